"""``begin``: the plan of the epoch a run processes, logged before anything reads data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eos.core import checkpoints, epochlog, faults
from eos.core.config import PipelineConfig
from eos.core.layout import Tables
from eos.core.outcomes import Outcome
from eos.core.phaselog import elapsed_ms, log_epoch_phase, timed
from eos.core.plan import Plan, Source, committed_source, new_plan, plan_of
from eos.core.protocol.authority import check_sinks
from eos.core.rewind import check_none_unfinished
from eos.core.tables import ensure_tables


@dataclass(frozen=True)
class Began:
    """What ``begin_epoch`` did: the plan this run processes, and how it got it."""

    plan: Plan
    outcome: Outcome


def begin(config: PipelineConfig, run_id: str | None = None, *,
          source: Source | None = None) -> Plan:
    """The plan of the epoch this run processes (``begin_epoch``, without how it was found)."""
    return begin_epoch(config, run_id, source=source).plan


def begin_epoch(config: PipelineConfig, run_id: str | None = None, *,
                source: Source | None = None, attempt: epochlog.Attempt | None = None) -> Began:
    """Return the plan of the epoch this run processes, logging a new one only if none exists.
    A new plan reads ``source``'s watermarks (default: the pipeline's Kafka topic). The plan
    row this call logs names ``attempt`` (a scheduler's task try) when it planned the epoch
    (``epochlog.with_try``); a try that found a plan logs its own row, if its caller wants.

    Scenarios:
    - a rewind is unfinished: ``RewindUnfinished`` (finish the rewind first);
    - the run was bound to an epoch before (a cleared run, committed or not): that epoch's plan,
      so clearing a run never moves it to another epoch (after a rewind, a backfill of the
      same runs replays each run's own epoch);
    - the log already holds a plan for c + 1 (a crash after logging, a retry): that plan;
    - otherwise a new plan for c + 1, logged *before* returning; of planners that race, exactly
      one logs its plan (a fenced append, ``epochlog.log_plan``) and the others adopt it.
    - a new plan's source (topic, cluster) is not the one the last checkpoint's offsets are
      of: ``SourceChanged`` (moving is ``eos move-source``, ``eos.core.move``).

    Costs: each table opened once, the epoch log read once (the run's rows and c + 1's, by file
    statistics), the last checkpoint read once, one append.
    """
    with timed() as took, ensure_tables(config) as tables:
        committed = checkpoints.last_checkpointed(tables, config.app_id)
        last = checkpoints.last(tables, committed)
        checkpoints.check_schema_view(last, config)
        logged = epochlog.plan_rows(tables, committed + 1, run_id)
        check_none_unfinished(logged)  # a half-done rewind: its tables are not consistent
        check_sinks(config, committed, last=last)
        plan, how = _existing_plan(logged, committed, run_id)
        if plan is None:
            fresh = new_plan(config, committed + 1, last.until if last else {}, source,
                             since=committed_source(tables, last))  # SourceChanged
            won = epochlog.log_plan(tables, config.app_id, fresh.epoch, fresh.to_json(),
                                    fresh.hash, run_id, elapsed_ms(took), attempt)
            faults.hit("begin.after_log")
            plan, how = fresh, Outcome.PLANNED
            if not won:  # another planner logged first: everyone uses its plan
                plan = plan_of(tables, fresh.epoch)
                how = Outcome.PLANNED if plan == fresh else Outcome.REUSED_RACE
                _bind(tables, plan, run_id, took, epochlog.with_try(None, attempt, how))
        elif how is not Outcome.REUSED_RUN:
            _bind(tables, plan, run_id, took, None)
    log_epoch_phase(
        "begin", epoch=plan.epoch, plan_hash=plan.hash, outcome=how,
        ranges=plan.describe_ranges(","), records=plan.records, rows=None, delta_versions={},
        duration_ms=took["ms"], committed_epoch=committed, run_id=run_id,
    )
    assert how is not None  # _existing_plan gives an outcome with every plan it finds
    return Began(plan, how)


def _bind(tables: Tables, plan: Plan, run_id: str | None, took: dict[str, float],
          details: dict[str, Any] | None) -> None:
    """Bind this run to the epoch it adopted, so clearing it later finds the same epoch."""
    if run_id:
        epochlog.append(tables, plan.epoch, epochlog.PLANNED, run_id=run_id,
                        plan_hash=plan.hash, plan=plan.to_json(), duration_ms=elapsed_ms(took),
                        details=details)


def _existing_plan(logged: list[dict[str, Any]], committed: int,
                   run_id: str | None) -> tuple[Plan | None, Outcome | None]:
    """The run's own plan, else the logged plan of c + 1 (``logged``: one read of the log)."""
    mine = epochlog.first_planned([r for r in logged if run_id and r["run_id"] == run_id])
    if mine is not None:
        return Plan.from_json(mine["plan"]), Outcome.REUSED_RUN
    row = epochlog.first_planned([r for r in logged if r["epoch"] == committed + 1])
    if row is not None:
        return Plan.from_json(row["plan"]), Outcome.REUSED_LOG
    return None, None

