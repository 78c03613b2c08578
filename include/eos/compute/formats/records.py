"""The declared fields applied to a decoded record (a Schema Registry format's dicts).

The rules are JSON's (``eos.compute.formats.values``: the same accept and explain functions, the
same order: event time, then the fields as declared, first failure wins), so a field means the same
whatever the format. What a binary format adds is typed values that JSON has no word for; they
map exactly or not at all:

* a timestamp (Avro ``timestamp-millis`` / ``timestamp-micros``, decoded as an aware datetime)
  is an event time, or a ``long`` of epoch milliseconds, or an ISO 8601 ``string``; a
  timestamp finer than a millisecond is quarantined for ``long`` and event time, not rounded;
* a ``date`` is an ISO ``string`` (YYYY-MM-DD); a ``uuid`` is a ``string``;
* decimals arrive as ``Decimal`` and are held to the declared precision and scale unrounded.

Every reason after decoding is prefixed with the writer schema (``schema id 7: missing field
'amount' (path order.amount)``), so a schema change that lost a declared path is named.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any
from uuid import UUID

import pyarrow as pa

from eos.compute.formats import Decoded, Parsed, RecordDecoder, Rejected, without_gc
from eos.compute.formats.values import (
    BAD,
    MAX_TS_MS,
    TIME_ACCEPT,
    declared_uses,
    explain_time,
    lookup,
    shown,
)
from eos.core.config import EventConfig
from eos.core.schema import parsed_schema

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FINER = "is finer than a millisecond; event time is kept in ms and not rounded"


def _datetime_ms(value: datetime, label: str) -> tuple[int | None, str | None]:
    """An aware datetime -> exact epoch ms, or why not (naive: a local-timestamp; sub-ms)."""
    if value.tzinfo is None:
        return None, f"field {label} = {value.isoformat()} has no UTC offset (a local timestamp)"
    delta = value - _EPOCH
    if delta.microseconds % 1000:
        return None, f"field {label} = {value.isoformat()} {_FINER}"
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000, None


def _adapted(value: Any, kind: str, label: str) -> tuple[Any, str | None]:
    """A typed value as the declared kind reads it; values without a mapping pass unchanged
    (the rule then says what it got)."""
    kind_of = type(value)
    if kind_of is datetime:
        if kind == "string":
            return value.isoformat().replace("+00:00", "Z"), None
        if kind == "long":
            return _datetime_ms(value, label)
    elif kind_of is date and kind == "string":
        return value.isoformat(), None
    elif kind_of is UUID and kind == "string":
        return str(value), None
    return value, None


_TYPED = (datetime, date, UUID)


def _getter(path: tuple[str, ...]) -> Callable[[Any], Any]:
    """``record[a][b]...`` for a path (raises KeyError or TypeError where ``lookup`` explains)."""
    if len(path) == 1:
        (key,) = path
        return lambda record: record[key]

    def get(record: Any) -> Any:
        for key in path:
            record = record[key]
        return record

    return get


class RecordParser:
    """``EventParser`` over a ``RecordDecoder``: compiled once per worker from ``event``."""

    def __init__(self, event: EventConfig, decoder: RecordDecoder) -> None:
        self.event = event
        self.schema = parsed_schema(event)
        self._decoder = decoder
        self._max_future = event.max_future
        self._fields, self._arrow_types, self._time = declared_uses(event)
        self._timeless = event.time.format == "none"  # no time rule applies: event time 0
        self._time_get = _getter(self._time.path if self._time is not None else ())
        self._gets = [_getter(use.path) for use in self._fields]

    # -- one record --

    def parse(self, raw: bytes | None, kafka_ts_ms: int | None) -> Parsed | Rejected:
        """One record value and its Kafka timestamp -> an event, or why it is quarantined."""
        if raw is None:
            return Rejected("null record value")
        decoded = self._decoder.decode(raw)
        if isinstance(decoded, Rejected):
            return decoded
        outcome = self._accept(decoded.record, kafka_ts_ms) or self._event(decoded.record,
                                                                            kafka_ts_ms)
        if isinstance(outcome, str):
            return Rejected(f"{decoded.where}: {outcome}")
        return outcome

    def _accept(self, record: dict[str, Any], kafka_ts_ms: int | None) -> Parsed | None:
        """The event when every rule holds without a second look, else None (then ``_event``
        decides, and says why): indexing instead of ``lookup``, no reasons built. Accepts
        nothing ``_event`` refuses, with the same values
        (``tests/unit/compute/formats/test_avro.py``)."""
        if self._timeless:
            ms = 0
        elif self._time is None:
            if kafka_ts_ms is None or not 0 <= kafka_ts_ms <= MAX_TS_MS:
                return None
            ms = kafka_ts_ms
        else:
            try:
                value = self._time_get(record)
            except (KeyError, TypeError):
                return None
            if type(value) is datetime:
                if value.tzinfo is None:
                    return None
                delta = value - _EPOCH
                if delta.microseconds % 1000:
                    return None
                ms = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
            else:
                ms = TIME_ACCEPT[self._time.kind](value)
            if not 0 <= ms <= MAX_TS_MS or (kafka_ts_ms is not None and kafka_ts_ms > 0
                                             and ms - kafka_ts_ms > self._max_future):
                return None
        values = []
        for use, get in zip(self._fields, self._gets, strict=True):
            try:
                value = get(record)
            except (KeyError, TypeError):  # absent, or a step that is null or not a record
                return None
            if value is None:
                if not use.optional:
                    return None
            elif type(value) in _TYPED:
                return None  # timestamps, dates, uuids: adapted by ``_event``
            else:
                value = use.accept(value)
                if value is BAD:
                    return None
            values.append(value)
        return Parsed(ms, tuple(values))

    def _event(self, record: dict[str, Any], kafka_ts_ms: int | None) -> Parsed | str:
        ms, reason = self._event_ms(record, kafka_ts_ms)
        if reason is not None:
            return reason
        assert ms is not None
        values = []
        for use in self._fields:
            value, reason = lookup(record, use)
            if reason:
                return reason
            if value is not None:
                value, reason = _adapted(value, use.kind, use.label)
                if reason:
                    return reason
                accepted = use.accept(value)
                if accepted is BAD:
                    return use.explain(value, use.label) or f"field {use.label} is refused"
                value = accepted
            values.append(value)
        return Parsed(ms, tuple(values))

    def _event_ms(self, record: dict[str, Any],
                  kafka_ts_ms: int | None) -> tuple[int | None, str | None]:
        """The event time (ms) or why there is none: JSON's checks, plus timestamps."""
        if self._timeless:
            return 0, None
        if self._time is None:
            if kafka_ts_ms is None or kafka_ts_ms < 0:
                return None, "the record has no Kafka timestamp"
            if kafka_ts_ms > MAX_TS_MS:
                return None, f"the record's Kafka timestamp {kafka_ts_ms} is outside 1970..9999"
            return kafka_ts_ms, None
        use = self._time
        value, reason = lookup(record, use)
        if reason:
            return None, reason
        if type(value) is datetime:
            ms, reason = _datetime_ms(value, use.label)
        else:
            ms, reason = explain_time(use.kind, value, use.label)
        if reason:
            return None, reason
        assert ms is not None
        if not 0 <= ms <= MAX_TS_MS:
            return None, f"field {use.label} = {shown(value)} is outside 1970..9999"
        if kafka_ts_ms is not None and kafka_ts_ms > 0 and ms - kafka_ts_ms > self._max_future:
            return None, (f"field {use.label} is {ms - kafka_ts_ms} ms ahead of the record's "
                          f"Kafka timestamp (max_future is {self._max_future} ms)")
        return ms, None

    # -- a batch --

    def parse_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Raw Kafka records -> one row each in ``parsed_schema(event)``: ``parse`` per record."""
        return without_gc(self._parse_batch, batch)

    def _parse_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        self._decoder.new_batch()
        n = batch.num_rows
        raws = batch.column("value").to_pylist()
        stamps = batch.column("timestamp_ms").to_pylist()
        keys = batch.column("key")
        ms: list[int | None] = []
        columns: list[list[Any]] = [[] for _ in self._fields]
        raw_keys: list[bytes | None] = [None] * n
        raw_values: list[bytes | None] = [None] * n
        reasons: list[str | None] = [None] * n
        for i, (raw, stamp) in enumerate(zip(raws, stamps, strict=True)):
            outcome = self.parse(raw, stamp)
            if isinstance(outcome, Parsed):
                ms.append(outcome.event_ms)
                for column, value in zip(columns, outcome.values, strict=True):
                    column.append(value)
            else:
                ms.append(None)
                for column in columns:
                    column.append(None)
                raw_keys[i], raw_values[i], reasons[i] = keys[i].as_py(), raw, outcome.reason
        return pa.RecordBatch.from_arrays(
            [batch.column("partition"), batch.column("offset"), batch.column("timestamp_ms"),
             pa.array(ms, pa.int64()),
             *(pa.array(c, t) for c, t in zip(columns, self._arrow_types, strict=True)),
             pa.array(raw_keys, pa.binary()), pa.array(raw_values, pa.binary()),
             pa.array(reasons, pa.string())],
            schema=self.schema)


__all__ = ["Decoded", "RecordParser"]
