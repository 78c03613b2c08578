"""The ``files`` sink on a local directory, run through the protocol (the in-memory pipeline):
each epoch committed once whatever fails between its steps, exactly one of two racing commits
creates the manifest, orphans of a crashed attempt are removed, and DuckDB reads back what was
committed."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from datetime import date, time
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest

from eos.core import sink as sink_module
from eos.core.config import PipelineConfig
from eos.core.errors import (
    ConfigError,
    InjectedFault,
    ProtocolViolation,
    RewindRefused,
    SinkCannotTake,
    SinkUnavailable,
)
from eos.core.outcomes import Outcome
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.rewind import rewind
from eos.core.sink import register, sinks_for
from eos.sinks.files.sink import FilesSink

from support.memory import STORES, MemorySource, MemoryStager, at_once, run_epoch, store
from support.pipelines import IN_MEMORY, make_pipeline

MEMORY = "memory:a"


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The sink type known in this process (the installed package's entry point may predate
    it), for this module's tests only."""
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    register(FilesSink.kind, FilesSink)
    yield
    STORES.clear()


@pytest.fixture
def source() -> MemorySource:
    return MemorySource()


def pipeline(tmp_path: Path, out: Path, **options: object) -> PipelineConfig:
    sinks = {"windows": [{"files": {"path": str(out), **options}}, {"memory": "a"}],
             "late": [{"memory": "b"}], "quarantine": [{"memory": "c"}]}
    return make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)


def data_files(out: Path) -> list[str]:
    """Every file a plain listing of the directory shows, outside ``_eos``."""
    return sorted(str(p.relative_to(out)) for p in out.rglob("*")
                  if p.is_file() and "_eos" not in p.parts)


def manifests(out: Path) -> dict[int, dict]:
    return {int(p.stem): json.loads(p.read_text())
            for p in sorted((out / "_eos" / "manifests").glob("*.json"))}


def triples(rows: list[dict]) -> list[tuple]:
    return sorted((r["key"], r["n"], r["epoch"], r["window_start"]) for r in rows)


@pytest.mark.parametrize(("form", "partition_by"), [("parquet", []), ("jsonl", []),
                                                    ("parquet", ["key"]), ("jsonl", ["epoch"])])
def test_epochs_commit_once_each_and_duckdb_reads_back_what_was_committed(
        tmp_path: Path, source: MemorySource, form: str, partition_by: list[str]) -> None:
    out = tmp_path / "out"
    config = pipeline(tmp_path, out, format=form, partition_by=partition_by)
    for _ in range(3):
        run_epoch(config, source)
        source.produce(0, 10)
    assert checkpointed_epoch(config) == 2
    sink = sinks_for(config)[0]
    assert sink.committed_epoch() == 2 and sink.commits() == [0, 1, 2]
    listed = {epoch: m["files"] for epoch, m in manifests(out).items()}
    assert list(listed) == [0, 1, 2]
    assert data_files(out) == sorted(f["path"] for files in listed.values() for f in files)
    for files in listed.values():
        for f in files:
            name = f["path"].rsplit("/", 1)[-1]
            assert name.startswith("epoch-") and name.endswith(f"-part-00000.{form}")
            assert all("=" in d for d in f["path"].split("/")[:-1])
            assert len(f["path"].split("/")) == len(partition_by) + 1
    committed = store(config, MEMORY).rows
    expected = [r for epoch in sorted(committed) for r in committed[epoch].to_pylist()]
    assert triples(sink.read_back()) == triples(expected) and expected
    summary = json.loads((out / "_eos" / "committed.json").read_text())
    assert summary["epoch"] == 2 and sorted(summary["files"]) == data_files(out)


@pytest.mark.parametrize("point", ["commit.between_sinks", "commit.before_checkpoint"])
def test_a_commit_that_fails_after_the_manifest_is_already_committed_on_retry(
        tmp_path: Path, source: MemorySource, arm: Callable[[str], None], point: str) -> None:
    out = tmp_path / "out"
    config = pipeline(tmp_path, out)
    plan = begin(config, source=source)
    precommit(config, plan.epoch, MemoryStager())
    arm(f"{point}:fail")
    with pytest.raises(InjectedFault):
        commit(config, 0)
    before = {p: (out / p).stat().st_mtime_ns for p in data_files(out)}
    result = commit(config, 0)  # the retry
    outcomes = {s.sink: s.outcome for s in result.sinks}
    assert outcomes[f"files:{out}"] is Outcome.ALREADY_COMMITTED
    assert {p: (out / p).stat().st_mtime_ns for p in data_files(out)} == before
    assert list(manifests(out)) == [0] and checkpointed_epoch(config) == 0


