"""The statements of the ``postgres`` sink's writer (psycopg 3), composed with ``psycopg.sql``
so that every name is quoted as an identifier and every value travels as a parameter."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from eos.core.outcomes import NO_EPOCH
from eos.sinks.postgres.types import Column

Name = tuple[str, str]  # (schema, table)
STAGE = "eos_upsert_stage"


def _ident(name: Name) -> Any:
    from psycopg import sql

    return sql.Identifier(*name)


def _regclass(name: Name) -> str:
    """The quoted name ``to_regclass`` resolves (None when the table does not exist)."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in name)


# How long a statement of ``ensure`` may wait for a lock (PostgreSQL's ``lock_timeout``), unless
# the session already has one (set for the role or the database, or in the DSN's options).
DDL_LOCK_TIMEOUT = "5s"


class LockTimeout(Exception):
    """A statement of ``ensure`` waited the lock timeout for a lock another session holds."""

    def __init__(self, doing: str, timeout: str) -> None:
        super().__init__(f"{doing} waited {timeout} (lock_timeout) for a lock another session "
                         "holds")
        self.doing, self.timeout = doing, timeout


def _schema_exists(conn: Any, schema: str) -> bool:
    return bool(conn.execute("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %s)",
                             (schema,)).fetchone()[0])


def _exists(conn: Any, table: Name) -> bool:
    return conn.execute("SELECT to_regclass(%s)", (_regclass(table),)).fetchone()[0] is not None


def _limit_lock_waits(conn: Any) -> str:
    """The transaction's ``lock_timeout``: the session's when it has one, else ours (SET LOCAL:
    it ends with the transaction)."""
    current = str(conn.execute("SELECT current_setting('lock_timeout')").fetchone()[0])
    if current not in ("0", "0ms", "0s"):
        return current
    conn.execute("SELECT set_config('lock_timeout', %s, true)", (DDL_LOCK_TIMEOUT,))
    return DDL_LOCK_TIMEOUT


def _ddl(conn: Any, statement: Any, doing: str, timeout: str) -> None:
    import psycopg

    try:
        conn.execute(statement)
    except psycopg.errors.LockNotAvailable:
        raise LockTimeout(doing, timeout) from None


def ensure(conn: Any, table: Name, columns: list[tuple[str, str]], keys: tuple[str, ...],
           marker: Name) -> list[str]:
    """Make the schemas, the table and the marker table exist, and the table have the output's
    columns (added nullable: the rows already there have none), issuing DDL only for what the
    catalog says is missing. Returns what it did (empty: nothing was missing).

    Reading the catalog first is what lets a role with only ``INSERT``, ``UPDATE`` and
    ``SELECT`` on tables made beforehand begin epochs (``CREATE ... IF NOT EXISTS`` checks the
    privilege to create before it looks, and ``ALTER TABLE`` needs ownership), and keeps a
    steady ``begin`` from taking the ACCESS EXCLUSIVE lock ``ALTER TABLE ... ADD COLUMN IF NOT
    EXISTS`` takes even when the column is there. Any DDL runs under a ``lock_timeout``: a lock
    held elsewhere (a long reader) raises ``LockTimeout`` instead of waiting, and every later
    reader of the table behind it, indefinitely."""
    from psycopg import sql

    schemas = [name for name in dict.fromkeys((table[0], marker[0]))
               if not _schema_exists(conn, name)]
    table_missing = not _exists(conn, table)
    have = {} if table_missing else _column_names(conn, table)
    added = [(name, kind) for name, kind in columns if name not in have]
    marker_missing = not _exists(conn, marker)
    if not (schemas or table_missing or added or marker_missing):
        return []
    timeout, done = _limit_lock_waits(conn), []
    for schema in schemas:
        _ddl(conn, sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)),
             f"creating schema {schema}", timeout)
        done.append(f"schema {schema}")
    if table_missing:
        parts = [sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(kind))  # kind: ours
                 for name, kind in columns]
        if keys:
            parts.append(sql.SQL("PRIMARY KEY ({})").format(
                sql.SQL(", ").join(map(sql.Identifier, keys))))
        _ddl(conn, sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
            _ident(table), sql.SQL(", ").join(parts)), f"creating table {_dotted(table)}",
             timeout)
        done.append(f"table {_dotted(table)}")
        # made meanwhile by another process, perhaps from an older output: its columns count
        have = _column_names(conn, table)
        added = [(name, kind) for name, kind in columns if name not in have]
    for name, kind in added:  # an output that gained a column since the table was made
        _ddl(conn, sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
            _ident(table), sql.Identifier(name), sql.SQL(kind)),
             f"adding column {name!r} to {_dotted(table)}", timeout)
        done.append(f"column {name}")
    if marker_missing:
        _ddl(conn, sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (pipeline text NOT NULL, sink text NOT NULL, "
            "epoch bigint NOT NULL, plan_hash text NOT NULL, "
            "committed_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (pipeline, sink, epoch))").format(_ident(marker)),
             f"creating marker table {_dotted(marker)}", timeout)
        done.append(f"marker table {_dotted(marker)}")
    return done


