"""Keeping the per-epoch bookkeeping bounded: staging retention and table maintenance.

Both run inside ``commit``: the prune in the seal (it drops only epochs older than the one
being committed, all of them checkpointed), the maintenance after the checkpoint is durable, so
neither can affect what is committed. Sinks' tables are the user's: their maintenance is the user's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from eos.core import epochlog
from eos.core.delta import CHECKPOINT_EVERY, CHECKPOINT_INTERVAL, open_table
from eos.core.layout import Tables
from eos.core.staging_fence import Fence, begin_maintenance, end_maintenance
from eos.core.storage import filesystem, join
from eos.core.tables import latest

if TYPE_CHECKING:
    from deltalake import DeltaTable

VACUUM_RETENTION_HOURS = 24
LOG_RETENTION = "delta.logRetentionDuration"
DEFAULT_LOG_RETENTION_MS = 86_400_000  # epoch.log_retention's default


def prune_bound(committed: int, retention: int, state_base: int | None = None) -> int | None:
    """The first staged epoch to keep once ``committed`` is sealed: every epoch older than the
    retention goes, but the committing one and every epoch back to the base of its state
    (``state_base``, ``eos.core.window_state``) stay: they are the state the next epoch
    resumes from. None when nothing is old enough to go.

    ``commit`` drops the epochs below it in the seal's own Delta commit
    (``eos.core.staging_fence.seal``), fenced like every staging write: a rewind that began
    since the seal's snapshot makes the seal (and so the prune) conflict and decide again, and
    once a rewind has begun, its restore alone decides what staging holds."""
    keep_from = committed - max(retention, 1) + 1
    if state_base is not None:
        keep_from = min(keep_from, state_base)
    return keep_from if keep_from > 0 else None


def maintain(tables: Tables, retention_hours: int = VACUUM_RETENTION_HOURS,
             log_retention_ms: int = DEFAULT_LOG_RETENTION_MS, *, app_id: str | None = None,
             epoch: int = -1, rewinds: int = 0) -> dict[str, Any]:
    """Compact the epoch log, delete files that pruned staging epochs and compactions left, and
    clean up the protocol tables' Delta logs older than ``log_retention_ms``.

    Every read of the log opens every live file, so without compaction each phase gets slower
    with the number of epochs logged (0.18 s per read at 300 epochs, 0.010 s compacted). The
    checkpoint table gets one file per epoch too and is compacted with it: compaction rewrites
    files, not rows, and keeps its ``txn`` versions (the authority) as they are. Every Delta
    read and write also lists the table's ``_delta_log`` directory, ~3 commit files per epoch
    (at 1,000 epochs a small append took 13 ms instead of 3 ms), so the log is cleaned up too
    (``_clean_log``). A failure here is reported and never fails the commit (the next
    maintenance epoch tries again). Files are deleted only once older than ``retention_hours``,
    so a phase still reading an older table version finds its files.

    A rewind restores old versions of staging and the checkpoint table: what a vacuum and a log
    cleanup delete. ``commit`` of ``epoch`` (sealed under ``rewinds`` rewinds) passes its
    ``app_id``, and the maintenance then runs only under the staging fence
    (``eos.core.staging_fence.begin_maintenance``): not once a rewind has begun or is unfinished
    (``skipped``: the next maintenance epoch does it), and a rewind that begins meanwhile
    waits for it to end (``EpochCommitting``) before it logs or fences anything.
    """
    done: dict[str, Any] = {}
    if app_id is not None:
        refused = _begin(tables, app_id, epoch, rewinds)
        if refused is not None:
            return {"skipped": refused}
    try:
        done["epoch_log"] = _compact(tables.epochs)
        done["checkpoints"] = _compact(tables.checkpoints)
        for name, path in (("epoch_log", tables.epochs), ("staging", tables.staging)):
            table = open_table(path)
            # Staging also holds files no commit ever named: attempts killed mid-write, tasks
            # Spark retried, precommits refused by the fence. Only a full vacuum deletes those
            # (a plain one deletes removed files only); older than ``retention_hours``, no
            # attempt can still be about to commit them.
            removed = [] if table is None else table.vacuum(
                retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False,
                full=name == "staging")
            done[f"{name}_files_deleted"] = len(removed)
        for name, path in (("epoch_log", tables.epochs), ("staging", tables.staging),
                           ("checkpoints", tables.checkpoints)):
            done[f"{name}_log_files_deleted"] = _clean_log(path, log_retention_ms)
    except Exception as error:  # maintenance only: the next maintenance epoch tries again
        done["error"] = f"{type(error).__name__}: {str(error)[:300]}"
    finally:
        if app_id is not None:
            _end(tables, app_id, epoch, done)
    return done


BEGIN_ATTEMPTS = 5


def _begin(tables: Tables, app_id: str, epoch: int, rewinds: int) -> str | None:
    """Begin a maintenance under the staging fence; None when begun, else why it stands aside.

    The epoch log is read *after* the fenced begin: a rewind logged before that read is seen
    here; one logged after it fences staging later still, and finds this maintenance running
    there (it waits). A rewind's fence that lands first is seen in ``rewinds``."""
    for _ in range(BEGIN_ATTEMPTS):
        staging = latest(tables, tables.staging)
        if staging is None:
            return "no staging table"
        if Fence.of(staging, app_id).rewinds != rewinds:
            return f"a rewind began after epoch {epoch} was sealed"
        if begin_maintenance(staging, app_id, epoch, rewinds, int(time.time() * 1000)):
            break
    else:
        return f"the staging fence moved {BEGIN_ATTEMPTS} times as it began"
    latest(tables, tables.epochs)
    unfinished = epochlog.unfinished_rewind(epochlog.rewind_rows(tables))
    if unfinished is not None:
        end_maintenance(staging, app_id, epoch)
        return (f"rewind {unfinished['rewind_id']} to epoch {unfinished['to_epoch']} is "
                "unfinished: its restore needs the history a maintenance deletes")
    return None


