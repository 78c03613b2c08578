"""The event parser: every record is an event or has a reason naming the field; nothing is
rounded; ``parse_batch`` and ``parse`` give every record the same outcome and reason."""

from __future__ import annotations

import json
import math
import pickle
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eos.compute.formats import Parsed, Rejected
from eos.compute.formats.json import Parser
from eos.compute.formats.json_diagnostics import MAX_DEPTH
from eos.compute.formats.values import MAX_TS_MS
from eos.compute.precommit.watermark import NEG_INF
from eos.compute.reader import RAW_SCHEMA
from eos.core.config import EventConfig, parse_config
from eos.core.schema import parsed_schema

KTS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the Kafka timestamp of the records below
MS_TIME = {"field": "ts", "format": "epoch_ms"}


def event(fields: dict, time: dict | None = None, **extra: Any) -> EventConfig:
    """An EventConfig, validated like a pipeline file's."""
    return parse_config({
        "name": "p", "kafka": {"topic": "t"},
        "event": {"time": time or MS_TIME, "fields": fields, **extra},
        "window": {"type": "tumbling", "size": "10s"},
        "aggregations": {"n": "count(*)"},
    }).event


def doc(**fields: Any) -> bytes:
    """A record value; values of type Raw are written as they are (hostile number texts)."""
    parts = [f"{json.dumps(k)}: {v if isinstance(v, Raw) else json.dumps(v)}"
             for k, v in fields.items()]
    return ("{" + ", ".join(parts) + "}").encode()


class Raw(str):
    """JSON text inserted verbatim by ``doc``."""


def one(ftype: str, text: str, **spec: Any) -> Parsed | Rejected:
    """A record with the single field ``v`` of type ``ftype`` whose JSON text is ``text``."""
    parser = Parser(event({"v": {"type": ftype, **spec}}))
    return parser.parse(doc(ts=KTS, v=Raw(text)), KTS)


def raw_batch(values: list[bytes | None], stamps: list[int | None] | None = None,
              keys: list[bytes | None] | None = None) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {"topic": ["t"] * n, "partition": [3] * n, "offset": list(range(100, 100 + n)),
         "timestamp_ms": stamps if stamps is not None else [KTS] * n,
         "key": keys if keys is not None else [b"k%d" % i for i in range(n)],
         "value": values},
        schema=RAW_SCHEMA)


def same(a: Any, b: Any) -> bool:
    """Equal, and for doubles also the same sign of zero."""
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


def assert_batch_agrees(parser: Parser, values: list[bytes | None],
                        stamps: list[int | None] | None = None) -> list[Parsed | Rejected]:
    """parse_batch gives each record exactly what parse gives it."""
    stamps = stamps if stamps is not None else [KTS] * len(values)
    batch = raw_batch(values, stamps)
    out = parser.parse_batch(batch)
    assert out.schema == parsed_schema(parser.event)
    assert out.num_rows == len(values)
    names = list(parser.event.fields)
    singles = []
    for i, row in enumerate(out.to_pylist()):
        single = parser.parse(values[i], stamps[i])
        singles.append(single)
        assert (row["__partition"], row["__offset"], row["__kafka_ts"]) == (3, 100 + i, stamps[i])
        if isinstance(single, Parsed):
            assert row["__reason"] is None, (values[i], row["__reason"])
            assert row["__event_ms"] == single.event_ms
            got = tuple(row[name] for name in names)
            assert all(same(g, s) for g, s in zip(got, single.values, strict=True)), (got, single)
            assert row["__raw_key"] is None and row["__raw_value"] is None
        else:
            assert row["__reason"] == single.reason, values[i]
            assert row["__event_ms"] is None
            assert all(row[name] is None for name in names)
            assert row["__raw_key"] == b"k%d" % i and row["__raw_value"] == values[i]
    return singles


def rejected(result: Parsed | Rejected) -> str:
    assert isinstance(result, Rejected), result
    return result.reason


# --- constants --------------------------------------------------------------------------------

def test_constants() -> None:
    assert NEG_INF == -(2**63)
    last = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
    assert last - datetime(1970, 1, 1, tzinfo=UTC) == timedelta(milliseconds=MAX_TS_MS)


# --- the record as a whole ----------------------------------------------------------------------

@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "null record value"),
        (b'{"ts": 1, "v": "a"', "malformed JSON"),
        (b"", "malformed JSON: the record value is empty"),
        (b'{"ts": 1, "v": "a"} {}', "malformed JSON: trailing characters"),
        (b'{"ts": 1, "v": NaN}', "malformed JSON: NaN is not a JSON number (byte 15)"),
        (b'{"ts": 1, "v": Infinity}', "malformed JSON: Infinity is not a JSON number (byte 15)"),
        (b'{"ts": 1, "v": -Infinity}',
         "malformed JSON: -Infinity is not a JSON number (byte 15)"),
        (b'{"ts": 1, "v": "a", "x": NaN}', "NaN is not a JSON number"),  # even undeclared
        (b'{"ts": 1, "v": "\\ud800"}', "half of a UTF-16 surrogate pair"),
        (b"[1, 2]", "not a JSON object (got array)"),
        (b'"text"', "not a JSON object (got string)"),
        (b"12", "not a JSON object (got integer)"),
        (b"1.5", "not a JSON object (got number)"),
        (b"null", "not a JSON object (got null)"),
        (b'{"ts": 1, "v": "a", "x": ' + b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1) + b"}",
         f"malformed JSON: nested more than {MAX_DEPTH} levels deep"),
    ],
)
def test_records_that_are_not_a_json_object(raw: bytes | None, reason: str) -> None:
    parser = Parser(event({"v": "string"}))
    got = rejected(parser.parse(raw, KTS))
    assert got.startswith(reason) or reason in got, got
    assert len(got) <= 200


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe",
        b'{"ts": 1, "v": "caf\xc3"}',
        b'{"ts": 1, "v": "\xed\xa0\x80"}',  # an encoded surrogate is not UTF-8
        # where msgspec skips (an undeclared key or its value) it is still refused
        b'{"ts": 1, "v": "a", "other": "ok \xe2\x82"}',
        b'{"ts": 1, "v": "a", "\xc0\xaf": 1}',
        b'{"ts": 1, "v": "a"}\x80',
    ],
)
def test_not_utf8_names_the_first_bad_byte(raw: bytes) -> None:
    parser = Parser(event({"v": "string"}))
    first = min(i for i in range(len(raw)) if raw[i] >= 0x80)
    assert rejected(parser.parse(raw, KTS)) == f"not valid UTF-8 at byte {first}"
    assert_batch_agrees(parser, [raw, doc(ts=1, v="ok")])


