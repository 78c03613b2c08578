"""The one epoch loop: begin -> precommit -> commit of one epoch in this process, as one DAG run
does it, and "until caught up". The ``eos`` command, the demo, the tests and the benchmarks run
epochs through here; the DAG runs the same three phases as Airflow tasks, and ``eos chaos``
calls them one by one to put its faults between them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from eos.core.config import PipelineConfig
from eos.core.plan import Plan, Source
from eos.core.protocol import CommitResult, StageResult, begin, commit, precommit
from eos.core.staging import Stager

DEFAULT_LIMIT = 1_000  # epochs "until caught up" runs at most before it gives up
RETRY_PAUSE_S = 0.5  # the first pause before a commit is retried; it doubles each time
PHASES = ("begin", "precommit", "commit")


@dataclass(frozen=True)
class EpochResult:
    """What one pass of the loop did: the plan, precommit's and commit's results, the wall
    seconds of the whole epoch and of each phase (``phases``: ``begin``, ``precommit``,
    ``commit``; the benchmarks report them)."""

    plan: Plan
    staged: StageResult
    committed: CommitResult
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def epoch(self) -> int:
        return self.plan.epoch

    def summary(self) -> dict[str, Any]:
        """One line of ``eos run`` and the demo."""
        return {"epoch": self.plan.epoch, "plan_hash": self.plan.hash,
                "records": self.plan.records, "outcome": str(self.committed.outcome),
                "rows": self.committed.rows, "seconds": round(self.seconds, 1)}


def run_epoch(config: PipelineConfig, run_id: str | None = None, *, spark: Any = None,
              stager: Stager | None = None, source: Source | None = None,
              in_phase: Callable[[str], AbstractContextManager[Any]] | None = None,
              commit_retries: int = 0) -> EpochResult:
    """One epoch: its plan (a new one, or the logged plan a cleared run is bound to), staged,
    committed. Precommit runs with ``stager`` when given (the fast tests' in-process one), else
    on ``spark`` (a session this process holds: tests, benchmarks, chaos), else where the
    pipeline's ``compute.mode`` says, as the DAG runs it. ``source`` plans from other offsets
    than Kafka's (the fast tests); Spark is imported only when precommit runs on it.

    ``in_phase(name)``, when given, is a context each phase runs inside, named as in
    ``PHASES`` (the benchmarks count the Delta calls of each phase with it).

    ``commit_retries``: how often a commit that failed transiently is run again, as the DAG's
    commit task is retried (commit is idempotent: a retry finishes what the failed attempt
    left). 0 raises the first failure, which is what a test of that failure wants."""
    phases: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(name: str) -> Iterator[None]:
        with in_phase(name) if in_phase is not None else contextlib.nullcontext():
            t0 = time.perf_counter()
            try:
                yield
            finally:
                phases[name] = time.perf_counter() - t0

    started = time.perf_counter()
    with phase("begin"):
        plan = begin(config, run_id=run_id, source=source)
    with phase("precommit"):
        if stager is None and spark is not None:
            from eos.compute.precommit.stager import SparkStager

            stager = SparkStager(spark)
        if stager is not None:
            staged = precommit(config, plan.epoch, stager, expected_hash=plan.hash)
        else:
            from eos.compute.spark import run_precommit

            staged = run_precommit(config, plan.epoch, plan.hash)
    with phase("commit"):
        committed = _commit_retried(config, plan.epoch, commit_retries)
    return EpochResult(plan, staged, committed, time.perf_counter() - started, phases)


def _commit_retried(config: PipelineConfig, epoch: int, retries: int) -> CommitResult:
    """``commit`` of ``epoch``, run again up to ``retries`` times while it fails transiently
    (a broker or store briefly away); a permanent failure is raised at once."""
    from eos.core.errors import TransientError
    from eos.core.phaselog import log_phase

    for attempt in range(retries + 1):
        try:
            return commit(config, epoch)
        except TransientError as error:
            if attempt == retries:
                raise
            log_phase("commit.retry", epoch=epoch, attempt=attempt + 1,
                      error=type(error).__name__, reason=str(error))
            time.sleep(RETRY_PAUSE_S * 2 ** attempt)
    raise AssertionError("unreachable")


def run_until_caught_up(config: PipelineConfig, run_prefix: str, *, spark: Any = None,
                        limit: int = DEFAULT_LIMIT,
                        on_epoch: Callable[[EpochResult], None] | None = None,
                        commit_retries: int = 0) -> list[EpochResult]:
    """Epochs until one is empty (everything the topic held when it was planned is committed).
    Run ids are ``<run_prefix>-<i>``. Raises ``RuntimeError`` after ``limit`` non-empty epochs:
    a producer faster than the pipeline never lets this return. ``commit_retries``: as in
    ``run_epoch``."""
    runs: list[EpochResult] = []
    while len(runs) < limit:
        runs.append(run_epoch(config, f"{run_prefix}-{len(runs)}", spark=spark,
                              commit_retries=commit_retries))
        if on_epoch is not None:
            on_epoch(runs[-1])
        if runs[-1].plan.records == 0:
            return runs
    raise RuntimeError(f"{config.name}: not caught up after {limit} epochs")
