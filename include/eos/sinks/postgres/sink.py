"""The ``postgres`` sink: one output of a pipeline as rows of a PostgreSQL table.

Exactly once, the way Flink's JDBC exactly-once sink is, without XA: the epoch's rows and a
marker row ``(pipeline, sink, epoch, plan_hash, committed_at)`` are written in **one** database
transaction. ``committed_epoch`` is ``max(epoch)`` of this pipeline's and sink's markers, so the
rows of an epoch are visible exactly when its marker is. The marker is inserted first: of two
attempts at once, the second's INSERT waits on the first's key ``(pipeline, sink, epoch)`` and
fails when the first commits (``ALREADY_COMMITTED``, ``raced=True``) or goes ahead when it rolls
back. A crash anywhere in the transaction leaves nothing, so ``abort`` has nothing to clean.

Rows are written with COPY (psycopg's ``cursor.copy``) inside the transaction: one round trip
streams the epoch, many times faster than ``executemany`` for 10k+ rows.

Without ``upsert_keys`` every epoch's rows are appended. With them, the table holds one row per
key: an epoch's rows are COPYed into a temporary table, then ``INSERT ... ON CONFLICT (keys) DO
UPDATE`` replaces the row of a key a later epoch updates (a window's newer aggregate, a user's
newer record). One statement cannot update a row twice, so an epoch holding a key several
times is reduced first to the key's last row (``eos.core.upserts``: within a partition the
later offset, across partitions the later Kafka timestamp), which the protocol does for every
sink that declares ``kept_by`` before ``check`` runs, and ``check`` and ``commit`` do again
(changing nothing then) for a caller that did not. Exactly once then means: each epoch's upsert
is applied once, in epoch order, so the table is the result of applying epochs 0..N once each;
a rerun of epoch N finds its marker and changes nothing, and an epoch never re-applies over a
later one. The audit expects, per key, the last row of the last epoch that wrote it
(``kept_by``).

``check`` refuses, before the seal, what the commit could only fail on: an existing table whose
columns conflict with the output, and values PostgreSQL cannot hold (``eos.sinks.postgres.types``).
A rewind to epoch N (``SupportsRewind``) deletes, in one transaction, the table's rows whose
``epoch`` column is after N and this pipeline's and sink's markers after N: the table is the
sink's alone and every output row carries the epoch that committed it, so what remains is
exactly epochs ..N, and a rerun deletes nothing more. It needs ``DELETE`` on the table and the
marker table besides what the epochs need. An upserted table (``upsert_keys``) keeps one row
per key: a later epoch's row replaced the earlier one, whose values are gone, so a rewind to N
is refused (``RewindRefused``, nothing changed) while a row written after N remains; to -1 it
empties the table (a full replay rebuilds it), and to N it goes when the epochs after N left no
row (their markers go). A rewind changes no column: a full replay under a config whose output
types changed meets the same table, which ``check`` refuses until it is altered.

``eos fill`` writes the epochs from before the sink joined the same way, under marker rows of
its own (``sink`` is the sink's name with ``#fill``: ``eos.sinks.postgres.fill``), and refuses
an upserted table, where an earlier epoch's row would replace a later one's.

The audit reads the table back with psycopg2, a different driver than the writer (its own C
type casters over libpq, where psycopg 3 has its own Python/Cython adaptation layer), which the
Airflow Postgres provider already needs; asyncpg would need an event loop per read. The audit
reads it a second time with DuckDB's postgres extension (``eos.tools.audit.independent.postgres``).

Credentials: the Airflow ``postgres`` connection named ``connection`` (handed over by the
airflow layer), else the DSN in the environment variable ``dsn_env`` (``postgres_connection``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from eos.core.errors import (
    ProtocolViolation,
    RewindRefused,
    SinkCannotTake,
    SinkRejected,
    SinkUnavailable,
    TableOwned,
)
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.sink import (
    SinkCommit,
    SupportsAssets,
    SupportsFill,
    SupportsReadBack,
    SupportsRewind,
    validated_options,
)
from eos.sinks.postgres.connection import dsn_for, redact

if TYPE_CHECKING:  # pyarrow and the SQL modules load on first use: parsing a DAG file needs neither
    import pyarrow as pa

__all__ = ["PostgresOptions", "PostgresSink"]

_NAME = r"[A-Za-z_][A-Za-z0-9_$]{0,62}"
QUALIFIED = re.compile(rf"^{_NAME}\.{_NAME}$")
MARKER = re.compile(rf"^(?:{_NAME}\.)?{_NAME}$")
COLUMN = re.compile(r"^[^\x00]{1,63}$")
CONNECT_TIMEOUT_S = 10


def session_options(dsn: str) -> str:
    """The session's ``options``: the DSN's own (``-c lock_timeout=30s``), then UTC as its time
    zone. A keyword ``options`` replaces the DSN's, so they are joined here."""
    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(dsn).get("options")
    return f"{given} -c TimeZone=UTC" if given else "-c TimeZone=UTC"


