"""``abort``: discard an uncommitted epoch's staged rows, unless its commit has begun."""

from __future__ import annotations

from eos.core import checkpoints, epochlog, staging_fence
from eos.core.config import PipelineConfig
from eos.core.errors import CommitConflict
from eos.core.outcomes import Outcome
from eos.core.phaselog import log_epoch_phase, timed
from eos.core.plan import Plan
from eos.core.protocol.authority import STAGE_ATTEMPTS
from eos.core.sink import sinks_for
from eos.core.staging_fence import Fence
from eos.core.tables import OpenTables, ensure_tables


def abort(config: PipelineConfig, epoch: int, reason: str = "", *,
          attempt: epochlog.Attempt | None = None) -> Outcome:
    """Discard epoch N's staged rows and anything a sink prepared, so a rerun starts clean.
    The aborted row names ``attempt`` (a scheduler's task try) as the one that aborted.

    Never touches a committed epoch (``NOTHING_TO_ABORT``), nor one whose commit has begun
    (``IN_COMMIT``: the commit sealed it and may have written sinks; it must finish). The drop
    is fenced against the seal (``eos.core.staging_fence.Fence``): of an abort and a commit of N
    that race, exactly one goes ahead. Clearing the run afterwards re-executes ``begin``,
    which returns the same plan: the same records are read again.
    """
    with timed() as took, ensure_tables(config) as tables:
        row = epochlog.first_plan_row(tables, epoch)
        plan = None if row is None else Plan.from_json(row["plan"])
        outcome, staging_version = _drop_staged(config, tables, epoch)
        if outcome is Outcome.ABORTED:
            for sink in sinks_for(config):
                sink.abort(epoch)
            epochlog.append(tables, epoch, epochlog.ABORTED,
                            run_id=attempt.run_id if attempt else None,
                            details=epochlog.with_try({"reason": reason[:500]}, attempt,
                                                      outcome))
    log_epoch_phase(
        "abort", epoch=epoch, plan_hash=plan.hash if plan else None, outcome=outcome,
        ranges=plan.describe_ranges(",") if plan else None,
        records=plan.records if plan else None, rows=None,
        delta_versions={"staging": staging_version}, duration_ms=took["ms"],
        reason=reason[:200],
    )
    return outcome


def _drop_staged(config: PipelineConfig, tables: OpenTables, epoch: int
                 ) -> tuple[Outcome, int | None]:
    """Abort's one staging write, decided and written through one snapshot; with the staging
    version it wrote (None when it wrote nothing)."""
    snapshot = tables.refreshed(tables.staging)
    for _ in range(STAGE_ATTEMPTS):
        tables.refresh(tables.checkpoints)
        if checkpoints.last_checkpointed(tables, config.app_id) >= epoch:
            return Outcome.NOTHING_TO_ABORT, None
        if Fence.of(snapshot, config.app_id).sealed >= epoch:
            return Outcome.IN_COMMIT, None
        if staging_fence.drop(snapshot, config.app_id, epoch, "abort"):
            return Outcome.ABORTED, snapshot.version()
    raise CommitConflict(f"aborting epoch {epoch} conflicted with concurrent writes "
                         f"{STAGE_ATTEMPTS} times; retrying is safe")

