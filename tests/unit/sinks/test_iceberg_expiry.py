"""The ``iceberg`` sink's epoch survives the expiry of its snapshots (issue item 13).

The defect: the sink read the epoch it holds only from the summaries of the snapshots on the
table's current line. Once another writer appended after eos's last snapshot and the snapshots
older than that were expired (pyiceberg's ``table.maintenance.expire_snapshots()``, Spark's
``expire_snapshots``), no marker of eos was left: the sink said it held epoch -1 while the
checkpoint said N, and every run after was a ``ProtocolViolation``.

Now every epoch's commit also sets the table property ``eos.epoch.<app id>.<sink>`` (the epoch,
and the id and sequence number of the snapshot that committed it) in the same catalog commit
as the rows, and a rewind sets it with its rollback: when no marker is left on the line, the
property says what the table holds. Real tables: a SQL catalog on SQLite in the test's
directory, expired with pyiceberg's own API."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table.update import AddSnapshotUpdate, SetPropertiesUpdate

from eos.core import sink as sink_module
from eos.core.config import PipelineConfig
from eos.core.errors import RewindRefused
from eos.core.outcomes import Outcome
from eos.core.protocol import checkpointed_epoch, commit
from eos.core.sink import register, sinks_for
from eos.sinks.iceberg.sink import IcebergSink
from eos.tools.audit.report import AuditReport
from eos.tools.audit.second_reading import read_back_with_version, reread_sink

from support.memory import STORES, MemorySource, at_once, run_epoch
from support.pipelines import IN_MEMORY, make_pipeline

TABLE = "eos_test.windows"
SINK = "iceberg:test.eos_test.windows"


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    register(IcebergSink.kind, IcebergSink)
    yield
    STORES.clear()


def properties(tmp_path: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": str(tmp_path / "warehouse")}


def pipeline(tmp_path: Path) -> PipelineConfig:
    sink = {"iceberg": {"catalog": "test", "table": TABLE,
                        "catalog_properties": properties(tmp_path)}}
    return make_pipeline(tmp_path, base=IN_MEMORY, sinks={
        "windows": [sink, {"memory": "a"}], "late": [{"memory": "b"}],
        "quarantine": [{"memory": "c"}]})


def table(tmp_path: Path) -> Any:
    """The table as another pyiceberg client (another writer, a maintenance job) sees it."""
    return load_catalog("test", **properties(tmp_path)).load_table(TABLE)


def the_sink(config: PipelineConfig) -> IcebergSink:
    found = sinks_for(config)[0]
    assert isinstance(found, IcebergSink)
    return found


def epochs_of(tmp_path: Path) -> list[str | None]:
    """Each snapshot's eos epoch (None: another writer's), oldest first."""
    return [s.summary.additional_properties.get("eos.epoch") for s in table(tmp_path).snapshots()]


def kept(tmp_path: Path, config: PipelineConfig) -> dict[str, int]:
    """The table property that keeps the sink's epoch."""
    return json.loads(table(tmp_path).properties[f"eos.epoch.{config.app_id}.{SINK}"])


def another_writer_appends(tmp_path: Path) -> int:
    """A writer without eos's summary appends a copy of one row; returns its snapshot's id."""
    time.sleep(0.01)  # its snapshot is strictly newer than every one before it
    other = table(tmp_path)
    other.append(other.scan(limit=1).to_arrow())
    return int(other.current_snapshot().snapshot_id)


def expire_older_than(tmp_path: Path, snapshot_id: int) -> None:
    """pyiceberg's expiry of every snapshot older than ``snapshot_id`` (a maintenance job)."""
    other = table(tmp_path)
    at = other.snapshot_by_id(snapshot_id).timestamp_ms
    other.maintenance.expire_snapshots().older_than(
        datetime.fromtimestamp(at / 1000, UTC)).commit()
    assert table(tmp_path).snapshots()[0].snapshot_id == snapshot_id


def three_epochs_then_expiry(tmp_path: Path) -> tuple[PipelineConfig, MemorySource, int]:
    """Epochs 0..2 through the protocol, another writer's append, and the expiry of every
    snapshot before it: no snapshot of eos is left."""
    config, source = pipeline(tmp_path), MemorySource()
    for _ in range(3):
        run_epoch(config, source)
        source.produce(0, 10)
    assert epochs_of(tmp_path) == ["0", "1", "2"]
    foreign = another_writer_appends(tmp_path)
    expire_older_than(tmp_path, foreign)
    assert epochs_of(tmp_path) == [None]
    return config, source, foreign