def test_a_long_malformed_json_reason_is_cut_to_200_characters() -> None:
    parser = Parser(event({"v": "string"}))
    raw = b'{"' + b"\\u12" + b"x" * 1000 + b'": 1}'
    assert len(rejected(parser.parse(raw, KTS))) <= 200


def test_nesting_up_to_the_limit_is_fine_and_brackets_in_strings_do_not_count() -> None:
    parser = Parser(event({"v": "string"}))
    deep = MAX_DEPTH - 1
    ok = b'{"ts": 1, "v": "a", "x": ' + b"[" * deep + b"]" * deep + b"}"
    assert parser.parse(ok, KTS) == Parsed(1, ("a",))
    brackets = ("[" * (MAX_DEPTH * 2)).encode()
    assert parser.parse(b'{"ts": 1, "v": "' + brackets + b'"}', KTS) == \
        Parsed(1, (brackets.decode(),))


def test_undeclared_keys_are_ignored_whatever_they_hold() -> None:
    parser = Parser(event({"v": "string"}))
    raw = doc(ts=KTS, v="a", n=Raw("1" * 5000), big=Raw("1e400"), o={"x": [1, {"y": None}]})
    assert parser.parse(raw, KTS) == Parsed(KTS, ("a",))


def test_the_last_of_duplicate_keys_wins_and_escaped_keys_match() -> None:
    parser = Parser(event({"v": "string"}))
    assert parser.parse(b'{"ts": 1, "v": "a", "v": "b"}', KTS) == Parsed(1, ("b",))
    # every occurrence of a declared key is checked
    assert rejected(parser.parse(b'{"ts": 1, "v": 5, "v": "b"}', KTS)) == \
        "field 'v': Expected `str`, got `int`"
    assert parser.parse(b'{"ts": 1, "\\u0076": "c"}', KTS) == Parsed(1, ("c",))
    assert parser.parse(b'{"ts": 1, "v": "\\u00e9\\ud83d\\ude00"}', KTS) == Parsed(1, ("é😀",))


# --- types --------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("ftype", "text", "value"),
    [
        ("string", '"abc"', "abc"),
        ("string", '""', ""),
        ("long", "5", 5),
        ("long", "-0", 0),
        ("long", "9223372036854775807", 2**63 - 1),
        ("long", "-9223372036854775808", -(2**63)),
        ("double", "1e-12", 1e-12),
        ("double", "1e20", 1e20),
        ("double", "-0.0", -0.0),
        ("double", "0.1", 0.1),
        ("double", "5", 5.0),
        ("double", "123456789012345678901234567890", 1.2345678901234568e29),
        ("double", "1.7976931348623157e308", 1.7976931348623157e308),
        ("double", "1e-400", 0.0),  # correctly rounded: below the smallest subnormal
        ("boolean", "true", True),
        ("boolean", "false", False),
        ("decimal(12,2)", "12.34", Decimal("12.34")),
        ("decimal(12,2)", "5", Decimal("5.00")),
        ("decimal(12,2)", "-0.0", Decimal("0.00")),
        ("decimal(12,2)", "1E3", Decimal("1000.00")),
        ("decimal(12,2)", "9999999999.99", Decimal("9999999999.99")),
        ("decimal(12,2)", "-9999999999.99", Decimal("-9999999999.99")),
        ("decimal(5,1)", "1.50", Decimal("1.5")),  # trailing zeros are not places
        ("decimal(5,1)", "1.5000000000000000000000000000", Decimal("1.5")),
        ("decimal(38,9)", "0.1", Decimal("0.1")),  # exactly, not 0.1000000000000000055...
        ("decimal(38,9)", "-0.000000001", Decimal("-0.000000001")),
        ("decimal(38,9)", "99999999999999999999999999999.999999999",
         Decimal("99999999999999999999999999999.999999999")),
        ("decimal(38,0)", "1e37", Decimal("1e37")),
        ("decimal(3,3)", "0.999", Decimal("0.999")),
    ],
)
def test_values_keep_their_declared_type_exactly(ftype: str, text: str, value: Any) -> None:
    result = one(ftype, text)
    assert isinstance(result, Parsed), result
    assert same(result.values[0], value), (result.values[0], value)


