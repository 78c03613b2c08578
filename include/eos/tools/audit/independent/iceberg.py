"""The audit's second reader of an ``iceberg`` sink: DuckDB's iceberg extension.

The sink writes and reads itself back with pyiceberg (its manifest-list and manifest reader,
pyarrow's Parquet reader and its own projection of Iceberg's types onto Arrow). DuckDB's
iceberg extension shares none of that: its own Avro reader for the manifests (the ``avro``
extension), its own Parquet reader and type mapping. It reads the **same metadata file** the
sink's reading was of, so both readings are of one snapshot, and an error in either library
(a data file left out, a delete applied wrongly, a value decoded wrongly) shows as a
disagreement.

The extensions are loaded from their PyPI wheels (``duckdb-extension-iceberg`` and
``duckdb-extension-avro``, pinned to our DuckDB; ``duckdb-extension-httpfs`` for ``s3://``),
never installed or fetched: autoloading is off. On S3 the credentials are the ``AWS_*``
variables the tables use, held in a DuckDB secret of the one in-memory connection.
"""

from __future__ import annotations

from typing import Any

from eos.tools.audit.independent.compare import canonical_row
from eos.tools.audit.independent.duckdb_extensions import duckdb_for, extension, quoted

__all__ = ["ICEBERG_READER", "read_iceberg"]

ICEBERG_READER = "DuckDB iceberg"


def read_iceberg(metadata_location: str, snapshot_id: int, since: int = 0
                 ) -> list[dict[str, Any]]:
    """Every row (of epoch ``since`` or later) of snapshot ``snapshot_id`` of the table whose
    metadata file is ``metadata_location`` (a local path, ``file://`` or ``s3://`` URI), in
    canonical form."""
    location = metadata_location.removeprefix("file://")
    with duckdb_for(location) as con:
        con.execute(f"LOAD {quoted(str(extension('duckdb_extension_avro', 'avro')))}")
        con.execute(f"LOAD {quoted(str(extension('duckdb_extension_iceberg', 'iceberg')))}")
        table = con.execute(f"SELECT * FROM iceberg_scan({quoted(location)}, "
                            f"snapshot_from_id={int(snapshot_id)}) WHERE epoch >= {int(since)}"
                            ).fetch_arrow_table()
    return [canonical_row(row) for row in table.to_pylist()]