def test_the_epoch_survives_the_expiry_of_every_eos_snapshot(tmp_path: Path) -> None:
    """Before: committed_epoch() was -1 here while the checkpoint said 2, and the next epoch
    was a ProtocolViolation forever."""
    config, source, foreign = three_epochs_then_expiry(tmp_path)
    sink = the_sink(config)
    assert checkpointed_epoch(config) == 2
    assert sink.committed_epoch() == 2
    assert sink.commits() == [2]  # what remains, ending at the epoch held
    run_epoch(config, source)
    assert checkpointed_epoch(config) == 3 and sink.committed_epoch() == 3
    assert epochs_of(tmp_path) == [None, "3"]
    assert commit(config, 3).outcome is Outcome.ALREADY_COMMITTED  # a retry writes nothing
    assert epochs_of(tmp_path) == [None, "3"] and sink.commits() == [3]
    assert kept(tmp_path, config)["epoch"] == 3
    assert kept(tmp_path, config)["snapshot"] == table(tmp_path).current_snapshot().snapshot_id
    assert table(tmp_path).current_snapshot().parent_snapshot_id == foreign
    # The audit's second reader (DuckDB's iceberg extension) reads the expired table's snapshot.
    held, snapshot = read_back_with_version(sink)
    assert held and reread_sink(AuditReport(config.name, 3), config, sink, held, snapshot) == []


def test_an_expiry_of_only_eos_snapshots_keeps_the_newest_on_the_line(tmp_path: Path) -> None:
    """No other writer: the newest snapshot is current and kept, its marker and the property
    agree; the audit's "contiguous run ending at N" takes the shorter run."""
    config, source = pipeline(tmp_path), MemorySource()
    for _ in range(3):
        run_epoch(config, source)
        source.produce(0, 10)
    expire_older_than(tmp_path, table(tmp_path).current_snapshot().snapshot_id)
    sink = the_sink(config)
    assert epochs_of(tmp_path) == ["2"] and sink.committed_epoch() == 2
    assert sink.commits() == [2] and sink.unreadable() is None
    held, snapshot = read_back_with_version(sink)
    assert reread_sink(AuditReport(config.name, 2), config, sink, held, snapshot) == []
    run_epoch(config, source)
    assert sink.commits() == [2, 3] and checkpointed_epoch(config) == 3


def test_the_rows_and_the_property_are_one_catalog_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = pipeline(tmp_path)
    sink = the_sink(config)
    rows = pa.table({"key": ["a"], "n": [1]})
    sink.prepare(rows.schema)
    swap, calls = SqlCatalog.commit_table, []

    def recorded(self: SqlCatalog, tbl: Any, requirements: Any, updates: Any) -> Any:
        calls.append(updates)
        return swap(self, tbl, requirements, updates)

    monkeypatch.setattr(SqlCatalog, "commit_table", recorded)
    assert sink.commit(0, rows, "h0").outcome is Outcome.COMMITTED
    assert len(calls) == 1
    added = [u.snapshot for u in calls[0] if isinstance(u, AddSnapshotUpdate)]
    props = [u.updates for u in calls[0] if isinstance(u, SetPropertiesUpdate)]
    assert len(added) == 1 and len(props) == 1
    name = f"eos.epoch.{config.app_id}.{SINK}"
    assert json.loads(props[0][name]) == {"epoch": 0, "snapshot": added[0].snapshot_id,
                                          "sequence": added[0].sequence_number}
    assert kept(tmp_path, config)["snapshot"] == table(tmp_path).current_snapshot().snapshot_id


