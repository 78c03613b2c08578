"""``precommit``: stage epoch N in one fenced Delta commit, or find it done."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from eos.core import checkpoints, epochlog, faults, staging
from eos.core.checkpoints import STAGED_VIEW, Checkpoint
from eos.core.config import PipelineConfig
from eos.core.errors import CommitConflict, ProtocolViolation
from eos.core.outcomes import Outcome
from eos.core.path_rules import PATH_RULES, rules_for
from eos.core.phaselog import elapsed_ms, log_epoch_phase, timed
from eos.core.plan import Plan, plan_of
from eos.core.protocol.authority import STAGE_ATTEMPTS, check_no_rewind
from eos.core.protocol.results import StageResult
from eos.core.staging import (
    StagedFiles,
    Stager,
    count_kinds,
    epoch_files,
    staged_epoch,
)
from eos.core.staging_fence import Fence
from eos.core.tables import OpenTables, ensure_tables, staging_schema

if TYPE_CHECKING:
    from deltalake import DeltaTable


def precommit(config: PipelineConfig, epoch: int, stager: Stager,
              expected_hash: str | None = None, *,
              attempt: epochlog.Attempt | None = None) -> StageResult:
    """Stage epoch N in one Delta commit, or do nothing when that is already done. The
    precommit row staged with N's rows (``eos.core.staging.PRECOMMIT``) names ``attempt`` (a
    scheduler's task try) as the one that staged N.

    ``stager`` computes N's staging files (Spark:
    ``eos.compute.precommit.stager.SparkStager``); every decision about whether they may be
    committed is taken here.

    Scenarios:
    - N is committed (a cleared committed run, a zombie): nothing, ``ALREADY_COMMITTED``;
    - staging holds a complete N for this plan hash (a crash after the write): ``REUSED_STAGE``;
    - N-1 is not committed: ``ProtocolViolation`` (epochs are staged in order);
    - otherwise compute N and replace any earlier attempt's rows of N in one commit; if N got
      committed while we computed, we are a zombie and discard our rows (``DISCARDED``); if
      its commit has sealed it, its staged rows are the ones being promoted: ``SEALED``,
      nothing written. "N is not staged" is read through the staging snapshot the write goes
      through, so an attempt that staged N since makes the write conflict (``REUSED_STAGE``).
    """
    with timed() as total, ensure_tables(config) as tables:
        plan = plan_of(tables, epoch)
        if expected_hash and expected_hash != plan.hash:
            raise ProtocolViolation(
                f"epoch {epoch}: asked to stage plan {expected_hash} but the log's plan is "
                f"{plan.hash}; refusing to stage a plan the log does not hold"
            )
        result = StageResult(epoch, plan.hash, Outcome.STAGED)
        committed = checkpoints.last_checkpointed(tables, config.app_id)
        if committed >= epoch:
            result.outcome = Outcome.ALREADY_COMMITTED
        elif (existing := staged_epoch(tables, epoch, plan.hash)) is not None:
            result.outcome = Outcome.REUSED_STAGE
            result.counts = count_kinds(existing)
        elif committed < epoch - 1:
            raise ProtocolViolation(
                f"epoch {epoch - 1} is not committed (last checkpoint: {committed}); epochs are "
                "staged and committed in order"
            )
        else:
            check_no_rewind(tables)
            previous = checkpoints.last(tables, committed)  # N-1: its config and plan hash
            checkpoints.check_schema_view(previous, config)
            _stage(config, tables, plan, previous, stager, result, attempt, total)
    result.timings_ms["total"] = total["ms"]
    result.line = log_epoch_phase(
        "precommit", epoch=epoch, plan_hash=plan.hash, outcome=result.outcome,
        ranges=plan.describe_ranges(","), records=plan.records, rows=result.counts,
        delta_versions={"staging": result.staging_version}, duration_ms=total["ms"],
        watermark_ms=result.watermark_ms, written_by=result.written_by,
        durations_ms=result.timings_ms,
    )
    return result


@dataclass(frozen=True)
class _Base:
    """What a precommit computed N from, as its snapshot of staging saw it: the rewinds begun
    and the files of N-1 (its open windows and watermark). If either has changed when the
    staging commit is refused, the computation is stale."""

    rewinds: int
    files: frozenset[str]


def _stage(config: PipelineConfig, tables: OpenTables, plan: Plan, previous: Checkpoint | None,
           stager: Stager, result: StageResult, attempt: epochlog.Attempt | None,
           total: dict[str, float]) -> None:
    timings = result.timings_ms
    # The snapshot precommit found N unstaged in (not a newer one: a seal and the stage it
    # seals could land in between unseen); the stager reads N-1's state through it.
    snapshot = _decided_from(tables)
    base = _Base(Fence.of(snapshot, config.app_id).rewinds, epoch_files(snapshot, plan.epoch - 1))
    staged = stager.stage(config, tables, plan, previous, timings)
    # Who staged N and how, as one more staged row: the epochs view's precommitted entry,
    # committed with N's rows (and copied into N's checkpoint) instead of a log append.
    facts = _facts(staged, attempt, timings, elapsed_ms(total))
    # What N was computed with (its filter and select may change by the next epoch): the
    # commit records it in N's checkpoint, and the audit recomputes N with it.
    # And with which path rules its records were quarantined (sinks come and go).
    view, rules = config.schema_view(), rules_for(config, config.outputs)
    if rules:
        view[PATH_RULES] = [rule.to_view() for rule in rules]
    facts[STAGED_VIEW] = view
    files = [*staged.files, staging.facts_file(tables.staging, plan.epoch, plan.hash,
                                               staging_schema(config), facts, staged.files)]
    faults.hit("precommit.before_write")
    with timed() as took:
        # Through the snapshot the state was read from (not a refreshed one): if a fenced step
        # committed since (a rewind, an abort, another attempt), delta-rs refuses the write
        # and ``_restaged`` decides again from the latest snapshot.
        for _ in range(STAGE_ATTEMPTS):
            if not _still_next(config, tables, plan, result) or _sealed(config, snapshot,
                                                                       plan, result):
                return
            result.staging_version = staging.commit(
                snapshot, files, plan.epoch, staging_schema(config), config.app_id, plan.hash)
            if result.staging_version is not None or _restaged(config, tables, plan, base,
                                                               result):
                break
        else:
            raise CommitConflict(f"staging epoch {plan.epoch} conflicted with concurrent "
                                 f"writes {STAGE_ATTEMPTS} times; retrying is safe")
    if result.staging_version is None:  # superseded, or another attempt staged the same plan
        return
    faults.hit("precommit.after_write")
    timings["staging_write"] = took["ms"]
    result.counts = staged.counts
    result.watermark_ms = staged.watermark_ms
    result.written_by = staged.written_by


def _facts(staged: StagedFiles, attempt: epochlog.Attempt | None,
           timings: dict[str, float], took_ms: float) -> dict[str, object]:
    """The precommit row's details (``eos.core.staging.PRECOMMIT``): what was staged, by whom,
    how long each step took and the phase so far (``took_ms``). Written before the staging
    commit, so that commit's own time is not in them (the phase's log line has it)."""
    return epochlog.facts(
        {"rows": staged.counts, "watermark_ms": staged.watermark_ms,
         "files": len(staged.files), "written_by": staged.written_by,
         "timings_ms": dict(timings)},
        attempt, Outcome.STAGED, took_ms)


def _still_next(config: PipelineConfig, tables: OpenTables, plan: Plan,
                result: StageResult) -> bool:
    """After computing: is N still the epoch after the last checkpoint? (The compute took a
    while: the checkpoint table is asked again, at its latest version.)"""
    tables.refresh(tables.checkpoints)
    now = checkpoints.last_checkpointed(tables, config.app_id)
    if now >= plan.epoch:
        result.outcome = Outcome.DISCARDED  # our files stay invisible; a vacuum deletes them
        return False
    if now < plan.epoch - 1:  # a rewind moved the checkpoint back while we computed
        raise ProtocolViolation(
            f"epoch {plan.epoch} was computed from epoch {plan.epoch - 1}, but the last "
            f"checkpoint is now epoch {now} (a rewind): not staging it"
        )
    return True


def _decided_from(tables: OpenTables) -> DeltaTable:
    """The staging handle as precommit read it (first opened after the checkpoint read, so it
    holds N-1's staged state)."""
    snapshot = tables.handle(tables.staging)
    return tables.refreshed(tables.staging) if snapshot is None else snapshot


def _sealed(config: PipelineConfig, snapshot: DeltaTable, plan: Plan,
            result: StageResult) -> bool:
    """Has a commit sealed N, as the snapshot the write goes through sees it? Then N's staged
    rows are being promoted and are never replaced (``SEALED``); a seal landing after the
    snapshot makes the write conflict (both carry the staging fence), and this is asked
    again through the updated snapshot."""
    if Fence.of(snapshot, config.app_id).sealed < plan.epoch:
        return False
    result.outcome = Outcome.SEALED
    return True


def _restaged(config: PipelineConfig, tables: OpenTables, plan: Plan, base: _Base,
              result: StageResult) -> bool:
    """The staging commit was refused: another fenced step committed since the snapshot. True
    when that settles the epoch (our rows must not be staged, or already are), False when
    the write may be tried again through the now up-to-date snapshot.

    - a rewind began since N-1's state was read, or N-1's staged files are not the ones read
      (a rewind and a replay of N-1): ``SUPERSEDED``, nothing staged;
    - a commit sealed N since: ``SEALED`` (its staged rows are being promoted);
    - staging holds N for this plan now (a concurrent attempt, identical rows): ``REUSED_STAGE``;
    - otherwise (a prune, an abort of N): try again."""
    latest = tables.refreshed(tables.staging)
    if (Fence.of(latest, config.app_id).rewinds != base.rewinds
            or epoch_files(latest, plan.epoch - 1) != base.files):
        result.outcome = Outcome.SUPERSEDED
        return True
    if _sealed(config, latest, plan, result):
        return True
    existing = staged_epoch(tables, plan.epoch, plan.hash)
    if existing is not None:
        result.outcome = Outcome.REUSED_STAGE
        result.counts = count_kinds(existing)
        return True
    return False

