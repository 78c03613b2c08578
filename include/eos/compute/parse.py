"""The event parser, compiled once from a pipeline's declared ``event`` (DESIGN §3).

Strict and total: every Kafka record either becomes an event (its time in epoch milliseconds and
its declared fields, typed) or is quarantined with a reason naming what is wrong, and nothing is
rounded silently. The audit recomputes the reasons and compares their text, so they are
deterministic: checks run in a fixed order (decode, object, time, then the fields in declared
order) and the first failure wins.

Two paths, one answer:

* **accept** (fast): msgspec decodes the record straight into a Struct shaped like the declared
  paths, typed where msgspec's strict types are exactly our rules (string, long, double, boolean),
  skipping undeclared keys; what msgspec cannot check (decimal scale and precision, event time,
  the time range and ``max_future``) is checked in Python. ``parse_batch`` does this a column at
  a time and pre-checks whole columns where it can.
* **explain** (slow, only for records the accept path refused): the rules written out plainly
  over a generic decode, producing the reason.

``parse`` and ``parse_batch`` both accept with the same rules and explain with the same function,
so a record gets the same outcome and reason either way (``tests/test_parse.py`` holds them to it).

The field rules are public because every format applies them (``eos.compute.formats.records``
for the decoded-record formats): ``declared_uses`` compiles the declared fields into ``Use``
rules (each an ``accept`` returning the value or ``BAD`` and an ``explain`` returning the
reason), ``lookup`` reads a ``Use``'s path from a decoded record, ``TIME_ACCEPT`` and
``explain_time`` read event time, ``shown`` quotes a value in a reason. A format that applies
them cannot give a field a meaning JSON does not.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal
from itertools import repeat
from operator import attrgetter, eq
from typing import Annotated, Any, NamedTuple, Union

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from eos.core.config import EventConfig, FieldSpec
from eos.core.schema import arrow_type, parsed_schema

NEG_INF = -(2**63)  # the watermark before the first event
MAX_TS_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
# Deeper documents are quarantined. msgspec recurses per nesting level and gives up at a depth that
# depends on the caller's Python stack; a fixed, lower limit keeps the outcome the same everywhere.
MAX_DEPTH = 500
REASON_CHARS = 200  # a malformed-JSON message is cut to this

BAD = object()  # what an accept rule returns for a value that failed it (then explained)
_CTX = Context(prec=100, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[])  # exact for every value we keep
_MS = Decimal("0.001")
_MAX_S = Decimal(MAX_TS_MS).scaleb(-3)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_fromisoformat = datetime.fromisoformat
# A fraction (of the time or of its offset) with a non-zero digit after the milliseconds.
# fromisoformat drops digits after the 6th, so they are looked for in the text.
_SUB_MS = re.compile(r"[.,][0-9]{3}0*[1-9]")
_BRACKETS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_BYTE = re.compile(r"\(byte (\d+)\)")
_LONE_SURROGATE = re.compile(  # msgspec reports these as truncated input
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_AT_PATH = re.compile(r"^(.*) - at `(.*)`$")
_HUGE_EXPONENT = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?[eE][+-]?0*[0-9]{19,}")
_Long = Annotated[int, msgspec.Meta(ge=LONG_MIN, le=LONG_MAX)]
# What decoding a record may raise: msgspec's errors; UnicodeDecodeError (a ValueError) for bad
# UTF-8 in a string; ArithmeticError when the float hook's Decimal() refuses an exponent beyond
# +-10^18 (it is only called for declared values read exactly).
_DECODE_ERRORS = (msgspec.DecodeError, ValueError, RecursionError, ArithmeticError)


class Parsed(NamedTuple):
    event_ms: int
    values: tuple  # in the declared order of event.fields; None for an absent optional field


class Rejected(NamedTuple):
    reason: str


# --- describing values in reasons -----------------------------------------------------------

_KINDS = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null",
          int: "integer", Decimal: "number", float: "number"}


def _kind(value: object) -> str:
    return _KINDS.get(type(value), type(value).__name__)


def _a_kind(value: object) -> str:
    kind = _kind(value)
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
            return f"field {label} must be a number, got {_kind(v)}"
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
    return None if type(v) is str else f"field {label} must be a string, got {_kind(v)}"


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
            return f"field {label} must be a string, got {_kind(v)}"
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
        got = f"number {shown(v)}" if type(v) is Decimal else _kind(v)
        return f"field {label} must be an integer, got {got}"
    if not LONG_MIN <= v <= LONG_MAX:
        return f"field {label} = {shown(v)} is out of the long range (signed 64-bit)"
    return None


def _explain_double(v: Any, label: str) -> str | None:
    if type(v) not in (int, Decimal, float):
        return f"field {label} must be a number, got {_kind(v)}"
    if _accept_double(v) is BAD:
        return f"field {label} = {shown(v)} is out of the double range"
    return None


def _explain_boolean(v: Any, label: str) -> str | None:
    return None if type(v) is bool else f"field {label} must be true or false, got {_kind(v)}"


_RULES: dict[str, tuple[Callable, Callable]] = {
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
            got = f"number {shown(v)}" if kind is Decimal else _kind(v)
            return None, f"field {label} must be integer epoch milliseconds, got {got}"
        return v, None
    if fmt == "epoch_s":
        if kind is int:
            return v * 1000, None
        if kind is not Decimal:
            return None, f"field {label} must be a number of epoch seconds, got {_kind(v)}"
        if _places(v) > 3:
            return None, f"field {label} = {shown(v)} {_FINER}"
        if not 0 <= v <= _MAX_S:
            return -1, None  # out of range; said by the caller
        return int(v.scaleb(3, _CTX)), None
    if kind is not str:
        return None, f"field {label} must be an ISO 8601 string, got {_kind(v)}"
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


# --- depth, UTF-8 and JSON errors ----------------------------------------------------------------

def _depth(raw: bytes) -> int:
    """How deeply arrays and objects nest (brackets inside strings do not count)."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(raw):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in (b"]", b"}"):
            depth -= 1
    return deepest


