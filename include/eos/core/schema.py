"""Types and column names derived from a pipeline's declared event schema.

One place maps a declared type (``eos.core.config.FieldType``) to Arrow and Spark, and names the
columns of a parsed batch: the declared fields under their own names (so the ``filter`` reads
them as written) and the record's coordinates under ``__``-prefixed names no field can take.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from eos.core.config import EventConfig, FieldType

# Columns of a parsed batch besides the declared fields.
PARTITION = "__partition"
OFFSET = "__offset"
KAFKA_TS = "__kafka_ts"
EVENT_MS = "__event_ms"
RAW_KEY = "__raw_key"
RAW_VALUE = "__raw_value"
REASON = "__reason"  # null: the record parsed; else why it is quarantined
# Read only when a pipeline names them (``eos.core.metadata.READ_ON_DEMAND``): the record's key
# as text and its timestamp's type, after the parsed columns.
KEY_TEXT = "__kafka_key"
TS_TYPE = "__kafka_ts_type"
METADATA_SCHEMA = pa.schema([(KEY_TEXT, pa.string()), (TS_TYPE, pa.string())])
# ... and, each when named: the key's bytes, every header, some headers as text.
KEY_BYTES = "__kafka_key_bytes"
HEADERS = "__kafka_headers"
# ``kafka_headers``: every header of a record in its order (a name may repeat, a value be null).
HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
KEY_FIELD_PREFIX = "__key_"  # the parsed key's fields (``event.key``), after the value's


def key_field_column(name: str) -> str:
    """The column of the parsed key's field ``name`` (``key.<name>`` in an expression)."""
    return f"{KEY_FIELD_PREFIX}{name}"


def header_column(index: int) -> str:
    """The column of the ``index``-th header read as text (``Carried.header_names``)."""
    return f"__header_{index}"


@dataclass(frozen=True)
class Carried:
    """What the reader carries beside each parsed record, each only when a pipeline reads it
    (``eos.core.metadata.READ_ON_DEMAND``): the key as text and the timestamp type (``pair``),
    the key's bytes, every header, and the headers named by ``header.<name>`` as text."""

    pair: bool = False
    key_bytes: bool = False
    headers: bool = False
    header_names: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        return self.pair or self.key_bytes or self.headers or bool(self.header_names)

    @property
    def raw_headers(self) -> bool:
        """Whether the reader must take each record's headers from Kafka."""
        return self.headers or bool(self.header_names)

    def schema(self) -> list[pa.Field]:
        return [*(METADATA_SCHEMA if self.pair else []),
                *([pa.field(KEY_BYTES, pa.binary())] if self.key_bytes else []),
                *([pa.field(HEADERS, HEADERS_TYPE)] if self.headers else []),
                *[pa.field(header_column(i), pa.string())
                  for i in range(len(self.header_names))]]

    def to_json(self) -> str:
        return json.dumps({"pair": self.pair, "key_bytes": self.key_bytes,
                           "headers": self.headers, "header_names": list(self.header_names)})

    @classmethod
    def from_option(cls, value: str | None) -> Carried:
        """The reader's option: absent, ``true`` (the pair: an older driver's), or JSON."""
        if not value:
            return cls()
        if value == "true":
            return cls(pair=True)
        doc = json.loads(value)
        return cls(bool(doc["pair"]), bool(doc["key_bytes"]), bool(doc["headers"]),
                   tuple(doc["header_names"]))


# A select's timestamp column: Spark's TIMESTAMP (microseconds, an instant; UTC).
TIMESTAMP = pa.timestamp("us", tz="UTC")
# Read only when a plan reads several topics (a plan of one names its topic once): each
# record's topic, after the metadata columns.
TOPIC = "__topic"


def arrow_type(ftype: FieldType) -> pa.DataType:
    if ftype.name == "decimal":
        return pa.decimal128(ftype.precision, ftype.scale)
    if ftype.name == "headers":
        return HEADERS_TYPE
    return {"string": pa.string(), "long": pa.int64(), "double": pa.float64(),
            "boolean": pa.bool_(), "binary": pa.binary(), "date": pa.date32(),
            "timestamp": TIMESTAMP}[ftype.name]


