"""``begin`` and ``check_sinks``: every decision about which plan an epoch reads."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from eos.core import epochlog
from eos.core.config import PipelineConfig
from eos.core.errors import ConfigError, DataLoss, InjectedFault, ProtocolViolation
from eos.core.identity import SourceIdentity
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.plan import KafkaSource, PartitionRange, Plan, new_plan
from eos.core.protocol import begin, check_sinks, checkpointed_epoch, commit, precommit
from eos.core.tables import ensure_tables
from eos.core.topics import Marks, TopicPartition

from support.memory import (
    MemorySink,
    MemorySource,
    MemoryStager,
    at_once,
    log_rows,
    run_epoch,
    store,
)
from support.pipelines import IN_MEMORY, make_pipeline, same_pipeline


def logged_plan(config: PipelineConfig, epoch: int) -> Plan | None:
    row = epochlog.first_plan_row(tables_for(config), epoch)
    return None if row is None else Plan.from_json(row["plan"])



def ranged(partition: int, start: int, until: int) -> PartitionRange:
    """A range of the fast pipeline's topic."""
    return PartitionRange(partition, start, until, "in-memory")


# -- a new plan ---------------------------------------------------------------------------------

def test_a_new_plan_reads_from_the_checkpoint_to_the_high_watermarks(
        pipeline: PipelineConfig, source: MemorySource, phases) -> None:
    first = begin(pipeline, "run-0", source=source)
    assert first.epoch == 0
    assert first.ranges == (ranged(0, 0, 25), ranged(1, 0, 15))
    assert phases.outcome("begin") == Outcome.PLANNED
    assert " source=memory " in phases.lines("begin.watermarks")[-1]
    precommit(pipeline, 0, MemoryStager())
    commit(pipeline, 0)
    source.produce(0, 7)
    second = begin(pipeline, "run-1", source=source)
    # Epoch 1 starts exactly where epoch 0's checkpoint says it ended.
    assert second.ranges == (ranged(0, 25, 32), ranged(1, 15, 15))
    assert second.epoch == 1 and phases.outcome("begin") == Outcome.PLANNED


def test_a_new_plan_is_logged_before_begin_returns(
        pipeline: PipelineConfig, source: MemorySource, arm, phases) -> None:
    """A crash right after the log append (``begin.after_log``): the plan is in the log, and
    the rerun returns it, not a plan of what the source holds by then."""
    arm("begin.after_log:fail")
    with pytest.raises(InjectedFault):
        begin(pipeline, "run-0", source=source)
    logged = logged_plan(pipeline, 0)
    assert logged is not None and logged.records == 40
    source.produce(0, 10)
    again = begin(pipeline, "run-0", source=source)
    assert again == logged
    assert phases.outcome("begin") == Outcome.REUSED_RUN
    assert source.asked == 1  # the rerun planned nothing


def test_a_logged_plan_is_reused_by_another_run(
        pipeline: PipelineConfig, source: MemorySource, phases) -> None:
    """A retry of ``begin`` under another run id (or none) gets the logged plan of c + 1, and
    the run is bound to it (clearing that run later finds the same epoch)."""
    first = begin(pipeline, "run-a", source=source)
    source.produce(1, 5)
    assert begin(pipeline, "run-b", source=source) == first
    assert phases.outcome("begin") == Outcome.REUSED_LOG
    assert begin(pipeline, source=source) == first
    assert phases.outcome("begin") == Outcome.REUSED_LOG
    assert source.asked == 1
    bound = epochlog.plan_row_for_run(tables_for(pipeline), "run-b")
    assert bound is not None and bound["plan_hash"] == first.hash
    assert len(log_rows(pipeline, 0, epochlog.PLANNED)) == 2  # run-a's plan, run-b's binding


