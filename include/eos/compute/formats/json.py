"""``event.format: json``: the event parser, compiled once from a pipeline's declared ``event``
(docs/pipelines.md).

Strict and total: every Kafka record either becomes an event (its time in epoch milliseconds and
its declared fields, typed) or is quarantined with a reason naming what is wrong, and nothing is
rounded silently. The audit recomputes the reasons and compares their text, so they are
deterministic: checks run in a fixed order (decode, object, time, then the fields in declared
order) and the first failure wins.

Two paths, one answer:

* **accept** (fast): msgspec decodes the record straight into a Struct shaped like the declared
  paths (``eos.compute.formats.json_struct``), typed where msgspec's strict types are exactly our
  rules (string, long, double, boolean), skipping undeclared keys; what msgspec cannot check
  (decimal scale and precision, event time, the time range and ``max_future``) is checked in
  Python. ``parse_batch`` does this a column at a time and pre-checks whole columns where it can.
* **explain** (slow, only for records the accept path refused): the rules written out plainly
  over a generic decode, producing the reason (the byte-level ones in
  ``eos.compute.formats.json_diagnostics``).

``parse`` and ``parse_batch`` both accept with the same rules and explain with the same function,
so a record gets the same outcome and reason either way (``tests/unit/compute/test_parse.py`` holds
them to it).
The field rules are those every format applies (``eos.compute.formats.values``).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from eos.compute.formats import REASON_CHARS, Parsed, Rejected, without_gc
from eos.compute.formats.json_diagnostics import (
    MAX_DEPTH,
    decoder_rejection,
    malformed,
    too_deep,
    unsupported_exponent,
    utf8_error,
)
from eos.compute.formats.json_struct import DECODE_ERRORS, compile_struct, getter
from eos.compute.formats.values import (
    BAD,
    MAX_TS_MS,
    RULES,
    TIME_ACCEPT,
    Use,
    declared_uses,
    explain_time,
    kind_name,
    lookup,
    shown,
)
from eos.core.config import EventConfig
from eos.core.schema import parsed_schema


class Parser:
    """``Parser(event).parse(raw, kafka_ts_ms)`` for one record, ``parse_batch`` for an Arrow batch
    of raw Kafka records (``eos.compute.reader.RAW_SCHEMA``); compiled once from ``event``."""

    def __init__(self, event: EventConfig) -> None:
        self.event = event
        self.schema = parsed_schema(event)
        self._max_future = event.max_future
        self._fields, self._arrow_types, self._time = declared_uses(event)
        # No event time (a pipeline without windows): no time rule applies, event time 0.
        self._timeless = event.time.format == "none"
        uses = [*self._fields, *([self._time] if self._time else [])]
        self._uses = uses
        root = compile_struct(uses)
        # Numbers are read exactly (as Decimal) where a rule needs their digits.
        exact = any(n.generic for n in root.walk()) or any(
            use.kind in ("decimal", "epoch_s") for use in uses)
        # The typed decoder every record goes through first (public for benchmarks).
        self.decoder = msgspec.json.Decoder(root.type, float_hook=Decimal if exact else None)
        self._decode = self.decoder.decode
        self._generic = msgspec.json.Decoder(float_hook=Decimal).decode
        self._dummy = root.dummy
        for use in uses:
            use.get, exact_type = getter(root, use)
            # msgspec's type is the whole rule only where no length or range is checked after.
            use.direct = exact_type and use.kind in RULES and use.whole is None
        self._time_ms: Callable[[Any], int] | None = None
        if self._time is not None:
            exact_ms = self._time.kind == "epoch_ms" and getter(root, self._time)[1]
            self._time_ms = None if exact_ms else TIME_ACCEPT[self._time.kind]

    def __reduce__(self) -> tuple[type, tuple[EventConfig]]:
        # The compiled Structs are made at run time and do not pickle; the config does.
        return Parser, (self.event,)

    # -- one record --

    def parse(self, raw: bytes | None, kafka_ts_ms: int | None) -> Parsed | Rejected:
        """One Kafka record value and its Kafka timestamp -> an event, or why it is quarantined."""
        parsed = self._accept(raw, kafka_ts_ms)
        if parsed is not None:
            return parsed
        return Rejected(self._reason(raw, kafka_ts_ms))

    def _accept(self, raw: bytes | None, kafka_ts_ms: int | None) -> Parsed | None:
        if raw is None or too_deep(raw):
            return None
        try:
            struct = self._decode(raw)
        except DECODE_ERRORS:
            return None
        if not raw.isascii() and utf8_error(raw) is not None:
            return None
        if self._timeless:
            ms = 0
        elif self._time is None:
            if kafka_ts_ms is None or not 0 <= kafka_ts_ms <= MAX_TS_MS:
                return None
            ms = kafka_ts_ms
        else:
            ms = self._time.get(struct)
            if self._time_ms is not None:
                ms = self._time_ms(ms)
            if not 0 <= ms <= MAX_TS_MS:
                return None
            if kafka_ts_ms is not None and kafka_ts_ms > 0 and ms - kafka_ts_ms > self._max_future:
                return None
        values = []
        for use in self._fields:
            value = use.get(struct)
            if value is None:
                if not use.optional:
                    return None
            elif not use.direct:
                value = use.accept(value)
                if value is BAD:
                    return None
            values.append(value)
        return Parsed(ms, tuple(values))

    def _reason(self, raw: bytes | None, kafka_ts_ms: int | None) -> str:
        """Why a record the accept path refused is quarantined: the rules in order, first wins."""
        if raw is None:
            return "null record value"
        bad_byte = utf8_error(raw)
        if bad_byte is not None:
            return f"not valid UTF-8 at byte {bad_byte}"
        if too_deep(raw):
            return f"malformed JSON: nested more than {MAX_DEPTH} levels deep"
        try:
            doc = self._generic(raw)
        except msgspec.ValidationError as error:  # an integer too long to convert
            problem: Exception = error
            try:  # the typed decoder names the path, if the number is at a declared one
                self._decode(raw)
            except DECODE_ERRORS as typed:
                if isinstance(typed, msgspec.ValidationError):
                    problem = typed
            return f"unsupported JSON number: {problem}"[:REASON_CHARS]
        except (msgspec.DecodeError, ValueError, RecursionError) as error:
            return malformed(raw, error)
        except ArithmeticError:
            return unsupported_exponent(raw)
        if type(doc) is not dict:
            return f"not a JSON object (got {kind_name(doc)})"
        reason = self._time_reason(doc, kafka_ts_ms)
        if reason:
            return reason
        for use in self._fields:
            value, reason = lookup(doc, use)
            if reason:
                return reason
            if value is not None:
                reason = use.explain(value, use.label)
                if reason:
                    return reason
        # The rules above mirror the accept path, over the last of duplicate keys. msgspec checks
        # every occurrence of a declared key: {"v": 5, "v": "a"} ends here, named by its path.
        try:
            self._decode(raw)
        except DECODE_ERRORS as error:
            labels = {"$." + ".".join(use.path): use.label for use in self._uses}
            return decoder_rejection(str(error), labels)
        return "rejected by the parser"

    def _time_reason(self, doc: dict, kafka_ts_ms: int | None) -> str | None:
        if self._timeless:
            return None
        if self._time is None:
            if kafka_ts_ms is None or kafka_ts_ms < 0:
                return "the record has no Kafka timestamp"
            if kafka_ts_ms > MAX_TS_MS:
                return f"the record's Kafka timestamp {kafka_ts_ms} is outside 1970..9999"
            return None
        use = self._time
        value, reason = lookup(doc, use)
        if reason:
            return reason
        ms, reason = explain_time(use.kind, value, use.label)
        if reason:
            return reason
        assert ms is not None
        if not 0 <= ms <= MAX_TS_MS:
            return f"field {use.label} = {shown(value)} is outside 1970..9999"
        if kafka_ts_ms is not None and kafka_ts_ms > 0 and ms - kafka_ts_ms > self._max_future:
            return (f"field {use.label} is {ms - kafka_ts_ms} ms ahead of the record's Kafka "
                    f"timestamp (max_future is {self._max_future} ms)")
        return None

    # -- a batch --

    def parse_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Raw Kafka records (columns partition, offset, timestamp_ms, key, value) -> one row each
        in ``eos.core.schema.parsed_schema(event)``: the event, or the raw bytes and the reason."""
        return without_gc(self._parse_batch, batch)

    def _parse_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        n = batch.num_rows
        kafka_ts = batch.column("timestamp_ms")
        if n == 0:
            return pa.RecordBatch.from_pylist([], schema=self.schema)
        value_column = batch.column("value")
        raws = value_column.to_numpy(zero_copy_only=False).tolist()  # 4x to_pylist's speed
        values = raws
        bad: set[int] = set()  # rows to quarantine
        if value_column.null_count:
            bad.update(i for i, v in enumerate(raws) if v is None)
            values = [b"" if v is None else v for v in raws]
        if max(map(len, values)) > MAX_DEPTH:
            deep = [i for i, v in enumerate(values) if too_deep(v)]
            if deep:
                values = values[:] if values is raws else values
                for i in deep:
                    values[i] = b""  # never handed to msgspec
                bad.update(deep)
        structs = self._decode_all(values, bad)
        if not b"".join(values).isascii():
            bad.update(i for i, v in enumerate(values) if utf8_error(v) is not None)

        ms, event_ms = self._event_times(kafka_ts, structs, bad)

        # fields, a column at a time
        columns: list[list] = []
        for use in self._fields:
            column = list(map(use.get, structs))
            if not use.direct:
                checked = use.whole(column) if use.whole else None
                column = _check_each(use, column, bad) if checked is None else checked
            columns.append(column)

        if bad:
            out = self._with_quarantine(batch, raws, bad, ms, columns)
        else:
            nulls = pa.nulls(n, pa.binary())
            out = [event_ms,
                   *(pa.array(c, t) for c, t in zip(columns, self._arrow_types, strict=True)),
                   nulls, nulls, pa.nulls(n, pa.string())]
        return pa.RecordBatch.from_arrays(
            [batch.column("partition"), batch.column("offset"), kafka_ts, *out],
            schema=self.schema)

    def _event_times(self, kafka_ts: pa.Array, structs: list[Any],
                     bad: set[int]) -> tuple[list, pa.Array]:
        """The batch's event times (a list, and the column): a row whose time is outside
        1970..9999 or too far ahead of its Kafka timestamp is added to ``bad``."""
        if self._timeless:
            ms = [0] * len(kafka_ts)
        elif self._time is None:
            ms = _pylist(kafka_ts)
            if kafka_ts.null_count:
                ms = [-1 if t is None else t for t in ms]
        else:
            ms = list(map(self._time.get, structs))
            if self._time_ms is not None:
                ms = list(map(self._time_ms, ms))
        if min(ms) < 0 or max(ms) > MAX_TS_MS:
            outside = [i for i, t in enumerate(ms) if not 0 <= t <= MAX_TS_MS]
            bad.update(outside)
            for i in outside:
                ms[i] = 0
        event_ms = pa.array(ms, pa.int64())
        if self._time is not None:
            ahead = pc.max(pc.subtract(event_ms, kafka_ts)).as_py()
            if ahead is not None and ahead > self._max_future:
                stamps = _pylist(kafka_ts)
                bad.update(i for i, (t, k) in enumerate(zip(ms, stamps, strict=True))
                           if k is not None and k > 0 and t - k > self._max_future)
        return ms, event_ms

    def _decode_all(self, values: list[bytes], bad: set[int]) -> list[Any]:
        """Decode every value; one that fails gets the stand-in Struct and its index in ``bad``."""
        decode = self._decode
        structs: list[Any] = []
        pending = iter(values)
        while True:
            try:
                structs.extend(map(decode, pending))  # keeps what it decoded before a failure
                break
            except DECODE_ERRORS:
                bad.add(len(structs))
                structs.append(self._dummy)
        if len(structs) != len(values):  # not expected: then one at a time
            structs = []
            for i, raw in enumerate(values):
                try:
                    structs.append(decode(raw))
                except DECODE_ERRORS:
                    bad.add(i)
                    structs.append(self._dummy)
        return structs

    def _with_quarantine(self, batch: pa.RecordBatch, raws: list, bad: set[int], ms: list,
                         columns: list[list]) -> list[pa.Array]:
        """The columns of a batch with quarantined rows: their fields null, bytes and reason set."""
        n = batch.num_rows
        stamps = batch.column("timestamp_ms")
        reasons: list[str | None] = [None] * n
        for i in bad:
            reasons[i] = self._reason(raws[i], stamps[i].as_py())
            ms[i] = None
        out = [pa.array(ms, pa.int64())]
        for column, arrow in zip(columns, self._arrow_types, strict=True):
            for i in bad:
                column[i] = None
            out.append(pa.array(column, arrow))
        raw_keys: list[bytes | None] = [None] * n
        raw_values: list[bytes | None] = [None] * n
        keys = batch.column("key")
        for i in bad:
            raw_keys[i] = keys[i].as_py()
            raw_values[i] = raws[i]
        out += [pa.array(raw_keys, pa.binary()), pa.array(raw_values, pa.binary()),
                pa.array(reasons, pa.string())]
        return out


def _pylist(array: pa.Array) -> list:
    """An Arrow column as a Python list (numpy's route is several times faster for no nulls)."""
    return array.to_pylist() if array.null_count else array.to_numpy().tolist()


def _check_each(use: Use, column: list, bad: set[int]) -> list:
    """A column through its rule value by value; a failing row is added to ``bad``."""
    checked = []
    for i, value in enumerate(column):
        if value is None:
            if not use.optional:
                bad.add(i)
        else:
            value = use.accept(value)
            if value is BAD:
                bad.add(i)
                value = None
        checked.append(value)
    return checked


def parser(event: EventConfig) -> Parser:
    return Parser(event)
