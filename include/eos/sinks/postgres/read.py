"""The ``postgres`` sink read back for the audit with psycopg2, not with psycopg 3 that wrote
it: a mistake in one driver's adaptation of a type (a decimal's scale, a timestamp's zone, a
non-finite double) shows as a disagreement instead of being read back the way it was written."""

from __future__ import annotations

from typing import Any

from eos.core.errors import SinkUnavailable
from eos.sinks.postgres.connection import redact

Name = tuple[str, str]


def _query(dsn: str, sink: str, statement: Any, args: tuple[Any, ...] = ()) -> tuple[
        list[str], list[tuple[Any, ...]]]:
    import psycopg2

    try:
        conn = psycopg2.connect(dsn, connect_timeout=10, options="-c TimeZone=UTC")
    except psycopg2.Error as error:
        raise SinkUnavailable(f"sink {sink}: {redact(str(error), dsn)}") from None
    try:
        with conn, conn.cursor() as cursor:
            cursor.execute("SET TRANSACTION READ ONLY")
            cursor.execute(statement, args)
            names = [d.name for d in cursor.description or []]
            return names, cursor.fetchall()
    except psycopg2.Error as error:
        raise SinkUnavailable(f"sink {sink}: {redact(str(error), dsn)}") from None
    finally:
        conn.close()


def _value(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


def read_table(dsn: str, table: Name, sink: str, since: int = 0) -> list[dict[str, Any]]:
    """Every row of the table (timestamps as UTC-aware datetimes, numerics as Decimals); of
    epoch ``since`` or later when ``since`` is set (the table then has an ``epoch`` column:
    ``eos.tools.audit.verify`` asks only then)."""
    from psycopg2 import sql

    statement = sql.SQL("SELECT * FROM {}").format(sql.Identifier(*table))
    if since:
        statement = sql.SQL("{} WHERE epoch >= {}").format(statement, sql.Literal(since))
    names, rows = _query(dsn, sink, statement)
    return [{n: _value(v) for n, v in zip(names, row, strict=True)} for row in rows]


def read_markers(dsn: str, marker: Name, pipeline: str, sink: str) -> list[int]:
    """The epochs of the pipeline's and sink's markers, oldest first."""
    from psycopg2 import sql

    _, rows = _query(dsn, sink, sql.SQL("SELECT epoch FROM {} WHERE pipeline = %s AND "
                                        "sink = %s ORDER BY epoch").format(
                                            sql.Identifier(*marker)), (pipeline, sink))
    return [int(row[0]) for row in rows]
