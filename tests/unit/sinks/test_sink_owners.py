"""Who writes a sink's place, for the sink types besides Delta (whose table ownership
tests/unit/protocol/test_table_ownership.py holds): a files sink's directory and an Iceberg
table record the pipeline and sink that write them, and refuse another pipeline before anything
of it is sealed or written, naming the owner (``TableOwned``).

The defect: two pipelines writing one files-sink directory were told ``ProtocolViolation ...
was it truncated?`` (the second one found the first one's manifests), and two pipelines on one
Iceberg table were not refused at all: each committed its epochs among the other's snapshots,
after which a rewind of either was refused and the audit could not tell their rows apart.

Kafka sinks share output topics by design, each pipeline with a marker topic of its own
(``<topic>.eos-markers.<pipeline>``); an explicit marker topic two pipelines name is refused
naming the other's marker key (``MarkerTopicShared``).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from eos.core import sink as sink_module
from eos.core.config import PipelineConfig
from eos.core.errors import MarkerTopicShared, TableOwned
from eos.core.outcomes import Outcome
from eos.core.outputs import output_schema
from eos.core.protocol import begin, checkpointed_epoch
from eos.core.sink import register, sinks_for
from eos.sinks.files.sink import FilesSink
from eos.sinks.iceberg.sink import IcebergSink
from eos.sinks.kafka.markers import MarkerLog
from eos.sinks.kafka.sink import KafkaSink

from support.memory import STORES, MemorySource, at_once, run_epoch
from support.pipelines import IN_MEMORY, make_pipeline

TABLE = "eos_test.windows"


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    register(FilesSink.kind, FilesSink)
    register(IcebergSink.kind, IcebergSink)
    yield
    STORES.clear()


def pipeline(tmp_path: Path, name: str, sink: dict[str, Any]) -> PipelineConfig:
    """Pipeline ``name`` (its tables under tmp_path/name) whose windows go to ``sink``."""
    return make_pipeline(tmp_path, base=IN_MEMORY, name=name, sinks={
        "windows": [sink], "late": [{"memory": "b"}], "quarantine": [{"memory": "c"}]})


def epochs(config: PipelineConfig, source: MemorySource, count: int) -> None:
    for _ in range(count):
        run_epoch(config, source)
        source.produce(0, 6)


# -- files ---------------------------------------------------------------------------------------

def files(tmp_path: Path, name: str, out: Path) -> PipelineConfig:
    return pipeline(tmp_path, name, {"files": {"path": str(out), "partition_by": ["key"]}})


def test_a_second_pipeline_on_a_files_directory_is_refused_naming_the_owner(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    a, b, source_a = files(tmp_path, "a", out), files(tmp_path, "b", out), MemorySource()
    epochs(a, source_a, 1)
    record = json.loads((out / "_eos" / "writers.json").read_text())
    assert json.loads(record["eos.writers"]) == [
        {"app": "eos:a", "pipeline": "a", "output": "windows", "sink": f"files:{out}"}]
    before = sorted(p for p in out.rglob("*") if p.is_file())

    with pytest.raises(TableOwned) as refused:
        begin(b, source=MemorySource())
    message = refused.value.message
    assert f"files sink directory {out} belongs to pipeline a (its windows sink files:{out})" \
        in message and "pipeline b" in message and "a directory of its own" in message
    assert "truncated" not in message and "shared: true" not in message
    sink = sinks_for(b)[0]
    with pytest.raises(TableOwned, match="belongs to pipeline a"):  # before the seal too
        sink.check(0, pa.table({"key": ["x"], "n": [1]}))
    assert sorted(p for p in out.rglob("*") if p.is_file()) == before
    assert checkpointed_epoch(b) == -1
    epochs(a, source_a, 1)  # the owner goes on
    assert checkpointed_epoch(a) == 1


def test_a_files_directory_from_before_writers_were_recorded(tmp_path: Path) -> None:
    """Its manifests name the pipeline that wrote it: that one adopts it, another is refused."""
    out = tmp_path / "out"
    a, b, source_a = files(tmp_path, "a", out), files(tmp_path, "b", out), MemorySource()
    epochs(a, source_a, 2)
    (out / "_eos" / "writers.json").unlink()  # as an eos that did not record writers left it
    with pytest.raises(TableOwned, match="holds commits of pipeline a"):
        begin(b, source=MemorySource())
    assert not (out / "_eos" / "writers.json").exists()
    begin(a, source=source_a)
    assert "pipeline" in (out / "_eos" / "writers.json").read_text()
    with pytest.raises(TableOwned, match="belongs to pipeline a"):
        begin(b, source=MemorySource())


def test_two_pipelines_beginning_on_one_directory_at_once_one_owns_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both find no record and create it at once (the manifest's create-if-absent): exactly
    one owns the directory, the other reads the winner's record and is refused."""
    out = tmp_path / "out"
    sinks = [sinks_for(files(tmp_path, name, out))[0] for name in ("a", "b")]
    barrier, link = threading.Barrier(2, timeout=30), os.link

    def link_together(source: str, target: str) -> None:
        barrier.wait()
        link(source, target)

    monkeypatch.setattr("eos.sinks.files.store.os.link", link_together)

    def prepare(sink: Any) -> str:
        try:
            sink.prepare(pa.schema([]))
            return "owner"
        except TableOwned:
            return "refused"

    outcomes = at_once(*(lambda s=s: prepare(s) for s in sinks))
    assert sorted(outcomes) == ["owner", "refused"]