def test_a_crash_after_the_data_files_before_the_manifest_leaves_orphans_the_rerun_cleans(
        tmp_path: Path, source: MemorySource, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    config = pipeline(tmp_path, out, partition_by=["key"])
    run_epoch(config, source)
    source.produce(0, 10)
    plan = begin(config, source=source)
    precommit(config, plan.epoch, MemoryStager())
    # An earlier attempt of epoch 1 under another plan, killed before its manifest: its files
    # and a temporary file (named as this sink names them) are orphans.
    stray = out / "key=zz" / "epoch-000000000001-0ldpl4n-part-00000.parquet"
    stray.parent.mkdir()
    stray.write_bytes(b"PAR1 partial")
    temp = out / ".epoch-000000000001-x-part-00000.parquet.abc.tmp"
    temp.write_bytes(b"")

    def crash(*args: object) -> bool:
        raise OSError("killed before the manifest")

    with monkeypatch.context() as patch:
        patch.setattr("eos.sinks.files.store.Place.create", crash)
        with pytest.raises(SinkUnavailable, match="killed before the manifest"):
            commit(config, 1)
    crashed = [p for p in data_files(out) if p.split("/")[-1].startswith("epoch-000000000001")]
    assert len(crashed) > 1 and 1 not in manifests(out)  # visible to a plain listing only
    sink = sinks_for(config)[0]
    assert sink.committed_epoch() == 0
    assert commit(config, 1).outcome is Outcome.COMMITTED
    assert list(manifests(out)) == [0, 1] and not stray.exists() and not temp.exists()
    listed = {f["path"] for m in manifests(out).values() for f in m["files"]}
    assert set(data_files(out)) == listed
    committed = store(config, MEMORY).rows
    assert triples(sink.read_back()) == triples(
        [r for e in sorted(committed) for r in committed[e].to_pylist()])


def test_abort_removes_what_no_manifest_lists_and_never_a_committed_file(
        tmp_path: Path, source: MemorySource) -> None:
    out = tmp_path / "out"
    config = pipeline(tmp_path, out)
    run_epoch(config, source)
    committed = data_files(out)
    orphan = out / "epoch-000000000001-abc-part-00000.parquet"
    orphan.write_bytes(b"x")
    stray0 = out / "epoch-000000000000-other-part-00000.parquet"
    stray0.write_bytes(b"x")
    sink = sinks_for(config)[0]
    sink.abort(1)
    sink.abort(0)
    assert data_files(out) == committed and sink.committed_epoch() == 0


def test_two_commits_at_once_create_one_manifest(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Both attempts find nothing held, write their (identical) files, and create the manifest
    at once: one wins, the other reports already committed and its files are the winner's."""
    out = tmp_path / "out"
    config = pipeline(tmp_path, out, format="jsonl", partition_by=["key"])
    barrier, link = threading.Barrier(2, timeout=30), os.link

    def link_together(source: str, target: str) -> None:
        barrier.wait()
        link(source, target)

    rows = pa.table({"key": ["a", "b", "a"], "n": [1, 2, 3]})
    sinks = [sinks_for(config)[0], sinks_for(config)[0]]
    for one in sinks:
        one.prepare(rows.schema)
    monkeypatch.setattr("eos.sinks.files.store.os.link", link_together)
    results = at_once(*(lambda s=s: s.commit(0, rows, "h0") for s in sinks))
    assert sorted((r.outcome, r.raced) for r in results) == sorted(
        [(Outcome.COMMITTED, False), (Outcome.ALREADY_COMMITTED, True)])
    assert list(manifests(out)) == [0]
    assert data_files(out) == ["key=a/epoch-000000000000-h0-part-00000.jsonl",
                               "key=b/epoch-000000000000-h0-part-00000.jsonl"]
    assert sorted((r["key"], r["n"]) for r in sinks[0].read_back()) == [
        ("a", 1), ("a", 3), ("b", 2)]


def test_out_of_order_epochs_and_what_cannot_be_written_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = sinks_for(pipeline(tmp_path, out, format="jsonl", partition_by=["key"]))[0]
    sink.prepare(pa.schema([]))
    with pytest.raises(ProtocolViolation, match="holds epoch -1; it cannot receive epoch 1"):
        sink.commit(1, pa.table({"key": ["x"]}), "h1")
    for value in [1.5, b"raw"]:  # a type no directory's name holds exactly
        with pytest.raises(SinkCannotTake, match=r"partition column 'key': a (float|bytes)"):
            sink.check(0, pa.table({"key": [value]}))
    with pytest.raises(SinkCannotTake, match="partition column 'key' is not a column"):
        sink.check(0, pa.table({"q": [1]}))
    with pytest.raises(SinkCannotTake, match="JSON cannot hold"):
        sink.check(0, pa.table({"key": ["x"], "at": [time(1, 2)]}))  # a time of day
    sink.check(0, pa.table({"key": ["x"], "day": [date(2026, 1, 1)]}))  # a date is ISO text
    rows = pa.table({"key": ["x", None], "v": [float("inf"), float("nan")]})
    sink.check(0, rows)  # non-finite doubles are written as the Kafka JSON codec writes them
    sink.commit(0, rows, "h0")
    text = (out / "key=x" / "epoch-000000000000-h0-part-00000.jsonl").read_text()
    assert text == '{"key":"x","v":"Infinity"}\n'
    assert (out / "key=__HIVE_DEFAULT_PARTITION__").is_dir()
    assert not list(out.rglob(".*.tmp"))


@pytest.mark.parametrize(("options", "message"), [
    ({"path": "../elsewhere"}, "leaves the pipeline's tables root"),
    ({"path": "."}, "tables root itself"),
    ({"path": "staging/files"}, "inside a protocol table"),
    ({"path": "/x", "format": "csv"}, "format"),
    ({"path": "/x", "partition_by": ["a/b"]}, "partition_by"),
    ({"path": "/x", "partition_by": ["a", "a"]}, "partition_by"),
    ({"path": "/x", "compression": "zstd"}, "compression"),
    ({"path": "gs2://b/p"}, "path"),
])
def test_bad_options_are_refused_naming_the_key(tmp_path: Path, options: dict,
                                                message: str) -> None:
    sinks = {"windows": [{"files": options}], "late": [], "quarantine": []}
    with pytest.raises(ConfigError, match=message):
        make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)


def test_a_relative_path_is_a_directory_under_the_tables_root(
        tmp_path: Path, source: MemorySource) -> None:
    """As a Delta sink's table name: it moves with the root, and is claimed as its place."""
    sinks = {"windows": [{"files": {"path": "files/windows"}}], "late": [], "quarantine": []}
    config = make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)
    run_epoch(config, source)
    out = Path(config.root) / "files" / "windows"
    assert sinks_for(config)[0].commits() == [0]
    assert (out / "_eos" / "manifests" / f"{0:012d}.json").is_file()
    beside = {"windows": [{"files": {"path": "files/windows"}}, {"delta": "files"}], "late": [],
              "quarantine": []}
    with pytest.raises(ConfigError, match="both claim"):
        make_pipeline(tmp_path, base=IN_MEMORY, name="nested", sinks=beside)


