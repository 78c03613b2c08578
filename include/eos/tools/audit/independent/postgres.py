"""The audit's second reader of a ``postgres`` sink: DuckDB's postgres extension.

The sink writes with psycopg 3 and reads itself back with psycopg2; both adapt PostgreSQL's
values in Python/C code of the psycopg family. DuckDB's postgres extension shares none of it:
it reads the table with PostgreSQL's binary COPY and decodes each type itself (its own libpq
build, its own numeric, timestamp and float decoders), so an adaptation bug in either psycopg
shows as a disagreement instead of agreeing with itself.

The extension is loaded from the ``duckdb-extension-postgres`` wheel (pinned to our DuckDB in
requirements.in), never installed or fetched: autoloading is off. The wheel names the file
``postgres.duckdb_extension`` while its entry point is ``postgres_scanner``'s, and DuckDB takes
the entry point from the file name, so the file is loaded through a link of that name in a
private temporary directory.

Credentials: the sink's own DSN (its Airflow ``postgres`` connection or its ``dsn_env``). The
password goes into a DuckDB secret (``CREATE SECRET (TYPE postgres, PASSWORD ...)``) held by
one in-memory connection, the rest of the DSN into ``ATTACH ... (READ_ONLY)``. DuckDB's
connection errors print the merged connection string, password included, so every DuckDB
error is redacted before it leaves this module.

One DuckDB transaction reads the markers and the table, which the extension runs in one
PostgreSQL ``REPEATABLE READ`` transaction: the rows are those of the markers read with them.
"""

from __future__ import annotations

import math
import os
import re
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

from eos.core.errors import SinkUnavailable
from eos.sinks.postgres.connection import redact
from eos.tools.audit.independent.compare import canonical_row
from eos.tools.audit.independent.duckdb_extensions import duckdb_for, extension, quoted

__all__ = ["POSTGRES_READER", "PostgresReading", "read_postgres"]

POSTGRES_READER = "DuckDB postgres"
ENTRY_POINT = "postgres_scanner"
Name = tuple[str, str]
_PASSWORD_SHOWN = re.compile(r"password\s*=\s*(?:'(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


class PostgresReading(NamedTuple):
    """The table's rows (canonical form) and the epochs of the pipeline's and sink's markers,
    oldest first, read in one snapshot."""

    rows: list[dict[str, Any]]
    epochs: list[int]


def _split(dsn: str) -> tuple[str, str | None]:
    """The DSN without its password (for ATTACH, libpq key=value form), and the password."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    parts = conninfo_to_dict(dsn)
    password = parts.pop("password", None)
    return make_conninfo(**parts), None if password is None else str(password)


def _hidden(text: str, dsn: str) -> str:
    """``text`` without the DSN, its password, or any ``password=...`` DuckDB printed."""
    return _PASSWORD_SHOWN.sub("password=***", redact(text, dsn))


def _ident(name: Name) -> str:
    return ".".join('"' + part.replace('"', '""') + '"' for part in name)


@contextmanager
def _attached(dsn: str) -> Iterator[Any]:
    """A DuckDB connection with the database attached read-only as ``pg``; the extension
    loaded from the wheel only (nothing downloaded, nothing under ``~/.duckdb``)."""
    with tempfile.TemporaryDirectory(prefix="eos-duckdb-") as private, \
            duckdb_for(dsn) as con:
        link = Path(private) / f"{ENTRY_POINT}.duckdb_extension"
        os.symlink(extension("duckdb_extension_postgres", "postgres"), link)
        con.execute(f"LOAD {quoted(str(link))}")
        conninfo, password = _split(dsn)
        secret = ""
        if password is not None:
            con.execute(f"CREATE TEMPORARY SECRET eos_pg (TYPE postgres, "
                        f"PASSWORD {quoted(password)})")
            secret = ", SECRET eos_pg"
        con.execute(f"ATTACH {quoted(conninfo)} AS pg (TYPE postgres, READ_ONLY{secret})")
        yield con


def _columns(con: Any, table: Name) -> list[tuple[str, str]]:
    """(name, ``format_type``) of the table's columns, in order, as PostgreSQL states them."""
    statement = ("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE "
                 f"attrelid = {quoted(_ident(table))}::regclass AND attnum > 0 AND NOT "
                 "attisdropped ORDER BY attnum")
    return [(str(n), str(t)) for n, t in con.execute(
        f"SELECT * FROM postgres_query('pg', {quoted(statement)})").fetchall()]


def _select(table: Name, columns: list[tuple[str, str]]) -> str:
    """The table's SELECT: an unconstrained ``numeric`` as text (DuckDB would read it as a
    double, rounding it, and a NaN as 0), parsed to a Decimal here."""
    names = [('"' + n.replace('"', '""') + '"', t) for n, t in columns]
    return "SELECT " + ", ".join(f"{n}::text AS {n}" if t == "numeric" else n
                                 for n, t in names) + f" FROM {_ident(table)}"


def _float32(value: float) -> float:
    """A ``real`` as PostgreSQL prints it (shortest digits that round-trip through float32),
    which is what a text-protocol driver reads: DuckDB hands the binary float32 widened."""
    if not math.isfinite(value):
        return value
    for digits in range(1, 10):
        shown = float(f"{value:.{digits}g}")
        if struct.unpack("f", struct.pack("f", shown))[0] == value:
            return shown
    return value


def _rows(con: Any, table: Name, since: int = 0) -> list[dict[str, Any]]:
    import pyarrow as pa

    columns = _columns(con, table)
    query = _select(table, columns) + (f" WHERE epoch >= {int(since)}" if since else "")
    result = con.execute(f"SELECT * FROM postgres_query('pg', {quoted(query)})"
                         ).fetch_arrow_table()
    text_numeric = {n for n, t in columns if t == "numeric"}
    real = {f.name for f in result.schema if pa.types.is_float32(f.type)}
    rows = result.to_pylist()
    for row in rows:
        for name in text_numeric:
            row[name] = None if row[name] is None else Decimal(row[name])
        for name in real:
            row[name] = None if row[name] is None else _float32(row[name])
    return [canonical_row(row) for row in rows]


def read_postgres(dsn: str, table: Name, marker: Name, pipeline: str, sink: str,
                  since: int = 0) -> PostgresReading:
    """Every row of ``table`` (of epoch ``since`` or later) and the epochs of (``pipeline``,
    ``sink``)'s markers in ``marker``, read by DuckDB in one snapshot; ``SinkUnavailable``
    (password removed) when DuckDB cannot."""
    import duckdb

    try:
        with _attached(dsn) as con:
            con.execute("BEGIN TRANSACTION")
            epochs = [int(e) for (e,) in con.execute(
                f"SELECT epoch FROM pg.{_ident(marker)} WHERE pipeline = ? AND sink = ? "
                "ORDER BY epoch", [pipeline, sink]).fetchall()]
            rows = _rows(con, table, since)
            con.execute("COMMIT")
    except (duckdb.Error, OSError) as error:
        raise SinkUnavailable(f"sink {sink}: {POSTGRES_READER} could not read "
                              f"{_ident(table)}: {_hidden(str(error), dsn)}") from None
    return PostgresReading(rows, epochs)
