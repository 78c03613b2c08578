"""The ``postgres`` sink (eos.sinks.postgres.sink) against a real PostgreSQL server that the harness
starts on 127.0.0.1 with a generated password (``support.postgres``), run through the protocol
with the in-process source and stager (``support.memory``): no Spark, no broker, no Airflow.

What is checked on the server, with psycopg2 (not the writer's driver): an epoch's rows are
visible exactly when its marker is, a failure inside the commit leaves nothing, a commit after
a crash past the sink is not written twice, two attempts at once write once, upserts replace
a key's row in epoch order, and what the sink cannot take is refused before the seal.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg2
import pyarrow as pa
import pytest

from eos.core import sink as sink_module
from eos.core.config import PipelineConfig
from eos.core.errors import (
    ConfigError,
    InjectedFault,
    ProtocolViolation,
    RewindRefused,
    SinkCannotTake,
    SinkUnavailable,
    TableOwned,
)
from eos.core.outcomes import Outcome
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.rewind import rewind
from eos.core.sink import register, sinks_for
from eos.sinks.postgres import sql as postgres_sql
from eos.sinks.postgres.connection import forget_dsns
from eos.sinks.postgres.sink import PostgresSink

from support.memory import STORES, MemorySource, MemoryStager, at_once, run_epoch, store
from support.pipelines import IN_MEMORY, make_pipeline
from support.postgres import PostgresServer, missing_reason, postgres_server

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))]

DSN_ENV = "EOS_TEST_POSTGRES_DSN"
WINDOW_KEYS = ["key", "window_start"]


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with postgres_server() as running:
        yield running


def dsn_of(server: PostgresServer, **change: Any) -> str:
    fields = {"host": server.host, "port": server.port, "user": server.user,
              "password": server.password, "dbname": server.database, **change}
    return " ".join(f"{k}={v}" for k, v in fields.items())


@pytest.fixture(autouse=True)
def environment(server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The sink type known here (the entry point does it for an installed package), its DSN in
    the environment as on the command line; memory stores and supplied DSNs forgotten after."""
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    register(PostgresSink.kind, PostgresSink)
    monkeypatch.setenv(DSN_ENV, dsn_of(server))
    yield
    STORES.clear()
    forget_dsns()


@pytest.fixture
def schema() -> str:
    """A schema of this test's own: tests share one server."""
    return f"t_{secrets.token_hex(4)}"


@pytest.fixture
def source() -> MemorySource:
    return MemorySource()


def options(schema: str, **more: Any) -> dict[str, Any]:
    return {"table": f"{schema}.windows", "dsn_env": DSN_ENV, **more}


def pipeline(tmp_path: Path, schema: str, **more: Any) -> PipelineConfig:
    """The in-memory pipeline with its windows in PostgreSQL, then in a memory sink."""
    sinks = {"windows": [{"postgres": options(schema, **more)}, {"memory": "a"}],
             "late": [{"memory": "b"}], "quarantine": [{"memory": "c"}]}
    return make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)


def query(server: PostgresServer, statement: str) -> list[tuple[Any, ...]]:
    """Read or change the server with psycopg2 (a second driver), in its own transaction."""
    conn = psycopg2.connect(dsn_of(server), options="-c TimeZone=UTC")
    try:
        with conn, conn.cursor() as cursor:
            cursor.execute(statement)
            return cursor.fetchall() if cursor.description else []
    finally:
        conn.close()


def windows(server: PostgresServer, schema: str) -> list[tuple[Any, ...]]:
    return sorted(query(server, f"SELECT key, window_start, n, epoch FROM {schema}.windows"))


def markers(server: PostgresServer, schema: str) -> list[tuple[Any, ...]]:
    return query(server, f"SELECT epoch, plan_hash FROM {schema}.eos_markers ORDER BY epoch")


def memory_windows(config: PipelineConfig) -> list[tuple[Any, ...]]:
    return sorted((r["key"], r["window_start"], r["n"], r["epoch"])
                  for t in store(config, "memory:a").rows.values() for r in t.to_pylist())