def test_two_commits_of_one_epoch_at_once_after_expiry_make_one_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both plan on the same metadata (no eos snapshot left, the property says 2) and swap
    together: one wins, the other conflicts, loads again and finds epoch 3 held."""
    config, _, _ = three_epochs_then_expiry(tmp_path)
    rows = table(tmp_path).scan(limit=2).to_arrow()
    barrier, swap = threading.Barrier(2, timeout=30), SqlCatalog.commit_table
    calls = []

    def together(self: SqlCatalog, *args: Any) -> Any:
        calls.append(1)
        if len(calls) <= 2:
            barrier.wait()
        return swap(self, *args)

    monkeypatch.setattr(SqlCatalog, "commit_table", together)
    attempts = [the_sink(config), the_sink(config)]
    results = at_once(*(lambda s=s: s.commit(3, rows, "h3") for s in attempts))
    assert sorted((r.outcome, r.raced) for r in results) == sorted(
        [(Outcome.COMMITTED, False), (Outcome.ALREADY_COMMITTED, True)])
    assert epochs_of(tmp_path) == [None, "3"] and kept(tmp_path, config)["epoch"] == 3
    assert attempts[0].committed_epoch() == 3 and attempts[1].commits() == [3]


def test_a_rewind_after_expiry_rolls_back_and_sets_the_property_with_it(
        tmp_path: Path) -> None:
    config, _, foreign = three_epochs_then_expiry(tmp_path)
    sink = the_sink(config)
    rows = table(tmp_path).scan(limit=1).to_arrow()
    for epoch in (3, 4):
        assert sink.commit(epoch, rows, f"h{epoch}").outcome is Outcome.COMMITTED
    target = sink.rewind_target(3)
    assert target == table(tmp_path).snapshots()[1].snapshot_id
    assert sink.rewind(3, target, "r1", rows.schema) == target
    assert kept(tmp_path, config) == {"epoch": 3, "snapshot": target, "sequence":
                                      table(tmp_path).snapshot_by_id(target).sequence_number}
    assert sink.committed_epoch() == 3 and sink.commits() == [3]
    # The rolled-back snapshot of 4 expires too: the line holds no marker newer than 3.
    table(tmp_path).maintenance.expire_snapshots().by_id(
        table(tmp_path).snapshots()[-1].snapshot_id).commit()
    assert sink.committed_epoch() == 3
    assert sink.commit(4, rows, "h4b").outcome is Outcome.COMMITTED
    assert sink.committed_epoch() == 4 and sink.commits() == [3, 4]
    # Going back past the other writer's snapshot is refused, as before.
    with pytest.raises(RewindRefused, match=f"snapshot {foreign} .*another writer"):
        sink.rewind_target(-1)
    with pytest.raises(RewindRefused, match=f"snapshot {foreign} .*another writer"):
        sink.rewind_target(2)


def test_a_rewind_to_the_start_then_expiry_keeps_minus_one(tmp_path: Path) -> None:
    config = pipeline(tmp_path)
    sink = the_sink(config)
    rows = pa.table({"key": ["a"], "n": [1]})
    sink.prepare(rows.schema)
    sink.commit(0, rows, "h0")
    sink.commit(1, rows, "h1")
    emptied = sink.rewind(-1, sink.rewind_target(-1), "r1", rows.schema)
    assert kept(tmp_path, config)["epoch"] == -1
    assert kept(tmp_path, config)["snapshot"] == emptied
    foreign = another_writer_appends_row(tmp_path, rows)
    expire_older_than(tmp_path, foreign)
    assert sink.committed_epoch() == -1 and sink.commits() == []
    assert sink.commit(0, rows, "h0").outcome is Outcome.COMMITTED


def another_writer_appends_row(tmp_path: Path, rows: pa.Table) -> int:
    time.sleep(0.01)
    other = table(tmp_path)
    other.append(rows)
    return int(other.current_snapshot().snapshot_id)


def test_a_rollback_by_someone_else_is_not_hidden_by_the_property(tmp_path: Path) -> None:
    """The property is believed only when no marker is left on the line and its snapshot
    is gone from the line's past: a rollback by someone else still shows, as before."""
    config = pipeline(tmp_path)
    sink = the_sink(config)
    rows = pa.table({"key": ["a"], "n": [1]})
    sink.prepare(rows.schema)
    first = another_writer_appends_row(tmp_path, rows)
    for epoch in range(3):
        sink.commit(epoch, rows, f"h{epoch}")
    ours = [s.snapshot_id for s in table(tmp_path).snapshots()[1:]]
    table(tmp_path).manage_snapshots().set_current_snapshot(snapshot_id=ours[1]).commit()
    assert sink.committed_epoch() == 1  # the line's marker, not the property's 2
    table(tmp_path).manage_snapshots().set_current_snapshot(snapshot_id=first).commit()
    assert sink.committed_epoch() == -1  # the property's snapshot is there, off the line
    table(tmp_path).maintenance.expire_snapshots().by_ids(ours).commit()
    assert sink.committed_epoch() == -1  # the line goes back past the property's snapshot


@pytest.mark.parametrize("edited", [None, "not json", "[1]", '{"epoch": 7}'])
def test_a_table_without_the_property_is_read_from_its_summaries(
        tmp_path: Path, edited: str | None) -> None:
    """A table written before the property (or whose property was edited into something not
    of ours): the markers on the line, as before; the next epoch sets the property."""
    config = pipeline(tmp_path)
    sink = the_sink(config)
    rows = pa.table({"key": ["a"], "n": [1]})
    sink.prepare(rows.schema)
    sink.commit(0, rows, "h0")
    sink.commit(1, rows, "h1")
    name = f"eos.epoch.{config.app_id}.{SINK}"
    with table(tmp_path).transaction() as transaction:
        if edited is None:
            transaction.remove_properties(name)
        else:
            transaction.set_properties({name: edited})
    assert sink.committed_epoch() == 1 and sink.commits() == [0, 1]
    assert sink.commit(2, rows, "h2").outcome is Outcome.COMMITTED
    assert kept(tmp_path, config)["epoch"] == 2
