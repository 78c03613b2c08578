"""A process's pool of open Delta handles, lent to one user at a time.

Opening a Delta table replays its log from the last Delta checkpoint: ~10 ms here for each of
the ~11 tables begin and commit use, half of an empty epoch's cost. A process that runs many
phases (``eos run``, the benchmarks, the tests) keeps the handles its phases are done with and
brings one up to date with ``update_incremental`` (~2.5 ms: only the new commits) instead of
opening again. A pooled handle is lent to one user at a time (``checkout`` / ``checkin``, or
``lent`` for a ``with`` block): a fenced write is checked and written through one snapshot,
which another phase must not move in between.

A handle is reused only while the commit file of the version it holds is the one it read (same
mtime and size): a table deleted and created again under the same path is opened afresh, never
patched with the new table's commits. That file survives until a log cleanup removes it
(``epoch.log_retention``); then the handle is opened afresh. On an object store the check is
one metadata request (HEAD) and the update one listing: an open costs a listing and a read of
the last checkpoint and of every commit since, so pooling saves round trips there too. A handle
given back at the version it was lent at keeps the mark checked when it was lent; one a write
moved has its new commit file's mark read.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from deltalake import DeltaTable

from eos.core.delta import local_path, open_table
from eos.core.phaselog import logger
from eos.core.storage import filesystem, join

POOL_SIZE = 64
_pool: dict[str, list[tuple[DeltaTable, tuple[int, int]]]] = {}
# The handles ``checkout`` lent and nobody gave back yet: id -> the version lent and its
# commit file's mark when known (a pooled handle no newer commit moved), so a handle given back
# at that version is pooled without asking the store again.
_lent: dict[int, tuple[int, tuple[int, int]] | None] = {}
_pool_lock = threading.Lock()
_pool_pid = os.getpid()


def _commit_mark(path: str, version: int) -> tuple[int, int] | None:
    """(mtime, size) of the table's commit file of ``version``; None when it cannot be told (a
    commit file cleaned up): such handles are not pooled, or not reused."""
    commit = join(path, "_delta_log", f"{version:020d}.json")
    local = local_path(path)
    if local is not None:
        try:
            found = os.stat(os.path.join(local, "_delta_log", f"{version:020d}.json"))
        except OSError:
            return None
        return found.st_mtime_ns, found.st_size
    import pyarrow.fs as pa_fs

    try:
        store, inside = filesystem(commit)
        info = store.get_file_info(inside)
    except OSError:
        return None
    if info.type != pa_fs.FileType.File or info.mtime_ns is None:
        return None
    return info.mtime_ns, info.size


def checkout(path: str) -> DeltaTable | None:
    """``path``'s table at its latest version, lent to the caller alone (``checkin`` gives it
    back); None when the table does not exist."""
    global _pool_pid
    with _pool_lock:
        if _pool_pid != os.getpid():  # a forked child never shares its parent's handles
            _pool.clear()
            _lent.clear()
            _pool_pid = os.getpid()
        pooled = _pool.get(path)
        found = pooled.pop() if pooled else None
        if pooled is not None and not pooled:
            del _pool[path]
    table, known = None, None
    if found is not None:
        pooled_table, mark = found
        held = pooled_table.version()
        if _commit_mark(path, held) == mark:
            try:
                pooled_table.update_incremental()
                table = pooled_table
                known = (held, mark) if table.version() == held else None
            except Exception:  # any doubt about a pooled handle: open it afresh
                table = None
    if table is None:
        table = open_table(path)
    if table is not None:
        with _pool_lock:
            _lent[id(table)] = known
    return table


def checkin(path: str, table: DeltaTable | None) -> None:
    """Give a handle back to the pool, for the next phase of this process to reuse. Only a
    handle ``checkout`` lent is pooled, with the mark of the commit it holds."""
    if table is None:
        return
    with _pool_lock:
        known = _lent.get(id(table))
    # Lent at this version with its mark checked: the same commit file (one request fewer).
    mark = (known[1] if known is not None and known[0] == table.version()
            else _commit_mark(path, table.version()))
    with _pool_lock:
        # The lent id is removed: a handle given back twice is pooled (and lent) once.
        if id(table) not in _lent:
            return
        del _lent[id(table)]
        if mark is None or _pool_pid != os.getpid():
            return
        _pool.setdefault(path, []).append((table, mark))
        _evict()


def pooled(path: str) -> bool:
    """Whether this process holds a handle of ``path`` whose commit file is still there (so the
    table exists: a commit file is only deleted by a log cleanup, which keeps newer ones)."""
    with _pool_lock:
        held = list(_pool.get(path, ())) if _pool_pid == os.getpid() else []
    return any(_commit_mark(path, table.version()) == mark for table, mark in held)


def _evict() -> None:
    """Drop the oldest pooled handles beyond ``POOL_SIZE`` (callers hold the lock). No path's
    list is ever empty: whoever empties one deletes it."""
    while sum(len(held) for held in _pool.values()) > POOL_SIZE:
        oldest = next(iter(_pool))
        _pool[oldest].pop(0)
        if not _pool[oldest]:
            del _pool[oldest]


@contextmanager
def lent(path: str) -> Iterator[DeltaTable | None]:
    """``checkout`` for the length of a ``with``; the handle goes back afterwards."""
    table = checkout(path)
    try:
        yield table
    finally:
        give_back({path: table})


def give_back(handles: dict[str, DeltaTable | None]) -> None:
    """Give handles back after the work is done: a failure here costs a reopen later, never the
    work (it runs right after a sink's commit), so it is logged, not raised."""
    for path, table in handles.items():
        try:
            checkin(path, table)
        except Exception as error:
            logger.warning("a Delta handle of %s was not pooled: %r", path, error)


