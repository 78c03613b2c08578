"""The ``iceberg`` sink against real pyiceberg tables (a SQL catalog on SQLite and a warehouse in
the test's directory), run through the protocol with the in-memory pipeline: one snapshot per
epoch carrying its marker, exactly once whatever fails between the commit's steps, one of two
racing commits wins, rewinds roll back or are refused, DuckDB's iceberg extension reads what
pyiceberg reads, and no secret leaves the sink."""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.sql import SqlCatalog

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
from eos.core.outputs import output_schema
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.rewind import rewind
from eos.core.sink import register, sinks_for
from eos.sinks.iceberg.sink import IcebergSink
from eos.tools.audit.independent.compare import canonical_row
from eos.tools.audit.independent.iceberg import read_iceberg
from eos.tools.audit.report import AuditReport, ProblemKind
from eos.tools.audit.second_reading import read_back_with_version, reread_sink

from support.memory import STORES, MemorySource, MemoryStager, at_once, run_epoch, store
from support.memory_rows import STATELESS_IN_MEMORY, RowStager
from support.pipelines import IN_MEMORY, make_pipeline

TABLE = "eos_test.windows"


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    register(IcebergSink.kind, IcebergSink)
    yield
    STORES.clear()


def properties(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": str(tmp_path / "warehouse"), **more}


def pipeline(tmp_path: Path, *, memory: str = "memory", output: str = "windows",
             base: dict[str, Any] = IN_MEMORY, **props: str) -> PipelineConfig:
    sink = {"iceberg": {"catalog": "test", "table": TABLE,
                        "catalog_properties": properties(tmp_path, **props)}}
    if output == "rows":
        return make_pipeline(tmp_path, base=base, sinks={
            "rows": [sink, {memory: "a"}], "quarantine": [{memory: "c"}]})
    return make_pipeline(tmp_path, base=base, sinks={
        "windows": [sink, {memory: "a"}], "late": [{memory: "b"}],
        "quarantine": [{memory: "c"}]})


def table(tmp_path: Path) -> Any:
    """The table as another pyiceberg client sees it."""
    return load_catalog("test", **properties(tmp_path)).load_table(TABLE)


def summaries(tmp_path: Path) -> list[dict[str, str]]:
    """The eos part of each snapshot's summary, oldest first."""
    return [{k: v for k, v in s.summary.additional_properties.items() if k.startswith("eos.")}
            for s in table(tmp_path).snapshots()]


def memory_rows(config: PipelineConfig, columns: tuple[str, ...],
                memory: str = "memory:a") -> list[tuple]:
    held = store(config, memory).rows
    return sorted(tuple(r[c] for c in columns) for e in held for r in held[e].to_pylist())


WINDOW = ("key", "n", "window_start", "epoch")


def rows_of(sink: Any, columns: tuple[str, ...] = WINDOW) -> list[tuple]:
    return sorted(tuple(r[c] for c in columns) for r in sink.read_back())


def the_sink(config: PipelineConfig) -> IcebergSink:
    found = sinks_for(config)[0]
    assert isinstance(found, IcebergSink)
    return found


def test_each_epoch_is_one_snapshot_with_its_marker_and_duckdb_reads_what_pyiceberg_reads(
        tmp_path: Path) -> None:
    config, source = pipeline(tmp_path), MemorySource()
    for _ in range(3):
        run_epoch(config, source)
        source.produce(0, 10)
    sink = the_sink(config)
    assert checkpointed_epoch(config) == 2 and sink.committed_epoch() == 2
    assert sink.commits() == [0, 1, 2] and sink.unreadable() is None
    assert [s["eos.epoch"] for s in summaries(tmp_path)] == ["0", "1", "2"]
    assert {(s["eos.pipeline"], s["eos.sink"]) for s in summaries(tmp_path)} == {
        (config.app_id, "iceberg:test.eos_test.windows")}
    assert rows_of(sink) == memory_rows(config, WINDOW) and rows_of(sink)
    types = {f.name: str(f.field_type) for f in table(tmp_path).schema().fields}
    assert types["window_start"] == "timestamptz" and types["n"] == "long"
    held, snapshot = read_back_with_version(sink)
    assert snapshot == table(tmp_path).current_snapshot().snapshot_id
    duck = read_iceberg(table(tmp_path).metadata_location, snapshot)
    assert sorted(map(_key, duck)) == sorted(_key(canonical_row(r)) for r in held)
    assert commit(config, 2).outcome is Outcome.ALREADY_COMMITTED
    assert len(summaries(tmp_path)) == 3


def _key(row: dict[str, Any]) -> tuple:
    return tuple(sorted(row.items()))


def test_a_stateless_pipelines_rows_are_appended_once_each(tmp_path: Path) -> None:
    config = pipeline(tmp_path, output="rows", base=STATELESS_IN_MEMORY)
    source = MemorySource()
    for _ in range(2):
        run_epoch(config, source, RowStager())
        source.produce(1, 7)
    columns = ("kafka_partition", "kafka_offset", "key", "epoch")
    sink = the_sink(config)
    assert sink.commits() == [0, 1] and rows_of(sink, columns) == memory_rows(config, columns)
    assert len(rows_of(sink, columns)) == len({r[:2] for r in rows_of(sink, columns)})


@pytest.mark.parametrize("point", ["commit.after_seal", "sink.before_write",
                                   "commit.between_sinks", "commit.before_checkpoint",
                                   "commit.after_checkpoint"])
def test_a_failure_at_every_commit_point_then_the_rerun_commits_exactly_once(
        tmp_path: Path, arm: Callable[[str], None], point: str) -> None:
    config, source = pipeline(tmp_path), MemorySource()
    run_epoch(config, source)
    source.produce(0, 10)
    plan = begin(config, source=source)
    precommit(config, plan.epoch, MemoryStager())
    arm(f"{point}:fail")
    with pytest.raises(InjectedFault):
        commit(config, 1)
    commit(config, 1)  # the retry
    assert checkpointed_epoch(config) == 1
    assert [s["eos.epoch"] for s in summaries(tmp_path)] == ["0", "1"]
    assert rows_of(the_sink(config)) == memory_rows(config, WINDOW)


@pytest.mark.parametrize("after", [False, True], ids=["before-the-swap", "after-the-swap"])
def test_a_catalog_commit_that_fails_leaves_the_epoch_whole_or_absent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: bool) -> None:
    """A failure of the catalog's swap itself: before it nothing of the epoch is visible, after
    it (the reply lost) the retry finds the marker and writes nothing again."""
    config, source = pipeline(tmp_path), MemorySource()
    plan = begin(config, source=source)
    precommit(config, plan.epoch, MemoryStager())
    swap = SqlCatalog.commit_table

    def lost(self: SqlCatalog, *args: Any) -> Any:
        if after:
            swap(self, *args)
        raise OSError("connection lost")

    with monkeypatch.context() as patch:
        patch.setattr(SqlCatalog, "commit_table", lost)
        with pytest.raises(SinkUnavailable, match="connection lost"):
            commit(config, 0)
    assert the_sink(config).committed_epoch() == (0 if after else -1)
    outcome = {s.sink: s.outcome for s in commit(config, 0).sinks}
    assert outcome["iceberg:test.eos_test.windows"] is (
        Outcome.ALREADY_COMMITTED if after else Outcome.COMMITTED)
    assert [s["eos.epoch"] for s in summaries(tmp_path)] == ["0"]
    assert rows_of(the_sink(config)) == memory_rows(config, WINDOW)


