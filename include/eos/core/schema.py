"""Types and column names derived from a pipeline's declared event schema.

One place maps a declared type (``eos.core.config.FieldType``) to Arrow and Spark, and names the
columns of a parsed batch: the declared fields under their own names (so the ``filter`` reads
them as written) and the record's coordinates under ``__``-prefixed names no field can take.
"""

from __future__ import annotations

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
# Read only when a plan reads several topics (a plan of one names its topic once): each
# record's topic, after the metadata columns.
TOPIC = "__topic"


def arrow_type(ftype: FieldType) -> pa.DataType:
    if ftype.name == "decimal":
        return pa.decimal128(ftype.precision, ftype.scale)
    return {"string": pa.string(), "long": pa.int64(), "double": pa.float64(),
            "boolean": pa.bool_()}[ftype.name]


def spark_ddl(dtype: pa.DataType) -> str:
    """The Spark SQL type of an Arrow type used in staging (fields, state, outputs)."""
    if pa.types.is_decimal(dtype):
        return f"decimal({dtype.precision},{dtype.scale})"
    if pa.types.is_list(dtype):
        return f"array<{spark_ddl(dtype.value_type)}>"
    simple = {pa.string(): "string", pa.int64(): "bigint", pa.int32(): "int",
              pa.float64(): "double", pa.bool_(): "boolean", pa.binary(): "binary"}
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


def read_schema(event: EventConfig, metadata: bool, topics: bool = False) -> pa.Schema:
    """What the reader emits per Kafka record: ``parsed_schema``, with ``metadata`` the
    record's key as text and its timestamp's type (``with_metadata``), with ``topics`` the
    record's topic (``TOPIC``)."""
    parsed = parsed_schema(event)
    parsed = pa.schema([*parsed, *METADATA_SCHEMA]) if metadata else parsed
    return pa.schema([*parsed, (TOPIC, pa.string())]) if topics else parsed


def with_metadata(parsed: pa.RecordBatch, raw: pa.RecordBatch) -> pa.RecordBatch:
    """A parsed batch with its raw records' key as text (``eos.core.metadata.key_text``) and
    timestamp type: what a pipeline reading ``kafka_key`` or ``kafka_timestamp_type`` needs of
    every record, not only of a quarantined one."""
    from eos.core.metadata import key_text

    keys = pa.array([key_text(k) for k in raw.column("key").to_pylist()], pa.string())
    return pa.RecordBatch.from_arrays(
        [*parsed.columns, keys, raw.column("timestamp_type")],
        schema=pa.schema([*parsed.schema, *METADATA_SCHEMA]))


def ddl(schema: pa.Schema) -> str:
    """A Spark DDL string for an Arrow schema (``mapInArrow``'s output type)."""
    return ", ".join(f"`{f.name}` {spark_ddl(f.type)}" for f in schema)
