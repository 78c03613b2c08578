"""Keeping the per-epoch bookkeeping bounded: staging retention and table maintenance.

Both run inside ``commit`` after the checkpoint of the epoch is durable, so neither can affect
what is committed. Sinks' tables are the user's: their maintenance is the user's.
"""

from __future__ import annotations

from typing import Any

from deltalake import DeltaTable

from eos.layout import Tables
from eos.tables import latest, open_table

VACUUM_RETENTION_HOURS = 24


def prune_staging(tables: Tables, committed: int, retention: int) -> int | None:
    """Drop staged epochs older than the retention; the last committed one always stays (it is
    the state the next epoch resumes from). Returns the first epoch kept, None if nothing went."""
    keep_from = committed - max(retention, 1) + 1
    if keep_from <= 0:
        return None
    staging = latest(tables, tables.staging)
    if staging is not None:
        staging.delete(f"epoch < {keep_from}")
    return keep_from


def maintain(tables: Tables, retention_hours: int = VACUUM_RETENTION_HOURS) -> dict[str, Any]:
    """Compact the epoch log and delete files that pruned staging epochs and compactions left.

    Every read of the log opens every live file, so without this each phase gets slower with the
    number of epochs logged (0.18 s per read at 300 epochs, 0.010 s compacted). The checkpoint
    table gets one file per epoch too and is compacted with it: compaction rewrites files, not
    rows, and keeps its ``txn`` versions (the authority) as they are. A failure here is
    reported and never fails the commit (the next maintenance epoch tries again). Files are
    deleted only once older than ``retention_hours``, so a phase still reading an older table
    version finds its files.
    """
    done: dict[str, Any] = {}
    try:
        done["epoch_log"] = _compact(tables.epochs)
        done["checkpoints"] = _compact(tables.checkpoints)
        for name, path in (("epoch_log", tables.epochs), ("staging", tables.staging)):
            removed = DeltaTable(path).vacuum(retention_hours=retention_hours, dry_run=False,
                                              enforce_retention_duration=False)
            done[f"{name}_files_deleted"] = len(removed)
    except Exception as error:  # maintenance only: the next maintenance epoch tries again
        done["error"] = f"{type(error).__name__}: {str(error)[:300]}"
    return done


def _compact(path: str) -> dict[str, Any]:
    """Rewrite a table's one-row-per-append files into one; rows and ``txn`` versions stay."""
    table = open_table(path)
    if table is None:
        return {}
    metrics = table.optimize.compact()
    return {"files_removed": metrics.get("numFilesRemoved"),
            "files_added": metrics.get("numFilesAdded")}
