"""The staging fence: one snapshot of the staging table, and the steps fenced through it.

Every commit that changes which epochs staging holds goes through the **staging fence**
(``Fence``): a precommit's stage, a commit's seal (which also prunes), an abort and a rewind;
and so does the beginning of a maintenance, which deletes files and history a rewind may
need. Each is checked and written through one snapshot and carries ``txn(<app>#fence, N)``;
delta-rs refuses a commit carrying an app id that another commit carried after its snapshot
(``ConcurrentTransaction``), so of two such steps the later one fails, re-reads and decides
again. That is what keeps an abort from deleting an epoch its commit is promoting, and a
precommit that computed from state a rewind has since replaced from staging it (docs/design.md,
"Fencing").
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError

from eos.core.delta import commit_properties, held_version
from eos.core.outcomes import NO_EPOCH


class Fence:
    """The staging fence as one snapshot of the staging table sees it (``txn`` versions, each
    read when first asked, once per snapshot: ``eos.core.delta.held_version``).

    - every fenced commit carries ``txn(<app>#fence, N)``: that app id in two commits is what
      makes the later one conflict (delta-rs compares app ids, not versions);
    - ``sealed``: the last epoch a commit sealed. ``commit(N)`` seals N before it writes any
      sink: from then on an abort of N is refused (the commit must finish) and a rewind waits
      for N's checkpoint. ``sealed > committed`` means a commit is in flight (or crashed and
      will be retried: it must eventually succeed);
    - ``rewinds``: rewinds begun on this pipeline. A precommit that read its state before a
      rewind began never stages what it computed (the replay computes it again);
    - ``maintaining``: when the maintenance in flight began (ms since the Unix epoch; 0: none).
      Maintenance deletes files and log entries a rewind's restore may need, so it begins
      only while no rewind has begun (``begin_maintenance``), and a rewind waits while one
      runs (``maintenance_running``).
    A table written before the fence existed has none of them: -1, 0 and 0."""

    def __init__(self, staging: DeltaTable, app_id: str) -> None:
        self.staging, self.app_id = staging, app_id

    @classmethod
    def of(cls, staging: DeltaTable, app_id: str) -> Fence:
        return cls(staging, app_id)

    def _version(self, suffix: str, default: int) -> int:
        held = held_version(self.staging, self.app_id + suffix)
        return default if held is None else int(held)

    @cached_property
    def sealed(self) -> int:
        return self._version(_SEALED, NO_EPOCH)

    @cached_property
    def rewinds(self) -> int:
        return self._version(_REWINDS, 0)

    @cached_property
    def maintaining(self) -> int:
        return self._version(_MAINTAINING, 0)

    def maintenance_running(self, now_ms: int) -> bool:
        """A maintenance began and has not ended, and is young enough to be still running (one
        that crashed never ends: past ``MAINTENANCE_LEASE_MS`` it is taken as gone)."""
        return 0 < now_ms - self.maintaining < MAINTENANCE_LEASE_MS

    def advance(self, epoch: int, *, sealed: int | None = None,
                rewinds: int | None = None) -> list[Transaction]:
        """The ``txn`` actions of a fenced commit about ``epoch`` (and a new seal or count)."""
        actions = [Transaction(self.app_id + _FENCE, int(epoch))]
        if sealed is not None:
            actions.append(Transaction(self.app_id + _SEALED, int(sealed)))
        if rewinds is not None:
            actions.append(Transaction(self.app_id + _REWINDS, int(rewinds)))
        return actions


_FENCE, _SEALED, _REWINDS, _MAINTAINING = "#fence", "#sealed", "#rewinds", "#maintaining"
# How long a maintenance that began and never ended is taken as still running (a rewind
# waits for it): far longer than a vacuum and log cleanup of the protocol's tables take.
MAINTENANCE_LEASE_MS = 3_600_000


def fenced(staging: DeltaTable, write: Any) -> bool:
    """Run one fenced ``write`` through ``staging``'s snapshot: True if it committed, False if
    another fenced step committed since the snapshot (``staging`` is brought up to date)."""
    try:
        write()
    except CommitFailedError:
        staging.update_incremental()
        return False
    staging.update_incremental()
    return True


def seal(staging: DeltaTable, app_id: str, epoch: int, prune_before: int | None = None) -> bool:
    """``commit(N)``'s first write: a commit saying N is being committed (see ``Fence``). With
    ``prune_before``, the same commit drops every staged epoch below it (the staging retention,
    ``eos.core.maintenance.prune_bound``): a delete of whole ``epoch`` partitions carrying the
    seal, so the retention costs no Delta commit of its own. Without anything to drop, the seal
    is an empty commit. False if the table moved since ``staging``'s snapshot."""
    properties = commit_properties(app_id, epoch, "seal", txn=False,
                                   also=Fence.of(staging, app_id).advance(epoch, sealed=epoch))
    if prune_before is not None and staging.file_uris(
            file_pruning_predicate=[("epoch", "<", str(int(prune_before)))]):
        where = f"epoch < {int(prune_before)}"
        return fenced(staging, lambda: staging.delete(where, commit_properties=properties))
    return fenced(staging, lambda: staging.create_write_transaction(
        [], mode="append", schema=_own_schema(staging), partition_by=["epoch"],
        commit_properties=properties))


