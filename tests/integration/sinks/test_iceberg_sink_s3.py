"""The ``iceberg`` sink with its warehouse on an object store (the embedded SeaweedFS S3 gateway,
a real S3 server) and its SQL catalog on SQLite: epochs committed through the protocol as one
snapshot each, the store's endpoint and credentials taken from the ``AWS_*`` variables the
tables use, DuckDB's iceberg extension (with httpfs) reading the same snapshot from the store,
and a refused credential named without the secret."""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pa_fs
import pytest

from eos.core import sink as sink_module
from eos.core.config import PipelineConfig
from eos.core.errors import SinkUnavailable
from eos.core.protocol import checkpointed_epoch
from eos.core.sink import register, sinks_for
from eos.sinks.iceberg.sink import IcebergSink
from eos.tools.audit.report import AuditReport
from eos.tools.audit.second_reading import read_back_with_version, reread_sink

from support.memory import STORES, MemorySource, run_epoch, store
from support.pipelines import IN_MEMORY, make_pipeline


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    register(IcebergSink.kind, IcebergSink)
    yield
    STORES.clear()


def pipeline(tmp_path: Path, warehouse: str) -> PipelineConfig:
    sink = {"iceberg": {"catalog": "lake", "table": "eos_s3.windows", "catalog_properties": {
        "type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": warehouse}}}
    return make_pipeline(tmp_path, base=IN_MEMORY, sinks={
        "windows": [sink, {"memory": "a"}], "late": [{"memory": "b"}],
        "quarantine": [{"memory": "c"}]})


def objects(prefix: str) -> list[str]:
    found, base = pa_fs.FileSystem.from_uri(prefix)
    infos = found.get_file_info(pa_fs.FileSelector(base, recursive=True, allow_not_found=True))
    return [i.path for i in infos if i.type == pa_fs.FileType.File]


def test_epochs_land_on_the_store_once_each_and_duckdb_reads_the_same_snapshot(
        tmp_path: Path, s3_root: str) -> None:
    config, source = pipeline(tmp_path, s3_root), MemorySource()
    for _ in range(3):
        run_epoch(config, source)
        source.produce(1, 7)
    sink = sinks_for(config)[0]
    assert checkpointed_epoch(config) == 2 and sink.commits() == [0, 1, 2]
    names = objects(s3_root)
    assert any(n.endswith(".metadata.json") for n in names)
    assert any(n.endswith(".parquet") for n in names)
    held = store(config, "memory:a").rows
    expected = sorted((r["key"], r["n"], r["epoch"]) for e in held for r in held[e].to_pylist())
    assert sorted((r["key"], r["n"], r["epoch"]) for r in sink.read_back()) == expected
    rows, snapshot = read_back_with_version(sink)
    report = AuditReport(config.name, 2)
    assert reread_sink(report, config, sink, rows, snapshot) == []
    assert report.second_readings[sink.name] == ("DuckDB iceberg", len(expected))


def test_a_refused_credential_is_named_without_the_secret(
        tmp_path: Path, s3_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "not-" + os.environ["AWS_SECRET_ACCESS_KEY"]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    config = pipeline(tmp_path, s3_root)
    with pytest.raises(SinkUnavailable) as failed:
        sinks_for(config)[0].commit(0, pa.table({"key": ["a"], "n": [1]}), "h0")
    assert "ACCESS_DENIED" in str(failed.value)
    assert secret not in "".join(traceback.format_exception(failed.value))
