"""The pipeline's own Delta tables (epoch log, staging, checkpoints): their schemas, and how one
phase opens them (``OpenTables``). Sinks' tables belong to the sinks (``eos.sinks.delta.sink``);
which epochs are committed is the checkpoint table's answer (``eos.core.checkpoints``); the
Delta primitives they all use are ``eos.core.delta``."""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field
from types import TracebackType

import pyarrow as pa
from deltalake import DeltaTable

from eos.core.aggregations import aggregations_for, output_column
from eos.core.config import PipelineConfig
from eos.core.delta import (
    CHECKPOINT_EVERY,
    CHECKPOINT_INTERVAL,
    create_table,
    open_table,
    scan,
)
from eos.core.errors import TableUnwritable
from eos.core.layout import Tables
from eos.core.pool import checkout, give_back
from eos.core.schema import arrow_type
from eos.core.storage import is_remote, probe_fence, refuse_unsafe_settings

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
        ("kind", pa.string()),  # output | state | change | watermark | offsets | late |
        # quarantine | precommit
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
        # The watermark row: the epoch whose snapshot N's open windows build on (N itself when
        # N staged a snapshot; ``eos.core.window_state``). Added later: older tables gain it on
        # open.
        ("state_base", pa.int64()),
        # The topic of an offsets row's range and of a late or quarantined row's record (a
        # pipeline may read several). Added later: older tables gain it on open, and rows
        # staged before it read as null (the commit gives them the plan's one topic).
        ("topic", pa.string()),
        # The precommit row (kind ``precommit``): who staged N and how, as JSON (``eos.core.
        # staging.PRECOMMIT``), in the staging commit rather than an epoch-log append. Added
        # later: older tables gain it on open.
        ("details", pa.string()),
    ]
)
CHECKPOINTS_SCHEMA = pa.schema(
    [
        ("epoch", pa.int64()),
        ("plan_hash", pa.string()),
        ("until", pa.string()),  # JSON {topic: {partition: until}}: where N+1 starts reading
        ("watermark_ms", pa.int64()),
        ("rows", pa.string()),  # JSON {output: rows}
        ("sinks", pa.string()),  # JSON {sink: outcome and version} as this commit left them
        ("committed_at", TS),
        ("config", pa.string()),  # JSON: the config's schema view this epoch was computed with
        ("source", pa.string()),  # JSON {topic, cluster_id}: what ``until`` is of (identity.py)
        # JSON: who committed N and how (the try, its duration, each sink's outcome) and who
        # staged it, for people: the epochs view's "precommitted" and "committed" entries, in
        # the commit that checkpoints N rather than in epoch-log rows of their own. Added later:
        # older tables gain it on open, and their rows read as null (their epoch log holds
        # those rows instead).
        ("details", pa.string()),
    ]
)

GROUP_PREFIX = "g__"  # group fields; state (s__) and output (o__) columns: eos.core.aggregations
ROW_PREFIX = "r__"  # a stateless pipeline's selected columns
ROW_TOPIC = "r__kafka_topic"  # ... and the topic of each row's record
ROW_HEADERS = "r__kafka_headers"  # ... and its headers, when a sink carries them


def group_column(name: str) -> str:
    return f"{GROUP_PREFIX}{name}"


def row_column(name: str) -> str:
    return f"{ROW_PREFIX}{name}"


def staging_schema(config: PipelineConfig) -> pa.Schema:
    """The protocol's columns, then the group fields, every aggregation's state columns and
    output column; without windows, each row's topic and selected columns (its partition and
    offset are the protocol's): derived from the config, which is why its schema view may not
    change."""
    if config.stateless:
        from eos.core.config.rows import carries_headers
        from eos.core.schema import HEADERS_TYPE

        return pa.schema([*STAGING_PROTOCOL, (ROW_TOPIC, pa.string()),
                          *[(row_column(name), arrow_type(ftype))
                            for name, ftype in config.row_columns.items()],
                          *([(ROW_HEADERS, HEADERS_TYPE)] if carries_headers(config) else []),
                          # each sink's record columns (a key or header as an expression);
                          # one added later is a column older staging tables gain on open
                          *[(row_column(name), arrow_type(column.type))
                            for name, column in config.record_columns.items()]])
    types = config.field_types
    groups = [(group_column(g), arrow_type(types[g])) for g in config.group_by]
    aggs = aggregations_for(config)
    states = [column for a in aggs for column in a.state()]
    outputs = [(output_column(a.output), a.output_type()) for a in aggs]
    return pa.schema([*STAGING_PROTOCOL, *groups, *states, *outputs])


