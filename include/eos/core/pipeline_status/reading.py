"""Reading a pipeline's status from its tables, its sinks and its topic. Reads only: no table is
created, no sink is prepared or fenced, so looking at a pipeline never disturbs a commit in
flight."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from eos.core import checkpoints, epochlog
from eos.core import verdicts as audits
from eos.core.config import PipelineConfig
from eos.core.errors import EosError
from eos.core.layout import Tables, tables_for
from eos.core.pipeline_status.model import (
    DEFAULT_LIMIT,
    EpochRun,
    EpochState,
    EpochStatus,
    PartitionLag,
    PipelineStatus,
    TaskTry,
)
from eos.core.plan import Plan, first_offset
from eos.core.tables import handle
from eos.core.topics import Marks, Offsets, TopicPartition

if TYPE_CHECKING:
    from deltalake import DeltaTable


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
    committed = checkpoints.last_checkpointed(tables, config.app_id)
    epochs, last_logged = (logged_epochs(tables, config.app_id, committed, limit) if limit > 0
                           else ([], None))
    sinks, sinks_error = _sinks(config, committed)
    try:
        settings, lag_error = client_settings(config.kafka.client), None
    except EosError as error:  # no broker configured: show what the config says
        settings, lag_error = dict(config.kafka.client), str(error)
    partitions: list[PartitionLag] = []
    if with_lag and lag_error is None:
        partitions, lag_error = _lag(config, settings, tables, committed)
    return PipelineStatus(
        name=config.name, topic=config.kafka.describe(), dag_id=config.dag_id,
        tables_root=str(tables.root), committed_epoch=committed, epochs=epochs,
        epochs_logged=None if last_logged is None else last_logged + 1,
        sinks=sinks, sinks_error=sinks_error, partitions=partitions, lag_error=lag_error,
        last_audit=audits.latest(tables), client=redact(settings),
    )


def logged_epochs(tables: Tables, app_id: str, committed: int, limit: int
                  ) -> tuple[list[EpochStatus], int | None]:
    """The last ``limit`` epochs logged and the highest epoch logged, in one read of the log,
    one of their checkpoints and one of the precommit rows staged and not committed yet (those
    carry each phase's row: ``carried``).

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
    if not shown:
        return [], committed if committed >= 0 else None
    done = {c.epoch: c for c in checkpoints.read_since(tables, shown[0])}
    staging = handle(tables, tables.staging)  # once: the carried rows and its versions
    for row in carried(staging, list(done.values()), committed):
        if row["epoch"] in by_epoch:
            by_epoch[row["epoch"]].append(row)
    rewinds = [json.loads(r["details"]) | {"at": r["at"]} for r in epochlog.rewind_rows(tables)
               if r["phase"] == epochlog.REWINDING]
    checkpointed = _versions(handle(tables, tables.checkpoints), app_id, "checkpoint",
                             2 * len(shown))
    staged = _versions(staging, app_id, "stage", 3 * len(shown))
    epochs = [_epoch(epoch, epochlog.in_log_order(by_epoch[epoch]), epoch <= committed,
                     done.get(epoch),
                     [r["at"] for r in rewinds if r["to_epoch"] < epoch <= r["from_epoch"]],
                     checkpointed.get(epoch), staged.get(epoch))
              for epoch in shown]
    return epochs, shown[-1]


def carried(staging: DeltaTable | None, done: list[checkpoints.Checkpoint],
            committed: int) -> list[dict[str, Any]]:
    """The rows precommit and commit record in commits they make anyway, read as epoch-log
    rows: each checkpoint's (``Checkpoint.log_rows``) and, for epochs not committed yet, the
    precommit row staged with their rows (``eos.core.staging.PRECOMMIT``), through
    ``staging``."""
    from eos.core.staging import staged_facts

    found = [row for checkpoint in done for row in checkpoint.log_rows()]
    if staging is not None:
        found += [epochlog.carried_row(epoch, epochlog.PRECOMMITTED, plan_hash, facts)
                  for epoch, plan_hash, facts in staged_facts(staging, committed)]
    return found


def epoch_rows(tables: Tables, epoch: int | None = None) -> list[dict[str, Any]]:
    """Everything recorded of ``epoch`` (or of every epoch) as epoch-log rows, in log order:
    the log's own rows and those precommit and commit carry in their commits (``carried``).
    One epoch's reads only its own checkpoint."""
    if epoch is None:
        done = checkpoints.read_all(tables)
        committed = max((c.epoch for c in done), default=-1)
    else:
        done = [c for c in [checkpoints.read(tables, epoch)] if c]
        committed = epoch if done else epoch - 1  # only its staged row, if not checkpointed
    found = carried(handle(tables, tables.staging), done, committed)
    rows = [*epochlog.rows(tables, epoch),
            *(r for r in found if epoch is None or r["epoch"] == epoch)]
    return epochlog.in_log_order(rows)


def _versions(table: DeltaTable | None, app_id: str, op: str, commits: int) -> dict[int, int]:
    """The version of ``table`` at which each of its last epochs' ``op`` commit landed (the
    latest one of an epoch), from the commit info in its last ``commits`` + 10 commits: a
    checkpoint or a staging commit cannot carry the version it is written at."""
    from eos.core.delta import APP, EPOCH, OP

    if table is None:
        return {}
    found: dict[int, int] = {}
    for commit in table.history(limit=commits + 10):  # newest first
        if commit.get(APP) == app_id and commit.get(OP) == op and EPOCH in commit:
            found.setdefault(int(commit[EPOCH]), int(commit["version"]))
    return found


def _epoch(epoch: int, rows: list[dict[str, Any]], committed: bool,
           checkpoint: checkpoints.Checkpoint | None, rewound_at: list[Any],
           checkpoint_version: int | None, staging_version: int | None) -> EpochStatus:
    """Fold one epoch's log rows (in logged order) into its status; ``rewound_at``: when
    rewinds that took it back began (a rewind logs its start at the first epoch it replays)."""
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
    elif (replay := _since_rewound(rows, rewound_at)) is not None:
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
        staging_version=(staging_version if staged and "staging_version" not in staged_details
                         else staged_details.get("staging_version")),
        sink_versions={name: s.get("version") for name, s in
                       (checkpoint.sinks if checkpoint else done_details.get("sinks", {})).items()},
        checkpoint_version=(checkpoint_version if committed and checkpoint_version is not None
                            else done_details.get("checkpoint_version")),
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


def _since_rewound(rows: list[dict[str, Any]], rewound_at: list[Any]
                   ) -> list[dict[str, Any]] | None:
    """For an epoch not committed now: its rows after the last sign that a rewind took it back
    (a ``committed`` or rewind row of its own, or the start of a rewind whose range held it),
    or None if there is none (it was never committed)."""
    marks = [r["at"] for r in rows
             if r["phase"] in (epochlog.COMMITTED, epochlog.REWINDING, epochlog.REWOUND)]
    marks += rewound_at
    if not marks:
        return None
    last = max(marks)
    return [r for r in rows if r["at"] > last]


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
    from eos.core.plan import KafkaSource

    last = checkpoints.last(tables, committed)
    offsets = last.until if last else {}
    problem: str | None = None
    if (moved := source_moved(config, last)) is not None:
        # Offsets of another topic say nothing of this one's lag (``eos move-source``).
        return [], f"{moved}: move the pipeline (eos move-source)"
    try:
        marks = KafkaSource(settings).watermarks(config)
    except EosError as error:
        marks, problem = {}, str(error)
    return partition_lags(config, offsets, marks), problem


def source_moved(config: PipelineConfig, last: checkpoints.Checkpoint | None) -> str | None:
    """Why the last checkpoint's offsets are not of the configured source (a committed topic
    the config no longer names), else None. A pattern's topics are only known to the broker:
    ``begin`` checks those (``eos.core.plan.check_same_source``)."""
    named = config.kafka.named_topics
    if last is None or last.source is None or named is None:
        return None
    if set(last.source.topics) <= set(named):
        return None
    return (f"the committed offsets are of {last.source.describe()}, the config reads "
            f"{config.kafka.describe()}")


def partition_lags(config: PipelineConfig, offsets: Offsets, marks: Marks) -> list[PartitionLag]:
    """Each partition's lag from the checkpoint's ``offsets`` and the topics' watermarks
    (``marks``: topic-partition -> (low, high)), for ``eos status`` and the epochs view."""
    read = {tp for tp in offsets if reads_topic(config, tp.topic)}  # not a topic that left
    return [_partition_lag(config, offsets, tp, marks.get(tp))
            for tp in sorted(read | set(marks))]


def reads_topic(config: PipelineConfig, topic: str) -> bool:
    """Whether the config reads ``topic``: names it, or matches it with its pattern (a topic
    taken out of the config keeps its offsets in the checkpoint, and has no lag)."""
    if config.kafka.pattern is not None:
        from eos.core.config.kafka_source import topic_pattern

        return topic_pattern(config.kafka.pattern).match(topic) is not None
    return topic in (config.kafka.named_topics or [])


def _partition_lag(config: PipelineConfig, offsets: Offsets, partition: TopicPartition,
                   marks: tuple[int, int] | None) -> PartitionLag:
    """Where the next epoch starts reading ``partition`` and how far behind that is. A partition
    no checkpoint knows yet (before the first epoch, or added later) starts where the plan
    would start it (``first_offset``: the log start, or for a brand-new pipeline where
    ``kafka.start`` says; a timestamp counts from the log start, an upper bound), so its lag is
    the backlog the next epochs will read, not unknown."""
    low, high = marks if marks is not None else (None, None)
    start = offsets.get(partition)
    if start is None and low is not None and high is not None:
        start = first_offset(config, offsets, low, high, partition.partition)
    # Past the log's end is no lag at all (``PartitionLag.beyond_log``): unknown, said in words.
    lag = (high - start if start is not None and high is not None and start <= high
           else None)
    return PartitionLag(partition.partition, start, high, lag, low, partition.topic)


