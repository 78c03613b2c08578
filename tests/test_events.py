"""Parsing and window rules: every record is an event or has a reason; windows are half-open."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eos.events import (
    NEG_INF,
    Event,
    Rejected,
    advance_watermark,
    parse_event,
    window_start,
)
from eos.produce import BAD_KINDS, GeneratorSpec, generate

KTS = 1_767_225_600_000


def _raw(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_good_event() -> None:
    event = parse_event(_raw(key="a", ts=KTS, value=1.25), KTS)
    assert event == Event("a", KTS, Decimal("1.250000000"))


def test_reasons_name_the_problem() -> None:
    cases = {
        None: "null record value",
        b"\xff\xfe": "not valid UTF-8",
        b'{"key": "a", "ts": 1': "malformed JSON",
        b"[1, 2]": "not a JSON object (got array)",
        _raw(ts=KTS, value=1): "missing field 'key'",
        _raw(key=None, ts=KTS, value=1): "field 'key' is null",
        _raw(key=7, ts=KTS, value=1): "field 'key' must be a string, got integer",
        _raw(key="a", ts="yesterday", value=1): "field 'ts' must be integer epoch milliseconds",
        _raw(key="a", ts=1.5, value=1): "field 'ts' must be integer epoch milliseconds",
        _raw(key="a", ts=True, value=1): "field 'ts' must be integer epoch milliseconds",
        _raw(key="a", ts=-5, value=1): "outside 1970..9999",
        _raw(key="a", ts=KTS + 10**12, value=1): "ahead of the record's Kafka timestamp",
        _raw(key="a", ts=KTS, value="lots"): "field 'value' must be a number, got string",
        _raw(key="a", ts=KTS, value=10**19): "out of range",
        b'{"key": "a", "ts": 1, "value": NaN}': "malformed JSON",
        _raw(key="k" * 2000, ts=KTS, value=1): "longer than 1024",
    }
    for raw, reason in cases.items():
        parsed = parse_event(raw, KTS, max_future_ms=86_400_000)
        assert isinstance(parsed, Rejected), raw
        assert reason in parsed.reason, (raw, parsed.reason)


def test_every_generated_bad_record_is_rejected_and_every_good_one_parses() -> None:
    spec = GeneratorSpec(events=3000, bad_fraction=0.2, late_fraction=0.1, disorder_ms=500, seed=5)
    kinds = set()
    for record in generate(spec):
        parsed = parse_event(record.value, record.timestamp_ms, max_future_ms=86_400_000)
        if record.kind in BAD_KINDS:
            assert isinstance(parsed, Rejected), record
            kinds.add(record.kind)
        else:
            assert isinstance(parsed, Event), (record, parsed)
    assert kinds == set(BAD_KINDS)


def test_generator_is_deterministic() -> None:
    spec = GeneratorSpec(events=500, bad_fraction=0.1, seed=11)
    assert list(generate(spec)) == list(generate(spec))
    assert list(generate(spec)) != list(generate(GeneratorSpec(events=500, seed=12)))


@given(st.binary(max_size=200))
def test_parse_is_total(raw: bytes) -> None:
    parsed = parse_event(raw, KTS, max_future_ms=1000)
    assert isinstance(parsed, Event | Rejected)


@given(
    key=st.text(max_size=30),
    ts=st.integers(min_value=0, max_value=KTS),
    value=st.decimals(min_value=-(10**12), max_value=10**12, allow_nan=False, places=4),
)
def test_valid_events_round_trip(key: str, ts: int, value: Decimal) -> None:
    raw = json.dumps({"key": key, "ts": ts, "value": float(value)}).encode()
    parsed = parse_event(raw, KTS)
    assert isinstance(parsed, Event)
    assert parsed.key == key and parsed.ts_ms == ts


@given(ts=st.integers(min_value=0, max_value=2**50), size=st.integers(min_value=1, max_value=10**8))
def test_windows_are_half_open(ts: int, size: int) -> None:
    start = window_start(ts, size)
    assert start <= ts < start + size
    assert start % size == 0
    assert window_start(start + size, size) == start + size


@given(st.lists(st.integers(min_value=0, max_value=10**13), max_size=20),
       st.integers(min_value=0, max_value=10**6))
def test_watermark_never_moves_back(maxima: list[int], lateness: int) -> None:
    wm = NEG_INF
    seen = None
    for m in maxima:
        seen = m if seen is None else max(seen, m)
        new = advance_watermark(wm, seen, lateness)
        assert new >= wm
        wm = new
    assert advance_watermark(wm, None, lateness) == wm


@pytest.mark.parametrize("raw", [b"1e-12", b"0.0000000001", b"2.0000000005"])
def test_a_value_with_more_than_nine_decimal_places_is_quarantined_not_rounded(raw: bytes) -> None:
    parsed = parse_event(b'{"key": "k", "ts": 1, "value": ' + raw + b"}", None)
    assert isinstance(parsed, Rejected)
    assert "more than 9 decimal places" in parsed.reason and "not rounded" in parsed.reason


def test_values_with_up_to_nine_decimal_places_are_kept_exactly() -> None:
    parsed = parse_event(b'{"key": "k", "ts": 1, "value": -0.000000001}', None)
    assert isinstance(parsed, Event) and parsed.value == Decimal("-0.000000001")
    zero = parse_event(b'{"key": "k", "ts": 1, "value": -0.0}', None)
    assert isinstance(zero, Event) and zero.value == 0
