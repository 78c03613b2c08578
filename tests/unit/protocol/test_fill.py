"""``eos fill``: a sink added to a running pipeline takes the epochs committed before it joined,
from the sink of its output that holds them: each epoch once (a rerun or a second fill writes
nothing), in order, under a marker of its own, while the pipeline keeps committing to it; the
refusals name why. Every sink type that can be filled is run: Delta, Iceberg (a SQL catalog on
SQLite), files and PostgreSQL (a real server, ``support.postgres``)."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eos.core import sink as sink_module
from eos.core.config import PipelineConfig
from eos.core.delta import FILL_SUFFIX, open_table, txn_version
from eos.core.fill import FillRefused, fill_sink
from eos.core.protocol import check_sinks, checkpointed_epoch
from eos.core.rewind import rewind
from eos.core.sink import register
from eos.core.storage import join
from eos.sinks.files.sink import FilesSink
from eos.sinks.iceberg.sink import IcebergSink
from eos.sinks.postgres.sink import PostgresSink
from eos.tools.audit.independent.compare import canonical_row

from support.memory import MemorySource, run_epoch
from support.pipelines import IN_MEMORY, make_pipeline
from support.postgres import PostgresServer, missing_reason, postgres_server

LATE = [{"memory_rewind": "late"}]
QUARANTINE = [{"memory_rewind": "quarantine"}]
DSN_ENV = "EOS_TEST_FILL_POSTGRES_DSN"
KINDS = ["delta", "iceberg", "files", "postgres"]


@dataclass
class Kind:
    """How a test names and looks into the added sink (``second``) of one sink type."""

    kind: str
    spec: dict[str, Any]  # its entry in the config's windows sinks
    name: str  # its sink name
    # The pipeline's marker epoch and the fill's, read from the sink's storage without the sink
    markers: Callable[[PipelineConfig], tuple[int, int]]
    fill_module: str  # the module whose ``fill`` writes one epoch


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    if (why := missing_reason()) is not None:
        pytest.skip(why)
    with postgres_server() as running:
        yield running


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sink types known here even without the package's entry points."""
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    for cls in (IcebergSink, FilesSink, PostgresSink):
        register(cls.kind, cls)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Kind:
    return {"delta": _delta, "iceberg": _iceberg, "files": _files,
            "postgres": _postgres}[request.param](request, tmp_path, monkeypatch)


def _delta(request: pytest.FixtureRequest, tmp_path: Path, _: Any) -> Kind:
    def markers(config: PipelineConfig) -> tuple[int, int]:
        second = join(config.root, "second")
        return txn_version(second, config.app_id), txn_version(second, config.app_id
                                                               + FILL_SUFFIX)

    return Kind("delta", {"delta": "second"}, "delta:second", markers, "eos.sinks.delta.fill")


def _iceberg(request: pytest.FixtureRequest, tmp_path: Path, _: Any) -> Kind:
    properties = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
                  "warehouse": str(tmp_path / "warehouse")}
    name = "iceberg:test.eos_test.second"

    def markers(config: PipelineConfig) -> tuple[int, int]:
        from pyiceberg.catalog import load_catalog

        table = load_catalog("test", **properties).load_table("eos_test.second")
        marks = {config.app_id: -1, config.app_id + FILL_SUFFIX: -1}
        for snapshot in table.snapshots():  # oldest first: the newest epoch of each mark stays
            summary = snapshot.summary.additional_properties
            if summary.get("eos.sink") == name and summary.get("eos.pipeline") in marks:
                marks[summary["eos.pipeline"]] = int(summary["eos.epoch"])
        return marks[config.app_id], marks[config.app_id + FILL_SUFFIX]

    spec = {"iceberg": {"catalog": "test", "table": "eos_test.second",
                        "catalog_properties": properties}}
    return Kind("iceberg", spec, name, markers, "eos.sinks.iceberg.fill")


def _files(request: pytest.FixtureRequest, tmp_path: Path, _: Any) -> Kind:
    from eos.sinks.files.fill import FILLS
    from eos.sinks.files.layout import MANIFESTS
    from eos.sinks.files.store import Place

    def markers(config: PipelineConfig) -> tuple[int, int]:
        place = Place(join(config.root, "second"))

        def newest(directory: str) -> int:
            return max((int(json.loads(place.read(name) or b"{}")["epoch"])
                        for name in place.names(directory)), default=-1)

        return newest(MANIFESTS), newest(FILLS)

    return Kind("files", {"files": {"path": "second"}}, "files:second", markers,
                "eos.sinks.files.fill")


