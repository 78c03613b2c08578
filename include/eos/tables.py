"""The pipeline's own Delta tables (epoch log, staging, checkpoints), their schemas, and the one
read path for Delta. Every transactional step goes through delta-rs. Sinks' tables belong to the
sinks (``eos.sinks.delta``); which epochs are committed is the checkpoint table's answer
(``eos.checkpoints``)."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from eos.config import PipelineConfig
from eos.errors import EosError
from eos.layout import Tables, tables_for  # noqa: F401 - re-exported
from eos.phaselog import logger

TS = pa.timestamp("us", tz="UTC")
DEC = pa.decimal128(38, 9)

EPOCHS_SCHEMA = pa.schema(
    [
        ("epoch", pa.int64()),
        ("phase", pa.string()),
        ("run_id", pa.string()),
        ("plan_hash", pa.string()),
        ("plan", pa.string()),
        ("at", TS),
        ("duration_ms", pa.float64()),
        ("details", pa.string()),
    ]
)

# One wide schema for every kind of staged row, so an epoch is a single Delta commit. The
# protocol's columns are fixed; the pipeline's own columns follow (``staging_schema``).
STAGING_PROTOCOL = pa.schema(
    [
        ("epoch", pa.int64()),
        ("kind", pa.string()),  # output | state | watermark | offsets | late | quarantine
        ("plan_hash", pa.string()),
        ("window_start_ms", pa.int64()),
        ("window_end_ms", pa.int64()),
        ("watermark_ms", pa.int64()),  # the watermark row: wm(N), the last row written
        ("max_event_ms", pa.int64()),
        ("filtered", pa.int64()),  # the watermark row: events the filter dropped in epoch N
        ("partition", pa.int32()),
        ("offset", pa.int64()),  # offsets rows: from; late/quarantine rows: the record's offset
        ("until", pa.int64()),
        ("kafka_timestamp_ms", pa.int64()),
        ("event_ms", pa.int64()),
        ("raw_key", pa.binary()),
        ("raw_value", pa.binary()),
        ("reason", pa.string()),
    ]
)
GROUP_PREFIX = "g__"  # group fields; state (s__) and output (o__) columns: eos.aggregations


def group_column(name: str) -> str:
    return f"{GROUP_PREFIX}{name}"


def staging_schema(config: PipelineConfig) -> pa.Schema:
    """The protocol's columns, then the group fields, every aggregation's state columns and
    output column: derived from the config, which is why its schema view may not change."""
    from eos.aggregations import aggregations_for, output_column
    from eos.schema import arrow_type

    fields = config.event.fields
    groups = [(group_column(g), arrow_type(fields[g].type)) for g in config.group_by]
    aggs = aggregations_for(config)
    states = [column for a in aggs for column in a.state()]
    outputs = [(output_column(a.output), a.output_type()) for a in aggs]
    return pa.schema([*STAGING_PROTOCOL, *groups, *states, *outputs])


# -- a process's pool of open handles -----------------------------------------------------------
#
# Opening a Delta table replays its log from the last Delta checkpoint: ~10 ms here for each of
# the ~11 tables begin and commit use, half of an empty epoch's cost (issue #13). A process that
# runs many phases (``eos run``, the benchmarks, the tests) keeps the handles its phases are done
# with and brings one up to date with ``update_incremental`` (~2.5 ms: only the new commits)
# instead of opening again. A pooled handle is lent to one user at a time: a fenced write is
# checked and written through one snapshot, which another phase must not move in between.
# Only local tables are pooled, and a handle is reused only while the commit file of the version
# it holds is the one it read (same mtime and size): a table deleted and created again under the
# same path is opened afresh, never patched with the new table's commits. That file survives
# until a log cleanup removes it (``epoch.log_retention``); then the handle is opened afresh.

POOL_SIZE = 64
_pool: dict[str, list[tuple[DeltaTable, tuple[int, int]]]] = {}
_lent: set[int] = set()  # ids of the handles ``checkout`` lent and nobody gave back yet
_pool_lock = threading.Lock()
_pool_pid = os.getpid()


def local_path(path: str) -> str | None:
    """The filesystem path of a local table (a plain path or a ``file://`` URI); None for a
    table on an object store."""
    if "://" in path and not path.startswith("file://"):
        return None
    return path.removeprefix("file://")


def _commit_mark(path: str, version: int) -> tuple[int, int] | None:
    """(mtime, size) of the table's commit file of ``version``; None when it cannot be told (a
    remote table, a commit file cleaned up): such handles are not pooled, or not reused."""
    local = local_path(path)
    if local is None:
        return None
    try:
        found = os.stat(os.path.join(local, "_delta_log", f"{version:020d}.json"))
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size


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
    table = None
    if found is not None and _commit_mark(path, found[0].version()) == found[1]:
        try:
            found[0].update_incremental()
            table = found[0]
        except Exception:  # any doubt about a pooled handle: open it afresh
            table = None
    if table is None:
        table = open_table(path)
    if table is not None:
        with _pool_lock:
            _lent.add(id(table))
    return table


def checkin(path: str, table: DeltaTable | None) -> None:
    """Give a handle back to the pool, for the next phase of this process to reuse. Only a
    handle ``checkout`` lent is pooled, with the mark of the commit it holds."""
    if table is None:
        return
    mark = _commit_mark(path, table.version())
    with _pool_lock:
        # The lent id is removed: a handle given back twice is pooled (and lent) once.
        if id(table) not in _lent:
            return
        _lent.discard(id(table))
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
        _give_back({path: table})


def _give_back(handles: dict[str, DeltaTable | None]) -> None:
    """Give handles back after the work is done: a failure here costs a reopen later, never the
    work (it runs right after a sink's commit), so it is logged, not raised."""
    for path, table in handles.items():
        try:
            checkin(path, table)
        except Exception as error:
            logger.warning("a Delta handle of %s was not pooled: %r", path, error)


@dataclass(frozen=True)
class OpenTables(Tables):
    """The pipeline's tables as one phase sees them: each Delta table opened at most once.

    Opening a Delta table replays its log (5-15 ms here, growing with the commits since its
    last Delta checkpoint), so a phase that opened a table once per question paid that a dozen
    times (issue #13). A phase builds one of these (``ensure_tables``) and every read, txn
    check and write of the phase goes through the same handle, opened (and created if missing)
    on first use; a write through a handle moves it to the version it wrote. A handle is a
    snapshot: fenced writes are *checked and written* through one
    (``eos.sinks.delta.fenced_append``), which is what makes them safe, and ``refresh`` brings
    one up to date where a phase must see other writers' commits.
    """

    schemas: dict[str, tuple[pa.Schema, list[str] | None]] = field(
        default_factory=dict, compare=False, repr=False)
    handles: dict[str, DeltaTable | None] = field(default_factory=dict, compare=False,
                                                  repr=False)

    def __post_init__(self) -> None:
        # The phase's handles go back to the process's pool once it is done with them.
        weakref.finalize(self, _give_back, self.handles)

    def handle(self, path: str) -> DeltaTable | None:
        if path not in self.handles:
            table = checkout(path)
            if table is None and path in self.schemas:
                from eos.sinks.delta import create_table

                create_table(path, *self.schemas[path])
                table = checkout(path)
            self.handles[path] = table
        return self.handles[path]

    def refresh(self, path: str) -> DeltaTable | None:
        """The table at its latest version (``update_incremental``: reads only new commits)."""
        table = self.handles.get(path)
        if table is None:
            self.handles.pop(path, None)
            return self.handle(path)
        table.update_incremental()
        return table


def handle(tables: Tables, path: str) -> DeltaTable | None:
    """``path``'s table: the phase's handle when ``tables`` is an ``OpenTables``, else a fresh
    open (status views and the audit hold plain ``Tables``). None when it does not exist."""
    if isinstance(tables, OpenTables):
        return tables.handle(path)
    return open_table(path)


def latest(tables: Tables, path: str) -> DeltaTable | None:
    """``path``'s table at its latest version: the phase's handle brought up to date, or a
    fresh open. For writes that must not start from an old snapshot (deletes, replaces)."""
    if isinstance(tables, OpenTables):
        return tables.refresh(path)
    return open_table(path)


def ensure_tables(config: PipelineConfig) -> OpenTables:
    """The pipeline's own tables for one phase: each opened on first use, and created then if
    missing (idempotent; safe when processes race). The open is the existence check, so
    nothing is opened twice and a phase opens only the tables it uses."""
    from eos.checkpoints import CHECKPOINTS_SCHEMA

    tables = OpenTables(config.root)
    try:
        tables.root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise EosError(f"cannot create table root {tables.root}: {error.strerror}") from None
    tables.schemas.update({tables.epochs: (EPOCHS_SCHEMA, None),
                           tables.staging: (staging_schema(config), ["epoch"]),
                           tables.checkpoints: (CHECKPOINTS_SCHEMA, None)})
    return tables


def open_table(path: str) -> DeltaTable | None:
    try:
        return DeltaTable(path)
    except TableNotFoundError:
        return None


def replace_epoch(path: str, data: pa.Table, epoch: int) -> int:
    """Replace exactly epoch ``epoch`` of a table partitioned by epoch, in one Delta commit."""
    write_deltalake(
        path, data, mode="overwrite", predicate=f"epoch = {int(epoch)}", partition_by=["epoch"]
    )
    return DeltaTable(path).version()


def read_table(path: str, columns: list[str] | None = None, filters: list | None = None,
               version: int | None = None) -> pa.Table:
    """Every row of a Delta table matching ``filters`` (``[(column, op, value), ...]``, ANDed),
    read by delta-rs' own engine (``scan``): it skips files by their statistics before opening
    them, so a filtered read of the uncompacted epoch log costs ~5 ms instead of ~22 ms.

    Never through delta-rs' default Python filesystem: with it, pyarrow's readahead threads
    release buffers after the read returns; when that happens during interpreter shutdown the
    process aborts ("terminate called without an active exception", delta-rs#2184) *after* its
    work succeeded, and a phase whose commit landed reports failure (measured: 50 of 60 ``eos
    begin`` processes exited 134).
    """
    return scan(DeltaTable(path, version=version), columns, filters)


def read_existing(path: str, columns: list[str] | None = None,
                  filters: list | None = None) -> pa.Table | None:
    """``read_table`` of a table that may not exist yet (None then), opening it once."""
    table = open_table(path)
    return None if table is None else scan(table, columns, filters)


def scan(table: DeltaTable, columns: list[str] | None = None,
         filters: list | None = None) -> pa.Table:
    """Rows of an opened table matching ``filters``, in the table's own Arrow types.

    Row order is not guaranteed: callers that need one sort."""
    reader = table.scan(columns=columns, predicate=predicate(filters) if filters else None)
    data = pa.table(reader)
    return data.cast(_plain(data.schema))


def _plain(schema: pa.Schema) -> pa.Schema:
    """delta-rs' engine returns string and binary *views* (nested ones too); the library works
    in plain types."""
    return pa.schema([f.with_type(_plain_type(f.type)) for f in schema])


def _plain_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_field
        return pa.list_(item.with_type(_plain_type(item.type)))
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_plain_type(t.field(i).type))
                          for i in range(t.num_fields)])
    return t