def test_a_cleared_run_gets_its_own_epoch_even_after_commit(
        pipeline: PipelineConfig, source: MemorySource, phases) -> None:
    """Clearing a committed run replays its own epoch's plan, and every later task is a no-op
    (failure matrix: "operator clears a committed run")."""
    zero = run_epoch(pipeline, source, run_id="run-0")
    source.produce(0, 3)
    one = run_epoch(pipeline, source, run_id="run-1")
    source.produce(0, 3)
    assert begin(pipeline, "run-0", source=source) == zero
    assert phases.outcome("begin") == Outcome.REUSED_RUN
    assert begin(pipeline, "run-1", source=source) == one
    stager = MemoryStager()
    assert precommit(pipeline, 0, stager).outcome is Outcome.ALREADY_COMMITTED
    assert commit(pipeline, 0).outcome is Outcome.ALREADY_COMMITTED
    assert stager.staged == [] and checkpointed_epoch(pipeline) == 1
    assert source.asked == 2  # the cleared runs planned nothing


class RacingSource(MemorySource):
    """Every planner waits for the others, then each sees a different high watermark."""

    def __init__(self, parties: int) -> None:
        super().__init__()
        self.barrier = threading.Barrier(parties, timeout=30)

    def watermarks(self, config: PipelineConfig) -> Marks:
        self.barrier.wait()
        with self.lock:
            self.asked += 1
            return {TopicPartition("in-memory", 0): (0, 10 * self.asked),
                    TopicPartition("in-memory", 1): (0, 5)}


def test_racing_planners_agree_on_the_first_plan_logged(
        pipeline: PipelineConfig, phases) -> None:
    """Two ``begin`` attempts that both found no plan: exactly one logs its plan (a fenced
    append), the other adopts it, and both runs are bound to it."""
    with ensure_tables(pipeline) as tables:  # created first: the race is about the plan
        for path in (tables.epochs, tables.staging, tables.checkpoints):
            tables.handle(path)
    racing = RacingSource(2)
    first, second = at_once(lambda: begin(pipeline, "run-0", source=racing),
                            lambda: begin(pipeline, "run-1", source=racing))
    plans: dict[str, Plan] = {"run-0": first, "run-1": second}
    assert racing.asked == 2  # both planned: the race was real
    assert plans["run-0"] == plans["run-1"] == logged_plan(pipeline, 0)
    assert sorted(phases.outcomes("begin")) == sorted([Outcome.PLANNED, Outcome.REUSED_RACE])
    rows = log_rows(pipeline, 0, epochlog.PLANNED)
    assert {r["plan_hash"] for r in rows} == {plans["run-0"].hash}
    assert sorted(r["run_id"] for r in rows) == ["run-0", "run-1"]


# -- what begin refuses -------------------------------------------------------------------------

def test_a_changed_schema_view_is_refused(pipeline: PipelineConfig, source: MemorySource) -> None:
    run_epoch(pipeline, source)
    changed = same_pipeline(pipeline, window={"type": "tumbling", "size": "20s"})
    with pytest.raises(ConfigError, match=r"window\.size: 10000 -> 20000"):
        begin(changed, source=source)
    assert logged_plan(pipeline, 1) is None
    # What is not part of the schema view may change.
    assert begin(same_pipeline(pipeline, epoch={"max_records": 7}), source=source).epoch == 1


def test_a_plan_is_refused_when_the_source_lost_records(
        pipeline: PipelineConfig, source: MemorySource) -> None:
    """Retention removed records epoch N must read, or the partition was recreated below
    the committed offset: ``DataLoss``, nothing logged."""
    run_epoch(pipeline, source)  # partition 0 committed until 25
    source.truncate(0, 30)
    with pytest.raises(DataLoss, match="must read from offset 25 but the log now starts at 30"):
        begin(pipeline, source=source)
    source.marks[0] = (0, 20)
    with pytest.raises(DataLoss, match="committed offset 25 is beyond the high watermark 20"):
        begin(pipeline, source=source)
    assert logged_plan(pipeline, 1) is None


def test_a_plan_is_capped_fairly_and_may_be_empty(tmp_path: Path, source: MemorySource) -> None:
    config = make_pipeline(tmp_path, base=IN_MEMORY,
                           epoch={"max_records": 10, "staging_retention": 2})
    assert run_epoch(config, source).ranges == (ranged(0, 0, 5), ranged(1, 0, 5))
    assert run_epoch(config, source).ranges == (ranged(0, 5, 10),
                                                ranged(1, 5, 10))
    latest = make_pipeline(tmp_path, base=IN_MEMORY,
                           kafka={"topic": "in-memory", "start": "latest"})
    empty = run_epoch(latest, source)  # starts at the high watermarks: an empty epoch
    assert empty.records == 0 and checkpointed_epoch(latest) == 0


