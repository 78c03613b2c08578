"""Source identity (``eos.core.identity``) and ``eos move-source`` (``eos.core.move``): what a
checkpoint's offsets are of, what ``begin`` refuses, and how a move is logged, refused and
followed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from eos.core import checkpoints, epochlog
from eos.core.checkpoints import Checkpoint
from eos.core.config import PipelineConfig
from eos.core.errors import MoveRefused, PermanentError, RewindRefused, SourceChanged
from eos.core.identity import SourceIdentity
from eos.core.layout import tables_for
from eos.core.move import StartPosition, move_source
from eos.core.outcomes import Outcome
from eos.core.pipeline_status import pipeline_status, render
from eos.core.plan import PartitionRange, Plan
from eos.core.protocol import begin, commit, precommit
from eos.core.readiness import Reason, decide, observe
from eos.core.rewind import rewind
from eos.core.tables import ensure_tables
from eos.core.topics import Marks, TopicPartition

from support.memory import MemorySource, MemoryStager, at_once, log_rows, run_epoch
from support.pipelines import IN_MEMORY, make_pipeline, same_pipeline

A = SourceIdentity.of("in-memory", "memory-cluster")  # the fast pipeline's topic and cluster
B = SourceIdentity.of("topic-b", "memory-cluster")
EARLIEST = StartPosition.parse("earliest")


def on_b(pipeline: PipelineConfig) -> PipelineConfig:
    """The same pipeline (name, tables, sinks) configured to read ``topic-b``."""
    return same_pipeline(pipeline, kafka={"topic": B.topics[0]})


def b_source() -> MemorySource:
    """Topic B: its partition 0's log starts at 3 (retention removed 0..2)."""
    return MemorySource({0: (3, 40), 1: (0, 10)})


def last_checkpoint(config: PipelineConfig, epoch: int) -> Checkpoint:
    found = checkpoints.read(tables_for(config), epoch)
    assert found is not None
    return found


# -- what a plan and a checkpoint record ---------------------------------------------------------

def test_a_checkpoint_records_the_topic_and_cluster_its_offsets_are_of(
        pipeline: PipelineConfig, source: MemorySource) -> None:
    plan = run_epoch(pipeline, source)
    assert plan.source == A
    assert last_checkpoint(pipeline, 0).source == A


def test_a_plan_logged_before_identities_keeps_its_hash() -> None:
    """A plan's JSON names its cluster only when known: a plan logged before identities were
    reads back unchanged, with the hash its staged rows and checkpoint carry."""
    logged = ('{"clock_ms":null,"epoch":3,"pipeline":"p","ranges":[{"partition":0,"start":0,'
              '"until":5}],"topic":"t"}')
    plan = Plan.from_json(logged)
    assert plan.to_json() == logged and plan.source == SourceIdentity.of("t")
    with_cluster = Plan("p", "t", 3, (PartitionRange(0, 0, 5),), None, "c-1")
    assert Plan.from_json(with_cluster.to_json()) == with_cluster
    assert with_cluster.hash != plan.hash


# -- what begin refuses --------------------------------------------------------------------------

@pytest.mark.parametrize("change", ["topic", "cluster"])
def test_begin_refuses_a_source_the_offsets_are_not_of(
        pipeline: PipelineConfig, source: MemorySource, change: str) -> None:
    """The silent skip this guards against: the new source planned from the old one's offsets.
    Nothing is logged; the message names both sources and the command that moves."""
    run_epoch(pipeline, source)
    config, now = pipeline, SourceIdentity(A.topics, "another-cluster")
    if change == "topic":
        config, now = on_b(pipeline), B
    else:
        source.cluster_id = now.cluster_id
    with pytest.raises(SourceChanged) as refused:
        begin(config, "run-1", source=source)
    assert isinstance(refused.value, PermanentError)
    message = str(refused.value)
    assert A.describe() in message and now.describe() in message
    assert f"eos move-source --pipeline {pipeline.name} --from earliest" in message
    assert log_rows(pipeline, 1) == []
    source.cluster_id = A.cluster_id  # the old source again: planned as before
    assert begin(pipeline, "run-1", source=source).ranges[0].start == 25


