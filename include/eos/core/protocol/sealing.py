"""The seal: a commit marks N in staging before its first sink write, after which no abort or
precommit replaces N's staged rows (``eos.core.staging.Fence``)."""

from __future__ import annotations

import pyarrow as pa

from eos.core import faults
from eos.core.config import PipelineConfig
from eos.core.errors import CommitConflict, ProtocolViolation
from eos.core.plan import Plan
from eos.core.protocol.authority import STAGE_ATTEMPTS, check_no_rewind
from eos.core.staging import Fence, seal, staged_epoch
from eos.core.tables import OpenTables


def sealed_already(config: PipelineConfig, tables: OpenTables, epoch: int) -> bool:
    """Whether a commit sealed ``epoch`` already, as the phase's staging snapshot sees it."""
    snapshot = tables.handle(tables.staging)
    return snapshot is not None and Fence.of(snapshot, config.app_id).sealed >= epoch


def seal_epoch(config: PipelineConfig, tables: OpenTables, plan: Plan,
               staged: pa.Table) -> tuple[int, pa.Table]:
    """Seal N in staging before any sink write (``eos.core.staging.Fence``); return the count
    of rewinds it was sealed under (the prune after the checkpoint needs it) and N's staged
    rows as sealed: ``staged`` (read through the staging handle) when the seal was written
    through the snapshot they were read from, else read again once sealed (another fenced
    step landed in between: an abort and a precommit may have replaced them). Once N is
    sealed no precommit replaces its rows (``SEALED``), so the sinks get what staging holds.

    - N is sealed already (a retry after a crash, a concurrent attempt): go on, whatever began
      since: a rewind waits for a sealed epoch, so this commit must finish;
    - a rewind is half done: ``RewindUnfinished``, nothing written;
    - the seal lost to another fenced step: if N's staged rows are gone (an abort), a
      ``ProtocolViolation`` (precommit again); else seal again through the new snapshot."""
    snapshot = tables.handle(tables.staging)
    if snapshot is None:
        raise ProtocolViolation(f"epoch {plan.epoch} is not pre-committed: no staging table")
    for attempt in range(STAGE_ATTEMPTS):
        fence = Fence.of(snapshot, config.app_id)
        if fence.sealed >= plan.epoch:
            return fence.rewinds, _sealed_rows(tables, plan, staged if attempt == 0 else None)
        check_no_rewind(tables)
        if seal(snapshot, config.app_id, plan.epoch):
            faults.hit("commit.after_seal")
            return fence.rewinds, _sealed_rows(tables, plan, staged if attempt == 0 else None)
        if staged_epoch(tables, plan.epoch, plan.hash, state=False) is None:
            raise ProtocolViolation(
                f"epoch {plan.epoch}'s staged rows were dropped (an abort) as this commit "
                "began; nothing was written: run precommit again")
    raise CommitConflict(f"sealing epoch {plan.epoch} conflicted with concurrent writes "
                         f"{STAGE_ATTEMPTS} times; retrying is safe")


def _sealed_rows(tables: OpenTables, plan: Plan, read: pa.Table | None) -> pa.Table:
    """N's staged rows (without its open windows) as sealed: ``read`` when they were read
    through the snapshot the seal was found or written in, else read now (after the seal)."""
    rows = read if read is not None else staged_epoch(tables, plan.epoch, plan.hash,
                                                      state=False)
    if rows is None:  # a sealed epoch is never dropped: the fence refuses it
        raise ProtocolViolation(f"epoch {plan.epoch} is sealed and not staged for plan "
                                f"{plan.hash}: inspect the staging table")
    return rows

