"""The audit's second reader of Delta (``eos.tools.audit.independent.compare``): DuckDB's delta
extension
(delta-kernel-rs underneath, its own log replay and Parquet reader), at the table version
delta-rs read. PyPI ships the extension as ``duckdb-extension-delta`` (one per DuckDB release,
pinned to ours in requirements.in); it is loaded from that wheel's file (``independent_duckdb``):
the audit never depends on reaching DuckDB's extension repository."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eos.tools.audit.independent.compare import canonical_row
from eos.tools.audit.independent.duckdb_extensions import duckdb_for, quoted

DELTA_READER = "DuckDB delta"


def delta_extension() -> Path:
    """The delta extension file ``duckdb-extension-delta`` installed for this DuckDB (the wheel
    holds one build, under ``extensions/v<duckdb version>/``)."""
    import duckdb
    import duckdb_extension_delta

    root = Path(duckdb_extension_delta.__file__).parent / "extensions"
    path = root / f"v{duckdb.__version__}" / "delta.duckdb_extension"
    if not path.is_file():
        builds = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
        raise FileNotFoundError(f"no DuckDB delta extension for duckdb {duckdb.__version__} "
                                f"(duckdb-extension-delta holds {builds}): pin both to one "
                                "version in requirements.in")
    return path


def readable_location(uri: str) -> str | None:
    """Where DuckDB reads a table at ``uri``: a local directory (a path or ``file://``), or an
    ``s3://`` URI (through its httpfs extension, with the ``AWS_*`` credentials of this
    process); None for stores the audit's DuckDB is not given credentials for (gs://,
    abfs[s]://): those are read by one reader only, and the report says so."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if "://" not in uri or uri.startswith("s3://"):
        return uri
    return None


def read_delta(path: str, version: int, since: int = 0) -> list[dict[str, Any]]:
    """Every row (of epoch ``since`` or later) of the Delta table at ``path`` as of
    ``version``, read by DuckDB's delta extension, in canonical form. Extensions are never
    fetched or auto-loaded: only the file from the wheel is loaded."""
    with duckdb_for(path) as con:
        con.execute(f"LOAD {quoted(str(delta_extension()))}")
        con.execute(f"ATTACH {quoted(path)} AS sink (TYPE delta, VERSION {int(version)})")
        table = con.execute(f"SELECT * FROM sink WHERE epoch >= {int(since)}"
                            ).fetch_arrow_table()
    return [canonical_row(row) for row in table.to_pylist()]
