"""The statements of the ``postgres`` sink's writer (psycopg 3), composed with ``psycopg.sql``
so that every name is quoted as an identifier and every value travels as a parameter."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from eos.core.outcomes import NO_EPOCH
from eos.sinks.postgres_types import Column

Name = tuple[str, str]  # (schema, table)
STAGE = "eos_upsert_stage"


def _ident(name: Name) -> Any:
    from psycopg import sql

    return sql.Identifier(*name)


def _regclass(name: Name) -> str:
    """The quoted name ``to_regclass`` resolves (None when the table does not exist)."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in name)


def create(conn: Any, table: Name, columns: list[tuple[str, str]], keys: tuple[str, ...],
           marker: Name) -> None:
    """The schemas, the table and the marker table, each only if missing, and the output's
    columns the table lacks (nullable: the rows already there have none)."""
    from psycopg import sql

    for schema in dict.fromkeys((table[0], marker[0])):
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    parts = [sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(kind))  # kind: ours, fixed
             for name, kind in columns]
    if keys:
        parts.append(sql.SQL("PRIMARY KEY ({})").format(
            sql.SQL(", ").join(map(sql.Identifier, keys))))
    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
        _ident(table), sql.SQL(", ").join(parts)))
    for name, kind in columns:  # an output that gained a column since the table was made
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
            _ident(table), sql.Identifier(name), sql.SQL(kind)))
    conn.execute(sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (pipeline text NOT NULL, sink text NOT NULL, "
        "epoch bigint NOT NULL, plan_hash text NOT NULL, "
        "committed_at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (pipeline, sink, epoch))").format(_ident(marker)))


def last_epoch(conn: Any, marker: Name, pipeline: str, sink: str) -> int:
    """``max(epoch)`` of the pipeline's and sink's markers; -1 with none (or no marker table)."""
    from psycopg import sql

    if conn.execute("SELECT to_regclass(%s)", (_regclass(marker),)).fetchone()[0] is None:
        return NO_EPOCH
    row = conn.execute(sql.SQL("SELECT coalesce(max(epoch), %s) FROM {} WHERE pipeline = %s "
                               "AND sink = %s").format(_ident(marker)), (NO_EPOCH, pipeline, sink))
    return int(row.fetchone()[0])


def insert_marker(conn: Any, marker: Name, pipeline: str, sink: str, epoch: int,
                  plan_hash: str) -> None:
    from psycopg import sql

    conn.execute(sql.SQL("INSERT INTO {} (pipeline, sink, epoch, plan_hash) "
                         "VALUES (%s, %s, %s, %s)").format(_ident(marker)),
                 (pipeline, sink, epoch, plan_hash))


def columns(conn: Any, table: Name) -> dict[str, Column]:
    """The table's columns with their types as ``format_type`` spells them; {} if missing."""
    found = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull, a.atthasdef "
        "FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 "
        "AND NOT a.attisdropped ORDER BY a.attnum", (_regclass(table),)).fetchall()
    return {name: Column(name, kind, nullable, default)
            for name, kind, nullable, default in found}


def unique_keys(conn: Any, table: Name) -> list[tuple[str, ...]]:
    """The column sets of the table's unique, non-partial, non-expression indexes (what
    ``ON CONFLICT (cols)`` can name)."""
    found = conn.execute(
        "SELECT array_agg(a.attname::text) FROM pg_index i JOIN pg_attribute a "
        "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL "
        "AND i.indexprs IS NULL GROUP BY i.indexrelid", (_regclass(table),)).fetchall()
    return [tuple(row[0]) for row in found]


def write_rows(conn: Any, table: Name, rows: pa.Table, keys: tuple[str, ...]) -> None:
    """COPY the rows into the table (appended), or into a temporary table and from there
    upserted on ``keys``."""
    from psycopg import sql

    names = sql.SQL(", ").join(map(sql.Identifier, rows.column_names))
    if not keys:
        _copy(conn, _ident(table), names, rows)
        return
    stage = sql.Identifier(STAGE)
    conn.execute(sql.SQL("CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT {} FROM {} "
                         "WITH NO DATA").format(stage, names, _ident(table)))
    _copy(conn, stage, names, rows)
    updated = [c for c in rows.column_names if c not in keys]
    action = sql.SQL("DO NOTHING") if not updated else sql.SQL("DO UPDATE SET {}").format(
        sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c))
                           for c in updated))
    conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) {}").format(
        _ident(table), names, names, stage,
        sql.SQL(", ").join(map(sql.Identifier, keys)), action))


def _copy(conn: Any, target: Any, names: Any, rows: pa.Table) -> None:
    from psycopg import sql

    with conn.cursor() as cursor, cursor.copy(
            sql.SQL("COPY {} ({}) FROM STDIN").format(target, names)) as copy:
        for batch in rows.to_batches(max_chunksize=10_000):
            columns = [column.to_pylist() for column in batch.columns]
            for row in zip(*columns, strict=True):
                copy.write_row(row)
