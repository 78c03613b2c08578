"""The audit's DuckDB (``eos.tools.audit.independent.compare``): a connection that never fetches or
auto-loads an extension, extensions loaded from their PyPI wheels' files (``LOAD '<path>'``: a
signed DuckDB build, no unsigned extensions allowed, nothing downloaded, nothing installed under
``~/.duckdb``), and the store's S3 credentials when a table lives there. Its readers:
``independent_delta``, ``independent_postgres``, ``independent_iceberg``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def extension(package: str, name: str) -> Path:
    """A DuckDB extension file shipped in a PyPI wheel (``duckdb-extension-<name>``)."""
    import importlib

    import duckdb

    root = Path(importlib.import_module(package).__file__ or "").parent / "extensions"
    path = root / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.is_file():
        raise FileNotFoundError(f"no DuckDB {name} extension for duckdb {duckdb.__version__} "
                                f"in {package}: pin both to one version in requirements.in")
    return path


def _s3_secret(con: Any) -> None:
    """A DuckDB secret for S3 from the standard ``AWS_*`` variables (what delta-rs and pyarrow
    read): never printed, held by this connection only."""
    import os
    from urllib.parse import urlsplit

    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    parts = [f"KEY_ID {quoted(os.environ.get('AWS_ACCESS_KEY_ID', ''))}",
             f"SECRET {quoted(os.environ.get('AWS_SECRET_ACCESS_KEY', ''))}",
             f"REGION {quoted(os.environ.get('AWS_REGION', 'us-east-1'))}"]
    if os.environ.get("AWS_SESSION_TOKEN"):
        parts.append(f"SESSION_TOKEN {quoted(os.environ['AWS_SESSION_TOKEN'])}")
    if endpoint:
        found = urlsplit(endpoint)
        parts += [f"ENDPOINT {quoted(found.netloc)}", "URL_STYLE 'path'",
                  f"USE_SSL {'false' if found.scheme == 'http' else 'true'}"]
    con.execute(f"CREATE SECRET eos_s3 (TYPE s3, {', '.join(parts)})")


@contextmanager
def duckdb_for(location: str) -> Iterator[Any]:
    """A DuckDB connection that never fetches or auto-loads an extension (only files from the
    wheels are loaded), with httpfs and the store's credentials when ``location`` is on S3."""
    import duckdb

    config = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    with duckdb.connect(config=config) as con:
        if location.startswith("s3://"):
            con.execute(f"LOAD {quoted(str(extension('duckdb_extension_httpfs', 'httpfs')))}")
            _s3_secret(con)
        yield con


def quoted(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"