def _too_deep(raw: bytes) -> bool:
    return (len(raw) > MAX_DEPTH and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH
            and _depth(raw) > MAX_DEPTH)


def _utf8_error(raw: bytes) -> int | None:
    if raw.isascii():
        return None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start
    return None


def _malformed(raw: bytes, error: Exception) -> str:
    message = str(error).removeprefix("JSON is malformed: ")
    if not raw.strip():
        message = "the record value is empty"
    elif message == "Input data was truncated" and _LONE_SURROGATE.search(raw):
        message = "a \\u escape is half of a UTF-16 surrogate pair"
    at = _BYTE.search(message)
    if at:
        start = int(at.group(1))
        for constant in (b"NaN", b"Infinity"):
            if raw.startswith(constant, start):
                sign = "-" if constant == b"Infinity" and raw[start - 1:start] == b"-" else ""
                message = (f"{sign}{constant.decode()} is not a JSON number "
                           f"(byte {start - len(sign)})")
    return f"malformed JSON: {message}"[:REASON_CHARS]


# --- compiling the declared paths into a msgspec Struct ------------------------------------------

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
        elif kind in _RULES:
            self.accept, self.explain = _RULES[kind]
        self.get: Callable[[Any], Any] = _absent  # set by the compiler
        self.direct = False  # msgspec's type is exactly the rule: the value needs no check

    @property
    def msgspec_type(self) -> Any:
        return {"string": str, "long": _Long, "double": float, "boolean": bool,
                "epoch_ms": int, "iso8601": str}.get(self.kind, Any)


def _absent(_: Any) -> None:
    return None


class _Node:
    """A key of the declared paths: a leaf (uses), an object (children), or both (generic)."""

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.uses: list[Use] = []
        self.attr = ""
        self.type: Any = Any
        self.generic = False  # decoded as plain JSON (dict, list, ...) and walked in Python
        self.required = False
        self.dummy: Any = None  # a stand-in value, for records that failed to decode

    def walk(self) -> list[_Node]:
        return [self, *(n for child in self.children.values() for n in child.walk())]