@pytest.mark.parametrize(
    ("ftype", "text", "reason"),
    [
        ("string", '{"a": 1}', "field 'v' must be a string, got object"),
        ("string", "[]", "field 'v' must be a string, got array"),
        ("string", "5", "field 'v' must be a string, got integer"),
        ("string", "5.5", "field 'v' must be a string, got number"),
        ("string", "true", "field 'v' must be a string, got boolean"),
        ("string", "null", "field 'v' is null"),
        ("long", "9223372036854775808", "field 'v' = 9223372036854775808 is out of the long range"),
        ("long", "-9223372036854775809", "is out of the long range"),
        ("long", "1" * 100,
         f"field 'v' = a {int('1' * 100).bit_length()}-bit integer is out of the long range"),
        ("long", "1.0", "field 'v' must be an integer, got number 1.0"),
        ("long", "1e3", "field 'v' must be an integer, got number 1E+3"),
        ("long", "true", "field 'v' must be an integer, got boolean"),
        ("long", '"5"', "field 'v' must be an integer, got string"),
        ("double", "1e400", "field 'v' = 1E+400 is out of the double range"),
        ("double", "-1e400", "is out of the double range"),
        ("double", "1" * 400,
         f"field 'v' = a {int('1' * 400).bit_length()}-bit integer is out of the double range"),
        ("double", "true", "field 'v' must be a number, got boolean"),
        ("double", '"1.5"', "field 'v' must be a number, got string"),
        ("boolean", "1", "field 'v' must be true or false, got integer"),
        ("boolean", '"true"', "field 'v' must be true or false, got string"),
        ("boolean", "null", "field 'v' is null"),
        ("decimal(12,2)", "1.2345",
         "field 'v' = 1.2345 has more than 2 decimal places; decimal(12,2) is not rounded"),
        ("decimal(38,9)", "1e-12",
         "field 'v' = 1E-12 has more than 9 decimal places; decimal(38,9) is not rounded"),
        ("decimal(38,9)", "2.0000000005", "has more than 9 decimal places"),
        ("decimal(5,1)", "1.55", "has more than 1 decimal places"),
        ("decimal(12,2)", "1e20",
         "field 'v' = 1E+20 does not fit decimal(12,2) (at most 10 digits before the point)"),
        ("decimal(12,2)", "10000000000", "does not fit decimal(12,2)"),
        ("decimal(12,2)", "-10000000000.00", "does not fit decimal(12,2)"),
        ("decimal(38,9)", "1" * 30, "does not fit decimal(38,9)"),
        ("decimal(3,3)", "1", "does not fit decimal(3,3)"),
        ("decimal(12,2)", "1e999999999999999999", "does not fit decimal(12,2)"),
        ("decimal(12,2)", "1e-999999999999999999", "has more than 2 decimal places"),
        ("decimal(12,2)", "1e-99999999999999999999", "its exponent is out of range"),
        ("decimal(12,2)", '"12.34"', "field 'v' must be a number, got string"),
        ("decimal(12,2)", "true", "field 'v' must be a number, got boolean"),
    ],
)
def test_a_value_that_does_not_fit_its_type_is_quarantined_not_rounded(
        ftype: str, text: str, reason: str) -> None:
    assert reason in rejected(one(ftype, text))


def test_decimal_places_are_counted_without_trailing_zeros_and_exponents_apply() -> None:
    assert one("decimal(12,2)", "1.2300000") == Parsed(KTS, (Decimal("1.23"),))
    assert "more than 2 decimal places" in rejected(one("decimal(12,2)", "1.2340000"))
    assert one("decimal(12,2)", "1.234e2") == Parsed(KTS, (Decimal("123.40"),))
    assert "more than 2 decimal places" in rejected(one("decimal(12,2)", "1234e-3"))


# --- paths and optional fields ----------------------------------------------------------------

NESTED = {"page": "string", "user": {"path": "user.id", "type": "string"},
          "country": {"path": "user.country", "type": "string", "optional": True},
          "deep": {"path": "a.b.c", "type": "long", "optional": True}}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"page": "/", "user": {"id": "u1", "country": "DE"}}, ("/", "u1", "DE", None)),
        ({"page": "/", "user": {"id": "u1"}}, ("/", "u1", None, None)),
        ({"page": "/", "user": {"id": "u1", "country": None}}, ("/", "u1", None, None)),
        ({"page": "/", "user": {"id": "u1"}, "a": {"b": {"c": 7}}}, ("/", "u1", None, 7)),
        ({"page": "/", "user": {"id": "u1"}, "a": None}, ("/", "u1", None, None)),
        ({"page": "/", "user": {"id": "u1"}, "a": {"b": None}}, ("/", "u1", None, None)),
        ({"page": "/", "user": {"id": "u1"}, "a": {}}, ("/", "u1", None, None)),
        ({"page": "/", "user": {}}, "missing field 'user' (path user.id)"),
        ({"page": "/"}, "missing field 'user' (path user.id)"),
        ({"page": "/", "user": "bob"},
         "field 'user' (path user.id): 'user' is a string, not an object"),
        ({"page": "/", "user": [1]},
         "field 'user' (path user.id): 'user' is an array, not an object"),
        ({"page": "/", "user": None},
         "field 'user' (path user.id): 'user' is null, not an object"),
        ({"page": "/", "user": {"id": None}}, "field 'user' (path user.id) is null"),
        ({"page": "/", "user": {"id": 5}},
         "field 'user' (path user.id) must be a string, got integer"),
        ({"page": {"x": 1}, "user": {"id": "u"}}, "field 'page' must be a string, got object"),
        ({"user": {"id": "u"}}, "missing field 'page'"),
        # an optional field may be absent or null, not of another type
        ({"page": "/", "user": {"id": "u", "country": 49}},
         "field 'country' (path user.country) must be a string, got integer"),
        ({"page": "/", "user": {"id": "u"}, "a": {"b": 5}},
         "field 'deep' (path a.b.c): 'a.b' is an integer, not an object"),
        ({"page": "/", "user": {"id": "u"}, "a": "x"},
         "field 'deep' (path a.b.c): 'a' is a string, not an object"),
        ({"page": "/", "user": {"id": "u"}, "a": {"b": {"c": 1.5}}},
         "field 'deep' (path a.b.c) must be an integer, got number 1.5"),
    ],
)
def test_dotted_paths_and_optional_fields(fields: dict, expected: tuple | str) -> None:
    parser = Parser(event(NESTED))
    result = parser.parse(doc(ts=KTS, **fields), KTS)
    if isinstance(expected, tuple):
        assert result == Parsed(KTS, expected)
    else:
        assert rejected(result) == expected