def spark_ddl(dtype: pa.DataType) -> str:
    """The Spark SQL type of an Arrow type used in staging (fields, state, outputs)."""
    if pa.types.is_decimal(dtype):
        return f"decimal({dtype.precision},{dtype.scale})"
    if pa.types.is_list(dtype):
        return f"array<{spark_ddl(dtype.value_type)}>"
    if pa.types.is_struct(dtype):
        inner = ", ".join(f"{f.name}: {spark_ddl(f.type)}" for f in dtype)
        return f"struct<{inner}>"
    simple = {pa.string(): "string", pa.int64(): "bigint", pa.int32(): "int",
              pa.float64(): "double", pa.bool_(): "boolean", pa.binary(): "binary",
              pa.date32(): "date", TIMESTAMP: "timestamp"}
    return simple[dtype]


def field_schema(event: EventConfig) -> pa.Schema:
    """The declared fields, typed, in declaration order (every one nullable: optional fields
    and quarantined rows are null)."""
    return pa.schema([(name, arrow_type(spec.type)) for name, spec in event.fields.items()])


def parsed_schema(event: EventConfig) -> pa.Schema:
    """What the parser emits per Kafka record: coordinates, event time, fields, and for a
    quarantined record its raw bytes and reason (fields and event time null)."""
    return pa.schema(
        [(PARTITION, pa.int32()), (OFFSET, pa.int64()), (KAFKA_TS, pa.int64()),
         (EVENT_MS, pa.int64()), *field_schema(event),
         (RAW_KEY, pa.binary()), (RAW_VALUE, pa.binary()), (REASON, pa.string())]
    )


def key_schema(event: EventConfig) -> list[pa.Field]:
    """The parsed key's fields (``event.key``), typed, after the value's parsed columns."""
    if event.key is None:
        return []
    return [pa.field(key_field_column(name), arrow_type(spec.type))
            for name, spec in event.key.fields.items()]


def read_schema(event: EventConfig, metadata: bool | Carried,
                topics: bool = False) -> pa.Schema:
    """What the reader emits per Kafka record: ``parsed_schema``, the parsed key's fields,
    what it carries (``Carried``; ``True``: the key as text and the timestamp's type), and with
    ``topics`` the record's topic (``TOPIC``: a plan of several topics)."""
    carried = Carried(pair=True) if metadata is True else metadata or Carried()
    return pa.schema([*parsed_schema(event), *key_schema(event), *carried.schema(),
                      *([pa.field(TOPIC, pa.string())] if topics else [])])


def with_metadata(parsed: pa.RecordBatch, raw: pa.RecordBatch,
                  carried: Carried | None = None) -> pa.RecordBatch:
    """A parsed batch with what its raw records carry: the key as text
    (``eos.core.metadata.key_text``) and timestamp type, the key's bytes, every header, and
    some headers as text (``header_text``): what a pipeline reading them needs of every record,
    not only of a quarantined one."""
    from eos.core.metadata import header_text, key_text

    carried = carried or Carried(pair=True)
    columns: list[pa.Array] = []
    if carried.pair:
        columns += [pa.array([key_text(k) for k in raw.column("key").to_pylist()], pa.string()),
                    raw.column("timestamp_type")]
    if carried.key_bytes:
        columns.append(raw.column("key"))
    if carried.raw_headers:
        headers = raw.column("headers").to_pylist()
        if carried.headers:
            columns.append(raw.column("headers"))
        for name in carried.header_names:
            columns.append(pa.array(
                [header_text([(h["key"], h["value"]) for h in hs or ()], name) for hs in headers],
                pa.string()))
    return pa.RecordBatch.from_arrays(
        [*parsed.columns, *columns], schema=pa.schema([*parsed.schema, *carried.schema()]))


def ddl(schema: pa.Schema) -> str:
    """A Spark DDL string for an Arrow schema (``mapInArrow``'s output type)."""
    return ", ".join(f"`{f.name}` {spark_ddl(f.type)}" for f in schema)
