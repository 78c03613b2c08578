"""The reader's ``constants`` option: values that change every epoch enter Spark as columns of
the input, never as literals of the plan (``eos.compute.reader.CONSTANTS_OPTION``)."""

from __future__ import annotations

import json

import pyarrow as pa

from eos.compute.reader import (
    CONSTANTS_OPTION,
    RAW_DDL,
    RAW_SCHEMA,
    KafkaRangeDataSource,
    with_constants,
)


def test_each_constant_is_a_long_column_with_one_value_in_every_row() -> None:
    batch = pa.RecordBatch.from_pylist(
        [{"topic": "t", "partition": 0, "offset": i, "timestamp_ms": 1, "key": None,
          "value": b"x"} for i in range(3)], schema=RAW_SCHEMA)
    stamped = with_constants(batch, {"__a": -5, "__b": 1767233589803})
    assert stamped.schema.names == [*RAW_SCHEMA.names, "__a", "__b"]
    assert stamped.schema.field("__b").type == pa.int64()
    assert stamped.column("__a").to_pylist() == [-5, -5, -5]
    assert stamped.column("__b").to_pylist() == [1767233589803] * 3
    assert with_constants(batch, {}) is batch
    # An epoch with nothing to read stamps its empty input the same way (a table, no rows).
    empty = with_constants(RAW_SCHEMA.empty_table(), {"__a": -5})
    assert empty.schema.names == [*RAW_SCHEMA.names, "__a"] and empty.num_rows == 0


def test_the_source_schema_names_the_constants_after_its_own_columns() -> None:
    plain = KafkaRangeDataSource({"topic": "t", "ranges": "[]"})
    stamped = KafkaRangeDataSource({"topic": "t", "ranges": "[]",
                                    CONSTANTS_OPTION: json.dumps({"__w": 7})})
    assert plain.schema() == RAW_DDL
    assert stamped.schema() == RAW_DDL + ", __w long"


def test_the_metadata_option_carries_every_records_key_as_text_and_timestamp_type() -> None:
    """Only with ``metadata`` (a pipeline reading ``kafka_key`` or ``kafka_timestamp_type``):
    the key of every record, not only a quarantined one's, decoded the one way the audit
    decodes it too (U+FFFD for a bad sequence)."""
    from eos.compute.formats import parser_for
    from eos.compute.reader import METADATA_OPTION, PARSE_OPTION, TIMESTAMP_TYPE, event_option
    from eos.core.config import parse_config
    from eos.core.schema import KEY_TEXT, TS_TYPE, read_schema, with_metadata

    config = parse_config({"name": "m", "kafka": {"topic": "t"},
                           "event": {"fields": {"page": "string"}},
                           "select": {"key": "kafka_key"}})
    raw = pa.RecordBatch.from_pylist(
        [{"topic": "t", "partition": 0, "offset": i, "timestamp_ms": 1, "key": key,
          "value": value, "timestamp_type": kind} for i, (key, value, kind) in enumerate([
              (b"k", b'{"page": "/a"}', "CreateTime"), (None, b'{"page": "/b"}', None),
              (b"\xff", b"nope", "LogAppendTime")])],
        schema=pa.schema([*RAW_SCHEMA, TIMESTAMP_TYPE]))
    parsed = with_metadata(parser_for(config.event).parse_batch(raw), raw)
    assert parsed.schema == read_schema(config.event, True)
    assert parsed.column(KEY_TEXT).to_pylist() == ["k", None, "\ufffd"]
    assert parsed.column(TS_TYPE).to_pylist() == ["CreateTime", None, "LogAppendTime"]
    options = {"topic": "t", "ranges": "[]", PARSE_OPTION: event_option(config.event)}
    assert KEY_TEXT not in KafkaRangeDataSource(options).schema()
    assert KafkaRangeDataSource({**options, METADATA_OPTION: "true"}).schema().endswith(
        f"`{KEY_TEXT}` string, `{TS_TYPE}` string")
