"""The ``files`` sink on an object store (the embedded SeaweedFS S3 gateway, a real S3 server):
epochs committed through the protocol, the manifest's conditional create (``If-None-Match: *``,
obstore's ``put(mode="create")`` in ``eos.sinks.files.s3``) letting exactly one of two racing
attempts win, orphans of a crashed attempt removed by the rerun, and DuckDB reading back what
was committed; any partition value gets a key, and the prefix is claimed by its pipeline
(``_eos/writers.json``, created with the same conditional PUT)."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pa_fs
import pytest

from eos.core import sink as sink_module
from eos.core.config import PipelineConfig
from eos.core.errors import SinkUnavailable, TableOwned
from eos.core.outcomes import Outcome
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.sink import register, sinks_for
from eos.sinks.files.s3 import put_if_absent
from eos.sinks.files.sink import FilesSink

from support.memory import STORES, MemorySource, MemoryStager, at_once, run_epoch, store
from support.pipelines import IN_MEMORY, make_pipeline


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    register(FilesSink.kind, FilesSink)
    yield
    STORES.clear()


def pipeline(tmp_path: Path, root: str, **options: object) -> PipelineConfig:
    sinks = {"windows": [{"files": {"path": root, **options}}, {"memory": "a"}],
             "late": [{"memory": "b"}], "quarantine": [{"memory": "c"}]}
    return make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)


def listing(root: str) -> list[str]:
    """What a plain listing of the prefix shows, relative to it."""
    store_fs, base = pa_fs.FileSystem.from_uri(root)
    infos = store_fs.get_file_info(pa_fs.FileSelector(base, recursive=True, allow_not_found=True))
    return sorted(i.path[len(base) + 1:] for i in infos if i.type == pa_fs.FileType.File)


def rows_of(config: PipelineConfig) -> list[tuple]:
    held = store(config, "memory:a").rows
    return sorted((r["key"], r["n"], r["epoch"]) for e in sorted(held)
                  for r in held[e].to_pylist())


def test_epochs_on_the_store_commit_once_and_duckdb_reads_them_back(
        tmp_path: Path, s3_root: str) -> None:
    config, source = pipeline(tmp_path, s3_root, partition_by=["key"]), MemorySource()
    for _ in range(3):
        run_epoch(config, source)
        source.produce(1, 7)
    sink = sinks_for(config)[0]
    assert checkpointed_epoch(config) == 2 and sink.commits() == [0, 1, 2]
    names = listing(s3_root)
    manifests = [n for n in names if n.startswith("_eos/manifests/")]
    assert manifests == [f"_eos/manifests/{e:012d}.json" for e in range(3)]
    committed = json.loads(pa_fs.FileSystem.from_uri(s3_root)[0].open_input_stream(
        f"{s3_root[5:]}/_eos/committed.json").read())
    assert sorted(committed["files"]) == [n for n in names if not n.startswith("_eos/")]
    assert sorted((r["key"], r["n"], r["epoch"]) for r in sink.read_back()) == rows_of(config)
    assert sink.asset_uri() == s3_root


def test_a_conditional_create_lets_exactly_one_of_two_racing_puts_win(s3_root: str) -> None:
    key = f"{s3_root}/race/{uuid.uuid4().hex}.json"
    barrier = threading.Barrier(2, timeout=30)

    def put(text: bytes) -> bool:
        barrier.wait()
        return put_if_absent(key, text)

    results = at_once(lambda: put(b"one"), lambda: put(b"two"))
    assert sorted(results) == [False, True]
    held = pa_fs.FileSystem.from_uri(key)[0].open_input_stream(key[5:]).read()
    assert held == (b"one" if results[0] else b"two")
    assert put_if_absent(key, b"three") is False


def test_two_sink_commits_at_once_create_one_manifest(tmp_path: Path, s3_root: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    config = pipeline(tmp_path, s3_root, format="jsonl")
    barrier = threading.Barrier(2, timeout=30)
    real = put_if_absent

    def together(uri: str, data: bytes) -> bool:
        barrier.wait()
        return real(uri, data)

    monkeypatch.setattr("eos.sinks.files.s3.put_if_absent", together)
    rows = pa.table({"key": ["a", "b"], "n": [1, 2]})
    sinks = [sinks_for(config)[0], sinks_for(config)[0]]
    results = at_once(*(lambda s=s: s.commit(0, rows, "h0") for s in sinks))
    assert sorted((r.outcome, r.raced) for r in results) == sorted(
        [(Outcome.COMMITTED, False), (Outcome.ALREADY_COMMITTED, True)])
    assert listing(s3_root) == ["_eos/committed.json", "_eos/manifests/000000000000.json",
                                "epoch-000000000000-h0-part-00000.jsonl"]
    assert sorted((r["key"], r["n"]) for r in sinks[0].read_back()) == [("a", 1), ("b", 2)]


def test_orphans_of_an_attempt_killed_before_its_manifest_are_removed_by_the_rerun(
        tmp_path: Path, s3_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    config, source = pipeline(tmp_path, s3_root), MemorySource()
    plan = begin(config, source=source)
    precommit(config, plan.epoch, MemoryStager())
    stray = f"{s3_root}/epoch-000000000000-0ldplan-part-00000.parquet"
    with pa_fs.FileSystem.from_uri(stray)[0].open_output_stream(stray[5:]) as out:
        out.write(b"PAR1 partial")

    def killed(uri: str, data: bytes) -> bool:
        raise SinkUnavailable("killed before the manifest")

    with monkeypatch.context() as patch:
        patch.setattr("eos.sinks.files.s3.put_if_absent", killed)
        with pytest.raises(SinkUnavailable):
            commit(config, 0)
    assert len([n for n in listing(s3_root) if n.startswith("epoch-")]) == 2
    assert sinks_for(config)[0].committed_epoch() == -1
    assert commit(config, 0).outcome is Outcome.COMMITTED
    names = listing(s3_root)
    assert [n for n in names if n.startswith("epoch-")] == [
        n for n in names if n.startswith("epoch-") and "0ldplan" not in n] and len(names) == 4
    assert "_eos/writers.json" in names  # begin claimed the prefix for the pipeline
    assert sorted((r["key"], r["n"], r["epoch"]) for r in
                  sinks_for(config)[0].read_back()) == rows_of(config)


def test_a_conflict_reported_as_already_existing_is_no_lost_race_until_the_object_is_seen(
        s3_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """obstore reports S3's 409 (a concurrent conditional write in flight, outcome unknown) as
    AlreadyExistsError, as it does a 412. Taken for a lost race, the attempt would report the
    epoch committed while its manifest may never be: it is retried until the object is seen."""
    import obstore
    from obstore.exceptions import AlreadyExistsError

    key = f"{s3_root}/conflict/{uuid.uuid4().hex}.json"
    real = obstore.put

    def conflict(*args: object, **kwargs: object) -> None:
        raise AlreadyExistsError("Server returned non-2xx status code: 409 Conflict: "
                                 "<Error><Code>ConditionalRequestConflict</Code></Error>")

    monkeypatch.setattr(obstore, "put", conflict)
    with pytest.raises(SinkUnavailable, match="HTTP 409 ConditionalRequestConflict"):
        put_if_absent(key, b"one")
    monkeypatch.setattr(obstore, "put", real)
    assert put_if_absent(key, b"one") is True
    monkeypatch.setattr(obstore, "put", conflict)
    assert put_if_absent(key, b"two") is False  # the object is there: a lost race


def test_a_refused_request_names_the_status_and_no_secret(s3_root: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-" + secret)
    with pytest.raises(SinkUnavailable, match=r"HTTP 403") as failed:
        put_if_absent(f"{s3_root}/x.json", b"{}")
    assert secret not in str(failed.value)


def test_any_partition_value_gets_a_key_and_the_prefix_has_one_owner(
        tmp_path: Path, s3_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 300-character key (before: the sealed epoch's commit failed on every run), a '/' and
    non-ASCII text: each under a name of at most 255 bytes, read back exactly. A second
    pipeline on the prefix is refused naming the first, before it writes anything."""
    config, source = pipeline(tmp_path, s3_root, partition_by=["key"]), MemorySource()
    keys = ["k" * 300, "country/region", "Zürich 東京"]
    for key in keys:
        monkeypatch.setattr("support.memory.KEY", key)
        run_epoch(config, source)
        source.produce(1, 7)
    sink = sinks_for(config)[0]
    assert checkpointed_epoch(config) == 2
    assert sorted(r["key"] for r in sink.read_back()) == sorted(keys)
    names = [n for n in listing(s3_root) if not n.startswith("_eos/")]
    assert len(names) == 3 and all(len(n.split("/")[0].encode()) <= 255 for n in names)
    assert "key=country%2Fregion" in {n.split("/")[0] for n in names}
    before = listing(s3_root)
    other = make_pipeline(tmp_path, base=IN_MEMORY, name="other", sinks={
        "windows": [{"files": {"path": s3_root, "partition_by": ["key"]}}],
        "late": [{"memory": "b"}], "quarantine": [{"memory": "c"}]})
    with pytest.raises(TableOwned, match=f"belongs to pipeline {config.name} "):
        begin(other, source=MemorySource())
    assert listing(s3_root) == before