def test_epochs_land_once_each_with_their_markers_and_read_back_whole(
        tmp_path: Path, server: PostgresServer, schema: str, source: MemorySource) -> None:
    config = pipeline(tmp_path, schema)
    for _ in range(3):
        run_epoch(config, source)
        source.produce(0, 10)
    assert checkpointed_epoch(config) == 2
    assert windows(server, schema) == memory_windows(config) and len(memory_windows(config)) >= 3
    assert [epoch for epoch, _ in markers(server, schema)] == [0, 1, 2]
    sink = sinks_for(config)[0]
    assert sink.committed_epoch() == 2 and sink.commits() == [0, 1, 2]
    assert sink.unreadable() is None
    assert sorted((r["key"], r["window_start"], r["n"], r["epoch"]) for r in sink.read_back()) \
        == memory_windows(config)
    columns = dict(query(server, "SELECT column_name, data_type FROM information_schema.columns "
                                 f"WHERE table_schema = '{schema}' AND table_name = 'windows'"))
    assert columns == {"key": "text", "window_start": "timestamp with time zone",
                       "window_end": "timestamp with time zone", "n": "bigint",
                       "epoch": "bigint"}
    sink.prepare(pa.schema([("key", pa.string()), ("added", pa.float64())]))  # kept, extended
    assert len(windows(server, schema)) == len(memory_windows(config))
    assert query(server, f"SELECT DISTINCT added FROM {schema}.windows") == [(None,)]


def test_a_second_pipeline_on_one_table_is_refused_before_the_seal_naming_the_owner(
        tmp_path: Path, server: PostgresServer, schema: str, source: MemorySource) -> None:
    first = pipeline(tmp_path, schema)
    run_epoch(first, source)
    second = make_pipeline(tmp_path, name="second", base=IN_MEMORY, sinks={
        "windows": [{"postgres": options(schema)}], "late": [], "quarantine": []})
    with pytest.raises(TableOwned, match=rf"table {schema}.windows belongs to pipeline\(s\) "
                                         f"{first.name} "):
        begin(second, source=MemorySource())
    before = windows(server, schema)
    with pytest.raises(TableOwned):
        sinks_for(second)[0].check(0, pa.table({"key": ["k"]}))
    assert windows(server, schema) == before and checkpointed_epoch(second) == -1