def _end(tables: Tables, app_id: str, epoch: int, done: dict[str, Any]) -> None:
    """End the maintenance begun by ``_begin`` (a rewind waiting for it may go on)."""
    try:
        staging = latest(tables, tables.staging)
        if staging is not None and not end_maintenance(staging, app_id, epoch):
            done.setdefault("error", "its end lost every race to other staging commits")
    except Exception as error:  # a rewind then waits out the lease (MAINTENANCE_LEASE_MS)
        done.setdefault("error", f"ending: {type(error).__name__}: {str(error)[:300]}")


def log_retention_property(log_retention_ms: int) -> str:
    """``delta.logRetentionDuration`` for a retention in milliseconds (Delta's interval form)."""
    return f"interval {log_retention_ms // 1000} seconds"


def ensure_properties(table: DeltaTable, wanted: dict[str, str]) -> None:
    """Set the table properties that differ from ``wanted`` (one metadata commit, none when
    they all match): the table handle moves to the version written."""
    configuration = table.metadata().configuration
    if any(configuration.get(k) != v for k, v in wanted.items()):
        table.alter.set_table_properties(wanted)


def _clean_log(path: str, log_retention_ms: int) -> int:
    """Checkpoint the table, then delete its commit files older than the retention that the
    checkpoint makes unneeded (delta-rs ``cleanup_metadata``, which honours the table's
    ``delta.logRetentionDuration``; set here from the pipeline's ``epoch.log_retention``).

    What stays readable: the latest version and every version younger than the retention. The
    checkpoint keeps the table's ``txn`` versions, so the checkpoint authority is untouched. Older
    versions (time travel, a rewind's restore of these tables) are gone, as after any Delta log
    cleanup."""
    table = open_table(path)
    if table is None:
        return 0
    # A table created before eos set its checkpoint interval gets it here (``CHECKPOINT_EVERY``).
    ensure_properties(table, {LOG_RETENTION: log_retention_property(log_retention_ms),
                              CHECKPOINT_INTERVAL: CHECKPOINT_EVERY})
    table.create_checkpoint()
    before = _log_files(path)
    table.cleanup_metadata()
    return before - _log_files(path)


def _log_files(path: str) -> int:
    """Files in a table's ``_delta_log`` (a local directory or an object-store prefix)."""
    import pyarrow.fs as pa_fs

    store, root = filesystem(join(path, "_delta_log"))
    return len(store.get_file_info(pa_fs.FileSelector(root, allow_not_found=True)))


def _compact(path: str) -> dict[str, Any]:
    """Rewrite a table's one-row-per-append files into one; rows and ``txn`` versions stay."""
    table = open_table(path)
    if table is None:
        return {}
    metrics = table.optimize.compact()
    return {"files_removed": metrics.get("numFilesRemoved"),
            "files_added": metrics.get("numFilesAdded")}
