"""A pipeline's status as an operator reads it: the one function behind ``eos status`` and the
Airflow UI's epochs view (``eos.airflow.epochs_view``), so the two can never disagree.

Everything here only reads: no table is created, no sink is prepared or fenced, so looking at a
pipeline never disturbs a commit in flight. What is committed comes from the checkpoint table
(the authority); what each epoch did (plan, counts, durations, versions) comes from the epoch
log, which is for people (DESIGN §4).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from eos.core import checkpoints, epochlog
from eos.core import verdicts as audits
from eos.core.config import PipelineConfig
from eos.core.errors import ConfigError, EosError
from eos.core.identity import SourceIdentity
from eos.core.layout import Tables, tables_for
from eos.core.outcomes import NO_EPOCH
from eos.core.plan import PartitionRange, Plan, first_offset
from eos.core.verdicts import AuditVerdict

if TYPE_CHECKING:
    from eos.core.plan import Source

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
        return " ".join(f"p{r.partition}:[{r.start},{r.until})" for r in self.ranges)

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


# -- reading ------------------------------------------------------------------------------------

def pipeline_status(config: PipelineConfig, limit: int = DEFAULT_LIMIT,
                    with_lag: bool = True) -> PipelineStatus:
    """The pipeline's last ``limit`` epochs, its sinks, its lag and its last audit.

    Reads the epoch log and the checkpoints of those epochs only (filtered by epoch), each
    sink's marker without fencing, and the topic's high watermarks (``with_lag``). A sink or
    broker that cannot be read is reported in the status, not raised: the page must show
    what it can.
    """
    from eos.core.kafka import client_settings, redact

    tables = tables_for(config)
    committed = checkpoints.committed_epoch(tables, config.app_id)
    epochs, last_logged = _epochs(tables, committed, limit) if limit > 0 else ([], None)
    sinks, sinks_error = _sinks(config, committed)
    try:
        settings, lag_error = client_settings(config.kafka.client), None
    except EosError as error:  # no broker configured: show what the config says
        settings, lag_error = dict(config.kafka.client), str(error)
    partitions: list[PartitionLag] = []
    if with_lag and lag_error is None:
        partitions, lag_error = _lag(config, settings, tables, committed)
    return PipelineStatus(
        name=config.name, topic=config.kafka.topic, dag_id=config.dag_id,
        tables_root=str(tables.root), committed_epoch=committed, epochs=epochs,
        epochs_logged=None if last_logged is None else last_logged + 1,
        sinks=sinks, sinks_error=sinks_error, partitions=partitions, lag_error=lag_error,
        last_audit=audits.latest(tables), client=redact(settings),
    )


def _epochs(tables: Tables, committed: int, limit: int) -> tuple[list[EpochStatus], int | None]:
    """The last ``limit`` epochs logged and the highest epoch logged, in one read of the log.

    ``begin`` only ever plans the epoch after the checkpoint, so the log's last epoch is the
    checkpoint's or the next one: reading from ``committed + 1 - limit`` covers the last
    ``limit`` epochs either way (the oldest read is dropped when ``committed + 1`` is logged;
    epochs beyond, should any exist, are read too).
    """
    since = max(0, committed + 1 - limit)
    by_epoch: dict[int, list[dict[str, Any]]] = {}
    for row in epochlog.rows(tables, since=since):
        by_epoch.setdefault(row["epoch"], []).append(row)
    shown = sorted(by_epoch)[-limit:]
    done = {c.epoch: c for c in checkpoints.read_since(tables, shown[0])} if shown else {}
    epochs = [_epoch(epoch, by_epoch[epoch], epoch <= committed, done.get(epoch))
              for epoch in shown]
    return epochs, (shown[-1] if shown else (committed if committed >= 0 else None))


def _epoch(epoch: int, rows: list[dict[str, Any]], committed: bool,
           checkpoint: checkpoints.Checkpoint | None) -> EpochStatus:
    """Fold one epoch's log rows (in logged order) into its status."""
    runs = _runs(rows)
    rows = [r for r in rows if r["phase"] != epochlog.TRIED] or rows
    planned = next((r for r in rows if r["phase"] == epochlog.PLANNED), None)
    plan = Plan.from_json(planned["plan"]) if planned else None
    staged = _last(rows, epochlog.PRECOMMITTED)
    done = _last(rows, epochlog.COMMITTED)
    staged_details = _details(staged)
    done_details = _details(done)
    if committed:
        state = EpochState.COMMITTED
    elif (replay := _since_rewound(rows)) is not None:
        # Logged as committed (or as where a rewind's replay starts) but not in the checkpoint
        # table: a rewind took it back. What the replay did with it since, if anything:
        phases = {r["phase"] for r in replay}
        state = (EpochState.PRECOMMITTED if epochlog.PRECOMMITTED in phases
                 else EpochState.PLANNED if epochlog.PLANNED in phases else EpochState.REWOUND)
    elif rows[-1]["phase"] == epochlog.ABORTED:
        state = EpochState.ABORTED
    else:
        state = EpochState.PRECOMMITTED if staged else EpochState.PLANNED
    return EpochStatus(
        epoch=epoch, state=state, plan_hash=plan.hash if plan else None,
        run_id=next((r["run_id"] for r in rows if r["phase"] == epochlog.PLANNED and r["run_id"]),
                    None),
        records=plan.records if plan else 0, ranges=plan.ranges if plan else (),
        counts=staged_details.get("rows", {}),
        watermark_ms=(checkpoint.watermark_ms if checkpoint
                      else staged_details.get("watermark_ms")),
        durations_ms={"begin": planned["duration_ms"] if planned else None,
                      "precommit": staged["duration_ms"] if staged else None,
                      "commit": done["duration_ms"] if done else None},
        staging_version=staged_details.get("staging_version"),
        sink_versions={name: s.get("version") for name, s in
                       (checkpoint.sinks if checkpoint else done_details.get("sinks", {})).items()},
        checkpoint_version=done_details.get("checkpoint_version"),
        planned_at=planned["at"] if planned else None,
        committed_at=checkpoint.committed_at if checkpoint else None,
        aborts=sum(1 for r in rows if r["phase"] == epochlog.ABORTED),
        runs=runs, moved=epochlog.move_of(planned) if planned else None,
    )


