"""The Kafka sink's record encoding, without a broker: every output row survives the
trip to JSON and back exactly, whatever its values."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from eos.core.config import load_pipeline
from eos.core.outputs import QUARANTINE_SCHEMA, late_schema, windows_schema
from eos.sinks.records import decode_value, encode_keys, encode_values

DEC = pa.decimal128(38, 9)
SCHEMA = pa.schema([("key", pa.string()), ("at", pa.timestamp("us", tz="UTC")), ("n", pa.int64()),
                    ("amount", DEC), ("avg", pa.float64()), ("raw", pa.binary())])

keys = st.one_of(st.none(), st.text(max_size=30))
stamps = st.one_of(st.none(), st.integers(0, 253_402_300_799_999).map(
    lambda ms: datetime.fromtimestamp(ms / 1000, UTC).replace(microsecond=(ms % 1000) * 1000)))
amounts = st.one_of(st.none(), st.decimals(min_value=-(10**18), max_value=10**18, places=9,
                                           allow_nan=False, allow_infinity=False))
floats = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False))
rows = st.lists(st.fixed_dictionaries({
    "key": keys, "at": stamps, "n": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    "amount": amounts, "avg": floats, "raw": st.one_of(st.none(), st.binary(max_size=20)),
}), max_size=20)


@settings(max_examples=200, deadline=None)
@given(rows)
def test_every_row_round_trips_exactly(data: list[dict]) -> None:
    table = pa.Table.from_pylist(data, schema=SCHEMA)
    encoded = encode_values(table)
    assert len(encoded) == table.num_rows
    for raw, row in zip(encoded, table.to_pylist(), strict=True):
        assert list(json.loads(raw)) == SCHEMA.names
        assert decode_value(raw, SCHEMA) == row


def test_the_documented_format() -> None:
    row = {"key": 'a"b\u00e9', "at": datetime(2026, 1, 1, 0, 1, 2, 345000, UTC), "n": 3,
           "amount": Decimal("-0.000000001"), "avg": 0.1, "raw": b"\x00\xff"}
    table = pa.Table.from_pylist([row], schema=SCHEMA)
    (value,) = encode_values(table)
    assert value == ('{"key":"a\\"b\u00e9","at":"2026-01-01T00:01:02.345Z","n":3,'
                     '"amount":-0.000000001,"avg":0.1,"raw":"AP8="}').encode()
    assert encode_keys(table, ["key"]) == ['{"key":"a\\"b\u00e9"}'.encode()]
    assert encode_keys(table, []) == [None]
    finer = pa.Table.from_pylist([{**row, "at": datetime(2026, 1, 1, 0, 1, 2, 345678, UTC)}],
                                 schema=SCHEMA)
    assert b'"at":"2026-01-01T00:01:02.345678Z"' in encode_values(finer)[0]  # not cut to ms
    assert decode_value(encode_values(finer)[0], SCHEMA)["at"].microsecond == 345678
    demo = load_pipeline("pageviews")
    for schema in (windows_schema(demo), late_schema(demo), QUARANTINE_SCHEMA):
        assert encode_values(schema.empty_table()) == []


def test_a_row_record_s_key_and_own_headers() -> None:
    """The key is the key column's bytes (a string as UTF-8, null: no key); a record's own
    headers are its source record's, in order and repeats kept, less eos's own, then the set
    ones; ``kafka_headers`` is never in the value (the headers carry it)."""
    from eos.core.schema import HEADERS_TYPE
    from eos.sinks.records import column_bytes, record_headers, value_columns

    headers = [[{"key": "t", "value": b"1"}, {"key": "eos-epoch", "value": b"3"},
                {"key": "t", "value": None}], []]
    rows = pa.table({"user": pa.array(["é", None]), "raw": pa.array([b"\x00", b"k"]),
                     "kafka_headers": pa.array(headers, HEADERS_TYPE)})
    assert column_bytes(rows, "user") == ["é".encode(), None]
    assert column_bytes(rows, "raw") == [b"\x00", b"k"]
    assert record_headers(rows, True, {"u": "user", "r": "raw"}) == [
        [("t", b"1"), ("t", None), ("u", "é".encode()), ("r", b"\x00")],
        [("u", None), ("r", b"k")]]
    assert record_headers(rows, False, {}) == [[], []]
    assert value_columns(rows).schema.names == ["user", "raw"]
    encoded = encode_values(rows.select(["kafka_headers"]))
    assert decode_value(encoded[0], rows.select(["kafka_headers"]).schema) == {
        "kafka_headers": [{"key": "t", "value": b"1"}, {"key": "eos-epoch", "value": b"3"},
                          {"key": "t", "value": None}]}


WIDE = pa.schema([*SCHEMA, ("day", pa.date32()), ("ok", pa.bool_()),
                  ("tiny", pa.decimal128(38, 18)), ("x", pa.float64())])
doubles = st.one_of(st.none(), st.floats(), st.floats(min_value=-1e17, max_value=1e17),
                    st.integers(-(10**6), 10**6).map(lambda n: n / 7))
wide_rows = st.lists(st.fixed_dictionaries({
    "key": st.one_of(st.none(), st.text(max_size=12), st.sampled_from(["", "a\"b", "c\\d", "\x00",
                                                                      "\u2028é"])),
    "at": stamps, "n": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    "amount": amounts, "avg": doubles, "raw": st.one_of(st.none(), st.binary(max_size=8)),
    "day": st.one_of(st.none(), st.dates()), "ok": st.one_of(st.none(), st.booleans()),
    "tiny": st.one_of(st.none(), st.decimals(min_value=-1, max_value=1, places=18,
                                             allow_nan=False, allow_infinity=False)),
    "x": doubles,
}), min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(wide_rows)
def test_arrows_encoding_is_byte_for_byte_the_python_definition(data: list[dict]) -> None:
    """``encode_values`` builds the text with Arrow (a 100k-row epoch in a fraction of the
    time); it must be exactly what encoding value by value in Python writes: decimals with
    every digit and no exponent, doubles as ``repr``, strings escaped by json."""
    from eos.sinks.records import _encode_in_python

    table = pa.Table.from_pylist(data, schema=WIDE)
    assert encode_values(table) == _encode_in_python(table)