def test_a_rewind_removes_the_later_epochs_and_the_replay_commits_them_again(
        tmp_path: Path, source: MemorySource) -> None:
    out = tmp_path / "out"
    config = pipeline(tmp_path, out, partition_by=["key"])
    for _ in range(3):
        run_epoch(config, source)
        source.produce(0, 5)
    sink = sinks_for(config)[0]
    kept = {f["path"] for e, m in manifests(out).items() if e == 0 for f in m["files"]}
    assert sink.rewind_target(0) is None
    with pytest.raises(RewindRefused, match="no manifest of epoch 7"):
        sink.rewind_target(7)
    sink.rewind(0, None, "r1", pa.schema([]))
    sink.rewind(0, None, "r1", pa.schema([]))  # a rerun finds it done
    assert sink.commits() == [0] and set(data_files(out)) == kept
    assert json.loads((out / "_eos" / "committed.json").read_text())["epoch"] == 0
    memory = store(config, MEMORY).rows
    assert triples(sink.read_back()) == triples(memory[0].to_pylist())
    rows = memory[1]
    assert sink.commit(1, rows, "replayed").outcome is Outcome.COMMITTED
    assert sink.commits() == [0, 1]
    sink.rewind(-1, None, "r2", pa.schema([]))
    assert sink.commits() == [] and data_files(out) == [] and sink.read_back() == []