class PostgresOptions(BaseModel):
    """``{postgres: {table: schema.name, connection?, dsn_env?, upsert_keys?, marker_table?}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    table: str = Field(description="schema.name of the table this sink writes (its alone).")
    connection: str = Field("postgres_default", min_length=1,
                            description="The Airflow connection (type postgres) to write with.")
    dsn_env: str | None = Field(None, min_length=1, description=(
        "An environment variable holding a libpq DSN, used where no Airflow connection was "
        "supplied (the command line)."))
    upsert_keys: tuple[str, ...] = Field((), description=(
        "Columns identifying a row: an epoch's rows replace the rows of their keys."))
    marker_table: str = Field("eos_markers", description=(
        "The table of markers, in the table's schema unless qualified."))

    @field_validator("table")
    @classmethod
    def _qualified(cls, value: str) -> str:
        if not QUALIFIED.match(value):
            raise ValueError(f"a table is named schema.name (letters, digits, _), got {value!r}")
        return value

    @field_validator("marker_table")
    @classmethod
    def _marker(cls, value: str) -> str:
        if not MARKER.match(value):
            raise ValueError(f"a marker table is named [schema.]name, got {value!r}")
        return value

    @field_validator("upsert_keys")
    @classmethod
    def _keys(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value) or not all(COLUMN.match(k) for k in value):
            raise ValueError(f"upsert keys are distinct column names, got {list(value)}")
        return value

    def marker(self) -> tuple[str, str]:
        schema, _, name = self.marker_table.rpartition(".")
        return (schema or self.table.split(".")[0], name)


class PostgresSink(SupportsRewind, SupportsReadBack, SupportsFill, SupportsAssets):
    """One output of a pipeline as rows of a PostgreSQL table, with its markers beside it."""

    kind = "postgres"
    options: PostgresOptions

    # -- what runs when the pipeline loads: no I/O, no client library --------------------------

    @classmethod
    def parse_options(cls, options: Any) -> PostgresOptions:
        data = {"table": options} if isinstance(options, str) else options
        return validated_options(PostgresOptions, data, "a postgres sink")

    @classmethod
    def describe(cls, options: PostgresOptions) -> str:
        return options.table

    @classmethod
    def check_pipeline(cls, options: PostgresOptions, config: Any, output: str) -> None:
        """Refuse ``upsert_keys`` naming a column the output does not have, and rows holding
        Kafka headers (a list of key/value pairs): no column type here takes them. Either
        way every epoch would be refused before its seal. Refuse too windows' keys leaving
        out a group field (``eos.core.upserts.ambiguous_keys``)."""
        from eos.core.upserts import ambiguous_keys
        from eos.sinks.columns import refuse_unknown_columns, sink_path

        refuse_unknown_columns(config, output, cls.kind, options, "upsert_keys",
                               options.upsert_keys)
        if why := ambiguous_keys(config, output, options.upsert_keys):
            raise ValueError(f"{sink_path(config, output, cls.kind, options)}.upsert_keys: "
                             f"{why}")
        if output != "rows":
            return
        from eos.core.config.rows import carries_headers

        listed = [name for name, ftype in config.row_columns.items() if ftype.name == "headers"]
        listed += ["kafka_headers"] if carries_headers(config) else []
        if listed:
            raise ValueError(f"postgres sink {options.table}: columns {listed} hold Kafka "
                             "headers (a list of key/value pairs), which no PostgreSQL column "
                             "here takes; select single headers as header.<name> instead")

    @classmethod
    def resources(cls, options: PostgresOptions, pipeline_name: str) -> frozenset[str]:
        return frozenset({f"postgres-table:{options.connection}:{options.table}"})

    # -- connections ----------------------------------------------------------------------------

    @property
    def table(self) -> tuple[str, str]:
        schema, name = self.options.table.split(".")
        return schema, name

    def _dsn(self) -> str:
        """The DSN, once the drivers are known to be installed (one error naming the extra)."""
        from eos.core.extras import require

        require("postgres", f"sink {self.name}")
        return dsn_for(self.options.connection, self.options.dsn_env)

    @contextmanager
    def _connected(self) -> Iterator[Any]:
        """A psycopg connection in one transaction (committed on leaving, rolled back on an
        error); driver errors as eos errors with the password taken out."""
        import psycopg

        dsn = self._dsn()
        try:
            with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S,
                                 options=session_options(dsn)) as conn:
                yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError) as error:
            # unreachable, a deadlock, a restart, a connection lost mid-way: retry
            raise SinkUnavailable(f"sink {self.name}: {redact(str(error), dsn)}") from None
        except psycopg.Error as error:
            raise SinkRejected(f"sink {self.name}: {redact(str(error), dsn)}") from None

    # -- the two-phase commit -------------------------------------------------------------------

    def prepare(self, schema: pa.Schema) -> None:
        """Create the schema, the table (from the output's schema, the upsert keys its primary
        key) and the marker table, if missing; add the output's columns an existing table
        lacks. A column of another type is left as it is, for ``check`` to refuse.

        The catalog is read first and DDL issued only for what is missing
        (``postgres_sql.ensure``): tables made beforehand need no more than ``INSERT``,
        ``UPDATE`` and ``SELECT``, and a steady ``begin`` takes no lock a reader or a writer
        holds. DDL waits for a lock at most the ``lock_timeout`` (the session's, else
        ``postgres_sql.DDL_LOCK_TIMEOUT``), then fails transiently, having changed nothing."""
        import psycopg

        from eos.sinks.postgres import sql as q
        from eos.sinks.postgres.types import column_type

        columns = [(field.name, column_type(field)) for field in schema]
        for attempt in range(2):  # two processes creating one table: the loser sees it made
            try:
                with self._connected() as conn:
                    q.ensure(conn, self.table, columns, self.options.upsert_keys,
                             self.options.marker())
                    self._refuse_other_writers(conn)
                return
            except q.LockTimeout as error:
                raise SinkUnavailable(
                    f"sink {self.name}: {error.doing} waited {error.timeout} (lock_timeout) for "
                    "a lock another session holds (a long transaction reading or writing it); "
                    "nothing was changed, retrying is safe") from None
            except SinkRejected as error:
                if attempt or not isinstance(error.__context__, psycopg.errors.UniqueViolation):
                    raise

    def _refuse_other_writers(self, conn: Any) -> None:
        """A table is one pipeline's (``TableOwned``, before the seal): the markers of this
        sink from another pipeline mean its rows are in the table too, and the two would read,
        upsert over and rewind each other's rows."""
        from eos.sinks.postgres import sql as q
        others = q.other_writers(conn, self.options.marker(), self.config.name, self.name)
        if others:
            raise TableOwned(
                f"PostgreSQL table {self.options.table} belongs to pipeline(s) "
                f"{', '.join(others)} (their markers of sink {self.name} are in "
                f"{'.'.join(self.options.marker())}); pipeline '{self.config.name}' may not "
                "write it too: give this sink a table of its own")

    def committed_epoch(self, fence: bool = True) -> int:
        """Nothing to fence: an attempt still in flight can only commit the sealed epoch's
        rows (the same rows, by the precommit's determinism), and only if no other attempt
        did, as the marker's key admits one of them."""
        from eos.sinks.postgres import sql as q
        with self._connected() as conn:
            return q.last_epoch(conn, self.options.marker(), self.config.name, self.name)

    def _latest(self, rows: pa.Table) -> pa.Table:
        """Each upsert key's last row (``eos.core.upserts``); the rows as given without keys, or
        as the protocol hands them (reduced already: nothing changes)."""
        from eos.core.upserts import RECORD_TIMESTAMP, last_per_key

        rows = last_per_key(rows, self.options.upsert_keys, self.output)
        return (rows.drop_columns([RECORD_TIMESTAMP]) if RECORD_TIMESTAMP in rows.column_names
                else rows)

    def check(self, epoch: int, rows: pa.Table) -> None:
        """Refuse, before the seal, what the commit could only fail on (the module docstring),
        in the rows the commit writes: each upsert key's last."""
        from eos.sinks.postgres import sql as q
        from eos.sinks.postgres.types import refuse_conflicts, refuse_values

        rows = self._latest(rows)
        with self._connected() as conn:
            columns = q.columns(conn, self.table)
            if not columns:
                raise SinkCannotTake(f"table {self.options.table} does not exist (begin "
                                     "creates it)")
            keys = q.unique_keys(conn, self.table)
            self._refuse_other_writers(conn)
        refuse_conflicts(self.options.table, rows.schema, columns, self.options.upsert_keys,
                         keys)
        refuse_values(self.options.table, rows, columns, self.options.upsert_keys)

    def commit(self, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        import psycopg

        from eos.sinks.postgres import sql as q
        rows = self._latest(rows)
        with self._connected() as conn:
            held = q.last_epoch(conn, self.options.marker(), self.config.name, self.name)
            if held >= epoch:
                return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows.num_rows)
            if not self.follows(held, epoch):
                raise ProtocolViolation(f"sink {self.name} holds epoch {held}; it cannot "
                                        f"receive epoch {epoch}")
            try:
                q.insert_marker(conn, self.options.marker(), self.config.name, self.name, epoch,
                                plan_hash)
            except psycopg.errors.UniqueViolation:  # a concurrent attempt committed it
                conn.rollback()
                return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows.num_rows,
                                  raced=True)
            q.write_rows(conn, self.table, rows, self.options.upsert_keys)
        return SinkCommit(self.name, Outcome.COMMITTED, rows.num_rows)

    def abort(self, epoch: int) -> None:
        """Nothing to clean: a commit is one transaction, which PostgreSQL rolls back whole
        when its attempt fails or its connection is lost."""

    # -- rewind ---------------------------------------------------------------------------------

    def rewind_target(self, epoch: int) -> int | None:
        """Nothing to go back to (a table has no versions here): checks the sink holds
        ``epoch`` and, upserted, that no row of a later epoch would have to be taken back."""
        from eos.sinks.postgres import sql as q
        with self._connected() as conn:
            held = q.marker_epochs(conn, self.options.marker(), self.config.name, self.name)
            if epoch != NO_EPOCH and epoch not in held:
                raise RewindRefused(f"sink {self.name} has no marker of epoch {epoch}; rewind "
                                    "to -1 to fill it from the start")
            self._refuse_upserted(conn, epoch)
        return None

    def _refuse_upserted(self, conn: Any, epoch: int) -> None:
        """``RewindRefused`` for an upserted table holding rows of epochs after ``epoch``
        (they replaced rows whose earlier values are gone); -1 empties it, always fine."""
        from eos.sinks.postgres import sql as q
        if not self.options.upsert_keys or epoch == NO_EPOCH:
            return
        later = q.rows_after(conn, self.table, epoch)
        if later:
            first, rows = min(later), sum(later.values())
            raise RewindRefused(
                f"sink {self.name} upserts on {list(self.options.upsert_keys)}: the table "
                f"keeps one row per key, and epoch {first} replaced or added rows after epoch "
                f"{epoch} ({rows} row(s) of epochs {', '.join(map(str, later))} remain), whose "
                "earlier values it no longer has; rewind to -1 (the table emptied, a full "
                "replay rebuilds it) or to an epoch no later row was written after")

    def rewind(self, epoch: int, target: int | None, rewind_id: str,
               schema: pa.Schema) -> int | None:
        """Delete the rows and markers of the epochs after ``epoch`` in one transaction
        (module docstring), the fill's markers too (``eos.sinks.postgres.fill``); a rerun
        finds nothing more to delete. No version: None."""
        from eos.sinks.postgres import sql as q
        from eos.sinks.postgres.fill import drop_after

        with self._connected() as conn:
            self._refuse_upserted(conn, epoch)
            q.delete_after(conn, self.table, self.options.marker(), self.config.name,
                           self.name, epoch)
            drop_after(self, conn, epoch)
        return None

    # -- eos fill -------------------------------------------------------------------------------

    def filled(self) -> tuple[int, int] | None:
        from eos.sinks.postgres.fill import filled

        return filled(self)

    def fill(self, epoch: int, rows: pa.Table, first: int) -> SinkCommit:
        from eos.sinks.postgres.fill import fill

        return fill(self, epoch, rows, first)

    # -- the audit and assets -------------------------------------------------------------------

    def kept_by(self) -> tuple[str, ...]:
        """An upserted table keeps the latest row of each key: the protocol hands the sink
        each key's last row of an epoch (``eos.core.upserts``), and the audit expects, per
        key, that row of the last epoch that wrote it (its ``epoch`` column says which)."""
        return self.options.upsert_keys

    def read_back(self, since: int = 0) -> list[dict[str, Any]]:
        from eos.sinks.postgres.read import read_table

        return read_table(self._dsn(), self.table, self.name, since)

    def commits(self) -> list[int]:
        from eos.sinks.postgres.read import read_markers

        return read_markers(self._dsn(), self.options.marker(), self.config.name, self.name)

    def asset_unnamed(self) -> str:
        where = f" nor ${self.options.dsn_env}" if self.options.dsn_env else ""
        return (f"no DSN naming one host and database in this process (neither the Airflow "
                f"connection '{self.options.connection}' supplied{where})")

    def asset_uri(self) -> str | None:
        """``postgres://host:port/database/schema/table`` (Airflow's and OpenLineage's naming),
        from the DSN this process has; None where it has none (a DAG file being parsed)."""
        from psycopg.conninfo import conninfo_to_dict

        try:
            parts = conninfo_to_dict(self._dsn())
        except Exception:  # no DSN here, or one libpq cannot parse: no name
            return None
        host, database = parts.get("host"), parts.get("dbname")
        if not host or not database or "," in str(host):
            return None
        schema, name = self.table
        return f"postgres://{host}:{parts.get('port') or 5432}/{database}/{schema}/{name}"