def test_a_checkpoint_without_a_source_adopts_the_configured_one(
        pipeline: PipelineConfig, source: MemorySource, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint written before identities were (a null ``source``) and a plan that names
    no cluster: the next plan on the same topic is not refused and its checkpoint records the
    source; a changed topic is refused (the topic comes from the epoch's logged plan)."""
    row = Checkpoint.to_row
    monkeypatch.setattr(Checkpoint, "to_row", lambda self: {**row(self), "source": None})
    source.cluster_id = None
    run_epoch(pipeline, source)
    monkeypatch.undo()
    assert last_checkpoint(pipeline, 0).source is None
    with pytest.raises(SourceChanged, match="topic 'in-memory' on an unrecorded cluster"):
        begin(on_b(pipeline), "run-1", source=source)
    source.cluster_id = A.cluster_id
    source.produce(0, 4)
    assert run_epoch(pipeline, source).ranges[0] == PartitionRange(0, 25, 29, "in-memory")
    assert last_checkpoint(pipeline, 1).source == A


# -- eos move-source -----------------------------------------------------------------------------

def test_a_move_plans_the_next_epoch_on_the_new_source_and_epochs_continue_there(
        pipeline: PipelineConfig, source: MemorySource, phases) -> None:
    run_epoch(pipeline, source)  # epoch 0: [0, 25) and [0, 15) of topic A
    moved, b = on_b(pipeline), b_source()
    with pytest.raises(SourceChanged):
        begin(moved, "run-1", source=b)

    done = move_source(moved, EARLIEST, source=b, run_id="operator")
    assert done.plan.epoch == 1 and done.plan.source == B
    assert done.plan.ranges == (PartitionRange(0, 3, 40, "topic-b"),
                                PartitionRange(1, 0, 10, "topic-b"))
    assert done.move == {"from": A.to_dict(), "to": B.to_dict(), "start": {"0": 3, "1": 0},
                         "position": "earliest", "after_epoch": 0}
    rows = log_rows(moved, 1)
    assert [r["phase"] for r in rows] == [epochlog.PLANNED, epochlog.MOVED]
    assert epochlog.move_of(rows[0]) == done.move  # the plan row carries the move
    assert " source_to=" in phases.lines("move-source")[-1]

    # begin returns the move's plan; the next epochs start from its checkpoint, on B.
    assert begin(moved, "run-1", source=b) == done.plan
    assert phases.outcome("begin") == Outcome.REUSED_LOG
    assert run_epoch(moved, b, run_id="run-1") == done.plan
    assert last_checkpoint(moved, 1).source == B
    assert last_checkpoint(moved, 1).until == {TopicPartition("topic-b", 0): 40,
                                               TopicPartition("topic-b", 1): 10}
    b.produce(0, 5)
    assert run_epoch(moved, b).ranges == (PartitionRange(0, 40, 45, "topic-b"),
                                         PartitionRange(1, 10, 10, "topic-b"))
    # The old config is now the one refused.
    with pytest.raises(SourceChanged):
        begin(pipeline, source=source)


@pytest.mark.parametrize("position, starts", [
    ("latest", (40, 10)),
    ("timestamp:12000", (12, 10)),  # record o is timestamped o s (MemorySource.offsets_at)
    ("timestamp:0", (3, 0)),
    ("offsets:0=7,1=2", (7, 2)),
])
def test_a_move_starts_where_its_position_says(pipeline: PipelineConfig, source: MemorySource,
                                               position: str, starts: tuple[int, int]) -> None:
    run_epoch(pipeline, source)
    done = move_source(on_b(pipeline), StartPosition.parse(position), source=b_source())
    assert tuple(r.start for r in done.plan.ranges) == starts
    assert tuple(r.until for r in done.plan.ranges) == (40, 10)
    assert done.move["position"] == position


def test_a_move_is_refused_while_an_epoch_is_in_flight(
        pipeline: PipelineConfig, source: MemorySource) -> None:
    """Epoch 1 is planned on A (then staged): it reads A whatever the config says, so it must
    commit first. Nothing is logged by the refused moves."""
    run_epoch(pipeline, source)
    source.produce(0, 5)
    begin(pipeline, "run-1", source=source)
    moved, b = on_b(pipeline), b_source()
    with pytest.raises(MoveRefused, match=r"epoch 1 .* in flight: planned on topic 'in-memory'"):
        move_source(moved, EARLIEST, source=b)
    precommit(pipeline, 1, MemoryStager())
    with pytest.raises(MoveRefused, match="in flight"):
        move_source(moved, EARLIEST, source=b)
    assert log_rows(moved, phase=epochlog.MOVED) == []
    assert commit(pipeline, 1).outcome is Outcome.COMMITTED
    assert move_source(moved, EARLIEST, source=b).plan.epoch == 2


@pytest.mark.parametrize("position, why", [
    ("earliest", "nothing to move"),  # the configured source is the checkpoint's
    ("offsets:0=2,1=0", r"partition 0: 2 not in \[3, 40\]"),  # below B's log start
    ("offsets:0=5,1=11", r"partition 1: 11 not in \[0, 10\]"),  # beyond its end
    ("offsets:0=5", r"partitions \[0\].* has partitions \[0, 1\]"),
])
def test_a_move_that_cannot_be_done_writes_nothing(
        pipeline: PipelineConfig, source: MemorySource, position: str, why: str) -> None:
    run_epoch(pipeline, source)
    config, target = (pipeline, source) if why == "nothing to move" else (on_b(pipeline),
                                                                          b_source())
    with pytest.raises(MoveRefused, match=why):
        move_source(config, StartPosition.parse(position), source=target)
    assert log_rows(pipeline, 1) == []


@pytest.mark.parametrize("text", ["", "first", "timestamp:", "timestamp:-5", "offsets:",
                                  "offsets:0=1,0=2", "offsets:0:1", "latest:3"])
def test_an_unknown_position_is_named(text: str) -> None:
    with pytest.raises(ValueError, match="earliest, latest, timestamp:<ms or ISO-8601>"):
        StartPosition.parse(text)


class Barrier(MemorySource):
    """A source whose watermarks are asked once every racer read the log."""

    def __init__(self, barrier: threading.Barrier, marks: dict[int, tuple[int, int]]) -> None:
        super().__init__(marks)
        self.barrier = barrier

    def watermarks(self, config: PipelineConfig) -> Marks:
        self.barrier.wait()
        return super().watermarks(config)


def test_a_move_and_a_stale_begin_that_race_log_one_plan(
        pipeline: PipelineConfig, source: MemorySource) -> None:
    """A begin still configured with topic A and a move to B both find no plan of epoch 1:
    the plan logged first is the only one (the fenced append plans share), and the loser
    adopts it (begin) or changed nothing (the move)."""
    run_epoch(pipeline, source)
    with ensure_tables(pipeline) as tables:
        tables.handle(tables.epochs)
    barrier = threading.Barrier(2, timeout=30)
    stale, b = Barrier(barrier, {0: (0, 30), 1: (0, 15)}), Barrier(barrier, b_source().marks)

    def move() -> Any:
        try:
            return move_source(on_b(pipeline), EARLIEST, source=b).plan
        except MoveRefused as refused:
            return refused

    began, moved = at_once(lambda: begin(pipeline, "run-1", source=stale), move)
    plans = log_rows(pipeline, 1, epochlog.PLANNED)
    assert len({r["plan_hash"] for r in plans}) == 1
    if isinstance(moved, MoveRefused):  # begin logged first: epoch 1 reads A
        assert began.source == A and log_rows(pipeline, 1, epochlog.MOVED) == []
    else:  # the move logged first: the stale begin adopted the plan on B
        assert began == moved and moved.source == B


def test_status_names_a_changed_source_and_shows_the_move(
        pipeline: PipelineConfig, source: MemorySource, monkeypatch: pytest.MonkeyPatch) -> None:
    """``eos status`` and the epochs view: no lag computed from another topic's offsets, and
    the epoch a move planned says so."""
    run_epoch(pipeline, source)
    moved = on_b(pipeline)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9")  # never contacted
    shown = pipeline_status(moved)
    assert shown.partitions == [] and shown.lag_error is not None
    assert "offsets are of topic 'in-memory'" in shown.lag_error
    assert "eos move-source" in shown.lag_error
    move_source(moved, EARLIEST, source=b_source())
    shown = pipeline_status(moved, with_lag=False)
    assert [e.epoch for e in shown.epochs] == [0, 1] and shown.epochs[0].moved is None
    assert shown.epochs[1].describe_move() == (
        "moved from topic 'in-memory' on cluster 'memory-cluster' to topic 'topic-b' on "
        "cluster 'memory-cluster' at earliest")
    assert shown.epochs[1].describe_move() in render(shown)


def test_a_data_driven_schedule_asks_for_an_epoch_when_the_source_changed(
        tmp_path: Path, source: MemorySource) -> None:
    """Another topic's offsets give no lag (here A's would say 10 records, below the
    threshold): the trigger fires, so begin refuses loudly, or runs a move's plan."""
    config = make_pipeline(tmp_path, base=IN_MEMORY, schedule={"lag_records": 1000})
    run_epoch(config, source)
    moved = same_pipeline(config, kafka={"topic": B.topics[0]}, schedule={"lag_records": 1000})
    b = b_source()
    observed = observe(moved, source=b, with_oldest=False)
    assert observed.source_changed is not None and "topic 'in-memory'" in observed.source_changed
    decision = decide(moved.schedule, observed, 1_800_000_000_000)
    assert (decision.fire, decision.reason) == (True, Reason.SOURCE_CHANGED)
    assert b.asked == 0


def test_a_rewind_to_before_a_move_from_another_cluster_is_refused(
        rewindable: PipelineConfig, source: MemorySource) -> None:
    """A replay reads each logged plan's topic from the configured cluster: epochs read from
    the cluster a pipeline moved away from cannot be replayed; those after the move can."""
    run_epoch(rewindable, source)  # epoch 0 on memory-cluster
    source.cluster_id = "cluster-2"  # a topic of the same name on another cluster
    with pytest.raises(SourceChanged, match="cluster 'cluster-2'"):
        begin(rewindable, source=source)
    move_source(rewindable, EARLIEST, source=source)
    run_epoch(rewindable, source)  # epoch 1: the move's plan, on cluster-2
    source.produce(0, 3)
    run_epoch(rewindable, source)  # epoch 2
    with pytest.raises(RewindRefused, match="epoch 0 read topic 'in-memory' on cluster "
                                            "'memory-cluster'"):
        rewind(rewindable, -1)
    assert log_rows(rewindable, phase=epochlog.REWINDING) == []
    assert rewind(rewindable, 0).outcome is Outcome.REWOUND
