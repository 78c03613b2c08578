"""The audit's own reading of Protobuf in the Schema Registry wire format.

Independent of the pipeline's decoder (``eos.compute.formats.protobuf``) where a decoder can be
wrong: the header and the message indexes are read here from a stream, the writer schema is
fetched with urllib (``?format=serialized``, by ``eos.tools.audit.registry``), its message is
found by walking the descriptor pool's types (not the FileDescriptorProto's lists), and a
message becomes a dict through ``ListFields`` (the fields that are set) over defaults, not
field-by-field ``HasField``. The bytes are parsed by the protobuf runtime, as fastavro parses
Avro for both: its errors are part of a quarantine reason, which the audit writes a second time
with the pipeline's words (the reasons are the pipeline's semantics, like the declared fields).
"""

from __future__ import annotations

import base64
from datetime import UTC, date, datetime, timedelta
from decimal import MAX_PREC, Context, Decimal
from io import BytesIO
from typing import Any

from eos.compute.formats import REASON_CHARS, Decoded, Rejected
from eos.compute.formats.protobuf import DECIMAL_TEXT, MAX_INDEXES, builtin_files
from eos.tools.audit.registry import HEADER, AuditRegistryDecoder


class _Bad(Exception):
    pass


class AuditProtobufDecoder(AuditRegistryDecoder):
    """A ``RecordDecoder`` for the audit (see the module)."""

    kind, what = "PROTOBUF", "Protobuf (event.format is protobuf)"
    query = "?format=serialized"

    def read(self, schema_id: int, raw: bytes) -> Decoded | Rejected:
        stream = BytesIO(raw[HEADER:])
        try:
            path = _indexes(stream)
        except _Bad as bad:
            return Rejected(f"schema id {schema_id}: {bad}")
        writer = self.writer(schema_id)
        if isinstance(writer, Rejected):
            return writer
        cls = _message_class(writer, path)
        if cls is None:
            return Rejected(f"schema id {schema_id}: message indexes {path} name no "
                            "message of the schema")
        from google.protobuf.message import DecodeError

        message = cls()
        try:
            message.ParseFromString(stream.read())
        except (DecodeError, RuntimeError, ValueError) as error:
            return Rejected(f"schema id {schema_id}: the payload does not decode "
                            f"({type(error).__name__}: {error})"[:REASON_CHARS])
        try:
            return Decoded(_as_dict(message), f"schema id {schema_id}")
        except _Bad as bad:
            return Rejected(f"schema id {schema_id}: {bad}"[:REASON_CHARS])

    def build(self, schema_id: int, text: str) -> Any:
        """The writer schema's file descriptor (in a pool of its own), or why not."""
        from google.protobuf import descriptor_pb2
        from google.protobuf.descriptor_pool import DescriptorPool

        try:
            proto = descriptor_pb2.FileDescriptorProto()
            proto.ParseFromString(base64.b64decode(text, validate=True))
        except Exception:  # not base64, not a descriptor
            return Rejected(f"schema id {schema_id} is not a serialized Protobuf schema (asked "
                            "with format=serialized, the registry answered something else: "
                            ".proto text?)")
        proto.name = f"schema_{schema_id}.proto"
        pool = DescriptorPool()
        for builtin in builtin_files():  # which imports need no reference: the pipeline's rule
            pool.AddSerializedFile(builtin)
        try:
            file = pool.Add(proto) or pool.FindFileByName(proto.name)
        except (TypeError, ValueError, KeyError) as error:
            return Rejected(f"schema id {schema_id} is not a valid Protobuf schema: "
                            f"{error}"[:REASON_CHARS])
        if not proto.message_type:
            return Rejected(f"schema id {schema_id} has no message types")
        return file


def _varint(stream: BytesIO) -> int:
    shift = result = 0
    for _ in range(10):
        byte = stream.read(1)
        if not byte:
            break
        result |= (byte[0] & 0x7F) << shift
        shift += 7
        if byte[0] < 0x80:
            return (result >> 1) if not result & 1 else -((result + 1) >> 1)
    raise _Bad("the message indexes are cut short")


def _indexes(stream: BytesIO) -> list[int]:
    count = _varint(stream)
    if count == 0:
        return [0]
    if count < 0 or count > MAX_INDEXES:
        raise _Bad(f"the message indexes claim {count} indexes")
    path = []
    for _ in range(count):
        index = _varint(stream)
        if index < 0:
            raise _Bad(f"message index {index} is negative")
        path.append(index)
    return path


def _message_class(file: Any, path: list[int]) -> Any:
    from google.protobuf.message_factory import GetMessageClass

    types = list(file.message_types_by_name.values())
    found = None
    for index in path:
        if index >= len(types):
            return None
        found = types[index]
        types = list(found.nested_types)
    return GetMessageClass(found)


def _as_dict(message: Any) -> dict[str, Any]:
    from google.protobuf.descriptor import FieldDescriptor

    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        if field.is_repeated:
            out[field.name] = {} if _is_map(field) else []
        elif field.has_presence:
            out[field.name] = None
        elif field.type == FieldDescriptor.TYPE_ENUM:
            out[field.name] = _enum(field, 0)
        else:
            out[field.name] = field.default_value
    for field, value in message.ListFields():
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _one(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_one(field, v) for v in value]
        else:
            out[field.name] = _one(field, value)
    return out


def _is_map(field: Any) -> bool:
    return bool(field.is_repeated and field.message_type is not None
                and field.message_type.GetOptions().map_entry)


def _enum(field: Any, number: int) -> Any:
    value = field.enum_type.values_by_number.get(number)
    return number if value is None else value.name


def _one(field: Any, value: Any) -> Any:
    from google.protobuf.descriptor import FieldDescriptor

    if field.type == FieldDescriptor.TYPE_ENUM:
        return _enum(field, value)
    if field.type not in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return value
    kind = field.message_type.full_name
    if kind == "google.protobuf.Timestamp":
        if not (-62_135_596_800 <= value.seconds <= 253_402_300_799
                and 0 <= value.nanos < 10**9):
            raise _Bad(f"field {field.name}: Timestamp {value.seconds} s {value.nanos} ns is "
                       "outside 0001..9999")
        if value.nanos % 1000:
            return value.ToJsonString()
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=value.seconds,
                                                             microseconds=value.nanos // 1000)
    if kind == "google.type.Date":
        try:
            return date(value.year, value.month, value.day)
        except ValueError:
            raise _Bad(f"field {field.name}: Date {value.year}-{value.month}-{value.day} is "
                       "not a full calendar date") from None
    if kind == "google.type.Decimal":
        if not DECIMAL_TEXT.fullmatch(value.value):
            raise _Bad(f"field {field.name}: Decimal {value.value[:40]!r} is not a decimal "
                       "number")
        return Decimal(value.value)
    if kind == "confluent.type.Decimal":
        if len(value.value) > 64:
            raise _Bad(f"field {field.name}: Decimal of {len(value.value)} bytes is too long")
        unscaled = Decimal(int.from_bytes(value.value, "big", signed=True))
        return unscaled.scaleb(-value.scale, Context(prec=MAX_PREC))  # exact
    if kind.startswith("google.protobuf.") and kind.endswith("Value") and kind[16:-5] in (
            "Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes"):
        return value.value
    return _as_dict(value)

