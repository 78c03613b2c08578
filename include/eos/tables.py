"""The pipeline's own Delta tables (epoch log, staging, checkpoints), their schemas, and the one
read path for Delta. Every transactional step goes through delta-rs. Sinks' tables belong to the
sinks (``eos.sinks.delta``); which epochs are committed is the checkpoint table's answer
(``eos.checkpoints``)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.fs as pa_fs
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from eos.config import PipelineConfig
from eos.errors import EosError
from eos.layout import Tables, tables_for

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


def ensure_tables(config: PipelineConfig) -> Tables:
    """Create the pipeline's own tables if missing. Idempotent; safe when processes race."""
    from eos.checkpoints import CHECKPOINTS_SCHEMA
    from eos.sinks.delta import create_table

    tables = tables_for(config)
    try:
        tables.root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise EosError(f"cannot create table root {tables.root}: {error.strerror}") from None
    create_table(tables.epochs, EPOCHS_SCHEMA)
    create_table(tables.staging, staging_schema(config), ["epoch"])
    create_table(tables.checkpoints, CHECKPOINTS_SCHEMA)
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
    """Read a Delta table through pyarrow's native filesystem, never delta-rs' default Python one.

    With the default (a ``PyFileSystem`` calling back into Python), pyarrow's readahead threads
    release buffers after the read returns; when that happens during interpreter shutdown the
    process aborts ("terminate called without an active exception", delta-rs#2184) *after* its
    work succeeded, and a phase whose commit landed reports failure (measured: 50 of 60 ``eos
    begin`` processes exited 134).
    """
    return _to_arrow(DeltaTable(path, version=version), path, columns, filters)


def read_existing(path: str, columns: list[str] | None = None,
                  filters: list | None = None) -> pa.Table | None:
    """``read_table`` of a table that may not exist yet (None then), opening it once."""
    table = open_table(path)
    return None if table is None else _to_arrow(table, path, columns, filters)


def _to_arrow(table: DeltaTable, path: str, columns: list[str] | None,
              filters: list | None) -> pa.Table:
    return table.to_pyarrow_table(columns=columns, filters=filters,
                                  filesystem=_native_filesystem(path))


def _native_filesystem(table_uri: str) -> pa_fs.FileSystem:
    uri = table_uri if "://" in table_uri else os.path.abspath(table_uri)
    filesystem, root = pa_fs.FileSystem.from_uri(uri)
    return pa_fs.SubTreeFileSystem(root, filesystem)


def read_epoch(path: str, epoch: int, columns: list[str] | None = None) -> pa.Table:
    return read_table(path, columns=columns, filters=[("epoch", "=", int(epoch))])
