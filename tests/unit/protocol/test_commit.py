"""``commit``: every decision about promoting a staged epoch into the sinks and checkpointing it."""

from __future__ import annotations

import threading

import pytest
from deltalake import DeltaTable

from eos.core import checkpoints, epochlog
from eos.core.config import PipelineConfig
from eos.core.errors import InjectedFault, ProtocolViolation
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.protocol import CommitResult, begin, checkpointed_epoch, commit, precommit
from eos.core.topics import TopicPartition

from support.memory import MemorySource, MemoryStager, at_once, log_plan, log_rows, run_epoch, store

SINKS = ["memory:a", "memory:b", "memory:c"]


def written(config: PipelineConfig) -> dict[str, list[int]]:
    return {name: store(config, name).written for name in SINKS}


def staged(config: PipelineConfig, source: MemorySource) -> int:
    plan = begin(config, source=source)
    precommit(config, plan.epoch, MemoryStager())
    return plan.epoch


def test_an_epoch_reaches_every_sink_then_its_checkpoint(
        pipeline: PipelineConfig, source: MemorySource, phases) -> None:
    plan = begin(pipeline, source=source)
    precommit(pipeline, 0, MemoryStager())
    result = commit(pipeline, 0)
    assert result.outcome is Outcome.COMMITTED and result.checkpoint_version is not None
    assert [(s.sink, s.outcome) for s in result.sinks] == [(n, Outcome.COMMITTED) for n in SINKS]
    assert result.rows == {"windows": 1, "late": 3, "quarantine": 3}
    windows = store(pipeline, "memory:a").rows[0].to_pylist()
    assert [(w["key"], w["n"], w["epoch"]) for w in windows] == [("k", 34, 0)]
    late = store(pipeline, "memory:b").rows[0].to_pylist()
    assert sorted((r["partition"], r["offset"]) for r in late) == [(0, 8), (0, 18), (1, 8)]
    quarantined = store(pipeline, "memory:c").rows[0].to_pylist()
    assert {r["reason"] for r in quarantined} == {"offset ends in 9"}
    checkpoint = checkpoints.read(tables_for(pipeline), 0)
    assert checkpoint is not None and checkpoint.plan_hash == plan.hash
    assert checkpoint.until == {TopicPartition("in-memory", 0): 25,
                                TopicPartition("in-memory", 1): 15}
    assert checkpoint.watermark_ms == 10_000
    assert checkpoint.config == pipeline.schema_view()
    assert len(log_rows(pipeline, 0, epochlog.COMMITTED)) == 1
    assert phases.outcome("commit") == Outcome.COMMITTED


def test_a_committed_epoch_is_not_committed_again(pipeline: PipelineConfig,
                                                  source: MemorySource) -> None:
    run_epoch(pipeline, source)
    fenced = [store(pipeline, n).fenced for n in SINKS]
    again = commit(pipeline, 0)
    assert again.outcome is Outcome.ALREADY_COMMITTED and again.sinks == []
    assert written(pipeline) == {n: [0] for n in SINKS}
    assert [store(pipeline, n).fenced for n in SINKS] == fenced  # no sink was even asked
    assert len(checkpoints.read_all(tables_for(pipeline))) == 1


def test_epochs_commit_in_order(pipeline: PipelineConfig) -> None:
    log_plan(pipeline, 1)
    with pytest.raises(ProtocolViolation, match="cannot commit epoch 1: the last checkpoint is "
                                                "epoch -1"):
        commit(pipeline, 1)
    with pytest.raises(ProtocolViolation, match="epoch 0 has no plan"):
        commit(pipeline, 0)
    assert written(pipeline) == {n: [] for n in SINKS}


def test_an_epoch_not_staged_is_not_committed(pipeline: PipelineConfig,
                                              source: MemorySource) -> None:
    plan = begin(pipeline, source=source)
    with pytest.raises(ProtocolViolation, match=f"epoch 0 is not pre-committed for plan "
                                                f"{plan.hash}; run precommit first"):
        commit(pipeline, 0)
    assert written(pipeline) == {n: [] for n in SINKS} and checkpointed_epoch(pipeline) == -1


def test_a_retry_after_a_crash_between_sinks_skips_the_sinks_holding_the_epoch(
        pipeline: PipelineConfig, source: MemorySource, arm) -> None:
    epoch = staged(pipeline, source)
    arm("commit.between_sinks:fail")
    with pytest.raises(InjectedFault):
        commit(pipeline, epoch)
    assert written(pipeline) == {"memory:a": [0], "memory:b": [], "memory:c": []}
    assert checkpointed_epoch(pipeline) == -1
    retry = commit(pipeline, epoch)
    assert retry.outcome is Outcome.COMMITTED and retry.checkpoint_version is not None
    assert retry.skipped == ["memory:a"] and not retry.sinks[0].raced
    assert sorted(retry.versions) == ["memory:b", "memory:c"]
    assert written(pipeline) == {n: [0] for n in SINKS} and checkpointed_epoch(pipeline) == 0


def test_a_retry_after_a_crash_before_the_checkpoint_only_checkpoints(
        pipeline: PipelineConfig, source: MemorySource, arm) -> None:
    epoch = staged(pipeline, source)
    arm("commit.before_checkpoint:fail")
    with pytest.raises(InjectedFault):
        commit(pipeline, epoch)
    assert written(pipeline) == {n: [0] for n in SINKS} and checkpointed_epoch(pipeline) == -1
    retry = commit(pipeline, epoch)
    assert retry.outcome is Outcome.COMMITTED and retry.skipped == SINKS
    assert written(pipeline) == {n: [0] for n in SINKS} and checkpointed_epoch(pipeline) == 0


def test_two_attempts_at_once_write_each_sink_and_the_checkpoint_once(
        pipeline: PipelineConfig, source: MemorySource) -> None:
    """Both attempts pass every check before either writes (a barrier right before each sink
    write): one writes each sink, the other finds it written (``raced``); one appends the
    checkpoint, the other reports ``ALREADY_COMMITTED`` and leaves the bookkeeping to it."""
    epoch = staged(pipeline, source)
    barrier = threading.Barrier(2, timeout=30)
    for name in SINKS:
        store(pipeline, name).before_write = lambda _: barrier.wait()
    results: list[CommitResult] = at_once(lambda: commit(pipeline, epoch),
                                          lambda: commit(pipeline, epoch))
    assert sorted(r.outcome for r in results) == sorted([Outcome.COMMITTED,
                                                         Outcome.ALREADY_COMMITTED])
    winner = next(r for r in results if r.outcome is Outcome.COMMITTED)
    assert winner.checkpoint_version is not None
    for name in SINKS:
        done = sorted(((s.outcome, s.raced) for r in results for s in r.sinks if s.sink == name),
                      key=str)
        assert done == sorted([(Outcome.COMMITTED, False), (Outcome.ALREADY_COMMITTED, True)],
                              key=str), name
    assert written(pipeline) == {n: [0] for n in SINKS}
    tables = tables_for(pipeline)
    assert [c.epoch for c in checkpoints.read_all(tables)] == [0]
    appends = [h for h in DeltaTable(tables.checkpoints).history() if h.get("eos.op")]
    assert [h["eos.epoch"] for h in appends] == ["0"]
    assert len(log_rows(pipeline, 0, epochlog.COMMITTED)) == 1
