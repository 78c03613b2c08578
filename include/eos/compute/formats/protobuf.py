"""``event.format: protobuf``: Protobuf messages in the Schema Registry wire format.

A record value is byte 0 (the magic byte), the writer schema's id (4 bytes, big-endian), the
message indexes (which message of the schema's file: a zigzag varint count, then that many zigzag
varint indexes into the nested message types; a single 0 is the file's first message), then the
Protobuf encoding of one message.

The writer schema is fetched by id once per worker with ``format=serialized``: the registry
answers a base64 ``FileDescriptorProto`` (the form Confluent's own deserializer asks for; a
Confluent registry converts the .proto text it keeps), so no .proto parser runs on a worker.
Its message class is built at run time in a pool of its own per schema id (two writer versions
both name ``shop.Order``) holding the well-known types (``google.protobuf``, ``google.type``,
``confluent.type``) that a schema may import without a reference.

The message becomes a dict of the field names as written in the schema, typed exactly:
64-bit integers stay ``int``, enums are their names (a number the schema does not name stays a
number, which a declared ``string`` refuses), ``bytes`` stay bytes, and

* ``google.protobuf.Timestamp`` is an aware datetime (a timestamp finer than a microsecond is
  its RFC 3339 text, so nothing is rounded: event time and ``long`` refuse it, as they refuse
  anything finer than a millisecond); ``google.type.Date`` is a date;
* ``google.type.Decimal`` (decimal text) and ``confluent.type.Decimal`` (two's-complement
  unscaled bytes and a scale) are exact ``Decimal`` values;
* the wrappers (``google.protobuf.Int64Value`` ...) are their value;
* a field with presence (a message, ``optional``, a oneof member, proto2) that is not set is
  None, so an optional declared field reads NULL and a required one is quarantined; a proto3
  scalar without presence is its default (0, ""), which is what its writer meant.

Quarantined, with the reason: no magic byte, an id the registry does not know, a schema that is
not Protobuf (or uses references), message indexes that name no message, a payload that does
not decode (truncated, a bad tag or length, invalid UTF-8 in a string), a timestamp, date or
decimal that is not one.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from eos.compute.formats import REASON_CHARS, Decoded, Rejected
from eos.compute.formats.records import RecordParser
from eos.compute.formats.registry import HEADER, RegistryDecoder, WriterSchemas
from eos.core.config import EventConfig, SchemaRegistryConfig

MAX_INDEXES = 64  # message nesting deeper than this is not a schema anyone writes
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# google.type.Decimal's text: an optional sign, digits with an optional point, an exponent.
DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


class Unreadable(Exception):
    """A value in a decoded message that is not what its type says (a reason)."""


class ProtobufDecoder(RegistryDecoder):
    """``RecordDecoder`` for Protobuf in the wire format; a schema's classes built once per id."""

    kind, what = "PROTOBUF", "Protobuf (event.format is protobuf)"
    fmt = "serialized"

    def __init__(self, registry: SchemaRegistryConfig | WriterSchemas) -> None:
        super().__init__(registry)
        self._readers: dict[tuple[int, tuple[int, ...]], Any] = {}  # -> (class, convert)

    def read(self, schema_id: int, raw: bytes) -> Decoded | Rejected:
        indexes, start = message_indexes(raw, HEADER)
        if isinstance(indexes, str):
            return Rejected(f"schema id {schema_id}: {indexes}")
        reader = self._readers.get((schema_id, indexes))
        if reader is None:
            reader = self._reader(schema_id, indexes)
            if not isinstance(reader, Rejected):  # hostile indexes are many: not kept
                self._readers[(schema_id, indexes)] = reader
        if isinstance(reader, Rejected):
            return reader
        message_class, convert = reader
        from google.protobuf.message import DecodeError

        message = message_class()
        try:
            message.ParseFromString(raw[start:])
        except (DecodeError, RuntimeError, ValueError) as error:  # RuntimeError: recursion
            return Rejected(f"schema id {schema_id}: the payload does not decode "
                            f"({type(error).__name__}: {error})"[:REASON_CHARS])
        try:
            record = convert(message)
        except Unreadable as error:
            return Rejected(f"schema id {schema_id}: {error}"[:REASON_CHARS])
        return Decoded(record, f"schema id {schema_id}")

    def _reader(self, schema_id: int, indexes: tuple[int, ...]) -> Any:
        """(message class, converter to a dict) for the message the indexes name, or why not."""
        from google.protobuf.message_factory import GetMessageClass

        file = self.writer(schema_id)
        if isinstance(file, Rejected):
            return file
        proto, pool = file
        name = message_name(proto, indexes)
        if name is None:
            return Rejected(f"schema id {schema_id}: message indexes {list(indexes)} name no "
                            "message of the schema")
        descriptor = pool.FindMessageTypeByName(name)
        return GetMessageClass(descriptor), converter(descriptor)

    def build(self, schema_id: int, text: str) -> Any:
        """The writer schema's FileDescriptorProto and the pool that built it, or why not."""
        built = file_from_serialized(text, f"schema_{schema_id}.proto")
        if isinstance(built, str):
            return Rejected(f"schema id {schema_id} {built}"[:REASON_CHARS])
        return built


