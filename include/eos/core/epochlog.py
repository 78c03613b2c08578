"""The epoch log: a write-ahead, append-only record of plans and phase transitions.

It is for people and for reusing plans; it is never the authority on what is committed (that is
each sink's Delta ``txn`` version).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake

from eos.core.delta import scan
from eos.core.layout import Tables
from eos.core.outcomes import Outcome
from eos.core.tables import EPOCHS_SCHEMA, handle

PLANNED, PRECOMMITTED, COMMITTED, ABORTED = "planned", "precommitted", "committed", "aborted"
# Neither precommit nor commit appends a row here: the staging commit and the checkpoint they
# write anyway carry who did the work and how (``facts``), and readers see those as
# ``precommitted`` and ``committed`` rows (``carried_row``;
# ``eos.core.pipeline_status.epoch_rows``). Logs written before that hold such rows of their own.
# A rewind to N is logged at epoch N + 1, the first epoch its replay recomputes
# (``eos.core.rewind``).
REWINDING, REWOUND = "rewinding", "rewound"
# ``eos move-source`` (``eos.core.move``) logs the plan of the first epoch on the new source,
# its details carrying the move (``MOVED``: old and new source, start offsets), then a
# ``moved`` row with the same details, for people (the plan row is the one that counts).
MOVED = "moved"
# One task try of a scheduler's run that finished a phase of the epoch, whether it did the
# work or found it done (``log_try``): who touched an epoch, for people; no step reads it.
# A try that did the phase's work is recorded in the row the phase appends anyway, under this
# key of its details (``with_try``): no append of its own.
TRIED = "tried"


@dataclass(frozen=True)
class Attempt:
    """A scheduler's task try working on a phase of an epoch: its run, its task, its number.
    Handed to a phase (``eos.core.protocol``) so the row the phase logs when it does the work
    names the try that did it, in the same append."""

    run_id: str
    task: str
    number: int | None

    def facts(self, outcome: Outcome) -> dict[str, Any]:
        """What the epochs view shows of this try once it ended with ``outcome``."""
        return {"task": self.task, "try": self.number, "outcome": str(outcome),
                "wrote": outcome.wrote}


def carried(outcome: Outcome) -> bool:
    """Whether a phase that ended with ``outcome`` logged its try in its own row: it did when
    it did the work (``outcome.wrote``: the plan, precommitted or aborted row, or the
    checkpoint's details for a commit: ``eos.core.checkpoints.Checkpoint.log_rows``).
    A try that found the work done logs a row of its own (``log_try``)."""
    return outcome.wrote


def with_try(details: dict[str, Any] | None, attempt: Attempt | None,
             outcome: Outcome) -> dict[str, Any] | None:
    """A phase row's ``details`` carrying ``attempt``'s try (unchanged without one, or when
    the try did not do the work: that one logs its own row)."""
    if attempt is None or not carried(outcome):
        return details
    return {**(details or {}), TRIED: attempt.facts(outcome)}


def try_facts(row: dict[str, Any]) -> dict[str, Any] | None:
    """The task try a log row records, if any: a ``tried`` row's details, or the try a phase's
    row carries (``with_try``)."""
    if not row["details"]:
        return None
    details = json.loads(row["details"])
    if row["phase"] == TRIED:
        return details
    found = details.get(TRIED) if isinstance(details, dict) else None
    return found if isinstance(found, dict) else None


def _row(epoch: int, phase: str, run_id: str | None, plan_hash: str | None, plan: str | None,
         duration_ms: float | None, details: dict[str, Any] | None) -> pa.Table:
    return pa.Table.from_pylist([{
        "epoch": epoch,
        "phase": phase,
        "run_id": run_id,
        "plan_hash": plan_hash,
        "plan": plan,
        "at": datetime.now(UTC),
        "duration_ms": duration_ms,
        "details": json.dumps(details, sort_keys=True, default=str) if details else None,
    }], schema=EPOCHS_SCHEMA)


def facts(details: dict[str, Any], attempt: Attempt | None, outcome: Outcome,
          duration_ms: float | None) -> dict[str, Any]:
    """What a phase that did its work records of it in a commit it makes anyway, instead of a
    log row of its own: ``details``, the try (``with_try``), the run, the duration, the time
    (``carried_row`` reads them back as a log row)."""
    return {**(with_try(details, attempt, outcome) or {}),
            "run_id": attempt.run_id if attempt else None, "duration_ms": duration_ms,
            "at": datetime.now(UTC).isoformat()}


def carried_row(epoch: int, phase: str, plan_hash: str, recorded: dict[str, Any],
                at: datetime | None = None) -> dict[str, Any]:
    """``facts`` recorded by a phase in its own commit, in the shape of a log row of
    ``phase`` (``at``: when it is not in them, as in a checkpoint's, which has its own time)."""
    details = {k: v for k, v in recorded.items() if k not in ("run_id", "duration_ms", "at")}
    when = datetime.fromisoformat(recorded["at"]) if recorded.get("at") else at
    return {"epoch": epoch, "phase": phase, "run_id": recorded.get("run_id"),
            "plan_hash": plan_hash, "plan": None, "at": when,
            "duration_ms": recorded.get("duration_ms"),
            "details": json.dumps(details, sort_keys=True, default=str)}


def append(
    tables: Tables,
    epoch: int,
    phase: str,
    *,
    run_id: str | None = None,
    plan_hash: str | None = None,
    plan: str | None = None,
    duration_ms: float | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Append one row (through the phase's handle of the log when there is one)."""
    row = _row(epoch, phase, run_id, plan_hash, plan, duration_ms, details)
    write_deltalake(handle(tables, tables.epochs) or tables.epochs, row, mode="append")


def log_try(tables: Tables, epoch: int, run_id: str, task: str, try_number: int | None,
            outcome: Outcome, plan_hash: str | None = None) -> None:
    """Record that try ``try_number`` of ``task`` in run ``run_id`` finished a phase of
    ``epoch`` with ``outcome``: the epochs view lists every run that touched an epoch and
    which of its tries did the work (``outcome.wrote``) or found it done, and links to that
    try's log. One small append per finished try that found the work done; a try that did the
    work is in the phase's own row (``carried``), and one that crashed before leaves none."""
    append(tables, epoch, TRIED, run_id=run_id, plan_hash=plan_hash,
           details=Attempt(run_id, task, try_number).facts(outcome))


def log_finished(tables: Tables, epoch: int, attempt: Attempt, outcome: Outcome,
                 plan_hash: str | None = None) -> bool:
    """After ``attempt`` finished a phase of ``epoch`` with ``outcome``: log its own ``tried``
    row unless the phase's row carried it (``carried``). True when it appended one."""
    if carried(outcome):
        return False
    log_try(tables, epoch, attempt.run_id, attempt.task, attempt.number, outcome, plan_hash)
    return True


def log_plan(tables: Tables, app_id: str, epoch: int, plan: str, plan_hash: str,
             run_id: str | None, duration_ms: float | None,
             attempt: Attempt | None = None, details: dict[str, Any] | None = None) -> bool:
    """Log the *first* plan of ``epoch``: True if this call's plan is the one, False if another
    planner's was logged first (read it with ``first_plan_row``).

    The append carries ``txn(<app id>:plan, epoch)`` and is fenced through the phase's snapshot
    of the log (the one ``plan_rows`` answered from), like a sink commit: of two planners that
    both found no plan, exactly one appends; the other's commit is refused. So "the first plan
    logged wins" is decided by Delta's commit order, not by comparing clocks, and the winner
    knows it without reading the log again. The row carries ``attempt``'s try as the one that
    planned (it is only committed if this call's plan wins), and ``details`` (a move's).
    """
    from eos.core.delta import fenced_append

    row = _row(epoch, PLANNED, run_id, plan_hash, plan, duration_ms,
               with_try(details, attempt, Outcome.PLANNED))
    done = fenced_append(tables.epochs, row, f"{app_id}:plan", epoch,
                         fault_point="begin.before_log", snapshot=handle(tables, tables.epochs),
                         in_order=False, op="plan")
    return done.outcome is Outcome.COMMITTED


def rows(tables: Tables, epoch: int | None = None, since: int | None = None,
         run_id: str | None = None) -> list[dict[str, Any]]:
    """Log rows of one ``epoch``, of epochs ``>= since``, of one ``run_id``, or all, in the order
    they were logged (by time, then plan hash for ties). A log not created yet has no rows.

    Filters are pushed into delta-rs' scan, which skips files by their statistics: the log is
    never read whole unless asked to."""
    filters: list[tuple[str, str, Any]] = []
    if epoch is not None:
        filters.append(("epoch", "=", int(epoch)))
    if since:
        filters.append(("epoch", ">=", int(since)))
    if run_id is not None:
        filters.append(("run_id", "=", run_id))
    table = handle(tables, tables.epochs)
    return in_log_order([] if table is None else scan(table, filters=filters or None).to_pylist())


def in_log_order(data: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Log rows (and rows read as log rows: ``Checkpoint.log_rows``) in the order they were
    logged."""
    return sorted(data, key=lambda r: (r["at"], r["epoch"], r["plan_hash"] or "", r["phase"]))


def plan_rows(tables: Tables, epoch: int, run_id: str | None) -> list[dict[str, Any]]:
    """The planned rows of ``epoch`` and those of ``run_id`` (at any epoch), and every rewind
    row, in one read: what ``begin`` needs to know whether its run or the epoch already has a
    plan, and whether a rewind is unfinished."""
    table = handle(tables, tables.epochs)
    if table is None:
        return []
    where = [[("epoch", "=", int(epoch)), ("phase", "=", PLANNED)],
             [("phase", "=", REWINDING)], [("phase", "=", REWOUND)]]
    if run_id:
        where.append([("run_id", "=", run_id), ("phase", "=", PLANNED)])
    return in_log_order(scan(table, filters=where).to_pylist())


def rewind_rows(tables: Tables) -> list[dict[str, Any]]:
    """Every rewind row (started and finished), in log order."""
    table = handle(tables, tables.epochs)
    if table is None:
        return []
    where = [[("phase", "=", REWINDING)], [("phase", "=", REWOUND)]]
    return in_log_order(scan(table, filters=where).to_pylist())


def unfinished_rewind(logged: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The plan (details) of a rewind logged as started and never as finished, if any."""
    started = [json.loads(r["details"]) for r in logged if r["phase"] == REWINDING]
    done = {json.loads(r["details"])["rewind_id"] for r in logged if r["phase"] == REWOUND}
    return next((plan for plan in started if plan["rewind_id"] not in done), None)


def log_rewind(tables: Tables, app_id: str, seq: int, epoch: int, run_id: str | None,
               details: dict[str, Any]) -> bool:
    """Log the start of rewind number ``seq`` (at ``epoch``, the first one it replays): True if
    this call logged it, False if a concurrent attempt logged rewind ``seq`` first (fenced as
    ``log_plan`` is, with ``txn(<app id>:rewind, seq)``)."""
    from eos.core.delta import fenced_append

    row = _row(epoch, REWINDING, run_id, None, None, None, details)
    done = fenced_append(tables.epochs, row, f"{app_id}:rewind", seq,
                         fault_point="rewind.before_log", snapshot=handle(tables, tables.epochs),
                         in_order=False, op="rewind-log")
    return done.outcome is Outcome.COMMITTED


def move_of(row: dict[str, Any]) -> dict[str, Any] | None:
    """The move a plan row carries (``eos.core.move``), if it is the first plan on a new
    source: ``{"from": ..., "to": ..., "start": {partition: offset}, "position": ...}``."""
    details = json.loads(row["details"]) if row.get("details") else None
    found = details.get(MOVED) if isinstance(details, dict) else None
    return found if isinstance(found, dict) else None


def first_plan_row(tables: Tables, epoch: int) -> dict[str, Any] | None:
    """The plan of ``epoch``: the first one logged wins, so racing planners agree on it."""
    return first_planned(rows(tables, epoch))


def plan_row_for_run(tables: Tables, run_id: str) -> dict[str, Any] | None:
    """The plan a DAG run logged first: a run keeps its epoch, even when cleared much later."""
    return first_planned(rows(tables, run_id=run_id))


def first_planned(logged: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first planned row of rows in log order (every planned row of an epoch carries the
    plan its first one logged: later rows only bind runs to it)."""
    return next((row for row in logged if row["phase"] == PLANNED), None)
