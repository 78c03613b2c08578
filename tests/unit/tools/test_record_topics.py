"""Late and quarantine rows say which topic their record is of (a pipeline may read several):
the commit shapes them from staging's ``topic`` column, rows staged before it had one take the
plan's one topic, and the audit tells two topics' records at one partition and offset apart."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa

from eos.core.config import parse_config
from eos.core.outputs import QUARANTINE_SCHEMA, late_schema, quarantine_rows
from eos.core.plan import PartitionRange, Plan
from eos.core.tables import STAGING_PROTOCOL
from eos.tools.audit.checks import compare_rows, row_identity, with_topics
from eos.tools.audit.reference import Record
from eos.tools.audit.report import AuditReport, ProblemKind
from eos.tools.audit.rows import row_reference

CONFIG = parse_config({"name": "ingest", "kafka": {"topics": ["a", "b"]},
                       "event": {"fields": {"page": "string"}}})


def _staged(topics: list[str | None]) -> pa.Table:
    """Quarantined records at partition 0, offset 7 of each of ``topics`` (None: staged before
    staging had the column)."""
    rows = [{"kind": "quarantine", "topic": t, "partition": 0, "offset": 7,
             "kafka_timestamp_ms": 1_000, "raw_value": b"x", "reason": "not JSON"}
            for t in topics]
    return pa.Table.from_pylist(rows, schema=STAGING_PROTOCOL)


def test_a_quarantine_row_carries_its_records_topic_last_in_its_schema() -> None:
    assert QUARANTINE_SCHEMA.names[-1] == "kafka_topic"
    assert late_schema(CONFIG).names[-1] == "kafka_topic"
    rows = quarantine_rows(_staged(["a", "b"]), 3)
    assert rows.schema == QUARANTINE_SCHEMA
    assert rows.column("kafka_topic").to_pylist() == ["a", "b"]


def test_a_row_staged_before_the_column_is_of_the_plans_one_topic() -> None:
    assert quarantine_rows(_staged([None]), 3, "views").column(
        "kafka_topic").to_pylist() == ["views"]
    # A plan of several topics ("") stages every row with its topic: nothing to guess.
    assert quarantine_rows(_staged([None]), 3, "").column("kafka_topic").to_pylist() == [None]


def test_two_topics_records_at_one_offset_are_two_quarantine_rows_to_the_audit() -> None:
    plan = Plan("ingest", "", 0, (PartitionRange(0, 7, 8, "a"), PartitionRange(0, 7, 8, "b")))
    records = [Record(0, 7, 1_000, b"not json", topic="a"),
               Record(0, 7, 1_000, b"not json", topic="b")]
    expected = row_reference(CONFIG, [(plan, records)]).rows["quarantine"]
    assert [q["kafka_topic"] for q in expected] == ["a", "b"]
    identity = row_identity(CONFIG, "quarantine")
    want = Counter(identity(row) for row in expected)
    # One topic's record held twice, the other's lost: the same (partition, offset) twice.
    held: list[dict[str, Any]] = [{**expected[0]}, {**expected[0]}]
    report = AuditReport("ingest", 0)
    compare_rows(report, "delta:quarantine", want, Counter(identity(row) for row in held))
    assert {p.kind for p in report.problems} == {ProblemKind.DUPLICATED, ProblemKind.MISSING}


def test_rows_committed_before_the_column_are_audited_as_their_epochs_topic() -> None:
    plans = [Plan("ingest", "views", 0, (PartitionRange(0, 0, 8),))]
    old = {"partition": 0, "offset": 7, "reason": "not JSON", "epoch": 0}
    overflow = {"partition": None, "offset": None, "reason": "overflow: ...", "epoch": 0}
    assert with_topics([old, overflow], plans) == [{**old, "kafka_topic": "views"}, overflow]