def test_a_failure_between_the_rows_and_the_marker_leaves_nothing(
        tmp_path: Path, server: PostgresServer, schema: str, source: MemorySource,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows are written, then the transaction fails before it commits: neither the rows nor
    the marker are visible, and the retry writes them once."""
    config = pipeline(tmp_path, schema)
    plan = begin(config, source=source)
    precommit(config, plan.epoch, MemoryStager())
    write_rows = postgres_sql.write_rows

    def write_then_fail(conn: Any, *args: Any) -> None:
        write_rows(conn, *args)
        assert conn.execute("SELECT count(*) FROM " f"{schema}.windows").fetchone()[0] > 0
        raise InjectedFault("between the rows and the transaction's commit")

    monkeypatch.setattr(postgres_sql, "write_rows", write_then_fail)
    with pytest.raises(InjectedFault):
        commit(config, 0)
    assert windows(server, schema) == [] and markers(server, schema) == []
    assert sinks_for(config)[0].committed_epoch() == -1
    monkeypatch.setattr(postgres_sql, "write_rows", write_rows)
    assert commit(config, 0).outcome is Outcome.COMMITTED
    assert windows(server, schema) == memory_windows(config)
    assert [epoch for epoch, _ in markers(server, schema)] == [0]


def test_a_crash_after_the_sink_committed_is_not_written_twice(
        tmp_path: Path, server: PostgresServer, schema: str, source: MemorySource,
        arm: Callable[[str], None]) -> None:
    config = pipeline(tmp_path, schema)
    plan = begin(config, source=source)
    precommit(config, plan.epoch, MemoryStager())
    arm("commit.before_checkpoint:fail")
    with pytest.raises(InjectedFault):
        commit(config, 0)
    written = windows(server, schema)
    assert written and checkpointed_epoch(config) == -1
    result = commit(config, 0)  # the retry
    outcomes = {s.sink: s.outcome for s in result.sinks}
    assert outcomes[f"postgres:{schema}.windows"] is Outcome.ALREADY_COMMITTED
    assert windows(server, schema) == written and checkpointed_epoch(config) == 0


def test_two_commits_at_once_write_once(tmp_path: Path, server: PostgresServer, schema: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Both attempts find nothing held, then insert the marker together: one commits, the
    other's insert waits on the key and conflicts."""
    config = pipeline(tmp_path, schema)
    rows = pa.table({"key": ["a", "b"], "n": [1, 2]})
    sinks_for(config)[0].prepare(rows.schema)
    barrier, insert = threading.Barrier(2, timeout=30), postgres_sql.insert_marker

    def insert_together(*args: Any) -> None:
        barrier.wait()
        insert(*args)

    monkeypatch.setattr(postgres_sql, "insert_marker", insert_together)
    attempts = [sinks_for(config)[0], sinks_for(config)[0]]
    results = at_once(*(lambda s=s: s.commit(0, rows, "h0") for s in attempts))
    assert sorted((r.outcome, r.raced) for r in results) == sorted(
        [(Outcome.COMMITTED, False), (Outcome.ALREADY_COMMITTED, True)])
    assert sorted(query(server, f"SELECT key, n FROM {schema}.windows")) == [("a", 1), ("b", 2)]
    assert markers(server, schema) == [(0, "h0")]


def test_upserts_replace_a_keys_row_in_epoch_order_once(
        tmp_path: Path, server: PostgresServer, schema: str) -> None:
    config = pipeline(tmp_path, schema, upsert_keys=["key"])
    sink = sinks_for(config)[0]
    first = pa.table({"key": ["a", "b"], "n": [1, 2]})
    second = pa.table({"key": ["a", "c"], "n": [5, 3]})
    sink.prepare(first.schema)
    for epoch, rows in enumerate([first, second]):
        sink.check(epoch, rows)
        assert sink.commit(epoch, rows, f"h{epoch}").outcome is Outcome.COMMITTED
    table = sorted(query(server, f"SELECT key, n FROM {schema}.windows"))
    assert table == [("a", 5), ("b", 2), ("c", 3)]
    assert sink.commit(0, first, "h0").outcome is Outcome.ALREADY_COMMITTED  # a rerun: no-op
    assert sorted(query(server, f"SELECT key, n FROM {schema}.windows")) == table
    assert sorted((r["key"], r["n"]) for r in sink.read_back()) == table
    assert sink.commits() == [0, 1] and sink.kept_by() == ("key",)
    with pytest.raises(SinkCannotTake, match="column 'key' is NOT NULL and the epoch has empty"):
        sink.check(2, pa.table({"key": [None], "n": [1]}, schema=first.schema))
    # a key twice in one epoch: its last row is written (these rows have neither a record nor
    # a window to order them: their other columns do), where it was refused for ever before
    twice = pa.table({"key": ["a", "c", "a"], "n": [9, 8, 4]})
    sink.check(2, twice)
    assert sink.commit(2, twice, "h2").outcome is Outcome.COMMITTED
    assert sorted(query(server, f"SELECT key, n FROM {schema}.windows")) == [
        ("a", 9), ("b", 2), ("c", 8)]


def test_an_empty_upsert_key_is_refused_before_the_seal_naming_the_way_out(
        tmp_path: Path, server: PostgresServer, schema: str) -> None:
    """A key column that may be null (a unique constraint made beforehand): ``ON CONFLICT``
    never matches a null there, so each epoch would add another row for it."""
    query(server, f"CREATE SCHEMA {schema}; CREATE TABLE {schema}.windows (key text UNIQUE, "
                  "n bigint)")
    sink = sinks_for(pipeline(tmp_path, schema, upsert_keys=["key"]))[0]
    rows = pa.table({"key": ["a", None, None], "n": [1, 2, 3]})
    with pytest.raises(SinkCannotTake, match=r"upsert key 'key' is empty in 1 row\(s\).*"
                                             r"event.filter.*coalesce"):
        sink.check(0, rows)


def test_the_dsns_session_options_are_kept_beside_utc(
        tmp_path: Path, server: PostgresServer, schema: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``lock_timeout`` in the DSN's ``options`` is the one ``begin``'s DDL waits under (the
    sink's own UTC time zone used to replace them)."""
    monkeypatch.setenv(DSN_ENV, dsn_of(server) + " options='-c lock_timeout=1234ms'")
    sink = sinks_for(pipeline(tmp_path, schema))[0]
    assert isinstance(sink, PostgresSink)
    with sink._connected() as conn:
        assert conn.execute("SHOW lock_timeout").fetchone()[0] == "1234ms"
        assert conn.execute("SHOW TimeZone").fetchone()[0] == "UTC"


def test_windows_upserted_on_their_keys_through_the_protocol(
        tmp_path: Path, server: PostgresServer, schema: str, source: MemorySource) -> None:
    config = pipeline(tmp_path, schema, upsert_keys=WINDOW_KEYS)
    for _ in range(3):
        run_epoch(config, source)
        source.produce(0, 10)
    latest = {(k, w): (n, e) for k, w, n, e in memory_windows(config)}  # epoch order
    assert windows(server, schema) == sorted((k, w, n, e) for (k, w), (n, e) in latest.items())


def test_what_postgresql_cannot_take_is_refused_before_the_seal(
        tmp_path: Path, server: PostgresServer, schema: str, source: MemorySource) -> None:
    query(server, f"CREATE SCHEMA {schema}; CREATE TABLE {schema}.windows (key text, "
                  "price numeric(5,2), n text, must text NOT NULL)")
    config = pipeline(tmp_path, schema)
    sink = sinks_for(config)[0]
    conflicting = pa.table({"key": ["a"], "n": [1]})
    with pytest.raises(SinkCannotTake, match="column 'n' is text, the output's is bigint"):
        sink.check(0, conflicting)
    with pytest.raises(SinkCannotTake, match="column 'nothere'"):
        sink.check(0, pa.table({"nothere": [1]}))
    query(server, f"ALTER TABLE {schema}.windows ALTER must SET DEFAULT 'x'")
    with pytest.raises(SinkCannotTake, match="NUL character"):
        sink.check(0, pa.table({"key": ["a\x00b"]}))
    price = pa.table({"price": pa.array([Decimal("999.99"), Decimal("1000.00")],
                                        pa.decimal128(12, 2))})
    with pytest.raises(SinkCannotTake, match=r"numeric\(5,2\), which cannot hold 1000.00"):
        sink.check(0, price)
    sink.check(0, price.slice(0, 1))  # a value that fits is taken
    keyed = sinks_for(pipeline(tmp_path, schema, upsert_keys=["key"]))[0]
    with pytest.raises(SinkCannotTake, match="no primary key or unique constraint"):
        keyed.check(0, pa.table({"key": ["a"]}))
    with pytest.raises(ProtocolViolation, match="holds epoch -1; it cannot receive epoch 1"):
        sink.commit(1, price.slice(0, 1), "h1")
    assert query(server, f"SELECT count(*) FROM {schema}.windows") == [(0,)]


def test_the_protocol_aborts_an_epoch_the_table_cannot_take(
        tmp_path: Path, server: PostgresServer, schema: str, source: MemorySource) -> None:
    """A conflicting table found at commit: the epoch is not sealed, nothing is written."""
    query(server, f"CREATE SCHEMA {schema}; CREATE TABLE {schema}.windows (key text, n text)")
    config = pipeline(tmp_path, schema)
    plan = begin(config, source=source)
    precommit(config, plan.epoch, MemoryStager())
    with pytest.raises(SinkCannotTake, match="column 'n' is text, the output's is bigint"):
        commit(config, 0)
    assert checkpointed_epoch(config) == -1
    assert query(server, f"SELECT count(*) FROM {schema}.windows") == [(0,)]
    assert store(config, "memory:a").rows == {}


def test_read_back_returns_each_type_as_committed(
        tmp_path: Path, server: PostgresServer, schema: str) -> None:
    when = datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)
    rows = pa.table({
        "price": pa.array([Decimal("12345678901234567890.12"), None], pa.decimal128(38, 2)),
        "ratio": [math.inf, math.nan], "at": pa.array([when, None], pa.timestamp("us", "UTC")),
        "day": pa.array([date(2026, 3, 1), date(1, 1, 1)], pa.date32()),
        "blob": [b"\x00\xff", b""], "flag": [True, False], "small": pa.array([1, -1], pa.int16()),
        "text": ["é ✓", ""]})
    sink = sinks_for(pipeline(tmp_path, schema))[0]
    sink.prepare(rows.schema)
    sink.check(0, rows)
    sink.commit(0, rows, "h0")
    back = sorted(sink.read_back(), key=lambda r: r["small"])
    expected = sorted(rows.to_pylist(), key=lambda r: r["small"])
    assert math.isnan(back[0].pop("ratio")) and math.isnan(expected[0].pop("ratio"))
    assert back == expected
    assert sink.commits() == [0]


def test_the_password_is_never_shown(tmp_path: Path, server: PostgresServer, schema: str,
                                     source: MemorySource, caplog: pytest.LogCaptureFixture,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.DEBUG)
    config = pipeline(tmp_path, schema)
    run_epoch(config, source)
    sink = sinks_for(config)[0]
    shown = [sink.name, repr(sink), repr(sink.options), str(sink.options), caplog.text,
             str(sink.asset_uri())]
    assert sink.asset_uri() == (f"postgres://{server.host}:{server.port}/{server.database}/"
                                f"{schema}/windows")
    for dsn in (dsn_of(server, port=1), dsn_of(server, password=server.password + "x")):
        monkeypatch.setenv(DSN_ENV, dsn)
        with pytest.raises(SinkUnavailable) as failed:
            sink.committed_epoch()
        shown.append(str(failed.value))
    assert "password authentication failed" in shown[-1]
    assert not [text for text in shown if server.password in text]


def test_without_a_connection_the_error_says_how_to_give_one(
        tmp_path: Path, schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DSN_ENV)
    sink = sinks_for(pipeline(tmp_path, schema))[0]
    with pytest.raises(ConfigError, match=f"'postgres_default'.*set {DSN_ENV}"):
        sink.committed_epoch()
    assert sink.asset_uri() is None
    # What the DAG's log says of the missing asset names the missing DSN, not a broker.
    assert "no DSN" in sink.asset_unnamed() and "'postgres_default'" in sink.asset_unnamed()
    assert "Kafka" not in sink.asset_unnamed()


def test_an_airflow_postgres_connection_supplies_the_credentials(
        tmp_path: Path, server: PostgresServer, schema: str, source: MemorySource,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What a task does before a phase (``eos.airflow.retry_policy.phase_call``): the sink's
    connection read through Airflow's connection API (here from ``AIRFLOW_CONN_*``)."""
    from eos.airflow.connections import export_postgres_connections

    monkeypatch.delenv(DSN_ENV)
    monkeypatch.setenv("AIRFLOW_CONN_EOS_TEST_PG", (
        f"postgres://{server.user}:{server.password}@{server.host}:{server.port}/"
        f"{server.database}"))
    config = pipeline(tmp_path, schema, connection="eos_test_pg")
    assert export_postgres_connections(config) == ["eos_test_pg"]
    run_epoch(config, source)
    assert windows(server, schema) == memory_windows(config)
    # The audit's second reader attaches with the same connection.
    from eos.tools.audit.report import AuditReport
    from eos.tools.audit.second_reading import read_back_with_version, reread_sink

    sink = sinks_for(config)[0]
    held, version = read_back_with_version(sink)
    report = AuditReport(config.name, 0)
    assert reread_sink(report, config, sink, held, version) == []
    assert report.second_readings[sink.name] == ("DuckDB postgres", len(held)) and held


# -- the audit's second reader: DuckDB's postgres extension -----------------------------------

def test_duckdb_reads_every_type_as_psycopg2_does(tmp_path: Path, server: PostgresServer,
                                                   schema: str) -> None:
    """Both of the audit's readings, column for column: decimals (a declared numeric(P,S) and
    an unconstrained numeric), doubles with NaN and both infinities, a real, times with their
    zone, dates, bytes, text, integers up to uint64, empty values; and the markers."""
    from eos.tools.audit.independent.compare import disagreements
    from eos.tools.audit.independent.postgres import read_postgres

    query(server, f"CREATE SCHEMA {schema}; CREATE TABLE {schema}.windows (loose numeric)")
    when = datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)
    rows = pa.table({
        "price": pa.array([Decimal("12345678901234567890.12"), Decimal("-0.01"), None],
                          pa.decimal128(38, 2)),
        "loose": pa.array([Decimal("3.14159"), Decimal("-1E+5"), None], pa.decimal128(12, 5)),
        "ratio": [math.inf, -math.inf, math.nan], "tenth": pa.array([1.1, 0.1, None],
                                                                   pa.float32()),
        "at": pa.array([when, datetime(1970, 1, 1, tzinfo=UTC), None],
                       pa.timestamp("us", "UTC")),
        "day": pa.array([date(2026, 3, 1), date(1, 1, 1), None], pa.date32()),
        "blob": [b"\x00\xff", b"", None], "flag": [True, False, None],
        "big": pa.array([2**64 - 1, 0, None], pa.uint64()),
        "small": pa.array([1, -1, 0], pa.int16()), "text": ["é ✓", "", None]})
    sink = sinks_for(pipeline(tmp_path, schema))[0]
    sink.prepare(rows.schema)
    sink.check(0, rows)
    sink.commit(0, rows, "h0")
    reading = read_postgres(dsn_of(server), sink.table, sink.options.marker(),
                            sink.config.name, sink.name)
    held = sink.read_back()
    assert len(reading.rows) == len(held) == 3
    assert disagreements(("psycopg2", held), ("DuckDB postgres", reading.rows)) == []
    assert reading.epochs == sink.commits() == [0]
    loose = sorted(str(r["loose"]) for r in reading.rows if r["loose"] is not None)
    assert loose == ["-100000.00000", "3.14159"]  # exact, not a double's rounding


def test_a_value_one_reader_misreads_fails_the_second_reading(
        tmp_path: Path, server: PostgresServer, schema: str, source: MemorySource) -> None:
    """psycopg2's reading with one value wrong (a decimal's scale, a time's zone) is what the
    second reading is for: it names the sink and the row; the same for a marker it misses."""
    from eos.tools.audit.report import AuditReport, ProblemKind
    from eos.tools.audit.second_reading import read_back_with_version, reread_sink

    config = pipeline(tmp_path, schema)
    for _ in range(2):
        run_epoch(config, source)
    sink = sinks_for(config)[0]
    held, version = read_back_with_version(sink)
    assert version == 1 and held
    report = AuditReport(config.name, version)
    assert reread_sink(report, config, sink, held, version) == []
    assert report.second_readings[sink.name] == ("DuckDB postgres", len(held))
    wrong = [dict(row) for row in held]
    wrong[0]["n"] += 1
    problems = reread_sink(AuditReport(config.name, version), config, sink, wrong, version)
    assert {(p.kind, p.where) for p in problems} == {(ProblemKind.READERS_DISAGREE, sink.name)}
    assert len(problems) == 2 and any(p.detail.startswith("DuckDB postgres reads {")
                                      for p in problems)
    query(server, f"DELETE FROM {schema}.eos_markers WHERE epoch = 1")
    problems = reread_sink(AuditReport(config.name, 1), config, sink, held, 1)
    assert [p.kind for p in problems] == [ProblemKind.SECOND_READER]
    assert "DuckDB postgres read the sink at epoch 0" in problems[0].detail


def test_the_password_never_shows_in_the_second_readers_errors(
        tmp_path: Path, server: PostgresServer, schema: str, source: MemorySource,
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB prints the connection string it failed with, password included: the audit's
    problem and the error carry neither it nor a password that almost matched."""
    from eos.tools.audit.independent.postgres import read_postgres
    from eos.tools.audit.report import AuditReport, ProblemKind
    from eos.tools.audit.second_reading import reread_sink

    caplog.set_level(logging.DEBUG)
    config = pipeline(tmp_path, schema)
    run_epoch(config, source)
    sink = sinks_for(config)[0]
    held = sink.read_back()
    shown: list[str] = []
    for dsn in (dsn_of(server, port=1), dsn_of(server, password=server.password + "x")):
        monkeypatch.setenv(DSN_ENV, dsn)
        with pytest.raises(SinkUnavailable) as failed:
            read_postgres(dsn, sink.table, sink.options.marker(), config.name, sink.name)
        (problem,) = reread_sink(AuditReport(config.name, 0), config, sink, held, 0)
        assert problem.kind == ProblemKind.SECOND_READER and problem.where == sink.name
        shown += [str(failed.value), repr(failed.value), problem.detail, str(problem)]
    assert "password authentication failed" in shown[-1]
    shown.append(caplog.text)
    assert not [text for text in shown if server.password in text]


# -- begin needs no ownership and takes no lock a reader or a writer holds ------------------------

def prepare_in_thread(sink: PostgresSink, schema: pa.Schema) -> tuple[threading.Thread,
                                                                      threading.Event, list]:
    """``sink.prepare(schema)`` in a thread: it, the event set when it returned, and what it
    raised (the test then waits for it without hanging itself)."""
    done, raised = threading.Event(), []

    def run() -> None:
        try:
            sink.prepare(schema)
        except BaseException as error:  # reported in the test's thread
            raised.append(error)
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done, raised


def holding(server: PostgresServer, mode: str, *tables: str) -> Any:
    """Another session holding ``mode`` locks on ``tables`` in an open transaction (a reader:
    ACCESS SHARE; a writer: ROW EXCLUSIVE); rolled back and closed by the caller."""
    conn = psycopg2.connect(dsn_of(server))
    with conn.cursor() as cursor:
        for name in tables:
            cursor.execute(f"LOCK TABLE {name} IN {mode} MODE")
    return conn


def test_a_role_with_only_insert_update_select_begins_and_commits_epochs(
        tmp_path: Path, server: PostgresServer, schema: str, source: MemorySource,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The tables made beforehand by their owner; the sink's role has USAGE on the schema and
    SELECT, INSERT, UPDATE on the table and the marker table, as docs/deploying.md says
    suffices. Before: ``begin`` ran CREATE SCHEMA / CREATE TABLE / ALTER TABLE on every epoch
    and was refused (permission denied). Now it reads the catalog, finds nothing missing and
    issues no DDL: the epochs commit, upserted."""
    from eos.core.outputs import output_schema

    config = pipeline(tmp_path, schema, upsert_keys=WINDOW_KEYS)
    sinks_for(config)[0].prepare(output_schema(config, "windows"))  # by the owner
    role, password = f"writer_{secrets.token_hex(4)}", secrets.token_hex(16)
    query(server, f"CREATE ROLE {role} LOGIN PASSWORD '{password}'; "
                  f"GRANT USAGE ON SCHEMA {schema} TO {role}; "
                  f"GRANT SELECT, INSERT, UPDATE ON {schema}.windows, {schema}.eos_markers "
                  f"TO {role}")
    monkeypatch.setenv(DSN_ENV, dsn_of(server, user=role, password=password))
    for _ in range(3):
        run_epoch(config, source)
        source.produce(0, 10)
    assert checkpointed_epoch(config) == 2
    latest = {(k, w): (n, e) for k, w, n, e in memory_windows(config)}  # epoch order
    assert windows(server, schema) == sorted((k, w, n, e) for (k, w), (n, e) in latest.items())
    assert [epoch for epoch, _ in markers(server, schema)] == [0, 1, 2]


@pytest.mark.parametrize("mode", ["ACCESS SHARE", "ROW EXCLUSIVE"])
def test_a_steady_prepare_does_not_wait_for_readers_or_writers(
        tmp_path: Path, server: PostgresServer, schema: str, mode: str) -> None:
    """Before: every ``begin`` ran ALTER TABLE ... ADD COLUMN IF NOT EXISTS, which takes an
    ACCESS EXCLUSIVE lock even when the column is there, and waited, without a lock timeout,
    behind any open transaction that had read or written the table (and made every later
    reader wait behind it). Now a table that has everything takes no such lock."""
    from eos.core.outputs import output_schema

    config = pipeline(tmp_path, schema)
    sink, columns = sinks_for(config)[0], output_schema(config, "windows")
    sink.prepare(columns)
    other = holding(server, mode, f"{schema}.windows", f"{schema}.eos_markers")
    try:
        thread, done, raised = prepare_in_thread(sink, columns)
        assert done.wait(20), f"prepare waited behind a {mode} lock"
        assert raised == []
    finally:
        other.rollback()
        other.close()
    thread.join(30)


def test_a_change_that_needs_a_lock_held_elsewhere_fails_transiently_in_the_lock_timeout(
        tmp_path: Path, server: PostgresServer, schema: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A column to add while another session reads the table: the ALTER waits at most the
    lock timeout, then ``begin`` fails with a transient error naming the lock, having changed
    nothing; once the reader is gone the column is added."""
    from eos.core.outputs import output_schema

    monkeypatch.setattr(postgres_sql, "DDL_LOCK_TIMEOUT", "300ms", raising=False)
    config = pipeline(tmp_path, schema)
    sink, columns = sinks_for(config)[0], output_schema(config, "windows")
    sink.prepare(columns)
    wider = columns.append(pa.field("added", pa.float64()))
    other = holding(server, "ACCESS SHARE", f"{schema}.windows")
    try:
        thread, done, raised = prepare_in_thread(sink, wider)
        assert done.wait(20), "prepare waited without a lock timeout"
    finally:
        other.rollback()
        other.close()
    thread.join(30)
    assert len(raised) == 1 and isinstance(raised[0], SinkUnavailable), raised
    assert "lock" in str(raised[0]) and "300ms" in str(raised[0])
    assert "added" not in dict(query(server, "SELECT column_name, 1 FROM information_schema."
                                             f"columns WHERE table_schema = '{schema}'"))
    sink.prepare(wider)
    assert query(server, f"SELECT count(added) FROM {schema}.windows") == [(0,)]


# -- rewind: the rows and markers of the later epochs deleted in one transaction -----------------

def rewind_pipeline(tmp_path: Path, schema: str, **more: Any) -> PipelineConfig:
    """The in-memory pipeline with its windows in PostgreSQL and in a memory sink that can be
    rewound (the protocol's rewind needs every sink to)."""
    sinks = {"windows": [{"postgres": options(schema, **more)}, {"memory_rewind": "a"}],
             "late": [{"memory_rewind": "b"}], "quarantine": [{"memory_rewind": "c"}]}
    return make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)


def rewound_windows(config: PipelineConfig) -> list[tuple[Any, ...]]:
    held = store(config, "memory_rewind:a").rows
    return sorted((r["key"], r["window_start"], r["n"], r["epoch"])
                  for epoch in sorted(held) for r in held[epoch].to_pylist())


def test_a_rewind_deletes_the_later_epochs_rows_and_markers_and_the_replay_commits_them(
        tmp_path: Path, server: PostgresServer, schema: str, source: MemorySource) -> None:
    """Before: a pipeline with a postgres sink could not be rewound at all (the sink type did
    not implement SupportsRewind). Now the protocol's rewind takes the appended table back to
    epoch 0, the replay commits epochs 1 and 2 again, once each, as the memory sink has them."""
    config = rewind_pipeline(tmp_path, schema)
    for _ in range(3):
        run_epoch(config, source)
        source.produce(0, 10)
    assert {e for *_, e in windows(server, schema)} == {0, 1, 2}
    assert rewind(config, 0).outcome is Outcome.REWOUND
    assert {e for *_, e in windows(server, schema)} == {0}
    assert [epoch for epoch, _ in markers(server, schema)] == [0]
    sink = sinks_for(config)[0]
    assert sink.committed_epoch() == 0 and sink.commits() == [0]
    run_epoch(config, source)
    run_epoch(config, source)
    assert checkpointed_epoch(config) == 2 and sink.commits() == [0, 1, 2]
    assert windows(server, schema) == rewound_windows(config) and rewound_windows(config)
    assert rewind(config, -1).outcome is Outcome.REWOUND
    assert windows(server, schema) == [] and markers(server, schema) == []


def test_a_sinks_rewind_is_one_transaction_rerun_safely_and_leaves_other_sinks_markers(
        tmp_path: Path, server: PostgresServer, schema: str) -> None:
    config = pipeline(tmp_path, schema)
    sink = sinks_for(config)[0]
    rows = [pa.table({"key": ["a", "b"], "n": [e, e], "epoch": [e, e]}) for e in range(3)]
    sink.prepare(rows[0].schema)
    for epoch, table in enumerate(rows):
        sink.commit(epoch, table, f"h{epoch}")
    query(server, f"INSERT INTO {schema}.eos_markers (pipeline, sink, epoch, plan_hash) "
                  "VALUES ('another', 'postgres:x', 5, 'h')")
    assert sink.rewind_target(1) is None and sink.rewind_target(-1) is None
    with pytest.raises(RewindRefused, match="no marker of epoch 7"):
        sink.rewind_target(7)
    assert sink.rewind(1, None, "r1", rows[0].schema) is None
    assert sink.rewind(1, None, "r1", rows[0].schema) is None  # a rerun finds it done
    assert sorted(query(server, f"SELECT key, epoch FROM {schema}.windows")) == [
        ("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert sink.commits() == [0, 1] and sink.committed_epoch() == 1
    assert query(server, f"SELECT pipeline, epoch FROM {schema}.eos_markers WHERE "
                         "pipeline = 'another'") == [("another", 5)]
    assert sink.commit(2, rows[2], "again").outcome is Outcome.COMMITTED


def test_an_upserted_table_is_rewound_only_where_nothing_after_the_epoch_replaced_a_row(
        tmp_path: Path, server: PostgresServer, schema: str) -> None:
    """An upsert keeps one row per key: a later epoch's row replaced the earlier value, which
    the table no longer has. So a rewind to N is refused while a row of an epoch after N
    remains (nothing written); to -1 (empty the table, a full replay) always works, and to N
    when the epochs after it left no row (only their markers go)."""
    config = pipeline(tmp_path, schema, upsert_keys=["key"])
    sink = sinks_for(config)[0]
    first = pa.table({"key": ["a", "b"], "n": [1, 2], "epoch": [0, 0]})
    second = pa.table({"key": ["a"], "n": [5], "epoch": [1]})
    sink.prepare(first.schema)
    sink.commit(0, first, "h0")
    sink.commit(1, second, "h1")
    sink.commit(2, first.slice(0, 0), "h2")  # an epoch that wrote no row
    assert sink.rewind_target(1) is None
    sink.rewind(1, None, "r1", first.schema)
    assert sink.commits() == [0, 1]
    with pytest.raises(RewindRefused, match=r"upsert.*epoch 1 replaced.*rewind to -1") as why:
        sink.rewind_target(0)
    assert "1 row" in str(why.value)
    with pytest.raises(RewindRefused, match="upsert"):
        sink.rewind(0, None, "r2", first.schema)
    assert sink.commits() == [0, 1]
    assert sorted(query(server, f"SELECT key, n FROM {schema}.windows")) == [("a", 5), ("b", 2)]
    sink.rewind(-1, None, "r3", first.schema)
    assert sink.commits() == [] and query(server, f"SELECT count(*) FROM {schema}.windows") \
        == [(0,)]