def test_without_a_source_begin_asks_kafka(pipeline: PipelineConfig, source: MemorySource,
                                           monkeypatch: pytest.MonkeyPatch, phases) -> None:
    """The default source is the topic, through ``eos.core.kafka`` as before the seam (the fast
    tier's guard refuses the client it creates), and the log line names the Kafka settings."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9")
    with pytest.raises(AssertionError, match="must not reach a broker"):
        begin(pipeline)
    asked = []

    def marks(settings: dict, names: list[str] | None, pattern: object) -> tuple[str, Marks]:
        asked.append((settings, names, pattern))
        return "c-1", {TopicPartition("in-memory", 0): (0, 4)}

    monkeypatch.setattr("eos.core.plan.input_watermarks", marks)
    plan = new_plan(pipeline, 0, {})
    assert plan.ranges == (ranged(0, 0, 4),)
    assert asked == [({"bootstrap.servers": "127.0.0.1:9"}, ["in-memory"], None)]
    assert plan.source == SourceIdentity.of("in-memory", "c-1")  # the plan names its cluster
    assert phases.lines("begin.watermarks")[-1] == (
        'phase=begin.watermarks epoch=0 kafka={"bootstrap.servers":"127.0.0.1:9"} '
        'watermarks={"0":[0,4]}')
    assert new_plan(pipeline, 0, {}, KafkaSource()) == plan


# -- check_sinks --------------------------------------------------------------------------------

def test_a_sink_two_epochs_ahead_is_refused(pipeline: PipelineConfig,
                                            source: MemorySource) -> None:
    run_epoch(pipeline, source)
    store(pipeline, "memory:b").marker = 2  # changed outside the protocol
    with pytest.raises(ProtocolViolation,
                       match="sink memory:b holds epoch 2 but the last checkpoint is epoch 0"):
        begin(pipeline, source=source)
    assert logged_plan(pipeline, 1) is None


def test_a_sink_behind_the_checkpoint_is_refused(pipeline: PipelineConfig,
                                                 source: MemorySource) -> None:
    run_epoch(pipeline, source)
    run_epoch(pipeline, source)
    store(pipeline, "memory:a").marker = 0  # its marker lost an epoch
    with pytest.raises(ProtocolViolation,
                       match="sink memory:a holds epoch 0 but the last checkpoint is epoch 1"):
        begin(pipeline, source=source)


def test_a_sink_one_epoch_ahead_is_accepted(pipeline: PipelineConfig, source: MemorySource,
                                            arm) -> None:
    """A crash between two sinks leaves the first one epoch ahead: begin goes on, and returns
    the plan that commit will complete."""
    plan = begin(pipeline, "run-0", source=source)
    precommit(pipeline, 0, MemoryStager())
    arm("commit.between_sinks:fail")
    with pytest.raises(InjectedFault):
        commit(pipeline, 0)
    assert check_sinks(pipeline, -1) == {"memory:a": 0, "memory:b": -1, "memory:c": -1}
    assert begin(pipeline, "run-0-retry", source=source) == plan


def test_check_sinks_prepares_and_fences_unless_read_only(
        pipeline: PipelineConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    prepared: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(MemorySink, "prepare",
                        lambda self, schema: prepared.append((self.name, schema.names)))
    names = ["memory:a", "memory:b", "memory:c"]
    assert check_sinks(pipeline, -1, read_only=True) == dict.fromkeys(names, -1)
    assert prepared == []
    assert [(store(pipeline, n).looked, store(pipeline, n).fenced) for n in names] == [(1, 0)] * 3
    check_sinks(pipeline, -1)
    assert [name for name, _ in prepared] == names
    assert prepared[0][1][:3] == ["key", "window_start", "window_end"]  # the output's schema
    assert prepared[2][1][0] == "reason"
    assert [store(pipeline, n).fenced for n in names] == [1] * 3