def _compile_node(node: _Node, name: str) -> None:
    """Give ``node`` its msgspec type, whether it is required, and its stand-in value."""
    node.required = any(not use.optional for n in node.walk() for use in n.uses)
    if node.children and node.uses:  # a value and an object at once: walked in Python
        node.generic = True
        return
    if node.uses:
        types = {use.msgspec_type for use in node.uses}
        if types == {int, _Long}:  # the event time in ms and a long: the stricter serves both
            types = {_Long}
        node.type = types.pop() if len(types) == 1 else Any
        node.generic = node.type is Any
        if node.generic:
            numeric = {"decimal", "double", "long", "epoch_ms", "epoch_s"}
            node.dummy = 0 if {use.kind for use in node.uses} <= numeric else None
        else:
            node.dummy = {str: "", _Long: 0, int: 0, float: 0.0, bool: False}[node.type]
        return
    fields: list[tuple] = []
    rename, dummies = {}, {}
    for i, (key, child) in enumerate(node.children.items()):
        child.attr = f"f{i}"
        rename[child.attr] = key
        _compile_node(child, f"{name}_{i}")
        if child.required:
            fields.append((child.attr, child.type))
            dummies[child.attr] = child.dummy
        else:
            fields.append((child.attr, Union[child.type, None], None))  # noqa: UP007
    node.type = msgspec.defstruct(name, fields, rename=rename, kw_only=True, gc=False)
    node.dummy = node.type(**dummies)


def _getter(root: _Node, use: Use) -> tuple[Callable[[Any], Any], bool]:
    """A function from the decoded Struct to the use's value (None: absent or null; BAD: an
    intermediate that is not an object), and whether the value is exactly typed by msgspec."""
    attrs: list[str] = []
    nullable = False
    node = root
    rest: tuple[str, ...] = ()
    for i, key in enumerate(use.path):
        node = node.children[key]
        attrs.append(node.attr)
        if node.generic:
            rest = use.path[i + 1:]
            break
        if i < len(use.path) - 1 and not node.required:
            nullable = True
    exact = not node.generic and node.type is use.msgspec_type
    if not nullable and not rest:
        return attrgetter(".".join(attrs)), exact

    def get(struct: Any) -> Any:
        value = struct
        for attr in attrs:
            value = getattr(value, attr)
            if value is None:
                return None
        for key in rest:
            if type(value) is not dict:
                return None if value is None else BAD
            value = value.get(key)
        return value

    return get, exact and not rest


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


# --- the parser ----------------------------------------------------------------------------------