def _postgres(request: pytest.FixtureRequest, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> Kind:
    import psycopg2

    from eos.sinks.postgres.connection import forget_dsns

    server: PostgresServer = request.getfixturevalue("server")
    monkeypatch.setenv(DSN_ENV, server.dsn())
    request.addfinalizer(forget_dsns)
    schema = f"t_{secrets.token_hex(4)}"  # tests share one server
    name = f"postgres:{schema}.second"

    def markers(config: PipelineConfig) -> tuple[int, int]:
        with psycopg2.connect(server.dsn()) as conn, conn.cursor() as cursor:
            cursor.execute(f"SELECT sink, max(epoch) FROM {schema}.eos_markers WHERE "
                           "pipeline = %s GROUP BY sink", (config.name,))
            found = dict(cursor.fetchall())
        return found.get(name, -1), found.get(name + FILL_SUFFIX, -1)

    spec = {"postgres": {"table": f"{schema}.second", "dsn_env": DSN_ENV}}
    return Kind("postgres", spec, name, markers, "eos.sinks.postgres.fill")


def pipeline(tmp_path: Path, windows: list[dict]) -> PipelineConfig:
    """The same pipeline (name, tables) with these windows sinks."""
    return make_pipeline(tmp_path, base=IN_MEMORY, name="filled",
                         sinks={"windows": windows, "late": LATE, "quarantine": QUARANTINE})


def epochs(config: PipelineConfig, source: MemorySource, count: int) -> None:
    for _ in range(count):
        run_epoch(config, source)
        source.produce(0, 6)
        source.produce(1, 4)


def joined(config: PipelineConfig, name: str) -> Any:
    """The pipeline's sink ``name``, joined (its ``joined_at`` set)."""
    from eos.core import checkpoints
    from eos.core.layout import tables_for
    from eos.core.protocol import join_sinks
    from eos.core.sink import sinks_for

    tables = tables_for(config)
    last = checkpoints.last(tables, checkpoints.last_checkpointed(tables, config.app_id))
    return next(s for s in join_sinks(sinks_for(config), last) if s.name == name)


def rows(config: PipelineConfig, name: str) -> list[tuple]:
    """The sink's rows as its read-back reads them, canonical (one form whatever the type)."""
    held = joined(config, name).read_back()
    return sorted(tuple(sorted((k, repr(v)) for k, v in canonical_row(r).items()
                               if k in ("key", "window_start", "window_end", "n", "epoch")))
                  for r in held)


def held_epochs(config: PipelineConfig, name: str) -> set[int]:
    return {int(r["epoch"]) for r in joined(config, name).read_back()}


def added(tmp_path: Path, kind: Kind, source: MemorySource, before: int,
          after: int) -> PipelineConfig:
    """``before`` epochs with ``delta:target`` alone, then ``after`` more with the added sink."""
    epochs(pipeline(tmp_path, [{"delta": "target"}]), source, before)
    config = pipeline(tmp_path, [{"delta": "target"}, kind.spec])
    epochs(config, source, after)
    return config


def test_an_added_sink_is_filled_with_every_earlier_epoch_once(tmp_path: Path,
                                                               kind: Kind) -> None:
    source = MemorySource()
    after = added(tmp_path, kind, source, 3, 2)  # the added sink joins at epoch 3
    assert held_epochs(after, kind.name) == {3, 4}
    assert joined(after, kind.name).filled() is None

    done = fill_sink(after, kind.name)
    assert (done.source, done.first, done.until) == ("delta:target", 0, 3)
    assert done.written == [0, 1, 2] and done.already == [] and done.rows > 0
    assert rows(after, kind.name) == rows(after, "delta:target")  # every epoch, every row, once
    sink = joined(after, kind.name)
    assert sink.filled() == (0, 2)
    # The fill's marker is its own; the pipeline's still says epoch 4, and its commits too.
    assert kind.markers(after) == (4, 2)
    assert sink.committed_epoch() == 4 and sink.commits() == [3, 4]

    again = fill_sink(after, kind.name)  # a rerun (or a racing fill) writes nothing
    assert again.written == [] and again.already == [0, 1, 2]
    assert rows(after, kind.name) == rows(after, "delta:target")
    epochs(after, source, 1)  # the pipeline goes on committing to it
    assert check_sinks(after, checkpointed_epoch(after))[kind.name] == 5
    assert rows(after, kind.name) == rows(after, "delta:target")
    assert kind.markers(after) == (5, 2)


def test_a_delta_fill_records_its_first_epoch_in_the_table(tmp_path: Path) -> None:
    source = MemorySource()
    epochs(pipeline(tmp_path, [{"delta": "target"}]), source, 2)
    after = pipeline(tmp_path, [{"delta": "target"}, {"delta": "second"}])
    epochs(after, source, 1)
    fill_sink(after, "delta:second")
    second = join(after.root, "second")
    assert open_table(second).metadata().configuration["eos.fill.first"] == "0"


def test_an_iceberg_fill_outlives_the_expiry_of_its_snapshots(tmp_path: Path,
                                                             request: pytest.FixtureRequest,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """Expiry removes the fill's snapshots from under the pipeline's later ones while their
    rows stay; the fill's table property still says what was filled, so the audit still reads
    the filled epochs and a rerun writes none of them again."""
    from datetime import UTC, datetime

    from pyiceberg.catalog import load_catalog

    kind = _iceberg(request, tmp_path, monkeypatch)
    source = MemorySource()
    after = added(tmp_path, kind, source, 3, 1)
    fill_sink(after, kind.name)
    epochs(after, source, 1)  # a snapshot of the pipeline's after the fill's
    properties = kind.spec["iceberg"]["catalog_properties"]
    table = load_catalog("test", **properties).load_table("eos_test.second")
    newest = table.current_snapshot()
    assert newest is not None
    table.maintenance.expire_snapshots().older_than(
        datetime.fromtimestamp(newest.timestamp_ms / 1000, UTC)).commit()
    left = load_catalog("test", **properties).load_table("eos_test.second").snapshots()
    assert [s.snapshot_id for s in left] == [newest.snapshot_id]

    assert joined(after, kind.name).filled() == (0, 2)
    again = fill_sink(after, kind.name)
    assert again.written == [] and again.already == [0, 1, 2]
    assert rows(after, kind.name) == rows(after, "delta:target")


def test_an_interrupted_fill_resumes_where_it_stopped(tmp_path: Path, kind: Kind,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    module = importlib.import_module(kind.fill_module)
    source = MemorySource()
    after = added(tmp_path, kind, source, 3, 1)
    real, calls = module.fill, []

    def dies_at_epoch_2(sink: Any, epoch: int, table: Any, first: int) -> Any:
        calls.append(epoch)
        if epoch == 2:
            raise RuntimeError("killed")
        return real(sink, epoch, table, first)

    monkeypatch.setattr(module, "fill", dies_at_epoch_2)
    with pytest.raises(RuntimeError):
        fill_sink(after, kind.name)
    assert joined(after, kind.name).filled() == (0, 1)
    monkeypatch.setattr(module, "fill", real)
    done = fill_sink(after, kind.name)
    assert calls == [0, 1, 2] and done.already == [0, 1] and done.written == [2]
    assert rows(after, kind.name) == rows(after, "delta:target")


def test_two_fills_at_once_write_each_epoch_once(tmp_path: Path, kind: Kind,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Both fills check the sink before either writes epoch 0 (a barrier in the sink's
    ``fill``); one writes each epoch, the other finds it written."""
    import importlib

    if kind.kind == "delta":  # its first fill sets eos.fill.first unfenced: the loser fails
        pytest.xfail("a racing Delta fill can fail setting eos.fill.first (CommitFailedError)")

    module = importlib.import_module(kind.fill_module)
    source = MemorySource()
    after = added(tmp_path, kind, source, 3, 1)
    real, barrier = module.fill, threading.Barrier(2, timeout=30)

    def together(sink: Any, epoch: int, table: Any, first: int) -> Any:
        if epoch == 0:
            barrier.wait()
        return real(sink, epoch, table, first)

    monkeypatch.setattr(module, "fill", together)
    results: list[Any] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            results.append(fill_sink(after, kind.name))
        except BaseException as error:  # reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert sorted(e for done in results for e in done.written) == [0, 1, 2]
    assert rows(after, kind.name) == rows(after, "delta:target")
    assert joined(after, kind.name).filled() == (0, 2)


def test_a_rewind_takes_filled_epochs_back_with_their_marker(tmp_path: Path,
                                                             kind: Kind) -> None:
    """The fill's commits are the pipeline's own to a rewind (not another writer's). A table
    with versions (Delta, Iceberg) goes back to the one that held the epoch, before the fill:
    the filled epochs go with their marker. Files and PostgreSQL keep the epochs up to it,
    filled ones with their marker. A rewind to -1 takes everything back either way."""
    source = MemorySource()
    after = added(tmp_path, kind, source, 2, 2)  # joins at 2, holds 2 and 3
    fill_sink(after, kind.name)
    rewind(after, 2)
    sink = joined(after, kind.name)
    if kind.kind in ("delta", "iceberg"):
        assert sink.filled() is None and held_epochs(after, kind.name) == {2}
    else:
        assert sink.filled() == (0, 1) and held_epochs(after, kind.name) == {0, 1, 2}
    assert sink.committed_epoch() == 2
    rewind(after, -1)
    assert joined(after, kind.name).filled() is None
    assert held_epochs(after, kind.name) == set()


def test_the_audit_reads_a_filled_sink_from_its_first_filled_epoch(tmp_path: Path,
                                                                   kind: Kind) -> None:
    """``eos verify`` compares the filled epochs too: with the reference of every epoch the
    sink agrees; told the filled epochs were never committed, it finds their rows extra."""
    from eos.tools.audit.reference import Expected
    from eos.tools.audit.report import AuditReport, ProblemKind
    from eos.tools.audit.span import Span
    from eos.tools.audit.verify import _audit_sink

    source = MemorySource()
    after = added(tmp_path, kind, source, 3, 2)
    fill_sink(after, kind.name)
    reference = joined(after, "delta:target").read_back()

    def audited(expected_rows: list[dict[str, Any]]) -> AuditReport:
        report = AuditReport(after.name, 4)
        expected = Expected()
        expected.rows["windows"] = expected_rows
        _audit_sink(report, after, joined(after, kind.name), [], expected, Span(0, 4, 0))
        return report

    report = audited(reference)
    assert report.filled[kind.name] == (0, 2)
    assert [p for p in report.problems if p.kind is not ProblemKind.SECOND_READER] == []
    report = audited([r for r in reference if r["epoch"] >= 3])
    assert any(p.kind is not ProblemKind.SECOND_READER for p in report.problems)


def test_an_upserting_postgres_sink_is_refused_naming_why(tmp_path: Path,
                                                          request: pytest.FixtureRequest,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Filling earlier epochs after later ones would let old rows replace newer ones."""
    from eos.sinks.postgres.connection import forget_dsns

    server: PostgresServer = request.getfixturevalue("server")
    monkeypatch.setenv(DSN_ENV, server.dsn())
    request.addfinalizer(forget_dsns)
    schema = f"t_{secrets.token_hex(4)}"
    upserting = {"postgres": {"table": f"{schema}.second", "dsn_env": DSN_ENV,
                              "upsert_keys": ["key", "window_start"]}}
    source = MemorySource()
    epochs(pipeline(tmp_path, [{"delta": "target"}]), source, 2)
    after = pipeline(tmp_path, [{"delta": "target"}, upserting])
    epochs(after, source, 1)
    name = f"postgres:{schema}.second"
    before = held_epochs(after, name)
    with pytest.raises(FillRefused, match=r"upserts on \['key', 'window_start'\].*old row"):
        fill_sink(after, name)
    assert held_epochs(after, name) == before == {2}
    assert joined(after, name).filled() is None


def test_what_cannot_be_filled_is_refused_naming_why(tmp_path: Path) -> None:
    source = MemorySource()
    epochs(pipeline(tmp_path, [{"delta": "target"}]), source, 2)
    after = pipeline(tmp_path, [{"delta": "target"}, {"delta": "second"}])
    epochs(after, source, 1)
    with pytest.raises(FillRefused, match="delta:target was there from the first epoch"):
        fill_sink(after, "delta:target")
    with pytest.raises(FillRefused, match="no sink delta:nowhere"):
        fill_sink(after, "delta:nowhere")
    with pytest.raises(FillRefused, match="a memory_rewind sink cannot be filled"):
        fill_sink(after, "memory_rewind:late")
    with pytest.raises(FillRefused, match="no sink memory_rewind:late writes the windows"):
        fill_sink(after, "delta:second", "memory_rewind:late")
