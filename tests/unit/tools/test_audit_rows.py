"""The audit of a pipeline without windows, on records made here: its reference (DuckDB's
evaluation of the filter and select over the records and their metadata) and its comparisons
find every lost, doubled or wrong row."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

import pytest

from eos.core.config import parse_config
from eos.core.plan import PartitionRange, Plan
from eos.tools.audit.checks import RECORD_TIMESTAMP, compare_rows, row_identity
from eos.tools.audit.reference import Record
from eos.tools.audit.report import AuditReport, ProblemKind
from eos.tools.audit.rows import compare_row_values, row_reference

CONFIG = parse_config({
    "name": "ingest", "kafka": {"topic": "views"},
    "event": {"fields": {"page": "string", "amount": "decimal(12,2)"},
              "filter": "amount >= 0 and kafka_timestamp_type = 'CreateTime'"},
    "select": {"page": "CAST(upper(page) AS string)", "amount": "amount",
               "cents": "CAST(amount * 100 AS bigint)", "key": "kafka_key",
               "at": "kafka_timestamp", "big": "amount > 10"},
})


def record(offset: int, value: bytes | None, key: bytes | None = b"k",
           kind: str | None = "CreateTime") -> Record:
    return Record(0, offset, 1_000 + offset, value, key, kind)


EPOCHS = [
    (Plan("ingest", "views", 0, (PartitionRange(0, 0, 4),)), [
        record(0, b'{"page": "/a", "amount": 12.5}'),
        record(1, b'{"page": "/b", "amount": -1}'),  # filtered out
        record(2, b"not json"),  # quarantined
        record(3, b'{"page": "/c", "amount": 1}', key=b"\xff"),
    ]),
    (Plan("ingest", "views", 1, (PartitionRange(0, 4, 6),)), [
        record(4, b'{"page": "/d", "amount": 2}', key=None),
        record(5, b'{"page": "/e", "amount": 3}', kind="LogAppendTime"),  # filtered out
    ]),
]


def test_the_reference_holds_each_kept_record_once_with_its_values() -> None:
    expected = row_reference(CONFIG, EPOCHS)
    assert expected.records == 6 and expected.filtered == {0: 1, 1: 1}
    assert expected.watermarks == {0: None, 1: None}
    assert [(q["offset"], q["epoch"]) for q in expected.rows["quarantine"]] == [(2, 0)]
    assert expected.rows["rows"] == [
        {"page": "/A", "amount": Decimal("12.50"), "cents": 1250, "key": "k", "at": 1000,
         "big": True, "kafka_topic": "views", "kafka_partition": 0, "kafka_offset": 0,
         RECORD_TIMESTAMP: 1000, "epoch": 0},
        {"page": "/C", "amount": Decimal("1.00"), "cents": 100, "key": "\ufffd", "at": 1003,
         "big": False, "kafka_topic": "views", "kafka_partition": 0, "kafka_offset": 3,
         RECORD_TIMESTAMP: 1003, "epoch": 0},
        {"page": "/D", "amount": Decimal("2.00"), "cents": 200, "key": None, "at": 1004,
         "big": False, "kafka_topic": "views", "kafka_partition": 0, "kafka_offset": 4,
         RECORD_TIMESTAMP: 1004, "epoch": 1}]


@pytest.mark.parametrize(("change", "kind"), [
    (lambda rows: rows + rows[:1], ProblemKind.DUPLICATED),
    (lambda rows: rows[1:], ProblemKind.MISSING),
    (lambda rows: [{**rows[0], "cents": 1251}, *rows[1:]], ProblemKind.WRONG_VALUES),
    (lambda rows: [{**rows[0], "epoch": 1}, *rows[1:]], ProblemKind.WRONG_VALUES),
])
def test_a_sink_with_a_row_doubled_lost_or_wrong_is_reported(change: Any,
                                                             kind: ProblemKind) -> None:
    want = row_reference(CONFIG, EPOCHS).rows["rows"]
    identity = row_identity(CONFIG, "rows")
    for held, problems in ((want, []), (change(want), [kind])):
        report = AuditReport("ingest", 1)
        compare_rows(report, "delta:target", Counter(map(identity, want)),
                     Counter(map(identity, held)))
        compare_row_values(report, CONFIG, "delta:target", want, held)
        assert [p.kind for p in report.problems] == problems