def test_the_protocols_rewind_takes_the_files_back_and_the_replay_matches(
        tmp_path: Path, source: MemorySource) -> None:
    out = tmp_path / "out"
    sinks = {"windows": [{"files": {"path": str(out), "format": "jsonl"}},
                         {"memory_rewind": "a"}],
             "late": [{"memory_rewind": "b"}], "quarantine": [{"memory_rewind": "c"}]}
    config = make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)
    for _ in range(3):
        run_epoch(config, source)
        source.produce(0, 5)
    assert rewind(config, 0).outcome is Outcome.REWOUND
    assert sinks_for(config)[0].commits() == [0] and list(manifests(out)) == [0]
    run_epoch(config, source)
    run_epoch(config, source)
    assert sinks_for(config)[0].commits() == [0, 1, 2]
    held = store(config, "memory_rewind:a").rows
    expected = [r for epoch in sorted(held) for r in held[epoch].to_pylist()]
    assert sorted(held) == [0, 1, 2] and expected
    assert triples(sinks_for(config)[0].read_back()) == triples(expected)


def test_a_directory_inside_another_sinks_or_the_pipelines_tables_is_refused(
        tmp_path: Path) -> None:
    nested = {"windows": [{"files": {"path": str(tmp_path / "out")}}],
              "late": [{"files": {"path": str(tmp_path / "out" / "late")}}], "quarantine": []}
    with pytest.raises(ConfigError, match="overlaps"):
        make_pipeline(tmp_path, base=IN_MEMORY, sinks=nested)
    root = make_pipeline(tmp_path, base=IN_MEMORY, name="p", sinks={
        "windows": [{"memory": "a"}], "late": [], "quarantine": []}).root
    inside = {"windows": [{"files": {"path": str(root)}}], "late": [], "quarantine": []}
    with pytest.raises(ConfigError, match="protocol table"):
        make_pipeline(tmp_path, base=IN_MEMORY, name="p", sinks=inside)