def without_gc(parse: Callable[[pa.RecordBatch], pa.RecordBatch],
               batch: pa.RecordBatch) -> pa.RecordBatch:
    """``parse(batch)`` with Python's cycle collector off: a parsed batch makes no cycles, so
    collections triggered by its millions of new objects would only rescan them."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return parse(batch)
    finally:
        if collecting:
            gc.enable()


def declared_uses(event: EventConfig) -> tuple[list[Use], list[pa.DataType], Use | None]:
    """The declared fields as every parser applies them (JSON's here, the decoded-record formats'
    in ``eos.compute.formats.records``), their Arrow types, and the event time's field (None
    for ``kafka_timestamp``): one compilation, so the formats cannot drift apart."""
    fields = [
        Use(_label(name, spec.path), spec.path, spec.type.name, spec.optional, spec,
             event.max_string_bytes)
        for name, spec in event.fields.items()
    ]
    types = [arrow_type(spec.type) for spec in event.fields.values()]
    time: Use | None = None
    if event.time.format != "kafka_timestamp":
        assert event.time.field is not None
        time = Use(f"'{event.time.field}'", event.time.path, event.time.format, optional=False)
    return fields, types, time

class Parser:
    """``Parser(event).parse(raw, kafka_ts_ms)`` for one record, ``parse_batch`` for an Arrow batch
    of raw Kafka records (``eos.compute.reader.RAW_SCHEMA``); compiled once from ``event``."""

    def __init__(self, event: EventConfig) -> None:
        self.event = event
        self.schema = parsed_schema(event)
        self._max_future = event.max_future
        self._fields, self._arrow_types, self._time = declared_uses(event)
        uses = [*self._fields, *([self._time] if self._time else [])]
        self._uses = uses
        root = _Node()
        for use in uses:
            node = root
            for key in use.path:
                node = node.children.setdefault(key, _Node())
            node.uses.append(use)
        _compile_node(root, "Event")
        # Numbers are read exactly (as Decimal) where a rule needs their digits.
        exact = any(n.generic for n in root.walk()) or any(
            use.kind in ("decimal", "epoch_s") for use in uses)
        # The typed decoder every record goes through first (public for benchmarks).
        self.decoder = msgspec.json.Decoder(root.type, float_hook=Decimal if exact else None)
        self._decode = self.decoder.decode
        self._generic = msgspec.json.Decoder(float_hook=Decimal).decode
        self._dummy = root.dummy
        for use in uses:
            use.get, exact_type = _getter(root, use)
            # msgspec's type is the whole rule only where no length or range is checked after.
            use.direct = exact_type and use.kind in _RULES and use.whole is None
        self._time_ms: Callable[[Any], int] | None = None
        if self._time is not None:
            exact_ms = self._time.kind == "epoch_ms" and _getter(root, self._time)[1]
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
        if raw is None or _too_deep(raw):
            return None
        try:
            struct = self._decode(raw)
        except _DECODE_ERRORS:
            return None
        if not raw.isascii() and _utf8_error(raw) is not None:
            return None
        if self._time is None:
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
        bad_byte = _utf8_error(raw)
        if bad_byte is not None:
            return f"not valid UTF-8 at byte {bad_byte}"
        if _too_deep(raw):
            return f"malformed JSON: nested more than {MAX_DEPTH} levels deep"
        try:
            doc = self._generic(raw)
        except msgspec.ValidationError as error:  # an integer too long to convert
            problem: Exception = error
            try:  # the typed decoder names the path, if the number is at a declared one
                self._decode(raw)
            except _DECODE_ERRORS as typed:
                if isinstance(typed, msgspec.ValidationError):
                    problem = typed
            return f"unsupported JSON number: {problem}"[:REASON_CHARS]
        except (msgspec.DecodeError, ValueError, RecursionError) as error:
            return _malformed(raw, error)
        except ArithmeticError:
            huge = _HUGE_EXPONENT.search(raw)
            number = huge.group().decode()[:40] if huge else "a number"
            return f"unsupported JSON number {number}: its exponent is out of range"
        if type(doc) is not dict:
            return f"not a JSON object (got {_kind(doc)})"
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
        except _DECODE_ERRORS as error:
            message = str(error)
            at = _AT_PATH.search(message)
            labels = {"$." + ".".join(use.path): use.label for use in self._uses}
            if at and at.group(2) in labels:
                return f"field {labels[at.group(2)]}: {at.group(1)}"[:REASON_CHARS]
            return f"rejected by the decoder: {message}"[:REASON_CHARS]
        return "rejected by the parser"

    def _time_reason(self, doc: dict, kafka_ts_ms: int | None) -> str | None:
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
            deep = [i for i, v in enumerate(values) if _too_deep(v)]
            if deep:
                values = values[:] if values is raws else values
                for i in deep:
                    values[i] = b""  # never handed to msgspec
                bad.update(deep)
        structs = self._decode_all(values, bad)
        if not b"".join(values).isascii():
            bad.update(i for i, v in enumerate(values) if _utf8_error(v) is not None)

        # event time
        if self._time is None:
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

    def _decode_all(self, values: list[bytes], bad: set[int]) -> list[Any]:
        """Decode every value; one that fails gets the stand-in Struct and its index in ``bad``."""
        decode = self._decode
        structs: list[Any] = []
        pending = iter(values)
        while True:
            try:
                structs.extend(map(decode, pending))  # keeps what it decoded before a failure
                break
            except _DECODE_ERRORS:
                bad.add(len(structs))
                structs.append(self._dummy)
        if len(structs) != len(values):  # not expected: then one at a time
            structs = []
            for i, raw in enumerate(values):
                try:
                    structs.append(decode(raw))
                except _DECODE_ERRORS:
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