def _dotted(name: Name) -> str:
    return ".".join(name)


def _column_names(conn: Any, table: Name) -> set[str]:
    return set(columns(conn, table))


def last_epoch(conn: Any, marker: Name, pipeline: str, sink: str) -> int:
    """``max(epoch)`` of the pipeline's and sink's markers; -1 with none (or no marker table)."""
    from psycopg import sql

    if conn.execute("SELECT to_regclass(%s)", (_regclass(marker),)).fetchone()[0] is None:
        return NO_EPOCH
    row = conn.execute(sql.SQL("SELECT coalesce(max(epoch), %s) FROM {} WHERE pipeline = %s "
                               "AND sink = %s").format(_ident(marker)), (NO_EPOCH, pipeline, sink))
    return int(row.fetchone()[0])


def other_writers(conn: Any, marker: Name, pipeline: str, sink: str) -> list[str]:
    """The pipelines other than ``pipeline`` with markers of ``sink`` (the same table): the
    table's other writers, as the markers record them ([] with no marker table)."""
    from psycopg import sql

    if conn.execute("SELECT to_regclass(%s)", (_regclass(marker),)).fetchone()[0] is None:
        return []
    found = conn.execute(sql.SQL("SELECT DISTINCT pipeline FROM {} WHERE sink = %s AND "
                                 "pipeline <> %s ORDER BY pipeline").format(_ident(marker)),
                         (sink, pipeline))
    return [str(row[0]) for row in found.fetchall()]


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


def marker_epochs(conn: Any, marker: Name, pipeline: str, sink: str) -> list[int]:
    """The epochs of the pipeline's and sink's markers, oldest first (none: no marker table)."""
    from psycopg import sql

    if not _exists(conn, marker):
        return []
    found = conn.execute(sql.SQL("SELECT epoch FROM {} WHERE pipeline = %s AND sink = %s "
                                 "ORDER BY epoch").format(_ident(marker)), (pipeline, sink))
    return [int(row[0]) for row in found.fetchall()]


def rows_after(conn: Any, table: Name, epoch: int) -> dict[int, int]:
    """How many rows of the table each epoch after ``epoch`` wrote (its ``epoch`` column);
    {} when the table or the column does not exist."""
    from psycopg import sql

    if "epoch" not in columns(conn, table):
        return {}
    found = conn.execute(sql.SQL("SELECT epoch, count(*) FROM {} WHERE epoch > %s "
                                 "GROUP BY epoch ORDER BY epoch").format(_ident(table)), (epoch,))
    return {int(e): int(n) for e, n in found.fetchall()}


def delete_after(conn: Any, table: Name, marker: Name, pipeline: str, sink: str,
                 epoch: int) -> tuple[int, int]:
    """Delete, in the caller's transaction, the table's rows of every epoch after ``epoch``
    and the pipeline's and sink's markers of those epochs; (rows, markers) deleted."""
    from psycopg import sql

    rows = 0
    if "epoch" in columns(conn, table):
        rows = conn.execute(sql.SQL("DELETE FROM {} WHERE epoch > %s").format(_ident(table)),
                            (epoch,)).rowcount
    marked = 0
    if _exists(conn, marker):
        marked = conn.execute(sql.SQL("DELETE FROM {} WHERE pipeline = %s AND sink = %s AND "
                                      "epoch > %s").format(_ident(marker)),
                              (pipeline, sink, epoch)).rowcount
    return rows, marked
