"""The seal: a commit marks N in staging before its first sink write, after which no abort or
precommit replaces N's staged rows (``eos.core.staging_fence.Fence``). The same Delta commit prunes
the staged epochs older than the retention."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from eos.core import faults
from eos.core.config import PipelineConfig
from eos.core.errors import CommitConflict, ProtocolViolation
from eos.core.maintenance import prune_bound
from eos.core.plan import Plan
from eos.core.protocol.authority import STAGE_ATTEMPTS, check_no_rewind
from eos.core.staging import base_of, staged_epoch, watermark_row
from eos.core.staging_fence import Fence, seal
from eos.core.tables import OpenTables


def sealed_already(config: PipelineConfig, tables: OpenTables, epoch: int) -> bool:
    """Whether a commit sealed ``epoch`` already, as the phase's staging snapshot sees it."""
    snapshot = tables.handle(tables.staging)
    return snapshot is not None and Fence.of(snapshot, config.app_id).sealed >= epoch


@dataclass(frozen=True)
class Sealed:
    """What ``seal_epoch`` found or wrote: the staging version it was found or written in
    (the maintenance after the checkpoint reads there the count of rewinds N was sealed under:
    ``eos.core.staging_fence.rewinds_at``), N's staged rows as sealed, and the first staged epoch
    the seal kept when it pruned older ones (None: it pruned nothing, or N was sealed
    already)."""

    version: int
    rows: pa.Table
    pruned_before: int | None = None


def seal_epoch(config: PipelineConfig, tables: OpenTables, plan: Plan,
               staged: pa.Table) -> Sealed:
    """Seal N in staging before any sink write (``eos.core.staging_fence.Fence``), dropping in
    the same commit the staged epochs older than the retention
    (``eos.core.maintenance.prune_bound``).
    N's staged rows as sealed are ``staged`` (read through the staging handle) when the seal
    was written through the snapshot they were read from, else those read again through the
    snapshot the seal was found or written in (another fenced step landed in between: an abort
    and a precommit may have replaced them). Once N is sealed no precommit replaces its rows
    (``SEALED``), so the sinks get what staging holds.

    - N is sealed already (a retry after a crash, a concurrent attempt): go on, whatever began
      since: a rewind waits for a sealed epoch, so this commit must finish;
    - a rewind is half done: ``RewindUnfinished``, nothing written;
    - the seal lost to another fenced step: if N's staged rows are gone (an abort), a
      ``ProtocolViolation`` (precommit again); else seal again through the new snapshot."""
    snapshot = tables.handle(tables.staging)
    if snapshot is None:
        raise ProtocolViolation(f"epoch {plan.epoch} is not pre-committed: no staging table")
    read = staged  # N's rows through ``snapshot``: read again whenever it moves
    for _ in range(STAGE_ATTEMPTS):
        fence = Fence.of(snapshot, config.app_id)
        if fence.sealed >= plan.epoch:
            return Sealed(snapshot.version(), read)
        check_no_rewind(tables)
        # The bound comes from N's rows as this snapshot holds them: the state they resume from.
        bound = prune_bound(plan.epoch, config.epoch.staging_retention,
                            base_of(watermark_row(read)))
        if seal(snapshot, config.app_id, plan.epoch, prune_before=bound):
            faults.hit("commit.after_seal")
            return Sealed(snapshot.version(), read, bound)
        again = staged_epoch(tables, plan.epoch, plan.hash, state=False)
        if again is None:
            raise ProtocolViolation(
                f"epoch {plan.epoch}'s staged rows were dropped (an abort) as this commit "
                "began; nothing was written: run precommit again")
        read = again
    raise CommitConflict(f"sealing epoch {plan.epoch} conflicted with concurrent writes "
                         f"{STAGE_ATTEMPTS} times; retrying is safe")