def test_two_commits_at_once_make_one_snapshot(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Both attempts plan their snapshot on the same metadata and ask the catalog together:
    one swap wins, the other conflicts, loads again and finds the epoch committed."""
    config = pipeline(tmp_path)
    rows = pa.table({"key": ["a", "b"], "n": [1, 2]})
    the_sink(config).prepare(rows.schema)
    barrier, swap = threading.Barrier(2, timeout=30), SqlCatalog.commit_table
    calls = []

    def together(self: SqlCatalog, *args: Any) -> Any:
        calls.append(1)
        if len(calls) <= 2:
            barrier.wait()
        return swap(self, *args)

    monkeypatch.setattr(SqlCatalog, "commit_table", together)
    attempts = [the_sink(config), the_sink(config)]
    results = at_once(*(lambda s=s: s.commit(0, rows, "h0") for s in attempts))
    assert sorted((r.outcome, r.raced) for r in results) == sorted(
        [(Outcome.COMMITTED, False), (Outcome.ALREADY_COMMITTED, True)])
    assert summaries(tmp_path) == [{"eos.pipeline": config.app_id, "eos.epoch": "0",
                                    "eos.sink": "iceberg:test.eos_test.windows",
                                    "eos.plan-hash": "h0"}]
    assert sorted((r["key"], r["n"]) for r in attempts[0].read_back()) == [("a", 1), ("b", 2)]


def test_a_rewind_rolls_back_to_the_epochs_snapshot_and_the_replay_commits_again(
        tmp_path: Path) -> None:
    config = pipeline(tmp_path)
    sink = the_sink(config)
    first, later = pa.table({"key": ["a"], "n": [1]}), pa.table({"key": ["b"], "n": [2]})
    sink.prepare(first.schema)
    for epoch, rows in enumerate([first, later, later]):
        sink.commit(epoch, rows, f"h{epoch}")
    target = sink.rewind_target(0)
    assert target == table(tmp_path).snapshots()[0].snapshot_id
    assert sink.rewind(0, target, "r1", first.schema) == target
    assert sink.rewind(0, target, "r1", first.schema) is None  # a rerun finds it done
    assert sink.committed_epoch() == 0 and sink.commits() == [0]
    assert [(r["key"], r["n"]) for r in sink.read_back()] == [("a", 1)]
    assert sink.commit(1, later, "h1").outcome is Outcome.COMMITTED
    assert sink.commits() == [0, 1]
    with pytest.raises(RewindRefused, match="holds no epoch 7"):
        sink.rewind_target(7)
    emptied = sink.rewind(-1, sink.rewind_target(-1), "r2", first.schema)
    assert emptied == table(tmp_path).current_snapshot().snapshot_id
    assert sink.committed_epoch() == -1 and sink.commits() == [] and sink.read_back() == []
    assert sink.commit(0, first, "h0").outcome is Outcome.COMMITTED and sink.commits() == [0]


def test_a_rewind_past_another_writers_snapshot_is_refused_naming_it(tmp_path: Path) -> None:
    config = pipeline(tmp_path)
    sink = the_sink(config)
    rows = pa.table({"key": ["a"], "n": [1]})
    sink.prepare(rows.schema)
    sink.commit(0, rows, "h0")
    sink.commit(1, rows, "h1")
    other = table(tmp_path)
    other.append(pa.table({"key": ["x"], "n": [9]}))  # another writer, no eos summary
    foreign = other.current_snapshot().snapshot_id
    with pytest.raises(RewindRefused, match=f"snapshot {foreign} .*another writer"):
        sink.rewind_target(0)
    assert "other writers" in (sink.unreadable() or "")
    assert sink.committed_epoch() == 1 and sink.commits() == [0, 1]  # stepped over
    assert sink.commit(2, rows, "h2").outcome is Outcome.COMMITTED


def test_the_protocols_rewind_takes_the_table_back_and_the_replay_matches(
        tmp_path: Path) -> None:
    config, source = pipeline(tmp_path, memory="memory_rewind"), MemorySource()
    for _ in range(3):
        run_epoch(config, source)
        source.produce(0, 5)
    assert rewind(config, 0).outcome is Outcome.REWOUND
    assert the_sink(config).commits() == [0]
    run_epoch(config, source)
    run_epoch(config, source)
    held = store(config, "memory_rewind:a").rows
    assert sorted(held) == [0, 1, 2] and the_sink(config).commits() == [0, 1, 2]
    assert rows_of(the_sink(config)) == memory_rows(config, WINDOW, "memory_rewind:a")


def test_the_second_reading_finds_a_row_one_reader_holds_differently(tmp_path: Path) -> None:
    config, source = pipeline(tmp_path), MemorySource()
    run_epoch(config, source)
    sink = the_sink(config)
    held, snapshot = read_back_with_version(sink)
    report = AuditReport(config.name, 0)
    assert reread_sink(report, config, sink, held, snapshot) == []
    assert report.second_readings[sink.name][0] == "DuckDB iceberg"
    changed = [dict(held[0], n=held[0]["n"] + 1), *held[1:]]
    problems = reread_sink(AuditReport(config.name, 0), config, sink, changed, snapshot)
    assert {p.kind for p in problems} == {ProblemKind.READERS_DISAGREE} and len(problems) == 2


def test_what_the_table_cannot_take_is_refused_before_the_seal(tmp_path: Path) -> None:
    config = pipeline(tmp_path)
    sink = the_sink(config)
    sink.prepare(pa.schema([("key", pa.string()), ("n", pa.int64())]))
    with pytest.raises(SinkCannotTake, match="n"):
        sink.check(0, pa.table({"key": ["a"], "n": ["not a number"]}))
    with pytest.raises(SinkCannotTake, match="Iceberg cannot hold"):
        sink.check(0, pa.table({"key": ["a"], "d": pa.array([1], pa.duration("s"))}))
    with pytest.raises(ProtocolViolation, match="holds epoch -1; it cannot receive epoch 1"):
        sink.commit(1, pa.table({"key": ["a"], "n": [1]}), "h1")
    wider = pa.table({"key": ["a"], "n": [1], "added": [0.5]})
    sink.check(0, wider)  # a new column is added by the commit, in the epoch's snapshot
    sink.commit(0, wider, "h0")
    assert [f.name for f in table(tmp_path).schema().fields] == ["key", "n", "added"]
    assert len(table(tmp_path).snapshots()) == 1


@pytest.mark.parametrize(("options", "message"), [
    ({"catalog": "c", "table": "nonamespace"}, "table"),
    ({"catalog": "a b", "table": "n.t"}, "catalog"),
    ({"table": "n.t"}, "catalog"),
    ({"catalog": "c", "table": "n.t", "catalog_properties": {"jdbc.password": "hunter2"}},
     "catalog_properties.*jdbc.password.*holds a secret"),
    ({"catalog": "c", "table": "n.t", "catalog_properties": {"uri": "${not-a-name}"}},
     "catalog_properties.*uri"),
    ({"catalog": "c", "table": "n.t", "location": "/x"}, "location"),
    ({"catalog": "c", "table": "n.t", "catalog_properties": {
        "uri": "postgresql+psycopg2://eos:hunter2@db/iceberg"}}, "uri.*password in its URL"),
])
def test_bad_options_are_refused_naming_the_key(tmp_path: Path, options: dict,
                                                message: str) -> None:
    sinks = {"windows": [{"iceberg": options}], "late": [], "quarantine": []}
    with pytest.raises(ConfigError, match=message):
        make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)


def test_a_password_from_the_environment_in_a_url_and_a_relative_catalog_on_a_store(
        tmp_path: Path) -> None:
    uri = {"uri": "postgresql+psycopg2://eos:${PGPASSWORD}@db/iceberg"}
    IcebergSink.parse_options({"catalog": "c", "table": "n.t", "catalog_properties": uri})
    sinks = {"windows": [{"iceberg": {"catalog": "c", "table": "n.t", "catalog_properties": {
        "uri": "sqlite:///iceberg/catalog.db"}}}], "late": [], "quarantine": []}
    with pytest.raises(ConfigError, match="relative to the tables root s3://b/p, which is not"):
        make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks, tables={"root": "s3://b/p"})


def test_the_catalog_is_found_by_name_in_pyicebergs_own_configuration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYICEBERG_CATALOG__ENVCAT__URI", f"sqlite:///{tmp_path}/env.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__ENVCAT__WAREHOUSE", str(tmp_path / "env-wh"))
    sinks = {"windows": [{"iceberg": {"catalog": "envcat", "table": "lake.windows"}}],
             "late": [], "quarantine": []}
    config = make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)
    run_epoch(config, MemorySource())
    assert the_sink(config).commits() == [0]
    assert list((tmp_path / "env-wh").rglob("*.metadata.json"))


def test_a_relative_catalog_and_warehouse_are_under_the_tables_root(tmp_path: Path) -> None:
    sinks = {"windows": [{"iceberg": {"catalog": "demo", "table": "lake.windows",
                                      "catalog_properties": {
                                          "type": "sql", "uri": "sqlite:///iceberg/catalog.db",
                                          "warehouse": "iceberg/warehouse"}}}],
             "late": [], "quarantine": []}
    config = make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)
    run_epoch(config, MemorySource())
    root = Path(config.root)
    assert (root / "iceberg" / "catalog.db").is_file()
    assert the_sink(config).commits() == [0]
    assert list((root / "iceberg" / "warehouse").rglob("*.metadata.json"))


def test_a_secret_in_the_catalog_properties_appears_in_no_error_and_no_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The warehouse, taken from the environment, sits under a file: pyiceberg's error names
    the path, and the sink's shows *** in its place."""
    secret = "s3cr3t-7f9c2a"
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("EOS_TEST_WAREHOUSE", f"{tmp_path}/afile/{secret}")
    monkeypatch.setenv("EOS_TEST_TOKEN", secret)
    caplog.set_level(logging.DEBUG)
    config = pipeline(tmp_path, warehouse="${EOS_TEST_WAREHOUSE}", token="${EOS_TEST_TOKEN}")
    sink = the_sink(config)
    with pytest.raises(SinkUnavailable) as failed:
        sink.commit(0, pa.table({"key": ["a"], "n": [1]}), "h0")
    assert "***" in str(failed.value) and secret not in str(failed.value)
    assert failed.value.__suppress_context__  # no traceback shows pyiceberg's message
    assert secret not in "".join(traceback.format_exception(failed.value))
    assert secret not in caplog.text and secret not in repr(sink.options)
    monkeypatch.delenv("EOS_TEST_TOKEN")
    with pytest.raises(ConfigError, match=r"'token' takes \$\{EOS_TEST_TOKEN\}, which is not set"):
        the_sink(config).committed_epoch()


# -- partition transforms: applied by pyiceberg-core, refused before the seal without it --------

def partitioned(tmp_path: Path, config: PipelineConfig) -> Any:
    """The sink's table made beforehand (as a person would) from the windows' schema, partitioned
    by day(window_start) and bucket(4, key): transforms pyiceberg applies through pyiceberg-core."""
    from pyiceberg.transforms import BucketTransform, DayTransform

    catalog = load_catalog("test", **properties(tmp_path))
    catalog.create_namespace_if_not_exists("eos_test")
    made = catalog.create_table(TABLE, schema=output_schema(config, "windows"))
    with made.update_spec() as spec:
        spec.add_field("window_start", DayTransform(), "day")
        spec.add_field("key", BucketTransform(4), "bucket")
    return made


def test_a_table_partitioned_by_day_and_bucket_takes_its_epochs(tmp_path: Path) -> None:
    """Before: pyiceberg-core was in neither the lock nor the extra, so a partitioned table's
    commit failed after the seal (pyiceberg's NotInstalledError, retried as transient forever).
    Now the transforms are applied and each epoch is one snapshot of partitioned files."""
    config, source = pipeline(tmp_path), MemorySource()
    partitioned(tmp_path, config)
    for _ in range(2):
        run_epoch(config, source)
        source.produce(0, 10)
    sink = the_sink(config)
    assert checkpointed_epoch(config) == 1 and sink.commits() == [0, 1]
    assert rows_of(sink) == memory_rows(config, WINDOW) and rows_of(sink)
    files = table(tmp_path).inspect.files().to_pylist()
    assert files and all(set(f["partition"]) == {"day", "bucket"} for f in files)
    assert all(f["partition"]["day"] is not None for f in files)


def test_a_transform_the_runtime_cannot_apply_is_refused_before_the_seal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pyiceberg-core (its import fails), the table's day and bucket transforms cannot be
    applied: ``prepare`` (begin) and ``check`` (before the seal) refuse it, naming the
    transforms and the package; nothing is sealed or written, and the commit is never tried."""
    config, source = pipeline(tmp_path), MemorySource()
    partitioned(tmp_path, config)
    monkeypatch.setitem(sys.modules, "pyiceberg_core", None)  # import pyiceberg_core fails
    sink = the_sink(config)
    with pytest.raises(SinkCannotTake, match=r"day\(window_start\).*bucket\[4\]\(key\).*"
                                             r"pyiceberg-core") as refused:
        sink.prepare(output_schema(config, "windows"))
    assert "Nothing was sealed or written" in refused.value.message
    rows = output_schema(config, "windows").empty_table()
    with pytest.raises(SinkCannotTake, match="pyiceberg-core"):
        sink.check(0, rows)
    with pytest.raises(SinkCannotTake, match="pyiceberg-core"):
        run_epoch(config, source)
    assert checkpointed_epoch(config) == -1 and the_sink(config).committed_epoch() == -1
    assert table(tmp_path).snapshots() == []
