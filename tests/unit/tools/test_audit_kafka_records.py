"""The audit's expectations of a Kafka sink of rows beyond its values: the key and own headers
a row's record must carry, and a key's records in their source order."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from eos.sinks.kafka.options import KafkaSinkOptions
from eos.tools.audit.kafka_records import _check_order, _expected

ROW = {"user": "ann", "raw": b"\x00", "kafka_headers": [
    {"key": "t", "value": b"1"}, {"key": "eos-epoch", "value": b"9"}, {"key": "t", "value": None}]}


def sink(**options: Any) -> Any:
    # A sink whose key and headers all name columns of the rows (no record columns).
    return SimpleNamespace(options=KafkaSinkOptions(topic="out", **options), name="kafka:out",
                           config=SimpleNamespace(record_column=lambda sink, role: None))


def test_the_key_and_headers_a_row_s_record_must_carry() -> None:
    assert _expected(sink(key="user"), ROW) == (b"ann", [])
    assert _expected(sink(headers="carry"), ROW) == (None, [("t", b"1"), ("t", None)])
    assert _expected(sink(key="raw", headers={"carry": True, "set": {"u": "user"}}), ROW) == (
        b"\x00", [("t", b"1"), ("t", None), ("u", b"ann")])


def test_a_key_s_records_out_of_source_order_are_reported() -> None:
    order: dict = {}
    wrong: list[str] = []
    record = SimpleNamespace(partition=0, key=b"ann")
    for offset in (3, 5, 4):
        _check_order(order, record, ("src", 1, offset), wrong)
    _check_order(order, record, ("src", 2, 0), wrong)  # another source partition: its own order
    _check_order(order, SimpleNamespace(partition=1, key=b"ann"), ("src", 1, 1), wrong)
    assert len(wrong) == 1
    assert "out of its source order" in wrong[0] and "(after offset 5)" in wrong[0]