def test_fields_are_checked_in_declared_order_after_the_time() -> None:
    parser = Parser(event({"b": "long", "a": "string"}))
    assert rejected(parser.parse(doc(ts=KTS, a=1, b="x"), KTS)) == \
        "field 'b' must be an integer, got string"
    assert rejected(parser.parse(doc(ts="x", a=1, b="x"), KTS)).startswith("field 'ts' must be")
    assert rejected(parser.parse(doc(a=1, b="x"), KTS)) == "missing field 'ts'"


def test_one_path_read_by_several_fields_and_by_the_time() -> None:
    """A path may be declared twice (and be the time too); each use keeps its own rule."""
    parser = Parser(event({"ts_long": {"path": "ts", "type": "long"},
                           "ts_double": {"path": "ts", "type": "double"},
                           "same": {"path": "ts", "type": "long"}}))
    assert parser.parse(doc(ts=KTS), KTS) == Parsed(KTS, (KTS, float(KTS), KTS))
    assert rejected(parser.parse(doc(ts=1.5), KTS)).startswith("field 'ts' must be integer")
    assert_batch_agrees(parser, [doc(ts=KTS), doc(ts=1.5), doc(ts="x"), doc(ts=2**70)])


def test_a_key_that_is_both_a_value_and_an_object() -> None:
    parser = Parser(event({"u": {"path": "user", "type": "string", "optional": True},
                           "uid": {"path": "user.id", "type": "string", "optional": True}}))
    assert parser.parse(doc(ts=KTS), KTS) == Parsed(KTS, (None, None))
    assert parser.parse(doc(ts=KTS, user=None), KTS) == Parsed(KTS, (None, None))
    assert rejected(parser.parse(doc(ts=KTS, user={"id": "x"}), KTS)) == \
        "field 'u' (path user) must be a string, got object"
    assert rejected(parser.parse(doc(ts=KTS, user="x"), KTS)) == \
        "field 'uid' (path user.id): 'user' is a string, not an object"
    assert_batch_agrees(parser, [doc(ts=KTS), doc(ts=KTS, user=None), doc(ts=KTS, user="x"),
                                 doc(ts=KTS, user={"id": "x"}), doc(ts=KTS, user={"id": 1})])


# --- event time -------------------------------------------------------------------------------

ISO = {"field": "ts", "format": "iso8601"}
SECONDS = {"field": "ts", "format": "epoch_s"}