# -- Iceberg -------------------------------------------------------------------------------------

def catalog_properties(tmp_path: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": str(tmp_path / "warehouse")}


def iceberg(tmp_path: Path, name: str, shared: bool | None = None) -> PipelineConfig:
    options: dict[str, Any] = {"catalog": "test", "table": TABLE,
                               "catalog_properties": catalog_properties(tmp_path)}
    if shared is not None:
        options["shared"] = shared
    return pipeline(tmp_path, name, {"iceberg": options})


def table(tmp_path: Path) -> Any:
    return load_catalog("test", **catalog_properties(tmp_path)).load_table(TABLE)


def writers(tmp_path: Path) -> list[str]:
    return [w["pipeline"] for w in json.loads(table(tmp_path).properties["eos.writers"])]


def test_a_second_pipeline_on_an_iceberg_table_is_refused_naming_the_owner(
        tmp_path: Path) -> None:
    a, b, source_a = iceberg(tmp_path, "a"), iceberg(tmp_path, "b"), MemorySource()
    epochs(a, source_a, 1)
    assert writers(tmp_path) == ["a"] and table(tmp_path).properties["eos.shared"] == "false"
    snapshots = len(table(tmp_path).snapshots())

    with pytest.raises(TableOwned) as refused:
        begin(b, source=MemorySource())
    message = refused.value.message
    assert (f"Iceberg table test.{TABLE} belongs to pipeline a (its windows sink "
            f"iceberg:test.{TABLE}), which did not declare it shared") in message
    assert "shared: true" in message and "'eos.writers' = '[]'" in message
    sink = sinks_for(b)[0]
    rows = output_schema(b, "windows").empty_table()
    with pytest.raises(TableOwned, match="belongs to pipeline a"):
        sink.check(0, rows)
    with pytest.raises(TableOwned, match="belongs to pipeline a"):  # and through the commit
        sink.commit(0, rows, "h0")
    assert len(table(tmp_path).snapshots()) == snapshots and writers(tmp_path) == ["a"]
    with pytest.raises(TableOwned, match="pipeline a"):  # declaring it shared alone is not enough
        begin(iceberg(tmp_path, "b", shared=True), source=MemorySource())
    epochs(a, source_a, 1)
    assert checkpointed_epoch(a) == 1


def test_an_iceberg_table_every_writer_declares_shared_takes_both(tmp_path: Path) -> None:
    a, b = iceberg(tmp_path, "a", shared=True), iceberg(tmp_path, "b", shared=True)
    epochs(a, MemorySource(), 1)
    epochs(b, MemorySource(marks={0: (0, 7)}), 2)
    assert writers(tmp_path) == ["a", "b"] and table(tmp_path).properties["eos.shared"] == "true"
    assert (checkpointed_epoch(a), checkpointed_epoch(b)) == (0, 1)
    assert sinks_for(a)[0].commits() == [0] and sinks_for(b)[0].commits() == [0, 1]


def test_an_iceberg_table_without_a_record_is_adopted_by_the_pipeline_that_wrote_it(
        tmp_path: Path) -> None:
    a, b, source_a = iceberg(tmp_path, "a"), iceberg(tmp_path, "b"), MemorySource()
    epochs(a, source_a, 1)
    made = table(tmp_path)
    with made.transaction() as transaction:  # as an eos that did not record writers left it
        transaction.remove_properties("eos.writers", "eos.shared")
    with pytest.raises(TableOwned, match="holds commits of pipeline a"):
        begin(b, source=MemorySource())
    begin(a, source=source_a)
    assert writers(tmp_path) == ["a"]


def test_an_emptied_record_hands_the_iceberg_table_over(tmp_path: Path) -> None:
    epochs(iceberg(tmp_path, "a"), MemorySource(), 1)
    with table(tmp_path).transaction() as transaction:
        transaction.set_properties({"eos.writers": "[]"})
    b = iceberg(tmp_path, "b")
    begin(b, source=MemorySource())
    assert writers(tmp_path) == ["b"]
    assert sinks_for(b)[0].commit(0, output_schema(b, "windows").empty_table(), "h").outcome \
        is Outcome.COMMITTED


# -- Kafka ---------------------------------------------------------------------------------------

def test_kafka_sinks_of_two_pipelines_on_one_topic_have_marker_topics_of_their_own() -> None:
    options = KafkaSink.parse_options("out")
    assert KafkaSink.resources(options, "a") != KafkaSink.resources(options, "b")


class Record:
    def __init__(self, key: bytes, offset: int) -> None:
        self._key, self._offset = key, offset

    def key(self) -> bytes:
        return self._key

    def offset(self) -> int:
        return self._offset


def test_a_marker_of_another_pipeline_in_a_marker_topic_is_refused_naming_it() -> None:
    log = MarkerLog("m", "m", "b", "kafka:out", {})
    with pytest.raises(MarkerTopicShared, match="key 'a/kafka:out' at offset 3"):
        log._refuse_foreign("m", [Record(b"b/kafka:out", 2), Record(b"a/kafka:out", 3)],
                            {log.key})
