"""What an operator reads about a pipeline: its epochs, their runs and tries, its sinks and lag.
Data only; ``reading`` fills it from the tables, ``rendering`` prints it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from eos.core import epochlog
from eos.core.identity import SourceIdentity
from eos.core.plan import PartitionRange
from eos.core.verdicts import AuditVerdict

DEFAULT_LIMIT = 50


class EpochState(StrEnum):
    """Where an epoch stands. ``committed`` is the checkpoint table's word, never the log's."""

    PLANNED = "planned"
    PRECOMMITTED = "precommitted"
    COMMITTED = "committed"
    ABORTED = "aborted"
    REWOUND = "rewound"  # committed once, then rewound: the next runs replay it


# The epoch-log row each phase appends when it does the work (and names its try in).
PHASE_ROWS = {"begin": epochlog.PLANNED, "precommit": epochlog.PRECOMMITTED,
              "commit": epochlog.COMMITTED}


@dataclass(frozen=True)
class TaskTry:
    """One try of a run's task on the epoch: ``wrote`` when it did the phase's work (named by
    the row the phase logged, ``epochlog.with_try``), else it found the work done (a retry, a
    cleared run, a run that shared the epoch: a finished try's ``epochlog.TRIED`` row)."""

    task: str
    try_number: int | None
    outcome: str
    wrote: bool
    at: datetime | None = None
    # The phase row that named it (``epochlog.PLANNED``, ``PRECOMMITTED``...); None for a
    # ``tried`` row. One task may run several phases (``compute.tasks: one``).
    row: str | None = None


@dataclass(frozen=True)
class EpochRun:
    """A run that touched the epoch: it planned it (``planned``), took it over from the log
    (``adopted``: a shared or a failed run's epoch, or a replay after a rewind), or only
    left tries (``None``: bound before tries were logged); its finished tries, in order."""

    run_id: str
    role: str | None
    tries: tuple[TaskTry, ...] = ()

    def worked(self, task: str) -> TaskTry | None:
        """This run's try of ``task`` that did the work, if one did."""
        return next((t for t in self.tries if t.task == task and t.wrote), None)


@dataclass(frozen=True)
class EpochStatus:
    """One epoch as the log and the checkpoint table describe it (None: not recorded)."""

    epoch: int
    state: EpochState
    plan_hash: str | None
    run_id: str | None  # the DAG run (or ``eos run``) the epoch was first planned by
    records: int
    ranges: tuple[PartitionRange, ...]
    counts: dict[str, int]  # staged rows by kind: output (windows), late, quarantine, state, ...
    watermark_ms: int | None
    durations_ms: dict[str, float | None]  # begin, precommit, commit
    staging_version: int | None
    sink_versions: dict[str, int | None]  # the Delta version (or offset) each sink wrote
    checkpoint_version: int | None
    planned_at: datetime | None
    committed_at: datetime | None
    aborts: int = 0
    runs: tuple[EpochRun, ...] = ()  # every run that touched it, in the order they did
    # The move its plan is the first epoch after (``eos move-source``, ``epochlog.move_of``).
    moved: dict[str, Any] | None = None

    def worked(self, task: str, phase: str | None = None) -> tuple[str, TaskTry] | None:
        """The run and the try of ``task`` that did the work on this epoch (the last one, for
        a phase done again: a precommit after an abort), if a logged try did; with ``phase``
        (``begin``, ``precommit``, ``commit``), the try that did that phase's work, for a task
        that runs several."""
        row = PHASE_ROWS.get(phase) if phase else None
        found = [(run.run_id, t) for run in self.runs for t in run.tries
                 if t.task == task and t.wrote and (row is None or t.row in (None, row))]
        return max(found, key=lambda f: f[1].at or datetime.min) if found else None

    def describe_ranges(self) -> str:
        """``p0:[0,5) p1:[0,7)``; ``a/p0:[0,5) b/p0:[0,2)`` when the ranges are of several
        topics."""
        several = len({r.topic for r in self.ranges}) > 1
        return " ".join(f"{r.topic + '/' if several else ''}p{r.partition}:[{r.start},{r.until})"
                        for r in self.ranges)

    def describe_move(self) -> str:
        """``moved from <source> to <source> at <position>`` ('' when no move led here)."""
        if not self.moved:
            return ""
        old, new = self.moved.get("from"), SourceIdentity.from_dict(self.moved["to"])
        before = SourceIdentity.from_dict(old).describe() if old else "an unrecorded source"
        return f"moved from {before} to {new.describe()} at {self.moved.get('position')}"


@dataclass(frozen=True)
class PartitionLag:
    partition: int
    committed: int | None  # where the next epoch starts reading (the plan's start rule)
    high: int | None  # the partition's high watermark
    lag: int | None
    low: int | None = None  # the partition's log start, as read with ``high``
    topic: str = ""  # the partition's topic

    @property
    def beyond_log(self) -> bool:
        """The committed offset is past the log's end: the topic was recreated or truncated,
        or the broker is another one (an embedded broker restarted empty). Not a lag: the next
        epoch stops (``DataLoss`` or ``SourceChanged``) until an operator decides."""
        return self.committed is not None and self.high is not None and self.committed > self.high


@dataclass(frozen=True)
class PipelineStatus:
    name: str
    topic: str
    dag_id: str
    tables_root: str
    committed_epoch: int  # -1: none
    epochs: list[EpochStatus]  # the last ``limit`` epochs logged, oldest first
    epochs_logged: int | None  # the highest epoch logged + 1 (None: the log was not read)
    sinks: dict[str, int] = field(default_factory=dict)  # each sink's own committed epoch
    sinks_error: str | None = None
    partitions: list[PartitionLag] = field(default_factory=list)
    lag_error: str | None = None
    last_audit: AuditVerdict | None = None
    client: dict[str, Any] = field(default_factory=dict)  # Kafka client settings, redacted

    @property
    def lag(self) -> int | None:
        return total_lag(self.partitions)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (datetimes as ISO strings), for the epochs view's API."""
        return json.loads(json.dumps(asdict(self), default=_iso))


def total_lag(partitions: list[PartitionLag]) -> int | None:
    """Records waiting over all partitions; None when any partition's lag is unknown."""
    lags = [p.lag for p in partitions]
    return None if not lags or None in lags else sum(lags)  # type: ignore[arg-type]


def _iso(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON: {type(value).__name__}")