@pytest.mark.parametrize(
    ("time", "text", "expected"),
    [
        (MS_TIME, "1767225601234", 1767225601234),
        (MS_TIME, "0", 0),
        (MS_TIME, str(MAX_TS_MS), MAX_TS_MS),
        (MS_TIME, str(MAX_TS_MS + 1), "field 'ts' = 253402300800000 is outside 1970..9999"),
        (MS_TIME, "-1", "field 'ts' = -1 is outside 1970..9999"),
        (MS_TIME, "1767225601234.5", "field 'ts' must be integer epoch milliseconds, got number"),
        (MS_TIME, "1.7e12", "field 'ts' must be integer epoch milliseconds, got number 1.7E+12"),
        (MS_TIME, '"1767225601234"', "field 'ts' must be integer epoch milliseconds, got string"),
        (MS_TIME, "true", "field 'ts' must be integer epoch milliseconds, got boolean"),
        (MS_TIME, "null", "field 'ts' is null"),
        (SECONDS, "1700000000", 1_700_000_000_000),
        (SECONDS, "1700000000.5", 1_700_000_000_500),
        (SECONDS, "1700000000.123", 1_700_000_000_123),
        (SECONDS, "1700000000.1230000", 1_700_000_000_123),
        (SECONDS, "1.7e9", 1_700_000_000_000),
        (SECONDS, "1700000000.001", 1_700_000_000_001),
        (SECONDS, "253402300799.999", MAX_TS_MS),
        (SECONDS, "1700000000.1234",
         "field 'ts' = 1700000000.1234 is finer than a millisecond; "
         "event time is kept in ms and not rounded"),
        (SECONDS, "1e-4", "finer than a millisecond"),
        (SECONDS, "253402300800", "field 'ts' = 253402300800 is outside 1970..9999"),
        (SECONDS, "1e400", "field 'ts' = 1E+400 is outside 1970..9999"),
        (SECONDS, "-0.5", "field 'ts' = -0.5 is outside 1970..9999"),
        (SECONDS, '"1700000000"', "field 'ts' must be a number of epoch seconds, got string"),
        (SECONDS, "false", "field 'ts' must be a number of epoch seconds, got boolean"),
        (ISO, '"2026-01-01T00:00:01.234Z"', 1_767_225_601_234),
        (ISO, '"2026-01-01T05:30:01.234+05:30"', 1_767_225_601_234),
        (ISO, '"2025-12-31T16:00:01.234-08:00"', 1_767_225_601_234),
        (ISO, '"2026-01-01T00:00:01.234+00:00"', 1_767_225_601_234),
        (ISO, '"2026-01-01T00:00:01Z"', 1_767_225_601_000),
        (ISO, '"2026-01-01 00:00:01.5Z"', 1_767_225_601_500),
        (ISO, '"2026-01-01T00:00:01.234000Z"', 1_767_225_601_234),
        (ISO, '"2026-01-01T00:00:01.234000000Z"', 1_767_225_601_234),
        (ISO, '"20260101T000001.234Z"', 1_767_225_601_234),
        (ISO, '"1970-01-01T00:00:00Z"', 0),
        (ISO, '"9999-12-31T23:59:59.999Z"', MAX_TS_MS),
        (ISO, '"2026-01-01T00:00:01.2345Z"',
         "field 'ts' = '2026-01-01T00:00:01.2345Z' is finer than a millisecond; "
         "event time is kept in ms and not rounded"),
        (ISO, '"2026-01-01T00:00:01.234000001Z"', "is finer than a millisecond"),  # past µs
        (ISO, '"2026-01-01T00:00:01+05:30:00.0001"', "is finer than a millisecond"),
        (ISO, '"2026-01-01T00:00:01.234"',
         "field 'ts' = '2026-01-01T00:00:01.234' has no UTC offset (end it with Z or +HH:MM)"),
        (ISO, '"2026-01-01"', "has no UTC offset"),
        (ISO, '"yesterday"', "field 'ts' = 'yesterday' is not an ISO 8601 time"),
        (ISO, '"2026-01-01T24:00:00Z"', "is not an ISO 8601 time"),
        (ISO, '"1969-12-31T23:59:59.999Z"', "is outside 1970..9999"),
        (ISO, '"9999-12-31T23:59:59.999-00:01"', "is outside 1970..9999"),
        (ISO, '"0001-01-01T00:00:00+01:00"', "is outside 1970..9999"),
        (ISO, "1767225601234", "field 'ts' must be an ISO 8601 string, got integer"),
    ],
)
def test_event_time(time: dict, text: str, expected: int | str) -> None:
    parser = Parser(event({"v": "string"}, time=time, max_future="3000000d"))
    result = parser.parse(doc(ts=Raw(text), v="a"), KTS)
    if isinstance(expected, int):
        assert result == Parsed(expected, ("a",))
    else:
        assert expected in rejected(result)


def test_the_time_field_has_its_own_path() -> None:
    parser = Parser(event({"v": "string"}, time={"field": "meta.at", "format": "epoch_ms"}))
    assert parser.parse(doc(meta={"at": 5}, v="a"), KTS) == Parsed(5, ("a",))
    assert rejected(parser.parse(doc(v="a"), KTS)) == "missing field 'meta.at'"
    assert rejected(parser.parse(doc(meta=3, v="a"), KTS)) == \
        "field 'meta.at': 'meta' is an integer, not an object"


@pytest.mark.parametrize(
    ("kts", "expected"),
    [
        (KTS, KTS),
        (0, 0),
        (None, "the record has no Kafka timestamp"),
        (-1, "the record has no Kafka timestamp"),
        (MAX_TS_MS + 1, "the record's Kafka timestamp 253402300800000 is outside 1970..9999"),
    ],
)
def test_kafka_timestamp_time(kts: int | None, expected: int | str) -> None:
    parser = Parser(event({"v": "string"}, time={"format": "kafka_timestamp"}))
    result = parser.parse(doc(v="a"), kts)
    if isinstance(expected, int):
        assert result == Parsed(expected, ("a",))
    else:
        assert rejected(result) == expected
    assert_batch_agrees(parser, [doc(v="a"), doc(v=1), None], [kts, kts, kts])


@pytest.mark.parametrize(
    ("ts", "kts", "ok"),
    [
        (KTS + 60_000, KTS, True),
        (KTS + 60_001, KTS, False),
        (KTS - 10**9, KTS, True),
        (KTS + 10**12, None, True),  # no Kafka timestamp: nothing to compare with
        (KTS + 10**12, 0, True),
        (KTS + 10**12, -1, True),
    ],
)
def test_max_future(ts: int, kts: int | None, ok: bool) -> None:
    parser = Parser(event({"v": "string"}, max_future="60s"))
    result = parser.parse(doc(ts=ts, v="a"), kts)
    if ok:
        assert result == Parsed(ts, ("a",))
    else:
        assert rejected(result) == ("field 'ts' is 60001 ms ahead of the record's Kafka "
                                    "timestamp (max_future is 60000 ms)")
    assert_batch_agrees(parser, [doc(ts=ts, v="a")] * 2, [kts, KTS])


# --- batches ------------------------------------------------------------------------------------

PAGEVIEWS = {"page": "string", "user": {"path": "user.id", "type": "string"},
             "country": {"path": "user.country", "type": "string"}, "revenue": "decimal(12,2)"}


def pageview(i: int, **changes: Any) -> bytes:
    fields = {"ts": f"2026-01-01T00:00:{i % 60:02d}.{i % 1000:03d}Z", "page": f"/p/{i}",
              "user": {"id": f"u{i}", "country": "DE"}, "revenue": Raw(f"{i}.{i % 100:02d}"),
              "session": f"s{i}", **changes}
    return doc(**{k: v for k, v in fields.items() if v is not None})