def test_committed_json_is_extended_by_each_commit_and_rebuilt_when_it_lagged(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = sinks_for(pipeline(tmp_path, out, format="jsonl"))[0]
    sink.prepare(pa.schema([]))
    summary = out / "_eos" / "committed.json"
    sink.commit(0, pa.table({"n": [1]}), "a")
    sink.commit(1, pa.table({"n": [2]}), "b")
    assert json.loads(summary.read_text()) == {"epoch": 1, "files": [
        "epoch-000000000000-a-part-00000.jsonl", "epoch-000000000001-b-part-00000.jsonl"]}
    summary.write_text(json.dumps({"epoch": 0, "files": ["epoch-000000000000-a-part-00000.jsonl"]}))
    sink.commit(2, pa.table({"n": [3]}), "c")  # a crash lost epoch 1's update: rebuilt
    assert json.loads(summary.read_text())["files"] == [
        f"epoch-00000000000{e}-{p}-part-00000.jsonl" for e, p in enumerate("abc")]


# -- partition values no directory name can hold as they are ---------------------------------

def test_a_300_character_key_commits_through_the_protocol_and_reads_back_whole(
        tmp_path: Path, source: MemorySource, monkeypatch: pytest.MonkeyPatch) -> None:
    """The defect: ``partition_by: [key]`` and one 300-character key. ``check`` let it pass,
    the epoch was sealed, and every commit failed with ``[Errno 36] File name too long``
    (``SinkUnavailable``, retried for ever; abort and rewind refused for a sealed epoch). Now
    its directory's name is shortened (a prefix and a hash of the value) and the rows hold the
    value whole."""
    long = "k" * 300
    monkeypatch.setattr("support.memory.KEY", long)
    out = tmp_path / "out"
    config = pipeline(tmp_path, out, partition_by=["key"])
    run_epoch(config, source)
    source.produce(0, 10)
    run_epoch(config, source)
    assert checkpointed_epoch(config) == 1
    sink = sinks_for(config)[0]
    assert [r["key"] for r in sink.read_back()] == [long, long]
    names = {p.split("/")[0] for p in data_files(out)}
    assert len(names) == 1 and all(len(n.encode()) <= 255 for n in names)


HARD_VALUES = ["a/b", "a\\b", "é été 日本", "..", ".", ".hidden", "", "a\x00b", "tab\there\n",
               "a=b", "50%", "a%2Fb", "a~b", "NULL", "null", "__HIVE_DEFAULT_PARTITION__",
               "k" * 300, "日" * 100, "/" * 100, "plain"]


def directory_of(out: Path, value: str, rows: list[dict]) -> str:
    """The partition directory the file holding ``value``'s row is in."""
    for path in data_files(out):
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            held = pq.ParquetFile(out / path).read().column("key").to_pylist()
        else:
            held = [json.loads(line)["key"] for line in (out / path).read_text().splitlines()]
        if value in held:
            assert set(held) == {value}, path  # one value per directory
            return path.split("/")[0]
    raise AssertionError(f"no file holds {value!r}")


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_any_partition_value_gets_a_directory_and_reads_back_exactly(
        tmp_path: Path, form: str) -> None:
    """A '/', NUL, '..', '', non-ASCII text, text a reader takes for a null, 300 characters:
    each value gets its own directory, whose name (at most 255 bytes) DuckDB's
    hive_partitioning reads back as the value unless it had to be shortened; the files hold
    the values whole, and the read-back returns them exactly."""
    import duckdb

    out = tmp_path / "out"
    sink = sinks_for(pipeline(tmp_path, out, format=form, partition_by=["key"]))[0]
    sink.prepare(pa.schema([]))
    values = [*HARD_VALUES, None]
    rows = pa.table({"key": pa.array(values, pa.string()), "n": list(range(len(values)))})
    sink.check(0, rows)
    assert sink.commit(0, rows, "h0").outcome is Outcome.COMMITTED
    assert sorted(sink.read_back(), key=lambda r: r["n"]) == rows.to_pylist()

    names = {value: directory_of(out, value, rows.to_pylist()) for value in values}
    assert len(set(names.values())) == len(values)  # never two values in one directory
    assert all(len(name.encode()) <= 255 for name in names.values())
    assert names[None] == "key=__HIVE_DEFAULT_PARTITION__"
    assert names["a/b"] == "key=a%2Fb" and names["é été 日本"] == "key=é été 日本"
    assert names["__HIVE_DEFAULT_PARTITION__"] == "key=%5F_HIVE_DEFAULT_PARTITION__"
    assert names[""] == "key=" and names[".."] == "key=.."
    shortened = {v for v, name in names.items() if "~" in name}
    assert shortened == {"k" * 300, "日" * 100, "/" * 100}
    assert names["k" * 300].startswith("key=" + "k" * 200)

    reader = "read_parquet" if form == "parquet" else "read_json"
    with duckdb.connect() as db:
        found = dict(db.execute(f"SELECT n, key FROM {reader}(?, hive_partitioning = true)",
                                [str(out / "**" / f"*.{form}")]).fetchall())
    by_path = {values[n]: key for n, key in found.items()}
    for value in values:
        if value is None:  # DuckDB does not read Hive's null directory as a null
            assert by_path[value] == "__HIVE_DEFAULT_PARTITION__"
        elif value in shortened:  # a shortened name is not the value: read it from the file
            prefix, digest = by_path[value].split("~")
            assert value.startswith(prefix) and len(digest) == 32
            assert by_path[value] == unquote(names[value].removeprefix("key="))
        else:
            assert by_path[value] == value, value


def test_a_slash_and_non_ascii_keys_commit_through_the_protocol(
        tmp_path: Path, source: MemorySource, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, a key holding '/' was refused before the seal, every epoch (and a key like
    "null" was read back by DuckDB as a null): now both land, each in its own directory."""
    out = tmp_path / "out"
    config = pipeline(tmp_path, out, partition_by=["key"])
    for key in ["country/region", "Zürich 東京"]:
        monkeypatch.setattr("support.memory.KEY", key)
        run_epoch(config, source)
        source.produce(0, 10)
    assert checkpointed_epoch(config) == 1
    assert sorted(r["key"] for r in sinks_for(config)[0].read_back()) == [
        "Zürich 東京", "country/region"]
    assert sorted({p.split("/")[0] for p in data_files(out)}) == [
        "key=Zürich 東京", "key=country%2Fregion"]


def test_partition_columns_no_directory_can_name_are_refused_when_the_pipeline_loads(
        tmp_path: Path) -> None:
    """Bytes, or a path that leaves no room for a partition directory's name: every epoch
    would be refused before its seal, so the pipeline is refused when it loads."""
    raw = {"windows": [{"memory": "a"}], "late": [],
           "quarantine": [{"files": {"path": "/x", "partition_by": ["raw_value"]}}]}
    with pytest.raises(ConfigError, match=r"raw_value.*is a binary"):
        make_pipeline(tmp_path, base=IN_MEMORY, sinks=raw)
    long = {"windows": [{"files": {"path": "s3://bucket/" + "p" * 940,
                                   "partition_by": ["key", "epoch"]}}],
            "late": [], "quarantine": []}
    with pytest.raises(ConfigError, match=r"leaves .* bytes for each partition directory"):
        make_pipeline(tmp_path, base=IN_MEMORY, sinks=long)
