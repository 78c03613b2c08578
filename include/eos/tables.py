"""The pipeline's Delta tables (epochs, staging, target, late, quarantine) and their schemas.

Every transactional step goes through delta-rs. The ``txn`` version a sink carries for the
pipeline's app id is the authority on which epochs that sink has committed.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.fs as pa_fs
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from eos.config import PipelineConfig
from eos.errors import EosError
from eos.layout import Tables, tables_for

TS = pa.timestamp("us", tz="UTC")
DEC = pa.decimal128(38, 9)
NO_EPOCH = -1

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

# One wide schema for every kind of staged row, so an epoch is a single Delta commit.
STAGING_SCHEMA = pa.schema(
    [
        ("epoch", pa.int64()),
        ("kind", pa.string()),  # output | state | offsets | late | quarantine
        ("plan_hash", pa.string()),
        ("key", pa.string()),
        ("window_start_ms", pa.int64()),
        ("count", pa.int64()),
        ("sum", DEC),
        ("min", DEC),
        ("max", DEC),
        ("watermark_ms", pa.int64()),  # state row with null key: the watermark after this epoch
        ("max_event_ms", pa.int64()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),  # offsets rows: from; late/quarantine rows: the record's offset
        ("until", pa.int64()),
        ("kafka_timestamp_ms", pa.int64()),
        ("event_ms", pa.int64()),
        ("value", DEC),
        ("raw_key", pa.binary()),
        ("raw_value", pa.binary()),
        ("reason", pa.string()),
    ]
)

LATE_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("event_time", TS),
        ("value", DEC),
        ("window_start", TS),
        ("window_end", TS),
        ("watermark", TS),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("kafka_timestamp", TS),
        ("epoch", pa.int64()),
    ]
)

QUARANTINE_SCHEMA = pa.schema(
    [
        ("reason", pa.string()),
        ("raw_key", pa.binary()),
        ("raw_value", pa.binary()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("kafka_timestamp", TS),
        ("epoch", pa.int64()),
    ]
)

_AGG_TYPES = {"count": pa.int64(), "sum": DEC, "min": DEC, "max": DEC, "avg": pa.float64()}


def target_schema(config: PipelineConfig) -> pa.Schema:
    aggregates = [(name, _AGG_TYPES[name]) for name in _AGG_TYPES if name in config.aggregations]
    return pa.schema(
        [("key", pa.string()), ("window_start", TS), ("window_end", TS), *aggregates,
         ("epoch", pa.int64())]
    )


def ensure_tables(config: PipelineConfig) -> Tables:
    """Create any missing table. Idempotent: creating an existing table is a no-op."""
    tables = tables_for(config)
    try:
        tables.root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise EosError(f"cannot create table root {tables.root}: {error.strerror}") from None
    specs = [
        (tables.epochs, EPOCHS_SCHEMA, None),
        (tables.staging, STAGING_SCHEMA, ["epoch"]),
        (tables.target, target_schema(config), None),
        (tables.late, LATE_SCHEMA, None),
        (tables.quarantine, QUARANTINE_SCHEMA, None),
    ]
    for path, schema, partitions in specs:
        if not DeltaTable.is_deltatable(path):
            try:
                DeltaTable.create(path, schema=schema, partition_by=partitions, mode="ignore")
            except OSError as error:
                raise EosError(f"cannot create Delta table at {path}: {error}") from None
    return tables


def open_table(path: str) -> DeltaTable | None:
    try:
        return DeltaTable(path)
    except TableNotFoundError:
        return None


def txn_version(path: str, app_id: str) -> int:
    """The last epoch this sink committed for ``app_id``; -1 if none."""
    table = open_table(path)
    if table is None:
        return NO_EPOCH
    version = table.transaction_version(app_id)
    return NO_EPOCH if version is None else int(version)


def append_with_txn(path: str, data: pa.Table, app_id: str, epoch: int) -> int:
    """Append ``data`` and ``txn(app_id, epoch)`` in one Delta commit; return the new version."""
    write_deltalake(
        path,
        data,
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id, epoch)]),
    )
    return DeltaTable(path).version()


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
    table = DeltaTable(path, version=version)
    return table.to_pyarrow_table(columns=columns, filters=filters,
                                  filesystem=_native_filesystem(path))


def _native_filesystem(table_uri: str) -> pa_fs.FileSystem:
    uri = table_uri if "://" in table_uri else os.path.abspath(table_uri)
    filesystem, root = pa_fs.FileSystem.from_uri(uri)
    return pa_fs.SubTreeFileSystem(root, filesystem)


def read_epoch(path: str, epoch: int, columns: list[str] | None = None) -> pa.Table:
    return read_table(path, columns=columns, filters=[("epoch", "=", int(epoch))])
