"""``eos verify`` reads everything twice: Kafka with confluent-kafka and aiokafka,
Delta with delta-rs and DuckDB's delta extension (``eos.tools.audit.independent.compare``), and
fails with
``READERS_DISAGREE`` when the two readings differ.

Real broker (the embedded one: aiokafka reads it with ``read_committed``; it filters nothing
there, docs/guarantees.md), real Spark, real Delta tables. A disagreement between two correct
libraries
on a correct table cannot be produced on purpose, so the end-to-end cases give the pipeline's
reader a real, plausible bug to have: delta-rs reading a stale version of a table someone
appended to outside the protocol, confluent-kafka skipping a record. The old audit passes the
first (both of its readings are the buggy one); this one fails it.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from deltalake import DeltaTable, write_deltalake

from eos.compute.epochs import run_until_caught_up
from eos.core.config import PipelineConfig
from eos.core.delta import read_table
from eos.core.kafka import client_settings
from eos.core.outputs import output_schema
from eos.core.sink import sinks_for
from eos.sinks.delta.sink import DeltaSink
from eos.tools.audit import verify as audit_module
from eos.tools.audit.independent import compare as independent
from eos.tools.audit.independent import delta as independent_delta
from eos.tools.audit.independent import kafka as independent_kafka
from eos.tools.audit.report import AuditReport, ProblemKind
from eos.tools.audit.second_reading import reread_sink
from eos.tools.audit.verify import audit
from eos.tools.generator import GeneratorSpec, generate
from eos.tools.produce import send

from support import postgres
from support.harness import sink
from support.pipelines import kafka_sinks, make_pipeline
from support.postgres import PostgresServer

PG_DSN_ENV = "EOS_TEST_AUDIT_POSTGRES_DSN"
SPEC = GeneratorSpec(events=1500, keys=10, interval_ms=25, disorder_ms=800, late_fraction=0.03,
                     late_delay_ms=20_000, bad_fraction=0.03, seed=26)


def key(row: dict[str, Any]) -> tuple:
    return tuple(sorted(independent.canonical_row(row).items()))


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer | None]:
    """A PostgreSQL server for the windows' postgres sink, its DSN in ``PG_DSN_ENV`` for the
    module; None where no server can run (the Kafka and Delta readings are still audited)."""
    if postgres.missing_reason() is not None:
        yield None
        return
    with postgres.postgres_server() as server, pytest.MonkeyPatch.context() as patch:
        patch.setenv(PG_DSN_ENV, " ".join(
            f"{k}={v}" for k, v in {"host": server.host, "port": server.port,
                                    "user": server.user, "password": server.password,
                                    "dbname": server.database}.items()))
        yield server


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory, kafka: str, spark: Any,
              pg: PostgresServer | None) -> PipelineConfig:
    """Windows to a Kafka topic, a Delta table and (with a server) a PostgreSQL table, late and
    quarantine to Delta: several epochs, committed."""
    sections = kafka_sinks()
    if pg is not None:
        sections["sinks"]["windows"].append(
            {"postgres": {"table": "audit.windows", "dsn_env": PG_DSN_ENV}})
    config = make_pipeline(tmp_path_factory.mktemp("independent"), base=sections,
                                 epoch={"max_records": 600, "staging_retention": 1})
    send(generate(SPEC), SPEC.events, config.kafka.topic, client_settings(), progress=False)
    assert len(run_until_caught_up(config, "independent", spark=spark)) >= 3
    return config


# -- the comparison, and the decoder, alone ---------------------------------------------------



def test_the_independent_readers_agree_with_the_pipelines_readers(
        committed: PipelineConfig, pg: PostgresServer | None) -> None:
    report = audit(committed)
    assert report.ok, report.render()
    names = {s.name for s in sinks_for(committed)}
    source = f"source {committed.kafka.topic}"
    assert set(report.second_readings) == names | {source}, report.render()
    assert report.second_readings[source] == ("aiokafka", SPEC.events)
    for name in names:
        assert report.second_readings[name][1] == report.counts[name][1] > 0, name
    assert report.second_readings["delta:target"][0] == "DuckDB delta"
    assert [report.second_readings[s.name][0] for s in sinks_for(committed)
            if s.kind == "postgres"] == (["DuckDB postgres"] if pg is not None else [])
    assert ("read again by DuckDB postgres" in report.render()) == (pg is not None)
    assert not report.single_reader
    # And directly: the same rows, column for column, by both readers of each kind of sink.
    target = sink(committed, "delta:target")
    duck = independent_delta.read_delta(target.path, DeltaTable(target.path).version())
    assert Counter(key(r) for r in duck) == Counter(key(r) for r in target.read_back())
    topic = next(s for s in sinks_for(committed) if s.kind == "kafka")
    records = independent_kafka.read_topic(client_settings(), topic.options.topic)
    rows = independent_kafka.sink_rows(records, committed.name,
                                       output_schema(committed, "windows"),
                                       independent_kafka.current_line(topic))
    assert Counter(key(r) for r in rows) == Counter(key(r) for r in topic.read_back())
    assert Counter(key(r) for r in rows) == Counter(key(r) for r in duck)


def test_a_record_one_kafka_reader_skips_fails_the_audit(
        committed: PipelineConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """confluent-kafka (the audit's first reader) loses the last record of every range."""
    real = audit_module.read_range

    def skipping(*args: Any, **kwargs: Any) -> list:
        return real(*args, **kwargs)[:-1]

    monkeypatch.setattr(audit_module, "read_range", skipping)
    report = audit(committed)
    assert not report.ok
    disagree = [p for p in report.problems if p.kind == ProblemKind.READERS_DISAGREE]
    assert disagree and all(p.where == f"source {committed.kafka.topic}" for p in disagree)
    assert all("aiokafka reads {" in p.detail for p in disagree)
    assert "readers disagree" in report.render()


def test_a_version_the_second_reader_cannot_read_fails_the_audit(
        committed: PipelineConfig) -> None:
    """The second reader's failure is no pass: DuckDB asked for a version the table never had."""
    target = sink(committed, "delta:target")
    report = AuditReport(committed.name, 0)
    problems = reread_sink(report, committed, target, [], 10**6)
    assert [p.kind for p in problems] == [ProblemKind.SECOND_READER], problems
    assert "DuckDB delta could not read" in problems[0].detail


def test_a_value_changed_in_postgresql_fails_the_audit_naming_the_sink(
        committed: PipelineConfig, pg: PostgresServer | None) -> None:
    """One window's count changed straight in PostgreSQL: both readers see the change (they
    agree), the comparison with the records names the postgres sink. Put back after."""
    if pg is None:
        pytest.skip(str(postgres.missing_reason()))
    import psycopg2

    (target,) = [s for s in sinks_for(committed) if s.kind == "postgres"]
    conn = psycopg2.connect(os.environ[PG_DSN_ENV])
    change = "UPDATE audit.windows SET count = count + %s WHERE ctid = %s RETURNING ctid"
    try:
        with conn, conn.cursor() as cursor:
            cursor.execute("SELECT min(ctid) FROM audit.windows")
            cursor.execute(change, (1, cursor.fetchone()[0]))
            (changed,) = cursor.fetchone()
        report = audit(committed)
        with conn, conn.cursor() as cursor:  # an update moves the row: put back by its new ctid
            cursor.execute(change, (-1, changed))
    finally:
        conn.close()
    assert not report.ok
    assert {p.where for p in report.problems} == {target.name}, report.render()
    assert report.disagreeing == 0, report.render()
    assert report.second_readings[target.name][0] == "DuckDB postgres"
    assert audit(committed).ok


def test_a_row_appended_outside_the_protocol_and_hidden_by_a_stale_reader_fails_the_audit(
        committed: PipelineConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A committed window appended a second time straight through delta-rs (no txn, outside
    the protocol). With honest readers both see it: the old check says DUPLICATED and the
    readers agree. With delta-rs reading the version before the append (a stale-snapshot bug),
    the old audit sees nothing wrong: only the second reader finds the row. Runs last: it
    leaves the table tampered with."""
    target = sink(committed, "delta:target")
    before = DeltaTable(target.path).version()
    row = read_table(target.path).slice(0, 1)
    write_deltalake(target.path, row, mode="append")

    honest = audit(committed)
    assert honest.count(ProblemKind.DUPLICATED) == 1, honest.render()
    assert honest.disagreeing == 0, honest.render()

    real = DeltaSink.read_back

    def stale(self: DeltaSink, since: int = 0) -> list[dict[str, Any]]:
        if self.name != "delta:target":
            return real(self, since)
        return read_table(self.path, version=before).to_pylist()

    monkeypatch.setattr(DeltaSink, "read_back", stale)
    fooled = audit(committed)
    assert not fooled.ok, fooled.render()
    kinds = {p.kind for p in fooled.problems if p.where == "delta:target"}
    assert ProblemKind.READERS_DISAGREE in kinds and ProblemKind.DUPLICATED not in kinds
    (problem,) = [p for p in fooled.problems if p.kind == ProblemKind.READERS_DISAGREE]
    assert problem.detail.startswith("DuckDB delta reads {") and problem.count == 1
    assert fooled.disagreeing == 1
