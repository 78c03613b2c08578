"""Protocol behaviour the fast tier found to contradict DESIGN §4-§5, each written as the test
the design implies and marked ``xfail(strict=True)``: it runs, it is expected to fail today,
and it fails the tier the day the behaviour is fixed (then drop the mark)."""

from __future__ import annotations

import contextlib

import pytest

from eos.core import checkpoints
from eos.core.config import PipelineConfig
from eos.core.errors import ConfigError, EosError, ProtocolViolation
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.plan import Plan
from eos.core.protocol import abort, begin, commit, committed_epoch, precommit
from eos.core.rewind import rewind

from .harness import MemorySource, MemoryStager, run_epoch, same_pipeline, staged_rows, store

pytestmark = pytest.mark.fast


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "abort is not fenced against an in-flight commit (DESIGN §5: 'neither may interleave with "
    "a precommit or commit'): it drops N's staged rows while commit promotes them, N is "
    "checkpointed without its state, and N+1's precommit halts the pipeline"))
def test_an_abort_while_the_epoch_commits_leaves_a_consistent_pipeline(
        pipeline: PipelineConfig, source: MemorySource) -> None:
    plan = begin(pipeline, source=source)
    precommit(pipeline, 0, MemoryStager())

    def operator_aborts(_: int) -> None:  # right before the first sink write
        store(pipeline, "memory:a").before_write = None
        with contextlib.suppress(EosError):  # refusing the abort would be one fix
            abort(pipeline, 0, reason="operator")

    store(pipeline, "memory:a").before_write = operator_aborts
    with contextlib.suppress(EosError):  # refusing the commit would be another
        commit(pipeline, 0)
    # Either the abort or the commit must have been refused: never a committed epoch whose
    # staged state is gone (what epoch 1 resumes from).
    assert committed_epoch(pipeline) == -1 or staged_rows(pipeline, 0, plan.hash) is not None


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "precommit's check after computing compares only the checkpoint's epoch number: a rewind "
    "and a replay back to N-1 while a zombie computed N from the old N-1 state pass it, and "
    "the replay then reuses the zombie's rows (REUSED_STAGE checks the plan hash only)"))
def test_a_zombie_that_computed_before_a_rewind_and_replay_is_not_staged(
        rewindable: PipelineConfig, source: MemorySource) -> None:
    for _ in range(2):
        run_epoch(rewindable, source)
        source.produce(0, 5)
    begin(rewindable, source=source)
    fixed = same_pipeline(rewindable, window={"type": "tumbling", "size": "20s"})

    def rewind_and_replay(_: Plan) -> None:  # the operator, while the zombie computes epoch 2
        rewind(fixed, -1)
        run_epoch(fixed, source)
        run_epoch(fixed, source)

    zombie = MemoryStager(during=rewind_and_replay)
    try:
        outcome = precommit(rewindable, 2, zombie).outcome
    except ProtocolViolation:
        outcome = Outcome.DISCARDED
    assert committed_epoch(fixed) == 1
    assert outcome is not Outcome.STAGED  # computed from epoch 1's state as it was before
    assert precommit(fixed, 2, MemoryStager()).outcome is Outcome.STAGED


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "commit checks no schema view and records the committing process's view in the "
    "checkpoint: an epoch staged under one config and committed under a changed one is "
    "checkpointed as the new config's, and begin then accepts the change"))
def test_a_changed_schema_view_is_refused_at_commit(pipeline: PipelineConfig,
                                                    source: MemorySource) -> None:
    run_epoch(pipeline, source)
    source.produce(0, 5)
    begin(pipeline, source=source)
    precommit(pipeline, 1, MemoryStager())
    changed = same_pipeline(pipeline, window={"type": "tumbling", "size": "20s"})
    try:
        commit(changed, 1)
    except ConfigError:
        return  # refused, naming the change: one fix
    last = checkpoints.read(tables_for(pipeline), 1)
    assert last is not None and last.config == pipeline.schema_view()  # what it was computed with
