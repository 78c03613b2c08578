"""After retention deleted records no epoch read (or a partition was recreated), ``begin``
stops with ``DataLoss``; ``eos acknowledge-loss`` is the explicit, recorded way on: the next
epoch starts the lost partitions at their log start and every other where it was, the epoch
log records the ranges, and a second acknowledgment, a move, or an epoch in flight is
refused."""

from __future__ import annotations

import json

import pytest

from eos.core.config import PipelineConfig
from eos.core.errors import DataLoss
from eos.core.layout import tables_for
from eos.core.loss import LossRefused, LostRange, acknowledge_loss, acknowledged_losses
from eos.core.plan import plan_and_move
from eos.core.protocol import begin

from support.memory import MemorySource, log_rows, run_epoch


def ranges(plan) -> list[tuple[int, int, int]]:
    return [(r.partition, r.start, r.until) for r in plan.ranges]


def test_a_loss_is_acknowledged_and_the_next_epoch_starts_past_it(
        pipeline: PipelineConfig, source: MemorySource) -> None:
    run_epoch(pipeline, source)  # reads p0 [0,25) and p1 [0,15)
    source.produce(0, 10)
    source.produce(1, 10)
    source.truncate(0, 30)  # retention: p0's 25..29 were never read
    with pytest.raises(DataLoss, match="eos acknowledge-loss --pipeline"):
        begin(pipeline, "run-1", source=source)
    done = acknowledge_loss(pipeline, source=source, run_id="operator")
    assert done.lost == [LostRange("in-memory", 0, 25, 30)] and done.lost[0].records == 5
    assert ranges(done.plan) == [(0, 30, 35), (1, 15, 25)]
    plan, move = plan_and_move(tables_for(pipeline), 1)
    assert plan.hash == done.plan.hash and acknowledged_losses(move) == done.lost
    logged = log_rows(pipeline, 1, "moved")
    assert len(logged) == 1 and json.loads(logged[0]["details"])["loss"][0]["start"] == 25
    run_epoch(pipeline, source)  # epoch 1: the acknowledged plan
    with pytest.raises(LossRefused, match="nothing to acknowledge"):
        acknowledge_loss(pipeline, source=source)


def test_a_recreated_partition_restarts_at_its_log_start(
        pipeline: PipelineConfig, source: MemorySource) -> None:
    run_epoch(pipeline, source)
    source.marks[1] = (0, 4)  # recreated: its end is below the committed 15
    with pytest.raises(DataLoss, match="truncated or recreated"):
        begin(pipeline, "run-1", source=source)
    done = acknowledge_loss(pipeline, source=source)
    assert done.lost == [LostRange("in-memory", 1, 15, 0, recreated=True)]
    assert done.lost[0].records is None and "unknown" in done.lost[0].describe()
    assert ranges(done.plan) == [(0, 25, 25), (1, 0, 4)]


def test_an_epoch_in_flight_is_never_replanned_by_an_acknowledgment(
        pipeline: PipelineConfig, source: MemorySource) -> None:
    run_epoch(pipeline, source)
    source.produce(0, 10)
    begin(pipeline, "run-1", source=source)  # epoch 1 planned, reading p0 [25,35)
    source.truncate(0, 30)
    with pytest.raises(LossRefused, match=r"epoch 1 .* is planned already"):
        acknowledge_loss(pipeline, source=source)