@dataclass(frozen=True)
class OpenTables(Tables):
    """The pipeline's tables as one phase sees them: each Delta table opened at most once.

    Opening a Delta table replays its log (5-15 ms here, growing with the commits since its
    last Delta checkpoint), so a phase that opened a table once per question paid that a dozen
    times. A phase opens one of these (``with ensure_tables(config) as tables``) and every
    read, txn check and write of the phase goes through the same handle, borrowed from the
    process's pool (``eos.core.pool``) on first use (created if missing); a write through a
    handle moves it to the version it wrote. A handle is a snapshot: fenced writes are
    *checked and written* through one (``eos.core.delta.fenced_append``), which is what makes
    them safe, and ``refresh`` brings one up to date where a phase must see other writers'
    commits. Leaving the ``with`` block gives the handles back; a phase that never enters one
    gives them back when it is collected.
    """

    schemas: dict[str, tuple[pa.Schema, list[str] | None]] = field(
        default_factory=dict, compare=False, repr=False)
    handles: dict[str, DeltaTable | None] = field(default_factory=dict, compare=False,
                                                  repr=False)

    def __post_init__(self) -> None:
        weakref.finalize(self, give_back, self.handles)

    def __enter__(self) -> OpenTables:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        give_back(self.handles)
        self.handles.clear()

    def handle(self, path: str) -> DeltaTable | None:
        if path not in self.handles:
            table = checkout(path)
            if table is None and path in self.schemas:
                _probe_once(self.root)  # before the first table on a store is created
                create_table(path, *self.schemas[path],
                             configuration={CHECKPOINT_INTERVAL: CHECKPOINT_EVERY})
                table = checkout(path)
            elif table is not None and path in self.schemas:
                _add_missing_columns(table, self.schemas[path][0])
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

    def refreshed(self, path: str) -> DeltaTable:
        """One of the pipeline's own tables (created on first use, so never missing) at its
        latest version."""
        table = self.refresh(path)
        if table is None:
            raise TableUnwritable(f"Delta table {path} could not be opened or created")
        return table


def _add_missing_columns(table: DeltaTable, schema: pa.Schema) -> None:
    """Give a table written by an earlier version the nullable columns added to its schema
    since (one metadata commit; a fenced write racing it re-reads and decides again)."""
    missing = _missing(table, schema)
    if not missing:
        return
    from deltalake import Field as DeltaField
    from deltalake.schema import Schema as DeltaSchema

    fields = DeltaSchema.from_arrow(pa.schema(missing)).fields
    try:
        table.alter.add_columns([DeltaField(f.name, f.type, nullable=True) for f in fields])
    except Exception as error:  # two processes adding them at once: one commit wins
        table.update_incremental()
        if _missing(table, schema):
            raise TableUnwritable(f"could not add {[f.name for f in missing]} to the Delta "
                                  f"table {table.table_uri}: {error}") from None
    table.update_incremental()


def _missing(table: DeltaTable, schema: pa.Schema) -> list[pa.Field]:
    have = {f.name for f in table.schema().fields}
    return [f for f in schema if f.name not in have]


_probed: set[str] = set()  # roots whose store this process has seen keep the fence


def _probe_once(root: str) -> None:
    """``eos.core.storage.probe_fence`` for ``root``, once per process (a local root is never
    probed): a store that lets two writers commit one version is refused before anything of
    the pipeline is written to it."""
    if is_remote(root) and root not in _probed:
        probe_fence(root)
        _probed.add(root)


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
    tables = OpenTables(config.root)
    refuse_unsafe_settings(tables.root)  # again at run time: the task's environment decides
    if not is_remote(tables.root):
        try:
            os.makedirs(tables.root, exist_ok=True)
        except OSError as error:
            raise TableUnwritable(
                f"cannot create table root {tables.root}: {error.strerror}") from None
    tables.schemas.update({tables.epochs: (EPOCHS_SCHEMA, None),
                           tables.staging: (staging_schema(config), ["epoch"]),
                           tables.checkpoints: (CHECKPOINTS_SCHEMA, None)})
    return tables


def read_epoch(tables: Tables, path: str, epoch: int, columns: list[str] | None = None,
               filters: list | None = None) -> pa.Table | None:
    """One epoch of a table partitioned by epoch (staging), through the phase's handle; None
    when the table does not exist yet."""
    table = handle(tables, path)
    if table is None:
        return None
    return scan(table, columns, [("epoch", "=", int(epoch)), *(filters or [])])
