"""Event parsing and event-time windows: the pure rules every phase and test agrees on.

Parsing is strict and total: every record either becomes an event or gets a reason, so nothing is
dropped silently. Values are exact decimals so sums do not depend on the order Spark adds them in.
"""

from __future__ import annotations

import json
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import NamedTuple

MAX_TS_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
MAX_ABS_VALUE = Decimal(10) ** 18
MAX_KEY_CHARS = 1024
SCALE = Decimal("1e-9")  # values and sums are DECIMAL(38, 9)
NEG_INF = -(2**63)  # the watermark before the first event


class Event(NamedTuple):
    key: str
    ts_ms: int
    value: Decimal


class Rejected(NamedTuple):
    reason: str


def _reject_constant(name: str) -> Decimal:
    raise ValueError(f"{name} is not a JSON number")


# One decoder for every record: json.loads(text, **settings) builds a new decoder per call, which
# was 60% of the parse cost (2.9 -> 1.2 us per record).
_DECODER = json.JSONDecoder(parse_float=Decimal, parse_constant=_reject_constant)


def _type_name(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null",
            int: "integer", Decimal: "number"}.get(type(value), type(value).__name__)


def parse_event(
    raw: bytes | None,
    kafka_ts_ms: int | None,
    key_field: str = "key",
    time_field: str = "ts",
    value_field: str = "value",
    max_future_ms: int | None = None,
) -> Event | Rejected:
    """One Kafka record value -> an event, or the reason it is quarantined."""
    if raw is None:
        return Rejected("null record value")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return Rejected(f"not valid UTF-8 at byte {error.start}")
    try:
        doc = _DECODER.decode(text)
    except (ValueError, RecursionError) as error:
        return Rejected(f"malformed JSON: {str(error)[:200]}")
    if not isinstance(doc, dict):
        return Rejected(f"not a JSON object (got {_type_name(doc)})")
    for name in (key_field, time_field, value_field):
        if name not in doc:
            return Rejected(f"missing field '{name}'")
        if doc[name] is None:
            return Rejected(f"field '{name}' is null")
    key, ts, value = doc[key_field], doc[time_field], doc[value_field]
    if not isinstance(key, str):
        return Rejected(f"field '{key_field}' must be a string, got {_type_name(key)}")
    if len(key) > MAX_KEY_CHARS:
        return Rejected(f"field '{key_field}' is longer than {MAX_KEY_CHARS} characters")
    if type(ts) is not int:
        return Rejected(
            f"field '{time_field}' must be integer epoch milliseconds, got {_type_name(ts)}"
        )
    if not 0 <= ts <= MAX_TS_MS:
        return Rejected(f"field '{time_field}' = {ts} is outside 1970..9999")
    if max_future_ms is not None and kafka_ts_ms is not None and kafka_ts_ms > 0:
        ahead = ts - kafka_ts_ms
        if ahead > max_future_ms:
            return Rejected(
                f"field '{time_field}' is {ahead} ms ahead of the record's Kafka timestamp "
                f"(max_future is {max_future_ms} ms)"
            )
    if type(value) not in (int, Decimal):
        return Rejected(f"field '{value_field}' must be a number, got {_type_name(value)}")
    try:
        exact = Decimal(value).quantize(SCALE, rounding=ROUND_HALF_EVEN)
    except InvalidOperation:
        return Rejected(f"field '{value_field}' is out of range")
    if exact != value:
        # Never round silently: 1e-12 used to become 0 here.
        return Rejected(f"field '{value_field}' = {value} has more than 9 decimal places; the "
                        "value type is DECIMAL(38,9) and it is not rounded")
    if abs(exact) >= MAX_ABS_VALUE:
        return Rejected(f"field '{value_field}' is out of range (|value| must be < 1e18)")
    return Event(key, ts, exact)


def window_start(ts_ms: int, size_ms: int) -> int:
    """Tumbling windows are half-open [start, start+size): an event at the end opens the next."""
    return ts_ms - ts_ms % size_ms


def advance_watermark(previous_ms: int, max_event_ms: int | None, lateness_ms: int) -> int:
    """wm(N) = max(wm(N-1), max event time in epochs <= N - allowed lateness)."""
    if max_event_ms is None:
        return previous_ms
    return max(previous_ms, max_event_ms - lateness_ms)


def idle_watermark(previous_ms: int, clock_ms: int | None, idle_timeout_ms: int | None) -> int:
    """With an idle timeout, an epoch with no events lets the watermark follow the planned clock."""
    if clock_ms is None or idle_timeout_ms is None:
        return previous_ms
    return max(previous_ms, clock_ms - idle_timeout_ms)
