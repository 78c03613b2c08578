"""Rewind and replay: take a pipeline back to committed epoch N, so that the next runs recompute
epochs N+1.. from their logged plans with the current code and config.

Flink users restart from a savepoint; Spark users delete the checkpoint and reprocess. Here
every epoch's plan is logged and every table is versioned, so every committed epoch is a
savepoint: ``rewind(N)`` restores each Delta sink, staging and the checkpoint table to the
version at which N was committed (``eos.core.timetravel``: Delta ``RESTORE`` with the marker
set back to N in the same commit). The epoch log is not rewound: it keeps every plan, so the
next ``begin`` finds N+1's logged plan and the replay reads exactly the ranges it read the first
time (or fails loudly, ``DataLoss``, if Kafka no longer holds them).

The steps, each idempotent; a crash anywhere is repaired by running the same rewind again:

1. *plan*: check the rewind is allowed (N committed; the config's schema view unchanged since
   N, or N = -1, a full replay; every sink can go back, or the user accepted republishing to
   the ones that cannot) and find every table's version of N, checking its files still exist.
   A refusal (``RewindRefused``) has written nothing.
2. *log* the rewind as started (``rewinding`` at epoch N+1), fenced: of two attempts that race,
   exactly one logs, the other adopts its plan. From here ``begin`` refuses to plan
   (``RewindUnfinished``) until the rewind is logged as finished.
2b. *fence* staging (``eos.core.staging_fence.fence_rewind``): an epoch whose commit has begun (it
   is sealed, not checkpointed) makes the rewind wait (``EpochCommitting``: rerun it once that
   commit finished); after the fence, a commit that had not sealed is refused, a precommit
   that read its state before it stages nothing, and no commit prunes or maintains staging.
   A maintenance running (a commit's vacuum and log cleanup, which delete the history a
   restore needs) makes the rewind wait too, before step 2 if it is seen then.
2c. *check* the history staging and the checkpoint table go back to is still there: gone
   (a maintenance that began before the rewind was logged deleted it), the rewind is
   abandoned (logged as finished, nothing restored) and refused (``RewindRefused``).
3. *restore* the sinks, then staging, then the checkpoint table, the authority, last. A table
   this rewind already restored is skipped (its history names the rewind).
4. *log* it finished (``rewound``).

Ordering: nothing the protocol trusts moves before step 2 is durable, and the checkpoint moves
last, so a half-done rewind is never mistaken for a consistent pipeline: ``begin`` refuses, and
``check_sinks`` would too (a sink behind the checkpoint).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from eos.core import checkpoints, epochlog, faults
from eos.core.config import PipelineConfig
from eos.core.errors import (
    CommitConflict,
    ConfigError,
    EpochCommitting,
    RewindRefused,
    RewindUnfinished,
)
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.outputs import output_schema
from eos.core.phaselog import log_phase, timed
from eos.core.plan import Plan
from eos.core.sink import Sink, SupportsRewind, sinks_for
from eos.core.staging_fence import Fence, fence_rewind
from eos.core.tables import OpenTables, ensure_tables, staging_schema
from eos.core.timetravel import (
    missing_files,
    replace_schema,
    restore,
    rewound,
    target_version,
    version_of,
)


@dataclass(frozen=True)
class RewindPlan:
    """What a rewind will do, logged before it does any of it (a rerun does exactly this)."""

    rewind_id: str
    seq: int  # rewinds of this pipeline before this one
    to_epoch: int  # the last committed epoch afterwards (-1: none, a full replay)
    from_epoch: int  # the last committed epoch before
    sinks: dict[str, int | None]  # sink name -> version restored (None: a marker only)
    staging: int
    checkpoints: int
    republish: list[str] = field(default_factory=list)  # sinks whose consumers see N+1.. again

    def to_details(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_details(cls, details: dict[str, Any]) -> RewindPlan:
        return cls(**details)


@dataclass
class RewindResult:
    plan: RewindPlan | None
    outcome: Outcome
    versions: dict[str, int | None] = field(default_factory=dict)  # table -> version written
    duration_ms: float = 0.0

    def summary(self) -> dict[str, Any]:
        plan = self.plan
        return {"outcome": str(self.outcome), "rewind_id": plan and plan.rewind_id,
                "to_epoch": plan and plan.to_epoch, "from_epoch": plan and plan.from_epoch,
                "republished": plan.republish if plan else [], "versions": self.versions}


def rewind(config: PipelineConfig, to_epoch: int, republish: bool = False,
           run_id: str | None = None) -> RewindResult:
    """Rewind the pipeline to committed epoch ``to_epoch`` (-1: before the first epoch).

    Scenarios:
    - a rewind is unfinished (a crash): finish it if it goes to ``to_epoch``, else
      ``RewindUnfinished`` (finish that one first);
    - ``to_epoch`` is the last committed epoch: nothing, ``NOTHING_TO_REWIND``;
    - the rewind is not allowed (see ``plan_rewind``): ``RewindRefused``, nothing written;
    - otherwise every table goes back to ``to_epoch``: ``REWOUND``.
    ``republish`` accepts that sinks which cannot withdraw records (Kafka topics) publish the
    replayed epochs a second time.
    """
    with timed() as took:
        tables = ensure_tables(config)
        plan = _unfinished(tables, to_epoch)
        if plan is None:
            plan = plan_rewind(config, tables, to_epoch, republish)
            if plan is None:
                return _nothing(to_epoch, "it is the last committed epoch")
            faults.hit("rewind.before_log")
            if not epochlog.log_rewind(tables, config.app_id, plan.seq, plan.to_epoch + 1,
                                       run_id, plan.to_details()):
                # A concurrent attempt logged rewind ``seq`` first: finish its plan, or find
                # it finished already.
                tables.refresh(tables.epochs)
                winner = _unfinished(tables, to_epoch)
                if winner is None:
                    return _nothing(to_epoch, "a concurrent attempt rewound it first")
                plan = winner
        faults.hit("rewind.after_log")
        _fence(config, tables, plan)
        _check_history(config, tables, plan, run_id)
        _check_still_rewindable(config, tables, plan, run_id)
        result = RewindResult(plan, Outcome.REWOUND, _restore(config, tables, plan))
        faults.hit("rewind.before_done")
        epochlog.append(tables, plan.to_epoch + 1, epochlog.REWOUND, run_id=run_id,
                        details={"rewind_id": plan.rewind_id, "versions": result.versions})
    result.duration_ms = took["ms"]
    log_phase("rewind", rewind_id=plan.rewind_id, from_epoch=plan.from_epoch,
              to_epoch=plan.to_epoch, outcome=result.outcome, republished=plan.republish,
              versions=result.versions, duration_ms=result.duration_ms)
    return result


def _nothing(to_epoch: int, reason: str) -> RewindResult:
    result = RewindResult(None, Outcome.NOTHING_TO_REWIND)
    log_phase("rewind", to_epoch=to_epoch, outcome=result.outcome, reason=reason)
    return result


def plan_rewind(config: PipelineConfig, tables: OpenTables, to_epoch: int,
                republish: bool) -> RewindPlan | None:
    """Check a rewind to ``to_epoch`` and find every table's version of it; None if there is
    nothing to rewind. Raises ``RewindRefused`` with the reason and what would work."""
    committed = checkpoints.last_checkpointed(tables, config.app_id)
    if not NO_EPOCH <= to_epoch <= committed:
        raise RewindRefused(
            f"cannot rewind '{config.name}' to epoch {to_epoch}: the committed epochs are "
            f"0..{committed}; rewind to one of them, or to -1 (before the first: a full replay)"
        )
    if to_epoch == committed:
        return None
    fence = Fence.of(tables.refreshed(tables.staging), config.app_id)
    _check_none_committing(config, fence.sealed, committed)
    _check_none_maintaining(config, fence)
    checkpoint = checkpoints.read(tables, to_epoch) if to_epoch >= 0 else None
    _check_schema(config, tables, checkpoint)
    _check_same_cluster(config, tables, to_epoch, committed)
    sinks = rewindable(config, to_epoch)
    republished = _check_republish(config, sinks, to_epoch, committed, republish)
    seq = len({json.loads(r["details"])["rewind_id"] for r in epochlog.rewind_rows(tables)
               if r["phase"] == epochlog.REWINDING})
    return RewindPlan(
        rewind_id=uuid.uuid4().hex[:12], seq=seq, to_epoch=to_epoch, from_epoch=committed,
        sinks={sink.name: sink.rewind_target(to_epoch) for sink in sinks},
        staging=_staging_target(config, tables, checkpoint),
        checkpoints=target_version(tables.checkpoints, config.app_id, to_epoch),
        republish=republished,
    )


FENCE_ATTEMPTS = 5


def _check_none_committing(config: PipelineConfig, sealed: int, committed: int) -> None:
    """A sealed, unchecked epoch is a commit in flight (or crashed, to be retried): it may have
    written sinks already and must finish before anything is rewound."""
    if sealed > committed:
        raise EpochCommitting(
            f"epoch {sealed} of '{config.name}' is being committed (its commit began and is "
            f"not checkpointed; the last checkpoint is epoch {committed}): the rewind waits "
            "until that commit finishes (its task's retry, or eos commit); then run it again")


def _check_none_maintaining(config: PipelineConfig, fence: Fence) -> None:
    """A maintenance running deletes files and log entries: the versions this rewind restores
    may be among them. It waits; a maintenance that begins after the rewind's fence stands
    aside (``eos.core.maintenance``)."""
    now_ms = int(time.time() * 1000)
    if fence.maintenance_running(now_ms):
        raise EpochCommitting(
            f"'{config.name}' is being maintained (a commit's vacuum and log cleanup, begun "
            f"{(now_ms - fence.maintaining) / 1000:.0f} s ago): the rewind waits until it "
            "ends (it may delete the history the rewind restores); then run it again")


def _check_history(config: PipelineConfig, tables: OpenTables, plan: RewindPlan,
                   run_id: str | None) -> None:
    """Step 2c: what staging and the checkpoint table go back to is still there. Checked after
    the fence: from then on no maintenance runs until the rewind is finished, so what is here
    now stays. What went, went before: a maintenance that began before this rewind was logged
    (its log read came first) and deleted what the plan checked. A first run that finds it
    gone has restored nothing (each run checks before it restores): the rewind is abandoned,
    logged as finished without a version restored, so the pipeline goes on where it was."""
    restored = [path for path in (tables.staging, tables.checkpoints)
                if rewound(DeltaTable(path), plan.rewind_id)]
    gone = _history_gone(tables, plan, restored)
    if gone is None:
        return
    if restored:  # never after a restore: the tables would disagree
        raise RewindRefused(f"rewind {plan.rewind_id} to epoch {plan.to_epoch} cannot finish: "
                            f"{gone}; inspect the tables before going on")
    epochlog.append(tables, plan.to_epoch + 1, epochlog.REWOUND, run_id=run_id,
                    details={"rewind_id": plan.rewind_id, "versions": {}, "abandoned": gone})
    raise RewindRefused(
        f"rewind {plan.rewind_id} of '{config.name}' to epoch {plan.to_epoch} was abandoned "
        f"before it restored anything: {gone} (a maintenance deleted it as the rewind began). "
        f"The pipeline stays at epoch {plan.from_epoch}; rewind to a later epoch, or to -1 "
        "(a full replay)")


def _check_still_rewindable(config: PipelineConfig, tables: OpenTables, plan: RewindPlan,
                            run_id: str | None) -> None:
    """Step 2d: every sink can still go back to its target. Another writer of a shared table
    that committed since the rewind was planned would lose its rows to the restore
    (``SupportsRewind.rewind_target`` refuses). Found before anything is restored, the rewind
    is abandoned as in step 2c: logged as finished without a version restored, so the pipeline
    goes on where it was instead of every later ``begin`` meeting an unfinished rewind."""
    _check_same_sinks(config, plan)  # a changed config is refused first: nothing abandoned
    try:
        for sink in rewindable(config, plan.to_epoch):
            sink.rewind_target(plan.to_epoch)
    except RewindRefused as refusal:
        untouched = (all(sink.committed_epoch(fence=False) == plan.from_epoch
                         for sink in sinks_for(config))
                     and not any(rewound(DeltaTable(path), plan.rewind_id)
                                 for path in (tables.staging, tables.checkpoints)))
        if not untouched:  # never after a restore: the tables would disagree
            raise
        epochlog.append(tables, plan.to_epoch + 1, epochlog.REWOUND, run_id=run_id,
                        details={"rewind_id": plan.rewind_id, "versions": {},
                                 "abandoned": refusal.message})
        raise RewindRefused(
            f"rewind {plan.rewind_id} of '{config.name}' to epoch {plan.to_epoch} was abandoned "
            f"before it restored anything: {refusal.message}. The pipeline stays at epoch "
            f"{plan.from_epoch}") from None


def _history_gone(tables: OpenTables, plan: RewindPlan, restored: list[str]) -> str | None:
    """What is missing of the versions of staging and the checkpoint table the rewind
    restores (those it has not restored yet), or None."""
    for path, version in ((tables.staging, plan.staging),
                          (tables.checkpoints, plan.checkpoints)):
        if path in restored:
            continue
        try:
            gone = missing_files(path, version)
        except TableNotFoundError:  # its log entries were cleaned up (a store error raises)
            return f"version {version} of {path} is no longer in its Delta log"
        if gone:
            return f"{len(gone)} files of version {version} of {path} were vacuumed"
    return None


def _fence(config: PipelineConfig, tables: OpenTables, plan: RewindPlan) -> None:
    """Step 2b, idempotent: fence staging for rewind ``plan.seq`` unless a run of it did. The
    checkpoint is read before the staging snapshot, so a seal the snapshot shows is never
    compared with an older checkpoint than its own."""
    for _ in range(FENCE_ATTEMPTS):
        tables.refresh(tables.checkpoints)
        committed = checkpoints.last_checkpointed(tables, config.app_id)
        snapshot = tables.refreshed(tables.staging)
        fence = Fence.of(snapshot, config.app_id)
        if fence.rewinds > plan.seq:
            return  # this rewind fenced staging already (a rerun, or a racing attempt of it)
        _check_none_committing(config, fence.sealed, committed)
        _check_none_maintaining(config, fence)
        if fence_rewind(snapshot, config.app_id, plan.to_epoch, plan.seq):
            faults.hit("rewind.after_fence")
            return
    raise CommitConflict(f"fencing staging for rewind {plan.rewind_id} conflicted with "
                         f"concurrent writes {FENCE_ATTEMPTS} times; rerunning it is safe")


def _unfinished(tables: OpenTables, to_epoch: int) -> RewindPlan | None:
    """The plan of the rewind logged as started and not finished, if it goes to ``to_epoch``."""
    details = epochlog.unfinished_rewind(epochlog.rewind_rows(tables))
    if details is None:
        return None
    plan = RewindPlan.from_details(details)
    if plan.to_epoch != to_epoch:
        raise RewindUnfinished(
            f"a rewind to epoch {plan.to_epoch} (id {plan.rewind_id}) was started and not "
            f"finished; run it again (eos rewind --to-epoch {plan.to_epoch}) before anything else"
        )
    return plan


def check_none_unfinished(logged: list[dict[str, Any]]) -> None:
    """``begin``'s guard: no epoch is planned while a rewind is half done."""
    details = epochlog.unfinished_rewind(logged)
    if details is not None:
        raise RewindUnfinished(
            f"a rewind to epoch {details['to_epoch']} (id {details['rewind_id']}) was started "
            f"and not finished; finish it (eos rewind --to-epoch {details['to_epoch']}) before "
            "running epochs"
        )


