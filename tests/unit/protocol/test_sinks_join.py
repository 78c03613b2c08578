"""A sink added to a running pipeline joins it at the next epoch, and one removed leaves it:
the checkpoint records each sink's first epoch (``since``) and the sinks that left, a crash
while a sink joins is completed by a rerun, and a sink that joins must be empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from eos.core import checkpoints
from eos.core.config import PipelineConfig
from eos.core.errors import InjectedFault, ProtocolViolation
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.protocol import begin, check_sinks, checkpointed_epoch, commit, precommit

from support.memory import IN_MEMORY, MEMORY_SINKS, MemorySource, MemoryStager, run_epoch, store
from support.pipelines import make_pipeline

WITH_D = {**MEMORY_SINKS, "windows": [*MEMORY_SINKS["windows"], {"memory": "d"}]}


def changed(pipeline: PipelineConfig, tmp_path: Path, sinks: dict) -> PipelineConfig:
    """The same pipeline (name, tables) with other sinks: its file edited."""
    return make_pipeline(tmp_path, name=pipeline.name, base=IN_MEMORY, sinks=sinks)


def more(source: MemorySource) -> None:
    source.produce(0, 10)
    source.produce(1, 10)


def since(config: PipelineConfig, epoch: int) -> dict[str, int]:
    checkpoint = checkpoints.read(tables_for(config), epoch)
    assert checkpoint is not None
    return {name: summary.get("since", 0) for name, summary in checkpoint.sinks.items()}


def test_a_sink_added_to_a_running_pipeline_joins_at_the_next_epoch(
        pipeline: PipelineConfig, source: MemorySource, tmp_path: Path) -> None:
    run_epoch(pipeline, source)
    more(source)
    run_epoch(pipeline, source)
    added = changed(pipeline, tmp_path, WITH_D)
    more(source)
    run_epoch(added, source)  # would have been ProtocolViolation: d holds -1, checkpoint 1
    more(source)
    run_epoch(added, source)
    assert store(added, "memory:d").written == [2, 3]
    assert store(added, "memory:a").written == [0, 1, 2, 3]
    assert since(added, 2) == {"memory:a": 0, "memory:b": 0, "memory:c": 0, "memory:d": 2}
    assert since(added, 3)["memory:d"] == 2  # carried by every checkpoint after
    assert check_sinks(added, 3) == {"memory:a": 3, "memory:b": 3, "memory:c": 3,
                                     "memory:d": 3}


def test_a_crash_while_a_sink_joins_is_completed_by_the_rerun(
        pipeline: PipelineConfig, source: MemorySource, tmp_path: Path, arm) -> None:
    run_epoch(pipeline, source)
    added = changed(pipeline, tmp_path, {**MEMORY_SINKS, "windows": [
        {"memory": "d"}, *MEMORY_SINKS["windows"]]})  # the new sink commits first
    more(source)
    plan = begin(added, source=source)
    precommit(added, plan.epoch, MemoryStager())
    arm("commit.between_sinks:fail")
    with pytest.raises(InjectedFault):
        commit(added, plan.epoch)
    assert store(added, "memory:d").written == [1] and checkpointed_epoch(added) == 0
    assert check_sinks(added, 0)["memory:d"] == 1  # one ahead, as any sink after a crash
    retry = commit(added, plan.epoch)
    assert retry.outcome is Outcome.COMMITTED and retry.skipped == ["memory:d"]
    assert since(added, 1)["memory:d"] == 1


def test_a_removed_sink_is_recorded_with_the_next_checkpoint(
        pipeline: PipelineConfig, source: MemorySource, tmp_path: Path) -> None:
    run_epoch(pipeline, source)
    removed = changed(pipeline, tmp_path, {**MEMORY_SINKS, "late": []})
    more(source)
    run_epoch(removed, source)
    checkpoint = checkpoints.read(tables_for(removed), 1)
    assert checkpoint is not None and checkpoint.details is not None
    assert checkpoint.details["sinks_left"] == ["memory:b"]
    assert "memory:b" not in checkpoint.sinks and store(removed, "memory:b").written == [0]


def test_a_sink_added_back_holding_old_epochs_is_refused_naming_the_way_on(
        pipeline: PipelineConfig, source: MemorySource, tmp_path: Path) -> None:
    run_epoch(pipeline, source)
    without_b = changed(pipeline, tmp_path, {**MEMORY_SINKS, "late": []})
    more(source)
    run_epoch(without_b, source)
    back = changed(pipeline, tmp_path, MEMORY_SINKS)  # b holds epoch 0, the checkpoint is 1
    more(source)
    with pytest.raises(ProtocolViolation, match="was added to the pipeline after epoch 1 but "
                                                "already holds epoch 0"):
        begin(back, source=source)


def test_a_listed_sink_that_lost_its_epochs_is_still_refused(
        pipeline: PipelineConfig, source: MemorySource) -> None:
    run_epoch(pipeline, source)
    store(pipeline, "memory:b").marker = -1  # truncated outside the protocol
    more(source)
    with pytest.raises(ProtocolViolation, match="sink memory:b holds epoch -1 but the last "
                                                "checkpoint is epoch 0"):
        begin(pipeline, source=source)
