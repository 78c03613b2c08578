"""``recover``: finish the epoch after the last checkpoint if it is staged."""

from __future__ import annotations

from eos.core import checkpoints, epochlog
from eos.core.config import PipelineConfig
from eos.core.outcomes import Outcome
from eos.core.plan import Plan
from eos.core.protocol.committing import commit
from eos.core.staging import staged_epoch
from eos.core.tables import ensure_tables


def recover(config: PipelineConfig) -> tuple[int | None, Outcome]:
    """Finish the epoch after the last checkpoint if it is staged (Flink's recoverAndCommit).

    Returns (that epoch or None, what happened): ``NOTHING_PENDING`` when no plan follows the
    checkpoint, ``NEEDS_PRECOMMIT`` when it is planned but not staged, else commit's outcome.
    A pre-committed epoch is always committed as staged, never recomputed differently.
    """
    with ensure_tables(config) as tables:
        pending = checkpoints.last_checkpointed(tables, config.app_id) + 1
        row = epochlog.first_plan_row(tables, pending)
        if row is None:
            return None, Outcome.NOTHING_PENDING
        if staged_epoch(tables, pending, Plan.from_json(row["plan"]).hash) is None:
            return pending, Outcome.NEEDS_PRECOMMIT
    return pending, commit(config, pending).outcome