def message_indexes(raw: bytes, at: int) -> tuple[tuple[int, ...] | str, int]:
    """The message indexes at ``raw[at:]`` and where the message starts, or what is wrong."""
    values: list[int] = []
    count: int | None = None
    while count is None or len(values) < count:
        value, at = _zigzag(raw, at)
        if value is None:
            return "the message indexes are cut short", at
        if count is None:
            if value == 0:
                return (0,), at
            if not 0 < value <= MAX_INDEXES:
                return f"the message indexes claim {value} indexes", at
            count = value
        elif value < 0:
            return f"message index {value} is negative", at
        else:
            values.append(value)
    return tuple(values), at


def _zigzag(raw: bytes, at: int) -> tuple[int | None, int]:
    """One zigzag varint (at most 10 bytes) from ``raw[at:]``; None if cut short."""
    value = shift = 0
    for i in range(at, min(at + 10, len(raw))):
        byte = raw[i]
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), i + 1
    return None, len(raw)


def message_name(proto: Any, indexes: tuple[int, ...]) -> str | None:
    """The full name of the message ``indexes`` names in a FileDescriptorProto, or None."""
    types, names = proto.message_type, [proto.package] if proto.package else []
    for index in indexes:
        if index >= len(types):
            return None
        names.append(types[index].name)
        types = types[index].nested_type
    return ".".join(names)


def builtin_files() -> list[bytes]:
    """The files a schema may import without a reference (confluent's serializer skips them)."""
    from confluent_kafka.schema_registry.confluent import meta_pb2
    from confluent_kafka.schema_registry.confluent.types import decimal_pb2 as confluent_decimal
    from google.protobuf import (
        any_pb2,
        api_pb2,
        descriptor_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )
    from google.type import (
        calendar_period_pb2,
        color_pb2,
        date_pb2,
        datetime_pb2,
        dayofweek_pb2,
        decimal_pb2,
        expr_pb2,
        fraction_pb2,
        latlng_pb2,
        money_pb2,
        month_pb2,
        postal_address_pb2,
        quaternion_pb2,
        timeofday_pb2,
    )

    modules = (any_pb2, source_context_pb2, type_pb2, api_pb2, descriptor_pb2, duration_pb2,
               empty_pb2, field_mask_pb2, struct_pb2, timestamp_pb2, wrappers_pb2,
               calendar_period_pb2, color_pb2, date_pb2, datetime_pb2, dayofweek_pb2,
               decimal_pb2, expr_pb2, fraction_pb2, latlng_pb2, money_pb2, month_pb2,
               postal_address_pb2, quaternion_pb2, timeofday_pb2, meta_pb2, confluent_decimal)
    return [m.DESCRIPTOR.serialized_pb for m in modules]


