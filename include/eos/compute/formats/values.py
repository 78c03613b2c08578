"""The value rules every input format applies to a decoded record: the declared field types
(string, long, double, boolean, decimal), event time (epoch ms, epoch seconds, ISO 8601) and the
reasons a value is refused for.

Strict and total: a value is accepted exactly or refused with a reason naming what is wrong, and
nothing is rounded silently. The audit recomputes the reasons and compares their text, so they
are deterministic. ``declared_uses`` compiles the declared fields into ``Use`` rules (each an
``accept`` returning the value or ``BAD`` and an ``explain`` returning the reason), ``lookup``
reads a ``Use``'s path from a decoded record, ``TIME_ACCEPT`` and ``explain_time`` read event
time, ``shown`` quotes a value in a reason. A format that applies them cannot give a field a
meaning JSON does not.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal
from itertools import repeat
from operator import eq
from typing import Any

import pyarrow as pa

from eos.core.config import EventConfig, FieldSpec
from eos.core.schema import arrow_type

MAX_TS_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

BAD = object()  # what an accept rule returns for a value that failed it (then explained)
_CTX = Context(prec=100, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[])  # exact for every value we keep
_MS = Decimal("0.001")
_MAX_S = Decimal(MAX_TS_MS).scaleb(-3)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_fromisoformat = datetime.fromisoformat
# A fraction (of the time or of its offset) with a non-zero digit after the milliseconds.
# fromisoformat drops digits after the 6th, so they are looked for in the text.
_SUB_MS = re.compile(r"[.,][0-9]{3}0*[1-9]")


# --- describing values in reasons -----------------------------------------------------------

_KINDS = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null",
          int: "integer", Decimal: "number", float: "number"}


def kind_name(value: object) -> str:
    return _KINDS.get(type(value), type(value).__name__)


def _a_kind(value: object) -> str:
    kind = kind_name(value)
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def shown(value: object) -> str:
    """A number or string as the reason quotes it, cut short: never the whole of a huge value."""
    if type(value) is int and not -(10**40) < value < 10**40:
        return f"a {'negative ' if value < 0 else ''}{value.bit_length()}-bit integer"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _label(name: str, path: tuple[str, ...]) -> str:
    dotted = ".".join(path)
    return f"'{name}'" if dotted == name else f"'{name}' (path {dotted})"


# --- the rules per type: accept (value or BAD) and explain (reason or None) ----------------------

def _accept_string(v: Any) -> Any:
    return v if type(v) is str else BAD


def _accept_long(v: Any) -> Any:
    return v if type(v) is int and LONG_MIN <= v <= LONG_MAX else BAD


def _accept_double(v: Any) -> Any:
    kind = type(v)
    if kind is float:
        return v if v - v == 0 else BAD  # inf - inf is nan
    if kind is int or kind is Decimal:
        try:
            f = float(v)  # correctly rounded from the exact value
        except OverflowError:
            return BAD
        return f if f - f == 0 else BAD
    return BAD


def _accept_boolean(v: Any) -> Any:
    return v if type(v) is bool else BAD


def _decimal_rules(precision: int, scale: int) -> tuple[Callable, Callable, Callable]:
    quantum = Decimal(1).scaleb(-scale)
    limit = 10 ** (precision - scale)
    exact_limit = Decimal(limit)  # Decimal against int converts the int on every comparison
    name = f"decimal({precision},{scale})"

    def accept(v: Any) -> Any:
        kind = type(v)
        if kind is Decimal:
            if not -exact_limit < v < exact_limit:
                return BAD
            exact = v.quantize(quantum, context=_CTX)
            return exact if exact == v else BAD
        if kind is int:
            return Decimal(v).quantize(quantum, context=_CTX) if -limit < v < limit else BAD
        return BAD

    def explain(v: Any, label: str) -> str | None:
        kind = type(v)
        if kind is not Decimal and kind is not int:
            return f"field {label} must be a number, got {kind_name(v)}"
        if kind is Decimal and _places(v) > scale:
            return (f"field {label} = {shown(v)} has more than {scale} decimal places; "
                    f"{name} is not rounded")
        if not -limit < v < limit:
            return (f"field {label} = {shown(v)} does not fit {name} "
                    f"(at most {precision - scale} digits before the point)")
        return None

    def whole(column: list) -> list | None:
        """``accept`` over a whole column in C-level maps; None if any value fails (or is null):
        then the column goes value by value."""
        kinds = set(map(type, column))
        if kinds != {Decimal}:
            if not kinds <= {Decimal, int}:
                return None
            column = [Decimal(v) if type(v) is int else v for v in column]
        exact = list(map(Decimal.quantize, column, repeat(quantum), repeat(None), repeat(_CTX)))
        if not all(map(eq, exact, column)):  # digits past the scale (or NaN: too many digits)
            return None
        if min(exact) <= -exact_limit or max(exact) >= exact_limit:
            return None
        return exact

    return accept, explain, whole


def _places(d: Decimal) -> int:
    """Significant decimal places of an exact decimal: 1.50 -> 1, 1E+3 -> 0, 1E-12 -> 12."""
    _, digits, exponent = d.as_tuple()
    assert isinstance(exponent, int)  # JSON numbers are finite
    if exponent >= 0:
        return 0
    significant = "".join(map(str, digits)).rstrip("0")
    return max(0, -exponent - (len(digits) - len(significant))) if significant else 0


def _explain_string(v: Any, label: str) -> str | None:
    return None if type(v) is str else f"field {label} must be a string, got {kind_name(v)}"


def _string_rules(limit: int) -> tuple[Callable, Callable, Callable]:
    """A string field of at most ``limit`` UTF-8 bytes (``event.max_string_bytes``): a longer
    one would make an output record (a window carries its group values in its key and its
    value) that no sink with a record limit could take, and halt the pipeline. Such a record is
    quarantined instead; it stays in Kafka at its partition and offset."""

    def size(v: str) -> int:  # chars <= bytes <= 4 chars: encode only when it matters
        return len(v) if len(v) * 4 <= limit or len(v) > limit else len(v.encode("utf-8",
                                                                                   "surrogatepass"))

    def accept(v: Any) -> Any:
        return v if type(v) is str and size(v) <= limit else BAD

    def explain(v: Any, label: str) -> str | None:
        if type(v) is not str:
            return f"field {label} must be a string, got {kind_name(v)}"
        if size(v) > limit:
            return (f"field {label} is {len(v.encode('utf-8', 'surrogatepass'))} bytes, more "
                    f"than event.max_string_bytes ({limit}): no output record may outgrow a "
                    "sink's record limit")
        return None

    def whole(column: list) -> list | None:
        """The column unchanged when every value is short enough; None: check each."""
        try:
            longest = max(map(len, column))
        except TypeError:  # an optional field's None among the values
            return None
        return column if longest * 4 <= limit else None

    return accept, explain, whole


def _explain_long(v: Any, label: str) -> str | None:
    if type(v) is not int:
        got = f"number {shown(v)}" if type(v) is Decimal else kind_name(v)
        return f"field {label} must be an integer, got {got}"
    if not LONG_MIN <= v <= LONG_MAX:
        return f"field {label} = {shown(v)} is out of the long range (signed 64-bit)"
    return None


def _explain_double(v: Any, label: str) -> str | None:
    if type(v) not in (int, Decimal, float):
        return f"field {label} must be a number, got {kind_name(v)}"
    if _accept_double(v) is BAD:
        return f"field {label} = {shown(v)} is out of the double range"
    return None


def _explain_boolean(v: Any, label: str) -> str | None:
    return None if type(v) is bool else f"field {label} must be true or false, got {kind_name(v)}"


RULES: dict[str, tuple[Callable, Callable]] = {
    "string": (_accept_string, _explain_string),
    "long": (_accept_long, _explain_long),
    "double": (_accept_double, _explain_double),
    "boolean": (_accept_boolean, _explain_boolean),
}


# --- event time: accept (ms, or -1) and explain ----------------------------------------------

def _ms_epoch_ms(v: Any) -> int:
    return v if type(v) is int else -1


def _ms_epoch_s(v: Any) -> int:
    kind = type(v)
    if kind is int:
        return v * 1000
    if kind is Decimal:
        if not 0 <= v <= _MAX_S:
            return -1
        exact = v.quantize(_MS, context=_CTX)
        return int(exact.scaleb(3, _CTX)) if exact == v else -1
    return -1


def _ms_iso8601(v: Any) -> int:
    if type(v) is not str:
        return -1
    try:
        moment = _fromisoformat(v)
    except ValueError:
        return -1
    if moment.tzinfo is None:
        return -1
    # The common shapes ...SS.fffZ and ...SS.fff+HH:MM have no digits past the milliseconds.
    if not ((len(v) == 24 or len(v) == 29) and v[19] == "." and v[23] in "Z+-") \
            and _SUB_MS.search(v):
        return -1
    delta = moment - _EPOCH  # exact: days, seconds, microseconds
    micros = delta.microseconds
    if micros % 1000:
        return -1
    return (delta.days * 86_400 + delta.seconds) * 1000 + micros // 1000


TIME_ACCEPT = {"epoch_ms": _ms_epoch_ms, "epoch_s": _ms_epoch_s, "iso8601": _ms_iso8601}
_FINER = "is finer than a millisecond; event time is kept in ms and not rounded"


def explain_time(fmt: str, v: Any, label: str) -> tuple[int | None, str | None]:
    """(ms, None) or (None, reason) for a present, non-null time value; the range is not checked."""
    kind = type(v)
    if fmt == "epoch_ms":
        if kind is not int:
            got = f"number {shown(v)}" if kind is Decimal else kind_name(v)
            return None, f"field {label} must be integer epoch milliseconds, got {got}"
        return v, None
    if fmt == "epoch_s":
        if kind is int:
            return v * 1000, None
        if kind is not Decimal:
            return None, f"field {label} must be a number of epoch seconds, got {kind_name(v)}"
        if _places(v) > 3:
            return None, f"field {label} = {shown(v)} {_FINER}"
        if not 0 <= v <= _MAX_S:
            return -1, None  # out of range; said by the caller
        return int(v.scaleb(3, _CTX)), None
    if kind is not str:
        return None, f"field {label} must be an ISO 8601 string, got {kind_name(v)}"
    try:
        moment = _fromisoformat(v)
    except ValueError:
        return None, f"field {label} = {shown(v)} is not an ISO 8601 time"
    if moment.tzinfo is None:
        return None, f"field {label} = {shown(v)} has no UTC offset (end it with Z or +HH:MM)"
    delta = moment - _EPOCH
    if _SUB_MS.search(v) or delta.microseconds % 1000:
        return None, f"field {label} = {shown(v)} {_FINER}"
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000, None


# --- a declared field's rule, and its path in a decoded record --------------------------------

class Use:
    """One declared field, or the event time, read from a path of the document."""

    def __init__(self, label: str, path: tuple[str, ...], kind: str, optional: bool,
                 spec: FieldSpec | None = None, max_string: int | None = None) -> None:
        self.label, self.path, self.kind, self.optional = label, path, kind, optional
        self.accept: Callable[[Any], Any] = _accept_string
        self.explain: Callable[[Any, str], str | None] = _explain_string
        self.whole: Callable[[list], list | None] | None = None  # accept for a column at once
        if kind == "decimal":
            assert spec is not None and spec.type.precision is not None
            self.accept, self.explain, self.whole = _decimal_rules(spec.type.precision,
                                                                   spec.type.scale or 0)
        elif kind == "string" and max_string is not None:
            self.accept, self.explain, self.whole = _string_rules(max_string)
        elif kind in RULES:
            self.accept, self.explain = RULES[kind]
        self.get: Callable[[Any], Any] = _absent  # set by the JSON parser's compiler
        self.direct = False  # msgspec's type is exactly the rule: the value needs no check


def _absent(_: Any) -> None:
    return None


def lookup(doc: dict, use: Use) -> tuple[Any, str | None]:
    """The value at ``use.path`` (None: absent or null, and allowed) or why it cannot be read."""
    value: Any = doc
    last = len(use.path) - 1
    for i, key in enumerate(use.path):
        if key not in value:
            return None, (None if use.optional else f"missing field {use.label}")
        value = value[key]
        if value is None:
            if use.optional:
                return None, None
            if i == last:
                return None, f"field {use.label} is null"
            return None, (f"field {use.label}: '{'.'.join(use.path[:i + 1])}' is null, "
                          "not an object")
        if i < last and type(value) is not dict:
            return None, (f"field {use.label}: '{'.'.join(use.path[:i + 1])}' is "
                          f"{_a_kind(value)}, not an object")
    return value, None


def declared_uses(event: EventConfig) -> tuple[list[Use], list[pa.DataType], Use | None]:
    """The declared fields as every parser applies them (JSON's in ``eos.compute.formats.json``,
    the decoded-record formats' in ``eos.compute.formats.records``), their Arrow types, and the
    event time's field (None for ``kafka_timestamp`` and ``none``): one compilation, so the
    formats cannot drift apart."""
    fields = [
        Use(_label(name, spec.path), spec.path, spec.type.name, spec.optional, spec,
             event.max_string_bytes)
        for name, spec in event.fields.items()
    ]
    types = [arrow_type(spec.type) for spec in event.fields.values()]
    time: Use | None = None
    if event.time.format not in ("kafka_timestamp", "none"):
        assert event.time.field is not None
        time = Use(f"'{event.time.field}'", event.time.path, event.time.format, optional=False)
    return fields, types, time
