"""The one epoch loop: begin -> precommit -> commit of one epoch in this process, as one DAG run
does it, and "until caught up". The ``eos`` command, the demo, chaos, the tests and the
benchmarks all run epochs through here; the DAG runs the same three phases as Airflow tasks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eos.compute.spark import run_precommit
from eos.compute.stage import SparkStager
from eos.core.config import PipelineConfig
from eos.core.plan import Plan
from eos.core.protocol import CommitResult, StageResult, begin, commit, precommit

DEFAULT_LIMIT = 1_000  # epochs "until caught up" runs at most before it gives up


@dataclass(frozen=True)
class EpochRun:
    """What one pass of the loop did: the plan, precommit's and commit's results."""

    plan: Plan
    staged: StageResult
    committed: CommitResult
    seconds: float

    @property
    def epoch(self) -> int:
        return self.plan.epoch

    def summary(self) -> dict[str, Any]:
        """One line of ``eos run`` and the demo."""
        return {"epoch": self.plan.epoch, "plan_hash": self.plan.hash,
                "records": self.plan.records, "outcome": str(self.committed.outcome),
                "rows": self.committed.rows, "seconds": round(self.seconds, 1)}


def run_epoch(config: PipelineConfig, run_id: str | None = None, *,
              spark: Any = None) -> EpochRun:
    """One epoch: its plan (a new one, or the logged plan a cleared run is bound to), staged,
    committed. Precommit runs on ``spark`` when given (a session this process holds: tests,
    benchmarks, chaos), else where the pipeline's ``compute.mode`` says, as the DAG runs it."""
    started = time.monotonic()
    plan = begin(config, run_id=run_id)
    if spark is not None:
        staged = precommit(config, plan.epoch, SparkStager(spark), expected_hash=plan.hash)
    else:
        staged = run_precommit(config, plan.epoch, plan.hash)
    committed = commit(config, plan.epoch)
    return EpochRun(plan, staged, committed, time.monotonic() - started)


def run_until_caught_up(config: PipelineConfig, run_prefix: str, *, spark: Any = None,
                        limit: int = DEFAULT_LIMIT,
                        on_epoch: Callable[[EpochRun], None] | None = None) -> list[EpochRun]:
    """Epochs until one is empty (everything the topic held when it was planned is committed).
    Run ids are ``<run_prefix>-<i>``. Raises ``RuntimeError`` after ``limit`` non-empty epochs:
    a producer faster than the pipeline never lets this return."""
    runs: list[EpochRun] = []
    while len(runs) < limit:
        runs.append(run_epoch(config, f"{run_prefix}-{len(runs)}", spark=spark))
        if on_epoch is not None:
            on_epoch(runs[-1])
        if runs[-1].plan.records == 0:
            return runs
    raise RuntimeError(f"{config.name}: not caught up after {limit} epochs")