def _runs(rows: list[dict[str, Any]]) -> tuple[EpochRun, ...]:
    """Every run named by the epoch's rows (its plan's, the runs bound to it, the tries),
    in the order they first appear, with their tries."""
    order: list[str] = []
    roles: dict[str, str] = {}
    tries: dict[str, list[TaskTry]] = {}
    planner_seen = False  # the first plan row is the planner's (``eos run``'s has no run id)
    for row in rows:
        run_id = row["run_id"]
        first_plan = row["phase"] == epochlog.PLANNED and not planner_seen
        planner_seen = planner_seen or row["phase"] == epochlog.PLANNED
        if not run_id:
            continue
        if run_id not in order:
            order.append(run_id)
        if row["phase"] == epochlog.PLANNED and run_id not in roles:
            roles[run_id] = "planned" if first_plan else "adopted"
        done = epochlog.try_facts(row)  # a tried row, or the try a phase's row carries
        if done is not None:
            tries.setdefault(run_id, []).append(TaskTry(
                task=done.get("task", "?"), try_number=done.get("try"),
                outcome=done.get("outcome", "?"), wrote=bool(done.get("wrote")), at=row["at"],
                row=None if row["phase"] == epochlog.TRIED else row["phase"]))
    return tuple(EpochRun(run_id, roles.get(run_id), tuple(tries.get(run_id, ())))
                 for run_id in order)