_OPS = {"=", "!=", "<", "<=", ">", ">="}


def predicate(filters: list) -> str:
    """A SQL predicate for delta-rs' engine from pyarrow-style filters: ``[(column, op, value),
    ...]`` (ANDed), or a list of such lists (ORed). Values are ints or strings (quoted, quotes
    doubled), so no caller builds SQL from text itself."""
    if filters and isinstance(filters[0], list):
        return " OR ".join(f"({predicate(group)})" for group in filters)
    terms = []
    for column, op, value in filters:
        if op not in _OPS or not column.isidentifier():
            raise ValueError(f"unsupported filter {(column, op, value)!r}")
        terms.append(f'"{column}" {op} {_literal(value)}')
    return " AND ".join(terms)


def _literal(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"unsupported filter value {value!r}")
    if isinstance(value, int):
        return str(int(value))
    return "'" + value.replace("'", "''") + "'"


def read_epoch(tables: Tables, path: str, epoch: int, columns: list[str] | None = None,
               filters: list | None = None) -> pa.Table | None:
    """One epoch of a table partitioned by epoch (staging), through the phase's handle; None
    when the table does not exist yet."""
    table = handle(tables, path)
    if table is None:
        return None
    return scan(table, columns, [("epoch", "=", int(epoch)), *(filters or [])])
