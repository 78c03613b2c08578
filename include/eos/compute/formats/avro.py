"""``event.format: avro``: Avro records in the Schema Registry wire format.

A record value is byte 0 (the magic byte), the writer schema's id (4 bytes, big-endian), then
the Avro binary encoding of one datum of that schema. The writer schema is fetched by id from
``event.schema_registry`` once per worker (``WriterSchemas``) and parsed by fastavro once; the
datum is decoded with it alone (no reader schema: the declared fields are paths into what the
writer wrote, so a new writer version that still has them is read as it is, and one that lost
a required path quarantines its records naming the schema id and the field).

fastavro maps the logical types exactly: ``decimal`` to ``Decimal`` at the schema's scale,
``timestamp-millis``/``-micros`` to aware datetimes, ``date`` to dates; enums are strings; a
union with null is a value or None (an optional field reads None as NULL; a required one is
quarantined as null). ``eos.compute.formats.records`` applies the declared types.

Quarantined, with the reason: no magic byte, an id the registry does not know, a schema that is
not Avro (or uses references), a payload that does not decode (truncated, a bad length or union
index, invalid UTF-8) or that has bytes left over after the datum.
"""

from __future__ import annotations

import json
from io import BytesIO
from typing import Any

from eos.compute.formats import REASON_CHARS, Decoded, Rejected
from eos.compute.formats.records import RecordParser
from eos.compute.formats.registry import HEADER, RegistryDecoder
from eos.core.config import EventConfig

# What fastavro raises on bytes that are not a datum of the schema: EOFError (truncated),
# IndexError (a union or enum index out of range), UnicodeDecodeError (a ValueError), ValueError
# and OverflowError (a negative or huge length), MemoryError (a length it tried to allocate).
_DECODE_ERRORS = (EOFError, IndexError, ValueError, OverflowError, MemoryError, StopIteration,
                  KeyError, TypeError)


class AvroDecoder(RegistryDecoder):
    """``RecordDecoder`` for Avro in the wire format; writer schemas parsed once per id."""

    kind, what = "AVRO", "Avro (event.format is avro)"

    def read(self, schema_id: int, raw: bytes) -> Decoded | Rejected:
        writer = self.writer(schema_id)
        if isinstance(writer, Rejected):
            return writer
        return _datum(raw, writer, schema_id)

    def build(self, schema_id: int, text: str) -> Any:
        """fastavro's parsed writer schema, or why no record of it can be read."""
        from fastavro import parse_schema
        from fastavro.schema import SchemaParseException, UnknownType

        try:
            parsed = parse_schema(json.loads(text))
        except (ValueError, SchemaParseException, UnknownType) as error:
            return Rejected(f"schema id {schema_id} is not a valid Avro schema: "
                            f"{error}"[:REASON_CHARS])
        unsafe = unsafe_schema(parsed)
        if unsafe is not None:
            return Rejected(f"schema id {schema_id} {unsafe}; not read")
        return parsed


def unsafe_schema(schema: Any) -> str | None:
    """Why records of ``schema`` cannot be decoded safely, if so (a phrase for the reason).

    * An array whose items encode to zero bytes (``null``, a record of such fields, ``fixed``
      of size 0): a datum states an array's length up front, so ten bytes can claim 2^62 items
      and decoding would fill the worker's memory.
    * A recursive record (a type that contains itself): a datum nested a few thousand levels
      deep crashes fastavro's compiled reader (a segfault at 10,000 levels, measured), which
      would kill the worker on every retry. Event records are not trees."""
    names: dict[str, Any] = {}

    def named(t: Any) -> Any:
        if isinstance(t, dict) and "name" in t:
            names[t["name"]] = t
        return names.get(t, t) if isinstance(t, str) else t

    def empty(t: Any) -> bool:
        t = named(t)
        if t == "null":
            return True
        if not isinstance(t, dict):
            return False
        if t.get("type") == "record":
            return all(empty(f["type"]) for f in t["fields"])
        if t.get("type") == "fixed":
            return t.get("size") == 0
        return t.get("type") == "null"

    def walk(t: Any, inside: frozenset[str]) -> str | None:
        t = named(t)
        if isinstance(t, list):
            return next((found for u in t if (found := walk(u, inside))), None)
        if not isinstance(t, dict):
            return None
        kind = t.get("type")
        if kind == "array":
            if empty(t["items"]):
                return (f"has an array of {json.dumps(t['items'])[:60]}, whose items take no "
                        "bytes: a record of a few bytes could claim billions of them")
            return walk(t["items"], inside)
        if kind == "map":
            return walk(t["values"], inside)
        if kind == "record":
            if t["name"] in inside:
                return f"is recursive (record {t['name']} contains itself)"
            return next((found for f in t["fields"]
                         if (found := walk(f["type"], inside | {t["name"]}))), None)
        return None

    return walk(schema, frozenset())


def _datum(raw: bytes, writer: Any, schema_id: int) -> Decoded | Rejected:
    """One datum of ``writer`` from ``raw`` after the header, all of it and nothing else."""
    from fastavro import schemaless_reader

    stream = BytesIO(raw)
    stream.seek(HEADER)
    try:
        record = schemaless_reader(stream, writer, None)
    except _DECODE_ERRORS as error:
        return Rejected(f"schema id {schema_id}: the payload does not decode "
                        f"({type(error).__name__}: {error})"[:REASON_CHARS])
    left = len(raw) - stream.tell()
    if left:
        return Rejected(f"schema id {schema_id}: {left} bytes are left after the record "
                        "(the payload is not one datum of this schema)")
    if type(record) is not dict:
        return Rejected(f"schema id {schema_id} is not a record schema "
                        f"(the datum is {type(record).__name__})")
    return Decoded(record, f"schema id {schema_id}")


def parser(event: EventConfig) -> RecordParser:
    assert event.schema_registry is not None  # checked when the config loads
    return RecordParser(event, AvroDecoder(event.schema_registry))
