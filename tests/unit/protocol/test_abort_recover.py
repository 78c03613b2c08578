"""``abort`` and ``recover``: discarding a failed epoch, finishing a staged one."""

from __future__ import annotations

import json

from eos.core import epochlog
from eos.core.config import PipelineConfig
from eos.core.outcomes import Outcome
from eos.core.protocol import abort, begin, checkpointed_epoch, commit, precommit, recover

from support.memory import MemorySource, MemoryStager, log_rows, run_epoch, staged_rows, store

SINKS = ["memory:a", "memory:b", "memory:c"]


def test_a_committed_epoch_is_never_aborted(pipeline: PipelineConfig, source: MemorySource,
                                            phases) -> None:
    plan = run_epoch(pipeline, source)
    assert abort(pipeline, 0, reason="late") is Outcome.NOTHING_TO_ABORT
    assert staged_rows(pipeline, 0, plan.hash) is not None
    assert [store(pipeline, n).aborted for n in SINKS] == [[], [], []]
    assert log_rows(pipeline, 0, epochlog.ABORTED) == []
    assert phases.outcome("abort") == Outcome.NOTHING_TO_ABORT


def test_an_aborted_epoch_is_dropped_and_rerun_identically(
        pipeline: PipelineConfig, source: MemorySource) -> None:
    """Staged rows dropped, every sink's ``abort`` called, "aborted" logged; the rerun gets the
    same plan and stages identical rows (failure matrix: "Spark killed mid-write")."""
    plan = begin(pipeline, "run-0", source=source)
    precommit(pipeline, 0, MemoryStager())
    first = staged_rows(pipeline, 0, plan.hash)
    assert abort(pipeline, 0, reason="spark died") is Outcome.ABORTED
    assert staged_rows(pipeline, 0, plan.hash) is None
    assert [store(pipeline, n).aborted for n in SINKS] == [[0], [0], [0]]
    (row,) = log_rows(pipeline, 0, epochlog.ABORTED)
    assert json.loads(row["details"]) == {"reason": "spark died"}
    source.produce(0, 10)
    assert begin(pipeline, "run-0", source=source) == plan
    rerun = MemoryStager()
    assert precommit(pipeline, 0, rerun).outcome is Outcome.STAGED and rerun.staged == [0]
    again = staged_rows(pipeline, 0, plan.hash)
    assert again is not None and again == first
    assert commit(pipeline, 0).outcome is Outcome.COMMITTED


def test_a_planned_epoch_can_be_aborted(pipeline: PipelineConfig, source: MemorySource) -> None:
    begin(pipeline, source=source)
    assert abort(pipeline, 0) is Outcome.ABORTED
    assert [store(pipeline, n).aborted for n in SINKS] == [[0], [0], [0]]


def test_recover_finds_nothing_pending(pipeline: PipelineConfig, source: MemorySource) -> None:
    assert recover(pipeline) == (None, Outcome.NOTHING_PENDING)
    run_epoch(pipeline, source)
    assert recover(pipeline) == (None, Outcome.NOTHING_PENDING)


def test_recover_leaves_a_planned_epoch_to_precommit(pipeline: PipelineConfig,
                                                     source: MemorySource) -> None:
    begin(pipeline, source=source)
    assert recover(pipeline) == (0, Outcome.NEEDS_PRECOMMIT)
    assert checkpointed_epoch(pipeline) == -1 and store(pipeline, "memory:a").written == []


def test_recover_commits_a_staged_epoch_as_staged(pipeline: PipelineConfig,
                                                  source: MemorySource) -> None:
    plan = begin(pipeline, source=source)
    precommit(pipeline, 0, MemoryStager())
    rows = store(pipeline, "memory:a")
    assert recover(pipeline) == (0, Outcome.COMMITTED)
    assert checkpointed_epoch(pipeline) == 0 and rows.written == [0]
    assert rows.rows[0].to_pylist()[0]["n"] == 34
    assert recover(pipeline) == (None, Outcome.NOTHING_PENDING)
    assert staged_rows(pipeline, 0, plan.hash) is not None