def _check_schema(config: PipelineConfig, tables: OpenTables,
                  checkpoint: checkpoints.Checkpoint | None) -> None:
    """Epochs ..N stay committed as they are: they must mean what the current config means."""
    changes = checkpoints.schema_changes(checkpoint, config)
    if not changes or checkpoint is None:
        return
    same = [c.epoch for c in checkpoints.read_all(tables)
            if not checkpoints.schema_changes(c, config)]
    raise RewindRefused(
        f"cannot rewind '{config.name}' to epoch {checkpoint.epoch}: it was computed with "
        f"another schema (changed since: {'; '.join(changes)}), and a rewind keeps epochs "
        f"0..{checkpoint.epoch} as committed. Rewind to -1 (a full replay)"
        + (f" or to an epoch computed with the current config ({_ranges(same)})" if same else "")
    )


def _check_same_cluster(config: PipelineConfig, tables: OpenTables, to_epoch: int,
                        committed: int) -> None:
    """The replay reads each logged plan's topic from the configured cluster: refuse a rewind
    to before a move from another cluster (``eos.core.move``), whose epochs it would read
    from the wrong one. The configured cluster is the last checkpoint's (``begin`` refuses
    any other)."""
    now = checkpoints.last(tables, committed)
    cluster = now.source.cluster_id if now is not None and now.source is not None else None
    if cluster is None:
        return
    replayed = [Plan.from_json(row["plan"]) for row in epochlog.rows(tables, since=to_epoch + 1)
                if row["phase"] == epochlog.PLANNED and row["epoch"] <= committed]
    for plan in replayed:  # every planned row of an epoch carries its first plan
        if plan.cluster_id not in (None, cluster):
            raise RewindRefused(
                f"cannot rewind '{config.name}' to epoch {to_epoch}: epoch {plan.epoch} read "
                f"{plan.source.describe()}, and the pipeline has moved to cluster "
                f"'{cluster}' since (eos move-source); a replay would read that epoch from the "
                "new cluster. Rewind to an epoch at or after the move")


