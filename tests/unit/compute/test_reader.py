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