def test_a_batch_of_good_records() -> None:
    parser = Parser(event(PAGEVIEWS, time=ISO))
    values = [pageview(i) for i in range(50)]
    out = parser.parse_batch(raw_batch(values))
    assert out.column("__reason").null_count == 50
    assert out.column("revenue").to_pylist()[7] == Decimal("7.07")
    assert out.column("__event_ms").to_pylist()[7] == KTS + 7_007
    assert_batch_agrees(parser, values)


def test_a_mixed_batch_quarantines_only_the_bad_records() -> None:
    parser = Parser(event(PAGEVIEWS, time=ISO))
    values = [pageview(i) for i in range(12)]
    values[1] = None
    values[3] = b"not json"
    values[4] = pageview(4, revenue=Raw("1.234"))
    values[6] = pageview(6, user="bob")
    values[8] = pageview(8, ts="2026-01-01T00:00:01")
    values[9] = b"\xff"
    values[10] = pageview(10, revenue=Raw("1e20"))
    singles = assert_batch_agrees(parser, values)
    assert [isinstance(s, Rejected) for s in singles] == \
        [False, True, False, True, True, False, True, False, True, True, True, False]


def test_a_batch_of_only_bad_records_and_an_empty_batch() -> None:
    parser = Parser(event(PAGEVIEWS, time=ISO))
    assert_batch_agrees(parser, [None, b"[]", b"{}", pageview(1, page=None)])
    empty = parser.parse_batch(raw_batch([]))
    assert empty.num_rows == 0 and empty.schema == parsed_schema(parser.event)


def test_batch_with_null_timestamps_and_sliced_columns() -> None:
    parser = Parser(event({"v": "string"}, max_future="1s"))
    values = [doc(ts=KTS + 5000, v="a"), doc(ts=KTS, v="b"), doc(ts=KTS + 5000, v="c")]
    assert_batch_agrees(parser, values, [None, KTS, KTS])
    sliced = raw_batch([b"x", *values], [KTS] * 4).slice(1)
    assert parser.parse_batch(sliced).column("__reason").to_pylist() == [
        "field 'ts' is 5000 ms ahead of the record's Kafka timestamp (max_future is 1000 ms)",
        None,
        "field 'ts' is 5000 ms ahead of the record's Kafka timestamp (max_future is 1000 ms)"]


def test_batch_decimal_column_checked_whole_agrees_value_by_value() -> None:
    """A decimal column is checked by Arrow at once when it can be; mixed columns fall back."""
    parser = Parser(event({"d": "decimal(5,2)", "o": {"type": "decimal(5,2)", "optional": True}}))
    texts = ["1", "1.5", "1.50", "-999.99", "999.99", "1000", "0.001", "0.0010", "1e2", "1e3",
             "-0", "1E-2", "1e-400", '"1"', "true", "null"]
    values = [doc(ts=KTS, d=Raw(t)) for t in texts] + [doc(ts=KTS, d=1, o=Raw(t)) for t in texts]
    assert_batch_agrees(parser, values)
    assert_batch_agrees(parser, [doc(ts=KTS, d=Raw(t)) for t in ("1", "2.5", "999.99")])


def test_the_parser_pickles_by_its_config() -> None:
    parser = Parser(event(PAGEVIEWS, time=ISO))
    again = pickle.loads(pickle.dumps(parser))
    assert again.parse(pageview(3), KTS) == parser.parse(pageview(3), KTS)


# --- properties -------------------------------------------------------------------------------

ALL_TYPES = {"s": {"type": "string", "optional": True}, "n": "long", "x": "double",
             "d": "decimal(12,2)", "b": {"type": "boolean", "optional": True},
             "u": {"path": "user.id", "type": "string"},
             "c": {"path": "user.c", "type": "decimal(38,9)", "optional": True}}
TIMES = [MS_TIME, SECONDS, ISO, {"format": "kafka_timestamp"}]
PARSERS = [Parser(event(ALL_TYPES, time=t, max_future="1d")) for t in TIMES]