def rewindable(config: PipelineConfig, to_epoch: int) -> list[SupportsRewind]:
    """Every sink of the pipeline, each able to rewind; else ``RewindRefused`` naming those that
    cannot (a sink without the ``SupportsRewind`` capability would keep the rewound epochs)."""
    sinks: list[Sink] = sinks_for(config)
    unable = [sink.name for sink in sinks if not isinstance(sink, SupportsRewind)]
    if unable:
        raise RewindRefused(
            f"cannot rewind '{config.name}' to epoch {to_epoch}: sink(s) {', '.join(unable)} "
            "cannot be rewound (their type does not implement SupportsRewind): they would keep "
            "the rewound epochs and then receive the replayed ones again"
        )
    return [sink for sink in sinks if isinstance(sink, SupportsRewind)]


def _check_republish(config: PipelineConfig, sinks: list[SupportsRewind], to_epoch: int,
                     committed: int,
                     republish: bool) -> list[str]:
    """The sinks that cannot withdraw what they published; refused unless ``republish``."""
    stuck = [sink.name for sink in sinks if not sink.withdraws]
    if stuck and not republish:
        raise RewindRefused(
            f"cannot rewind '{config.name}' to epoch {to_epoch}: sink(s) {', '.join(stuck)} "
            f"cannot withdraw the records of epochs {to_epoch + 1}..{committed} (published "
            "records stay published). Pass --republish to rewind anyway: consumers (reading "
            f"read_committed) will then see a marker of epoch {to_epoch}, then the replayed "
            f"epochs {to_epoch + 1}.. a second time, their records headed eos-lineage: "
            "<rewind id>; a consumer that keys its state by window replaces the old values"
        )
    return stuck