def _since_rewound(rows: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """For an epoch not committed now: its rows after the last sign that a rewind took it back
    (a ``committed`` or rewind row), or None if there is none (it was never committed)."""
    marks = [i for i, r in enumerate(rows)
             if r["phase"] in (epochlog.COMMITTED, epochlog.REWINDING, epochlog.REWOUND)]
    return rows[marks[-1] + 1:] if marks else None


def _last(rows: list[dict[str, Any]], phase: str) -> dict[str, Any] | None:
    return next((r for r in reversed(rows) if r["phase"] == phase), None)


def _details(row: dict[str, Any] | None) -> dict[str, Any]:
    return json.loads(row["details"]) if row and row["details"] else {}


def _sinks(config: PipelineConfig, committed: int) -> tuple[dict[str, int], str | None]:
    from eos.core.protocol import check_sinks

    try:
        return check_sinks(config, committed, read_only=True), None
    except EosError as error:
        return {}, str(error)


def _lag(config: PipelineConfig, settings: dict[str, Any], tables: Tables, committed: int
         ) -> tuple[list[PartitionLag], str | None]:
    from eos.core.kafka import topic_watermarks

    last = checkpoints.last(tables, committed)
    offsets = last.until if last else {}
    problem: str | None = None
    if last is not None and last.source is not None and last.source.topic != config.kafka.topic:
        # Offsets of another topic say nothing of this one's lag (``eos move-source``).
        return [], (f"the committed offsets are of {last.source.describe()}, the config reads "
                    f"topic '{config.kafka.topic}': move the pipeline (eos move-source)")
    try:
        marks = topic_watermarks(settings, config.kafka.topic)
    except EosError as error:
        marks, problem = {}, str(error)
    return partition_lags(config, offsets, marks), problem


def partition_lags(config: PipelineConfig, offsets: dict[int, int],
                   marks: dict[int, tuple[int, int]]) -> list[PartitionLag]:
    """Each partition's lag from the checkpoint's ``offsets`` and the topic's watermarks
    (``marks``: partition -> (low, high)), for ``eos status`` and the epochs view."""
    return [_partition_lag(config, offsets, p, marks.get(p))
            for p in sorted(set(offsets) | set(marks))]


def _partition_lag(config: PipelineConfig, offsets: dict[int, int], partition: int,
                   marks: tuple[int, int] | None) -> PartitionLag:
    """Where the next epoch starts reading ``partition`` and how far behind that is. A partition
    no checkpoint knows yet (before the first epoch, or added later) starts where the plan
    would start it (``first_offset``: the log start, or with ``kafka.start: latest`` the high
    watermark for a brand-new pipeline), so its lag is the backlog the next epochs will read,
    not unknown."""
    low, high = marks if marks is not None else (None, None)
    start = offsets.get(partition)
    if start is None and low is not None and high is not None:
        start = first_offset(config, offsets, low, high)
    lag = high - start if start is not None and high is not None else None
    return PartitionLag(partition, start, high, lag, low)


# -- ``eos status`` ---------------------------------------------------------------------------

def render(status: PipelineStatus) -> str:
    """The status as ``eos status`` prints it."""
    committed = status.committed_epoch
    lines = [f"pipeline {status.name}: topic '{status.topic}', tables {status.tables_root}",
             f"last committed epoch: {committed if committed != NO_EPOCH else 'none'}", "",
             f"{'epoch':>5}  {'state':<12} {'records':>8} {'output':>7} {'late':>5} "
             f"{'quar.':>5} {'stage s':>7}  ranges"]
    for entry in status.epochs:
        counts = entry.counts
        lines.append(
            f"{entry.epoch:>5}  {entry.state:<12} {entry.records:>8} "
            f"{counts.get('output', 0):>7} {counts.get('late', 0):>5} "
            f"{counts.get('quarantine', 0):>5} "
            f"{(entry.durations_ms['precommit'] or 0) / 1000:>7.1f}  {entry.describe_ranges()}"
            + (f"  ({entry.describe_move()})" if entry.moved else "")
        )
    lines.append("")
    lines.append(f"sinks: {status.sinks_error}" if status.sinks_error else
                 "sinks: " + ", ".join(f"{name} at epoch {epoch}"
                                       for name, epoch in status.sinks.items()))
    lines.append("")
    if status.lag_error:
        lines.append(f"lag unknown: {status.lag_error}")
    lines.append(f"{'partition':>9} {'committed':>10} {'high wm':>10} {'lag':>8}")
    for p in status.partitions:
        cells = ["-" if v is None else v for v in (p.committed, p.high, p.lag)]
        lines.append(f"{p.partition:>9} {cells[0]:>10} {cells[1]:>10} {cells[2]:>8}")
    if status.last_audit is not None:
        audit = status.last_audit
        lines += ["", f"last audit {audit.at:%Y-%m-%d %H:%M:%S} UTC: "
                      f"{'OK' if audit.ok else 'FAILED'} (epochs 0..{audit.committed_epoch}, "
                      f"{audit.problems} problem(s))"]
    return "\n".join(lines)


# -- stalls (``alerts.stall_after``) ------------------------------------------------------------

class StallVerdict(StrEnum):
    """Whether a pipeline is stalled: its checkpoint has not moved for ``stall_after`` while
    records wait. A quiet topic (nothing to read) is never stalled, however old its checkpoint."""

    STALLED = "stalled"
    ADVANCING = "advancing"  # the checkpoint moved within stall_after
    CAUGHT_UP = "caught up"  # nothing waits: no lag


@dataclass(frozen=True)
class StallCheck:
    """One look at a pipeline for the stall alert: the verdict and what it was decided on."""

    pipeline: str
    verdict: StallVerdict
    committed_epoch: int  # -1: none
    committed_at: datetime | None  # the last checkpoint's time (None: nothing committed)
    age_s: float | None  # how long the checkpoint has not moved (None: nothing committed)
    lag: int | None  # records waiting (None: unknown, e.g. the broker did not answer)
    stall_after_s: float
    lag_error: str | None = None

    @property
    def stalled(self) -> bool:
        return self.verdict is StallVerdict.STALLED

    def fields(self) -> dict[str, Any]:
        """The check as the alert's log line and its notifier's context carry it."""
        return {"pipeline": self.pipeline, "verdict": str(self.verdict),
                "committed_epoch": self.committed_epoch,
                "committed_at": self.committed_at.isoformat() if self.committed_at else None,
                "checkpoint_age_s": None if self.age_s is None else round(self.age_s, 1),
                "lag": self.lag, "stall_after_s": self.stall_after_s,
                "lag_error": self.lag_error}

    def message(self) -> str:
        """One sentence for a person (a chat message, a page)."""
        since = ("no epoch committed yet" if self.committed_at is None else
                 f"epoch {self.committed_epoch} committed {self.age_s:.0f} s ago")
        waiting = (f"lag unknown ({self.lag_error})" if self.lag is None
                   else f"{self.lag} records waiting")
        return f"pipeline {self.pipeline} is {self.verdict}: {since}, {waiting}"


def stall_verdict(age_s: float | None, lag: int | None, stall_after_s: float) -> StallVerdict:
    """The decision. Stalled: records wait (or how many is unknown: a broker that does not
    answer cannot prove the pipeline caught up) and the checkpoint has not moved for
    ``stall_after_s`` (or nothing was ever committed: the caller, the DAG run's deadline, has
    already waited that long)."""
    if lag == 0:
        return StallVerdict.CAUGHT_UP
    if age_s is not None and age_s < stall_after_s:
        return StallVerdict.ADVANCING
    return StallVerdict.STALLED


def check_stall(config: PipelineConfig, stall_after_ms: int | None = None,
                source: Source | None = None, now: datetime | None = None) -> StallCheck:
    """Look at ``config``'s pipeline now: the last checkpoint's age and the lag behind it (the
    watermarks of ``source``, the pipeline's Kafka topic by default, against the checkpoint's
    offsets, as ``eos status`` reads them). Reads only; a broker that does not answer makes the
    lag unknown, not an error."""
    from eos.core.plan import KafkaSource

    stall_after_ms = stall_after_ms or config.alerts.stall_after
    if stall_after_ms is None:
        raise ConfigError(f"pipeline {config.name} sets no alerts.stall_after")
    tables = tables_for(config)
    committed = checkpoints.committed_epoch(tables, config.app_id)
    last = checkpoints.last(tables, committed)
    try:
        marks, lag_error = (source or KafkaSource()).watermarks(config), None
    except EosError as error:
        marks, lag_error = {}, str(error)
    partitions = partition_lags(config, last.until if last else {}, marks)
    lag = None if lag_error else total_lag(partitions)
    committed_at = last.committed_at if last else None
    if committed_at is not None and committed_at.tzinfo is None:
        committed_at = committed_at.replace(tzinfo=UTC)  # Delta timestamps are UTC
    now = now or datetime.now(UTC)
    age_s = None if committed_at is None else max(0.0, (now - committed_at).total_seconds())
    return StallCheck(
        pipeline=config.name,
        verdict=stall_verdict(age_s, lag, stall_after_ms / 1000),
        committed_epoch=committed, committed_at=committed_at, age_s=age_s, lag=lag,
        stall_after_s=stall_after_ms / 1000, lag_error=lag_error,
    )