numbers = st.one_of(
    st.sampled_from(["0", "-0", "-0.0", "1e-12", "1e20", "1e400", "-1e400", "1.5", "1.50", "0.1",
                     "12.345", "9223372036854775807", "9223372036854775808", "1E3", "1e-400",
                     "123456789012.34", "9999999999.99", "1e999999999999999999",
                     "1e-99999999999999999999", "1700000000.5", "1700000000.1234",
                     str(KTS), str(KTS // 1000), str(MAX_TS_MS)]),
    st.integers().map(str),
    st.integers(min_value=0, max_value=MAX_TS_MS).map(str),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
times_iso = st.one_of(
    st.datetimes(min_value=datetime(1960, 1, 1), max_value=datetime(9999, 12, 31),
                 timezones=st.sampled_from([UTC, None, timezone(timedelta(hours=5, minutes=30))]),
                 ).map(lambda d: d.isoformat()),
    st.sampled_from(["2026-01-01T00:00:01.234Z", "2026-01-01T00:00:01.2345Z",
                     "2026-01-01T00:00:01.234+05:30", "2026-01-01T00:00:01.1234567Z",
                     "2026-01-01", "x"]),
).map(json.dumps)
leaves = st.one_of(numbers, times_iso, st.sampled_from(["true", "false", "null", "[]", "{}"]),
                   st.text(max_size=8).map(json.dumps))


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    keys = draw(st.lists(st.sampled_from(["ts", "s", "n", "x", "d", "b", "user", "extra"]),
                         unique=True))
    parts = []
    for key in keys:
        if key == "user" and draw(st.booleans()):
            inner = draw(st.dictionaries(st.sampled_from(["id", "c", "z"]), leaves, max_size=3))
            text = "{" + ", ".join(f'"{k}": {v}' for k, v in inner.items()) + "}"
        else:
            text = draw(leaves)
        parts.append(f'"{key}": {text}')
    return ("{" + ", ".join(parts) + "}").encode()


good_times = [
    st.integers(0, MAX_TS_MS).map(str),
    st.one_of(st.integers(0, MAX_TS_MS // 1000).map(str),
              st.integers(0, MAX_TS_MS).map(lambda ms: f"{ms // 1000}.{ms % 1000:03d}")),
    st.integers(0, MAX_TS_MS).map(lambda ms: json.dumps(
        (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)).isoformat())),
    st.just(None),
]
good_fields = {
    "s": st.one_of(st.text(max_size=8).map(json.dumps), st.just("null"), st.none()),
    "n": st.integers(-(2**63), 2**63 - 1).map(str),
    "x": numbers,
    "d": st.decimals(-(10**10) + 1, 10**10 - 1, places=2).map(str),
    "b": st.sampled_from(["true", "false", "null", None]),
}


@st.composite
def mostly_good(draw: st.DrawFn, which: int) -> bytes:
    """A document valid for PARSERS[which], sometimes with one value made hostile or removed."""
    values = {k: draw(v) for k, v in good_fields.items()}
    values["ts"] = draw(good_times[which])
    user = {"id": draw(st.text(max_size=6).map(json.dumps)),
            "c": draw(st.one_of(st.none(), st.decimals(-(10**20), 10**20, places=9).map(str)))}
    spoil = draw(st.sampled_from(["", "", "ts", "s", "n", "x", "d", "b", "id", "c"]))
    if spoil:
        hostile = draw(st.one_of(leaves, st.none()))
        (user if spoil in ("id", "c") else values)[spoil] = hostile
    parts = [f'"{k}": {v}' for k, v in values.items() if v is not None]
    inner = ", ".join(f'"{k}": {v}' for k, v in user.items() if v is not None)
    parts.append(f'"user": {{{inner}}}')
    return ("{" + ", ".join(draw(st.permutations(parts))) + "}").encode()


records = st.one_of(documents(), st.none(), st.binary(max_size=40),
                    st.sampled_from([b"[1]", b'"x"', b"{", b'{"ts": NaN}']))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(range(len(PARSERS))))
def test_batch_agrees_with_single_records(data: st.DataObject, which: int) -> None:
    """Mixed good and bad records: parse_batch gives each exactly parse's outcome and reason, and
    every refusal comes from a rule (never the catch-all)."""
    parser = PARSERS[which]
    kafka_ts = st.sampled_from([KTS, MAX_TS_MS, None, 0, -5])
    items = data.draw(st.lists(st.tuples(st.one_of(mostly_good(which), mostly_good(which),
                                                   records), kafka_ts),
                               min_size=1, max_size=12))
    values = [v for v, _ in items]
    stamps = [k for _, k in items]
    for result in assert_batch_agrees(parser, values, stamps):
        if isinstance(result, Rejected):
            assert not result.reason.startswith("rejected by the"), result


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)))
def test_parse_is_total(raw: bytes, kts: int | None) -> None:
    for parser in PARSERS:
        result = parser.parse(raw, kts)
        assert isinstance(result, Parsed | Rejected)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60), st.text(max_size=20))
def test_parse_is_total_on_near_json(prefix: bytes, text: str) -> None:
    raw = b'{"ts": 1, "n": 1, "x": 1, "d": 1, "user": {"id": ' + prefix + json.dumps(text).encode()
    for parser in PARSERS:
        assert isinstance(parser.parse(raw, KTS), Parsed | Rejected)
        assert isinstance(parser.parse(raw + b"}}", KTS), Parsed | Rejected)


DOUBLE = Parser(event({"v": "double"}))


@given(st.one_of(st.floats(allow_nan=False).map(repr),
                 st.decimals(allow_nan=False, allow_infinity=False).map(str),
                 st.integers().map(str)).filter(lambda t: "inf" not in t.lower()))
def test_a_double_is_the_correctly_rounded_value_of_its_text(text: str) -> None:
    result = DOUBLE.parse(doc(ts=KTS, v=Raw(text)), KTS)
    expected = float(Decimal(text))  # correctly rounded; inf beyond the largest double
    if math.isinf(expected):
        assert "out of the double range" in rejected(result)
    else:
        assert isinstance(result, Parsed) and same(result.values[0], expected), (text, result)


@given(st.one_of(st.decimals(min_value=-(10**40), max_value=10**40, allow_nan=False,
                             allow_infinity=False).map(str),
                 st.tuples(st.integers(-(10**12), 10**12), st.integers(-60, 60)).map(
                     lambda c: f"{c[0]}e{c[1]}"),
                 st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 12)).map(
                     lambda c: f"{c[0]}.{c[1]:06d}{'0' * c[2]}")),
       st.sampled_from([(12, 2), (38, 9), (5, 0), (3, 3), (38, 0), (10, 6)]))
def test_a_decimal_is_kept_exactly_or_refused(text: str, ps: tuple[int, int]) -> None:
    """The value is exactly the text's, or the record is refused: never rounded. Batches agree."""
    precision, scale = ps
    parser = Parser(event({"v": f"decimal({precision},{scale})"}))
    raw = doc(ts=KTS, v=Raw(text))
    result = parser.parse(raw, KTS)
    numerator, denominator = Decimal(text).as_integer_ratio()
    fits = 10**scale % denominator == 0 and abs(numerator) < denominator * 10 ** (precision - scale)
    if fits:
        assert isinstance(result, Parsed) and result.values[0] == Decimal(text), (text, result)
    else:
        assert isinstance(result, Rejected), (text, result)
    assert_batch_agrees(parser, [raw, raw, doc(ts=KTS, v=1)])