def _staging_target(config: PipelineConfig, tables: OpenTables,
                    checkpoint: checkpoints.Checkpoint | None) -> int:
    """Staging at the commit that staged N for its checkpointed plan (N's open windows are the
    state N+1 resumes from); before any staged epoch for a full replay."""
    if checkpoint is None:
        staging = tables.handle(tables.staging)  # ensure_tables creates it when missing
        if staging is None:
            raise RewindRefused(f"'{config.name}' has no staging table at {tables.staging}")
        return version_of(staging, tables.staging, config.app_id, NO_EPOCH)
    return target_version(tables.staging, config.app_id, checkpoint.epoch, checkpoint.plan_hash)


def _restore(config: PipelineConfig, tables: OpenTables, plan: RewindPlan) -> dict[str, int | None]:
    """Step 3: the sinks, staging, then the checkpoint table (the authority) last."""
    versions: dict[str, int | None] = {}
    app, epoch, rid = config.app_id, plan.to_epoch, plan.rewind_id
    _check_same_sinks(config, plan)
    for sink in rewindable(config, epoch):
        versions[sink.name] = sink.rewind(epoch, plan.sinks[sink.name], rid,
                                          output_schema(config, sink.output))
        faults.hit("rewind.between_tables")
    versions["staging"] = restore(tables.staging, plan.staging, app, epoch, rid, fenced=True)
    if epoch == NO_EPOCH:
        versions["staging"] = replace_schema(tables.staging, staging_schema(config), app, epoch,
                                             rid, partition_by=["epoch"]) or versions["staging"]
    faults.hit("rewind.before_checkpoints")
    versions["checkpoints"] = restore(tables.checkpoints, plan.checkpoints, app, epoch, rid)
    return versions


def _check_same_sinks(config: PipelineConfig, plan: RewindPlan) -> None:
    """A rewind restores the sinks it planned for. Rerunning a crashed rewind under a config
    whose sinks changed since would leave a planned sink half-restored or meet a sink with no
    target: refuse before touching anything, and say how to finish."""
    configured = {sink.name for sink in sinks_for(config)}
    if configured != set(plan.sinks):
        raise ConfigError(
            f"rewind {plan.rewind_id} to epoch {plan.to_epoch} was planned for the sinks "
            f"{', '.join(sorted(plan.sinks)) or 'none'}, and the config now names "
            f"{', '.join(sorted(configured)) or 'none'}: finish the rewind under the config it "
            "began with (rerun it), then change the sinks")


def _ranges(epochs: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0..2, 5``."""
    parts: list[str] = []
    for e in epochs:
        if parts and parts[-1].split("..")[-1] == str(e - 1):
            parts[-1] = f"{parts[-1].split('..')[0]}..{e}"
        else:
            parts.append(str(e))
    return ", ".join(parts)