def rewinds_at(path: str, app_id: str, version: int) -> int:
    """The rewinds begun as staging's ``version`` saw them (``Fence.rewinds``). A commit reads
    there the count its seal was decided under only when its maintenance is due (a read of a
    ``txn`` version replays the log: not paid every epoch for a figure used every hundredth)."""
    return Fence.of(DeltaTable(path, version=version), app_id).rewinds


def drop(staging: DeltaTable, app_id: str, epoch: int, op: str) -> bool:
    """Delete epoch N's staged rows, fenced. False if the table moved since ``staging``'s
    snapshot."""
    fence = Fence.of(staging, app_id)
    return fenced(staging, lambda: staging.delete(
        f"epoch = {int(epoch)}", commit_properties=commit_properties(
            app_id, epoch, op, txn=False, also=fence.advance(epoch))))


def fence_rewind(staging: DeltaTable, app_id: str, to_epoch: int, seq: int) -> bool:
    """A rewind's first staging write, before it restores anything: rewind ``seq`` has begun
    (every precommit that read its state earlier is superseded) and nothing is sealed past
    ``to_epoch`` any more. False if the table moved since ``staging``'s snapshot."""
    fence = Fence.of(staging, app_id)
    return fenced(staging, lambda: staging.create_write_transaction(
        [], mode="append", schema=_own_schema(staging), partition_by=["epoch"],
        commit_properties=commit_properties(
            app_id, to_epoch, "rewind-fence", txn=False,
            also=fence.advance(to_epoch, sealed=to_epoch, rewinds=seq + 1))))


def begin_maintenance(staging: DeltaTable, app_id: str, epoch: int, rewinds: int,
                      now_ms: int) -> bool:
    """Fenced: maintenance (epoch N's commit's) begins at ``now_ms``, unless a rewind began since
    N was sealed (``rewinds``: the count it was sealed under). False when refused, or when the
    table moved since ``staging``'s snapshot (``staging`` is brought up to date: ask again).
    Of this and a rewind's fence (``fence_rewind``), the one that lands second sees the other."""
    fence = Fence.of(staging, app_id)
    if fence.rewinds != rewinds:
        return False
    return fenced(staging, lambda: staging.create_write_transaction(
        [], mode="append", schema=_own_schema(staging), partition_by=["epoch"],
        commit_properties=commit_properties(
            app_id, epoch, "maintain", txn=False,
            also=[*fence.advance(epoch), Transaction(app_id + _MAINTAINING, int(now_ms))])))


def end_maintenance(staging: DeltaTable, app_id: str, epoch: int) -> bool:
    """The maintenance begun by ``begin_maintenance`` is over (a rewind need not wait). Not
    fenced: it decides nothing, and must land whatever else commits meanwhile. False if it
    lost every race (a rewind then waits out ``MAINTENANCE_LEASE_MS``)."""
    return any(fenced(staging, lambda: staging.create_write_transaction(
        [], mode="append", schema=_own_schema(staging), partition_by=["epoch"],
        commit_properties=commit_properties(app_id, epoch, "maintained", txn=False,
                                            also=[Transaction(app_id + _MAINTAINING, 0)])))
               for _ in range(5))


def _own_schema(staging: DeltaTable) -> pa.Schema:
    """The table's schema as it is, so an empty fenced commit never changes its metadata."""
    return pa.schema(staging.schema().to_arrow())
