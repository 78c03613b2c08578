"""The Avro Kafka sink's configuration: refused without a Schema Registry when the config loads,
and an Avro value schema for every output the grammar allows."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from eos.core.config import parse_config
from eos.core.errors import ConfigError
from eos.core.outputs import windows_schema
from eos.sinks.kafka.avro import value_schema
from eos.tools.servers.schema_registry import SchemaRegistryServer

with warnings.catch_warnings():  # authlib (imported by the client) warns on import
    import authlib.deprecate  # noqa: F401  its import adds an "always" filter: then ours
    warnings.simplefilter("ignore")
from support.registry_formats import AUTH_ENV


def avro_sink(topic: str, registry: SchemaRegistryServer | None) -> dict[str, Any]:
    options: dict[str, Any] = {"topic": topic, "format": "avro"}
    if registry is not None:
        options["schema_registry"] = {"url": registry.url, "auth_env": AUTH_ENV, "timeout": "2s"}
    return {"kafka": options}




def test_an_avro_sink_without_a_registry_is_refused_when_the_config_loads() -> None:
    base = {"name": "p", "kafka": {"topic": "t"},
            "event": {"time": {"field": "ts", "format": "epoch_ms"},
                      "fields": {"key": "string", "value": "decimal(12,2)"}},
            "group_by": ["key"], "window": {"size": "10s"},
            "aggregations": {"n": "count(*)", "total": "sum(value)"}}
    with pytest.raises(ConfigError, match="format avro needs a Schema Registry"):
        parse_config({**base, "sinks": {"windows": [avro_sink("out", None)]}})
    connection = {"kafka": {"topic": "out", "format": "avro", "schema_registry": {
        "url": "http://127.0.0.1:1", "connection": "sr"}}}
    with pytest.raises(ConfigError, match="credentials from auth_env only"):
        parse_config({**base, "sinks": {"windows": [connection]}})
    with pytest.raises(ConfigError, match="schema_registry is for format: avro"):
        parse_config({**base, "sinks": {"windows": [{"kafka": {
            "topic": "out", "schema_registry": {"url": "http://127.0.0.1:1"}}}]}})
    config = parse_config({**base, "sinks": {"windows": [avro_sink("out.v1", None) | {
        "kafka": {"topic": "out.v1", "format": "avro",
                  "schema_registry": {"url": "http://127.0.0.1:1", "auth_env": "X"}}}]}})
    schema = value_schema(windows_schema(config), "out.v1", config.name)
    fields = {f["name"]: f["type"] for f in schema["fields"]}
    assert schema["name"] == "out_v1" and schema["namespace"] == "eos.p"
    assert fields["window_start"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert fields["total"] == ["null", {"type": "bytes", "logicalType": "decimal",
                                        "precision": 38, "scale": 2}]
    assert fields["key"] == ["null", "string"] and fields["epoch"] == "long"


def test_every_output_the_grammar_allows_has_an_avro_value_schema() -> None:
    """The sink does not check its columns when the config loads (that needs pyarrow, which the
    DAG file's parse must not import): instead no config can fail at commit. Every aggregation
    the grammar accepts, on every field type, grouped by every field type, in windows, late
    and quarantine rows, maps to an Avro schema fastavro parses."""
    import fastavro

    from eos.core.aggregations import FUNCTIONS
    from eos.core.outputs import output_schema

    types = {"s": "string", "l": "long", "d": "double", "b": "boolean", "m": "decimal(38,9)"}
    accepted = {}
    for function in FUNCTIONS:
        for name in types:
            for spec in ({f"{function}_{name}": f"{function}({name})"}
                         | ({f"{function}_all": f"{function}(*)"} if name == "s" else {})).items():
                try:
                    parse_config({**_all_types(types), "aggregations": dict([spec])})
                except ConfigError:
                    continue
                accepted[spec[0]] = spec[1]
    assert {"count_all", "sum_m", "avg_d", "min_s", "count_distinct_s"} <= set(accepted)
    config = parse_config({**_all_types(types), "aggregations": accepted})
    for output in ("windows", "late", "quarantine"):
        schema = value_schema(output_schema(config, output), "out", config.name)
        fastavro.parse_schema(schema)
        assert len(schema["fields"]) == len(output_schema(config, output))


def _all_types(types: dict[str, str]) -> dict[str, Any]:
    return {"name": "p", "kafka": {"topic": "t"},
            "event": {"time": {"field": "ts", "format": "epoch_ms"}, "fields": types},
            "group_by": list(types), "window": {"size": "10s"},
            "sinks": {"windows": [{"kafka": {"topic": "out", "format": "avro", "schema_registry": {
                "url": "http://127.0.0.1:1", "auth_env": "X"}}}]}}



def test_rows_with_a_raw_key_and_headers_have_an_avro_schema() -> None:
    """A stateless pipeline's binary and headers columns: bytes, and an array of {key, value}
    records (a name may repeat, a value be null), each surviving the trip."""
    import io

    import pyarrow as pa
    from fastavro import parse_schema, schemaless_reader, schemaless_writer

    from eos.core.schema import HEADERS_TYPE
    from eos.sinks.kafka.avro import value_schema

    schema = pa.schema([("raw", pa.binary()), ("all", HEADERS_TYPE),
                        ("kafka_partition", pa.int32())])
    parsed = parse_schema(value_schema(schema, "out", "p"))
    row = {"raw": b"\x00k", "all": [{"key": "a", "value": None}, {"key": "a", "value": b"1"}],
           "kafka_partition": 1}
    out = io.BytesIO()
    schemaless_writer(out, parsed, row)
    out.seek(0)
    assert schemaless_reader(out, parsed, None) == row
