"""The ``files`` sink read back for the audit by DuckDB, a different library than the one that
wrote the files (pyarrow): Parquet with ``read_parquet``, JSON lines with
``read_json_objects`` (then typed by the Kafka JSON codec's decoder, whose encoder wrote
them). Only the files the manifests list are read. Files on an object store are copied to a
temporary directory first (DuckDB's S3 reader is an extension that may not be installable
where the audit runs)."""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from eos.sinks.files.layout import Manifest
    from eos.sinks.files.store import Place


def read_files(place: Place, manifests: list[Manifest], form: str) -> list[dict[str, Any]]:
    """Every row of the manifests' files, oldest epoch first, typed as the latest schema."""
    schema = manifests[-1].arrow_schema()
    paths = [path for manifest in manifests for path in manifest.files]
    if not paths:
        return []
    if not place.remote:
        return _read([place.location(p) for p in paths], form, schema)
    with tempfile.TemporaryDirectory(prefix="eos-files-") as directory:
        local = []
        for i, path in enumerate(paths):
            data = place.read(path)
            if data is None:
                raise FileNotFoundError(f"{place.location(path)}: listed by a manifest, absent")
            local.append(os.path.join(directory, f"{i:08d}-{os.path.basename(path)}"))
            with open(local[-1], "wb") as out:
                out.write(data)
        return _read(local, form, schema)


def _read(files: list[str], form: str, schema: pa.Schema) -> list[dict[str, Any]]:
    import duckdb

    with duckdb.connect() as db:
        db.execute("SET TimeZone = 'UTC'")
        if form == "jsonl":
            from eos.sinks.records import decode_value

            texts = db.execute("SELECT json::VARCHAR FROM read_json_objects(?, "
                               "format = 'newline_delimited')", [files]).fetchall()
            return [decode_value(text.encode(), schema) for (text,) in texts]
        table = db.execute("SELECT * FROM read_parquet(?, hive_partitioning = false, "
                           "union_by_name = true)", [files]).fetch_arrow_table()
    return _typed(table, schema).to_pylist()


def _typed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """DuckDB's Arrow types as the output's (its timestamps are microseconds, its strings may
    be views): the same values, the output's types; a column an older epoch lacked is null."""
    import pyarrow as pa

    columns = [table.column(f.name).cast(f.type) if f.name in table.schema.names
               else pa.nulls(table.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)
