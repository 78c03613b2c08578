"""The audit's second readers (``eos.tools.audit.independent.compare``) compare what two libraries
read:
their habits (a time zone, a decimal's exponent, bytes or a view) are no disagreement, a changed
or a doubled row is; and the independent decoder reads what the Kafka sink's codec writes."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from eos.sinks.records import encode_values
from eos.tools.audit.independent import compare as independent
from eos.tools.audit.independent import kafka as independent_kafka


def key(row: dict[str, Any]) -> tuple:
    return tuple(sorted(independent.canonical_row(row).items()))


ROWS = [
    {"key": "a", "window_start": datetime(2026, 1, 1, tzinfo=UTC), "sum": Decimal("1.5"),
     "avg": 0.5, "count": 3, "raw": b"\x00\x01"},
    {"key": "b", "window_start": datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC),
     "sum": Decimal("-2.000000001"), "avg": 1e-300, "count": 1, "raw": None},
]


def test_readers_agree_on_the_same_rows_in_other_clothes() -> None:
    """Each reader has its own habits (a time zone, a decimal's exponent, bytes or a view):
    those are no disagreement."""
    other = [{**row, "window_start": row["window_start"].astimezone(timezone(timedelta(hours=2))),
              "sum": row["sum"].quantize(Decimal("0.000000001")),
              "raw": None if row["raw"] is None else bytearray(row["raw"])}
             for row in reversed(ROWS)]
    assert independent.disagreements(("delta-rs", ROWS), ("DuckDB delta", other)) == []


def test_one_changed_row_is_a_disagreement_both_ways() -> None:
    changed = [ROWS[0], {**ROWS[1], "sum": Decimal("-2.000000002")}]
    found = independent.disagreements(("delta-rs", ROWS), ("DuckDB delta", changed))
    assert sorted((d.reader, d.count, dict(d.row)["sum"]) for d in found) == [
        ("DuckDB delta", 1, Decimal("-2.000000002")), ("delta-rs", 1, Decimal("-2.000000001"))]
    assert "delta-rs reads {" in str(found[0]) or "delta-rs reads {" in str(found[1])


def test_a_row_held_twice_by_one_reader_is_a_disagreement() -> None:
    found = independent.disagreements(("confluent-kafka", [*ROWS, ROWS[0]]), ("aiokafka", ROWS))
    assert [(d.reader, d.other, d.count) for d in found] == [("confluent-kafka", "aiokafka", 1)]


def test_the_independent_decoder_inverts_the_sinks_encoder() -> None:
    """``decode_json`` is written again, not imported: it must read what the sink's codec
    writes (times to the millisecond, exact decimals, doubles, base64 binary, nulls)."""
    schema = pa.schema([("key", pa.string()), ("window_start", pa.timestamp("ms", tz="UTC")),
                        ("sum", pa.decimal128(38, 9)), ("avg", pa.float64()),
                        ("count", pa.int64()), ("raw", pa.binary())])
    rows = [{**row, "sum": row["sum"].quantize(Decimal("0.000000001"))} for row in ROWS]
    decoded = [independent_kafka.decode_json(raw, schema)
               for raw in encode_values(pa.Table.from_pylist(rows, schema=schema))]
    assert Counter(key(r) for r in decoded) == Counter(key(r) for r in ROWS)
    assert independent_kafka.iso_micros("2026-01-01T00:00:10.123Z") == (1767225610 * 10**6 + 123000)
    with pytest.raises(ValueError):
        independent_kafka.iso_micros("2026-01-01T00:00:10+00:00")

