"""The grammar of the Kafka metadata beyond the value (a parsed key, the raw key, headers) and
of a Kafka sink of rows (key, headers): what loads, how it is typed, and every refusal named
at load."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from eos.core.config import parse_config
from eos.core.config.rows import carries_headers, headers_read, metadata_read
from eos.core.errors import ConfigError
from eos.core.outputs import output_schema
from eos.core.schema import HEADERS_TYPE
from eos.core.tables import ROW_HEADERS, staging_schema

EVENT: dict[str, Any] = {"fields": {"page": "string", "n": "long"},
                         "key": {"format": "json", "fields": {"user": "string",
                                                              "shard": "long"}}}


def load(select: dict[str, str] | None = None, sink: dict[str, Any] | None = None,
         **event: Any) -> Any:
    data: dict[str, Any] = {"name": "meta", "kafka": {"topic": "t"},
                            "event": {**EVENT, **event}}
    if select is not None:
        data["select"] = select
    if sink is not None:
        data["sinks"] = {"rows": [{"kafka": {"topic": "out", **sink}}]}
    return parse_config(data)


def test_key_fields_headers_and_raw_key_are_typed_columns() -> None:
    config = load(select={"page": "page", "user": "key.user", "shard": "key.shard",
                          "raw": "kafka_key_bytes", "trace": "header.`trace-id`",
                          "many": "CAST(key.shard * 2 AS BIGINT)", "all": "kafka_headers"},
                  filter="key.shard >= 0 AND header.tenant = 'a'")
    schema = output_schema(config, "rows")
    assert [(f.name, f.type) for f in schema][:6] == [
        ("page", pa.string()), ("user", pa.string()), ("shard", pa.int64()),
        ("raw", pa.binary()), ("trace", pa.string()), ("many", pa.int64())]
    assert schema.field("all").type == HEADERS_TYPE  # every header, in record order
    assert headers_read(config) == ("tenant", "trace-id")
    assert metadata_read(config) == {"kafka_key_bytes", "kafka_headers"}
    assert config.schema_view()["event"]["key"]["fields"]["user"]["type"]["name"] == "string"


def test_a_pipeline_without_a_key_keeps_its_schema_view() -> None:
    config = parse_config({"name": "plain", "kafka": {"topic": "t"},
                           "event": {"fields": {"page": "string"}}})
    assert "key" not in config.schema_view()["event"]


@pytest.mark.parametrize(("changes", "match"), [
    ({"select": {"u": "key.nobody"}}, r"select column 'u'.*\['key.nobody'\]"),
    ({"filter": "key.nobody = 1"}, r"filter uses \['key.nobody'\]"),
    ({"select": {"x": "concat(kafka_key_bytes, page)"}}, r"select column 'x'.*CAST"),
    ({"fields": {"key": "string"}}, r"event.key is declared.*rename the field 'key'"),
    ({"fields": {"header": "string"}, "select": {"h": "header.trace"}},
     r"reads header.<name>, but a declared field is named 'header'"),
    ({"key": {"format": "avro", "fields": {"u": "string"}}}, r"key.format"),
    ({"key": {"fields": {"u": "binary"}}}, r"unknown type 'binary'"),
])
def test_refused_at_load_naming_the_key_or_header(changes: dict[str, Any], match: str) -> None:
    event = {k: v for k, v in changes.items() if k != "select"}
    with pytest.raises(ConfigError, match=match):
        load(select=changes.get("select"), **event)


def test_only_a_pipeline_without_windows_outputs_a_binary_column() -> None:
    with pytest.raises(ConfigError, match=r"select column 'raw'.*only a pipeline without windows"):
        parse_config({"name": "w", "kafka": {"topic": "t"},
                      "event": {"fields": {"page": "string"},
                                "time": {"format": "kafka_timestamp"}},
                      "select": {"raw": "kafka_key_bytes"}, "group_by": ["page"],
                      "window": {"type": "tumbling", "size": "60s"},
                      "aggregations": {"views": "count(*)"}})


def test_a_sink_that_carries_headers_makes_every_row_hold_them() -> None:
    config = load(select={"page": "page", "user": "key.user"},
                  sink={"key": "user", "headers": "carry"})
    assert carries_headers(config)
    assert "kafka_headers" in metadata_read(config)
    assert output_schema(config, "rows").field("kafka_headers").type == HEADERS_TYPE
    assert staging_schema(config).field(ROW_HEADERS).type == HEADERS_TYPE
    options = config.sinks.rows[0]["kafka"]
    assert options.key == "user" and options.headers.carry and options.headers.set == {}


@pytest.mark.parametrize(("sink", "match"), [
    ({"key": "nope"}, r"sink kafka:out: key 'nope' uses \['nope'\], which are neither "
                      r"columns of the rows nor declared fields"),
    ({"key": "shard"}, r"key names 'shard', of type long; a key or header is a string or binary"),
    ({"key": "CAST(n + 1 AS BIGINT)"}, r"key 'CAST\(n \+ 1 AS BIGINT\)' is of type long; a key "
                                       r"or a header is a string or binary"),
    ({"key": "upper(page)"}, r"key 'upper\(page\)' has no type eos can tell"),
    ({"key": "rand()"}, r"rand"),
    ({"headers": {"set": {"eos-epoch": "page"}}}, r"must be non-empty and not start with 'eos-'"),
    ({"headers": {"set": {"h": "missing"}}}, r"sink kafka:out: header h 'missing' uses"),
    ({"headers": {"carry": "sometimes"}}, r"carry"),
    ({"headers": "copy"}, r"headers"),
])
def test_sink_key_and_headers_refused_at_load(sink: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load(select={"page": "page", "shard": "key.shard"}, sink=sink)


def test_a_select_column_may_not_take_the_carried_headers_name() -> None:
    with pytest.raises(ConfigError, match="a Kafka sink carries the records' headers"):
        load(select={"kafka_headers": "page"}, sink={"headers": "carry"})


def test_key_and_headers_are_options_of_rows_only() -> None:
    with pytest.raises(ConfigError, match="key and headers are options of a sink of rows"):
        parse_config({"name": "w", "kafka": {"topic": "t"},
                      "event": {"fields": {"page": "string"},
                                "time": {"format": "kafka_timestamp"}},
                      "group_by": ["page"], "window": {"type": "tumbling", "size": "60s"},
                      "aggregations": {"views": "count(*)"},
                      "sinks": {"windows": [{"kafka": {"topic": "o", "key": "page"}}]}})


def test_a_key_or_header_may_be_an_expression_staged_for_its_sink_alone() -> None:
    """A key or header that names no column of the rows is an expression, typed as a select
    column is; Spark computes it with the row under a record column of its own, which only
    its sink receives (never in the row, nor in the record's value)."""
    from eos.core.outputs import rows_schema
    from eos.core.tables import row_column

    key = "CAST(concat(key.user, '/', CAST(n AS STRING)) AS STRING)"
    config = load(select={"page": "page"},
                  sink={"key": key, "headers": {"set": {"p": "page", "raw": "kafka_key_bytes"}}})
    records = config.record_columns
    assert [(c.role, c.expression, str(c.type)) for c in records.values()] == [
        ("key", key, "string"), ("header:raw", "kafka_key_bytes", "binary")]
    name = config.record_column("kafka:out", "key")
    assert name is not None and name.startswith("__key_") and name in records
    assert config.record_column("kafka:out", "header:p") is None  # a column: read as one
    assert staging_schema(config).field(row_column(name)).type == pa.string()
    assert name not in rows_schema(config).names
    assert "kafka_key_bytes" in metadata_read(config)  # the reader carries what they read
    # A type change is another column, never a staged column of another type.
    other = load(select={"page": "page"}, sink={"key": "kafka_key_bytes"})
    assert other.record_column("kafka:out", "key") != name