@given(st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30)),
       st.integers(min_value=-23 * 60, max_value=23 * 60),
       st.integers(min_value=0, max_value=9), st.integers(min_value=0, max_value=10**9 - 1))
def test_iso_times_convert_exactly(moment: datetime, offset_min: int, digits: int,
                                   nanos: int) -> None:
    """Any offset and any number of fraction digits: exact epoch ms, or refused if the fraction
    has a non-zero digit past the milliseconds."""
    fraction = f"{nanos:09d}"[:digits]
    sign = "+" if offset_min >= 0 else "-"
    offset = f"{sign}{abs(offset_min) // 60:02d}:{abs(offset_min) % 60:02d}"
    text = moment.replace(microsecond=0).isoformat() + (f".{fraction}" if digits else "") + offset
    parser = Parser(event({"v": "string"}, time=ISO, max_future="3000000d"))
    result = parser.parse(doc(ts=text, v="a"), KTS)
    utc = moment.replace(microsecond=0, tzinfo=UTC) - timedelta(minutes=offset_min)
    seconds = int((utc - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds())
    frac = Decimal(f"0.{fraction}" if digits else "0")
    if (frac * 1000) != (frac * 1000).to_integral_value():
        assert "finer than a millisecond" in rejected(result)
    else:
        assert result == Parsed(seconds * 1000 + int(frac * 1000), ("a",))


@pytest.mark.parametrize("pipeline", ["pageviews", "clicks"])
def test_every_generated_record_parses_or_is_quarantined_as_its_kind(pipeline: str) -> None:
    """The generator's good and late records parse under the shipped pipeline's schema and each
    of its bad kinds is quarantined: the demo's ground truth and the parser agree."""
    from eos.core.config import load_pipeline
    from eos.tools.generator import GeneratorSpec, generate, generator_options

    config = load_pipeline(pipeline)
    parser = Parser(config.event)
    spec = GeneratorSpec(events=3000, late_fraction=0.05, bad_fraction=0.2, seed=3,
                         disorder_ms=2000, **generator_options(config))
    outcomes: dict[str, set[bool]] = {}
    for record in generate(spec):
        parsed = parser.parse(record.value, record.timestamp_ms)
        outcomes.setdefault(record.kind, set()).add(isinstance(parsed, Parsed))
    assert outcomes.pop("good") == {True} and outcomes.pop("late") == {True}
    assert len(outcomes) >= 5 and all(o == {False} for o in outcomes.values()), outcomes


# -- the string limit: no output record may outgrow a sink ------------------------------------

def test_a_string_longer_than_max_string_bytes_is_quarantined_naming_the_field_and_limit() -> None:
    """A 600 KB group value once made a window record over Kafka's 1 MB limit and halted the
    pipeline (``MSG_SIZE_TOO_LARGE`` on every retry); the record is quarantined instead."""
    parser = Parser(event({"user": "string", "n": "long"}))
    huge = doc(ts=KTS, user="u" * 600_000, n=1)
    assert rejected(parser.parse(huge, KTS)) == (
        "field 'user' is 600000 bytes, more than event.max_string_bytes (16384): no output "
        "record may outgrow a sink's record limit")
    at_limit = doc(ts=KTS, user="u" * 16_384, n=1)
    assert isinstance(parser.parse(at_limit, KTS), Parsed)
    assert_batch_agrees(parser, [huge, at_limit, doc(ts=KTS, user="short", n=2)])


def test_the_string_limit_counts_utf8_bytes_and_is_configurable() -> None:
    parser = Parser(event({"city": {"type": "string", "optional": True}},
                          max_string_bytes=100))
    accepted = doc(ts=KTS, city="é" * 50)  # 100 bytes
    refused = doc(ts=KTS, city="é" * 51)  # 102 bytes, 51 characters
    assert isinstance(parser.parse(accepted, KTS), Parsed)
    assert "is 102 bytes, more than event.max_string_bytes (100)" in rejected(
        parser.parse(refused, KTS))
    assert_batch_agrees(parser, [accepted, refused, doc(ts=KTS), doc(ts=KTS, city=None)])


@pytest.mark.parametrize("stamp", [None, -1, 1_700_000_000_000, MAX_TS_MS + 1])
def test_without_an_event_time_no_time_rule_quarantines(stamp: int | None) -> None:
    """``event.time`` absent (a pipeline without windows): a record without a Kafka timestamp,
    or with one outside 1970..9999, is accepted; with ``kafka_timestamp`` it is quarantined."""
    timeless = EventConfig.model_validate({"fields": {"page": "string"}})
    timed = EventConfig.model_validate({"fields": {"page": "string"},
                                        "time": {"format": "kafka_timestamp"}})
    raw = b'{"page": "/a"}'
    assert Parser(timeless).parse(raw, stamp) == Parsed(0, ("/a",))
    batch = pa.RecordBatch.from_pylist(
        [{"partition": 0, "offset": 0, "timestamp_ms": stamp, "value": raw}], schema=RAW_SCHEMA)
    parsed = Parser(timeless).parse_batch(batch)
    assert parsed.column("page").to_pylist() == ["/a"]
    assert parsed.column("__reason").to_pylist() == [None]
    if stamp is None or not 0 <= stamp <= MAX_TS_MS:
        assert isinstance(Parser(timed).parse(raw, stamp), Rejected)
