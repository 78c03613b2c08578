"""What an audit of part of the history compares and leaves out (``eos.tools.audit.span``),
and the windowed replay that keeps only the span's rows (``audit_reference.Replay``)."""

from __future__ import annotations

import json
from pathlib import Path

from eos.core.config import PipelineConfig
from eos.core.plan import PartitionRange, Plan
from eos.tools.audit.reference import Record, Replay
from eos.tools.audit.span import batches, deleted_ranges, span_for
from eos.tools.audit.verify import first_epoch
from eos.tools.pipelines import write_pipeline

TOPIC = "clicks"


def _windowed(tmp_path: Path, window: dict) -> PipelineConfig:
    return write_pipeline(
        tmp_path, kafka={"topic": TOPIC}, group_by=["key"],
        event={"time": {"field": "ts", "format": "epoch_ms"},
               "fields": {"key": "string", "value": "long"}},
        window=window, aggregations={"n": "count(*)", "total": "sum(value)"})


def _stateless(tmp_path: Path) -> PipelineConfig:
    return write_pipeline(tmp_path, kafka={"topic": TOPIC}, group_by=None, window=None,
                          aggregations=None, event={"fields": {"key": "string"}},
                          sinks={"rows": [{"delta": "rows"}]})


def _plans(sizes: list[int]) -> list[Plan]:
    """One plan per epoch reading ``sizes[e]`` records of partition 0, back to back."""
    plans, at = [], 0
    for epoch, n in enumerate(sizes):
        plans.append(Plan.of("p", epoch, [PartitionRange(0, at, at + n, TOPIC)], None, None,
                             [TOPIC]))
        at += n
    return plans


def test_the_span_of_last_n_and_since() -> None:
    assert first_epoch(199, None, 5) == 195
    assert first_epoch(3, None, 10) == 0
    assert first_epoch(199, 150, None) == 150
    assert first_epoch(199, 500, None) == 199  # never past the last committed epoch
    assert first_epoch(199, None, None) == 0


def test_batches_bound_the_records_read_at_once() -> None:
    plans = _plans([40, 40, 40, 150, 10, 10])
    assert [[p.epoch for p in b] for b in batches(plans, limit=100)] == [
        [0, 1], [2], [3], [4, 5]]  # an epoch over the limit is a batch of its own


def test_deleted_ranges_name_what_retention_took() -> None:
    plans = _plans([10, 10, 10])
    gone = deleted_ranges(plans, {(TOPIC, 0): 15})
    assert [(d.epoch, d.records) for d in gone] == [(0, 10), (1, 5)]
    assert "offsets 10..19, of which 5 were deleted (the log starts at 15)" in gone[1].describe()
    assert deleted_ranges(plans, {(TOPIC, 0): 0}) == []


def test_a_stateless_span_reads_only_its_epochs_and_leaves_out_deleted_ones(
        tmp_path: Path) -> None:
    config = _stateless(tmp_path)
    plans = _plans([10] * 8)
    span = span_for(config, plans, deleted_ranges(plans, {(TOPIC, 0): 55}), {}, 4)
    assert (span.first, span.replay_from, sorted(span.unreadable)) == (4, 4, [4, 5])
    out = span.excluded("rows")
    assert [out({"epoch": e}) for e in range(8)] == [True] * 6 + [False] * 2


def test_a_windowed_span_replays_from_the_first_epoch_when_nothing_was_deleted(
        tmp_path: Path) -> None:
    config = _windowed(tmp_path, {"type": "tumbling", "size": "10s"})
    span = span_for(config, _plans([10] * 8), [], {}, 6)
    assert (span.replay_from, span.window_bound, span.unreadable) == (0, None, frozenset())
    assert not span.excluded("windows")({"epoch": 6, "window_start": 0})


def test_after_deleted_records_windows_that_may_hold_them_are_left_out(tmp_path: Path) -> None:
    """The replay restarts after the last epoch with deleted records, from its checkpointed
    watermark; a window starting before that watermark plus the allowed lateness may hold a
    deleted record: left out, on both sides. Sessions reach a gap further."""
    config = _windowed(tmp_path, {"type": "tumbling", "size": "10s",
                                  "allowed_lateness": "2s"})
    plans = _plans([10] * 8)
    deleted = deleted_ranges(plans, {(TOPIC, 0): 25})  # epochs 0..2 lost records
    span = span_for(config, plans, deleted, {2: 50_000}, 1)
    assert (span.replay_from, span.seed_watermark, span.window_bound) == (3, 50_000, 52_000)
    assert sorted(span.unreadable) == [1, 2]
    windows = span.excluded("windows")
    assert windows({"epoch": 5, "window_start": 50_000})
    assert not windows({"epoch": 5, "window_start": 60_000})
    assert windows({"epoch": 2, "window_start": 90_000})  # the epoch itself is gone
    quarantine = span.excluded("quarantine")
    assert quarantine({"epoch": 5, "offset": None})  # a window's overflow row
    assert not quarantine({"epoch": 5, "offset": 51})  # a record's

    sessions = _windowed(tmp_path / "s", {"type": "session", "gap": "30s",
                                          "allowed_lateness": "2s"})
    assert span_for(sessions, plans, deleted, {2: 50_000}, 1).window_bound == 82_000


def _record(offset: int, ts: int, key: str = "a") -> Record:
    return Record(0, offset, ts, json.dumps({"key": key, "value": 1, "ts": ts}).encode())


def test_a_replay_keeps_only_the_span_rows_and_computes_the_same_windows(
        tmp_path: Path) -> None:
    """Replaying every epoch but keeping rows from epoch 3 on gives exactly the full replay's
    rows of epochs 3.., and holds no earlier row."""
    config = _windowed(tmp_path, {"type": "tumbling", "size": "10s"})
    plans = _plans([4] * 6)
    epochs = [(plan, [_record(o, 3_000 * o) for o in range(plan.ranges[0].start,
                                                             plan.ranges[0].until)])
              for plan in plans]
    full, part = Replay(config), Replay(config, keep_from=3)
    for plan, records in epochs:
        full.epoch(plan, records)
        part.epoch(plan, records)
    kept = [row for row in full.expected.rows["windows"] if row["epoch"] >= 3]
    assert kept and part.expected.rows["windows"] == kept
    assert len(full.expected.rows["windows"]) > len(kept)
    assert part.expected.watermarks == full.expected.watermarks