def file_from_serialized(text: str, name: str) -> tuple[Any, Any] | str:
    """(FileDescriptorProto, its own pool) from a registry's base64 serialized schema, or why
    it is not a Protobuf schema (a phrase after ``schema id N``)."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.descriptor_pool import DescriptorPool
    from google.protobuf.message import DecodeError

    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
        proto = descriptor_pb2.FileDescriptorProto.FromString(data)
    except (UnicodeEncodeError, binascii.Error, ValueError, DecodeError):
        return ("is not a serialized Protobuf schema (asked with format=serialized, the "
                "registry answered something else: .proto text?)")
    proto.name = name
    pool = DescriptorPool()
    for builtin in builtin_files():
        pool.AddSerializedFile(builtin)
    try:
        pool.Add(proto)
    except (TypeError, ValueError, KeyError) as error:
        return f"is not a valid Protobuf schema: {error}"
    if not proto.message_type:
        return "has no message types"
    return proto, pool


# --- a message as a dict ------------------------------------------------------------------

def converter(descriptor: Any) -> Callable[[Any], dict[str, Any]]:
    """message -> dict for one message type (compiled once; nested types on first use)."""
    fields = [(field.name, _field(field)) for field in descriptor.fields]

    def convert(message: Any) -> dict[str, Any]:
        return {name: read(message) for name, read in fields}

    return convert


def _field(field: Any) -> Callable[[Any], Any]:
    """message -> this field's value (None for a field with presence that is not set)."""
    name = field.name
    if field.is_repeated:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_of = _value(field.message_type.fields_by_name["value"])
            return lambda m: {k: value_of(v) for k, v in getattr(m, name).items()}
        one = _value(field)
        return lambda m: [one(v) for v in getattr(m, name)]
    one = _value(field)
    if field.has_presence:
        return lambda m: one(getattr(m, name)) if m.HasField(name) else None
    return lambda m: one(getattr(m, name))


def _value(field: Any) -> Callable[[Any], Any]:
    """One value of the field's type -> its Python value."""
    from google.protobuf.descriptor import FieldDescriptor

    if field.type == FieldDescriptor.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda v: names.get(v, v)
    if field.type not in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return lambda v: v
    kind = field.message_type
    special = _SPECIAL.get(kind.full_name)
    if special is not None:
        label = field.name
        return lambda v: special(v, label)
    if kind.full_name in _WRAPPERS:
        return lambda v: v.value
    cache: list[Callable[[Any], dict[str, Any]]] = []

    def nested(v: Any) -> dict[str, Any]:  # compiled on first use: a type may contain itself
        if not cache:
            cache.append(converter(kind))
        return cache[0](v)

    return nested


def _timestamp(v: Any, label: str) -> datetime | str:
    if not (-62_135_596_800 <= v.seconds <= 253_402_300_799 and 0 <= v.nanos < 10**9):
        raise Unreadable(f"field {label}: Timestamp {v.seconds} s {v.nanos} ns is outside "
                         "0001..9999")
    if v.nanos % 1000:
        return str(v.ToJsonString())  # finer than datetime holds: its text, not rounded
    return _EPOCH + timedelta(seconds=v.seconds, microseconds=v.nanos // 1000)


def _date(v: Any, label: str) -> date:
    try:
        return date(v.year, v.month, v.day)
    except ValueError:
        raise Unreadable(f"field {label}: Date {v.year}-{v.month}-{v.day} is not a full "
                         "calendar date") from None


def _google_decimal(v: Any, label: str) -> Decimal:
    if not DECIMAL_TEXT.fullmatch(v.value):
        raise Unreadable(f"field {label}: Decimal {v.value[:40]!r} is not a decimal number")
    return Decimal(v.value)


def _confluent_decimal(v: Any, label: str) -> Decimal:
    if len(v.value) > 64:  # 154 digits: more than any decimal a field declares
        raise Unreadable(f"field {label}: Decimal of {len(v.value)} bytes is too long")
    unscaled = int.from_bytes(v.value, "big", signed=True)
    sign, digits = (1 if unscaled < 0 else 0), tuple(int(d) for d in str(abs(unscaled)))
    return Decimal((sign, digits, -v.scale))  # exact: no context, no rounding


_SPECIAL: dict[str, Callable[[Any, str], Any]] = {
    "google.protobuf.Timestamp": _timestamp,
    "google.type.Date": _date,
    "google.type.Decimal": _google_decimal,
    "confluent.type.Decimal": _confluent_decimal,
}
_WRAPPERS = {f"google.protobuf.{k}Value" for k in (
    "Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")}


def parser(event: EventConfig) -> RecordParser:
    assert event.schema_registry is not None  # checked when the config loads
    return RecordParser(event, ProtobufDecoder(event.schema_registry))
