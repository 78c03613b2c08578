"""A Kafka sink in Avro (``{kafka: {topic, format: avro}}``): the value schema derived from the
output's columns, registered under ``<topic>-value`` before the transaction, values in the
Schema Registry wire format that confluent-kafka's ``AvroDeserializer`` reads.

Real broker (embedded, over TCP), real Spark and Delta for the end-to-end test; the registry is
``eos.tools.schema_registry``, a Schema-Registry-compatible stand-in (not Confluent's server,
which does not install here) on 127.0.0.1 with basic auth."""

from __future__ import annotations

import json
import warnings
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pyarrow as pa
import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from eos.compute.epochs import run_until_caught_up
from eos.core.config import parse_config
from eos.core.delta import read_table
from eos.core.errors import ConfigError, SinkUnavailable
from eos.core.kafka import client_settings, consumer, topic_watermarks
from eos.core.outcomes import Outcome
from eos.core.outputs import windows_schema
from eos.sinks.kafka_avro import AvroValues, value_schema
from eos.tools.audit import audit
from eos.tools.independent import canonical_row
from eos.tools.pipelines import unique_topic, write_pipeline
from eos.tools.produce import GeneratorSpec, produce
from eos.tools.schema_registry import SchemaRegistryServer

from support.harness import delta_path, sink

with warnings.catch_warnings():  # authlib (imported by the client) warns on import
    import authlib.deprecate  # noqa: F401  its import adds an "always" filter: then ours
    warnings.simplefilter("ignore")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer

pytestmark = [pytest.mark.integration]

AUTH_ENV = "EOS_TEST_SR_AUTH"


def avro_sink(topic: str, registry: SchemaRegistryServer | None) -> dict[str, Any]:
    options: dict[str, Any] = {"topic": topic, "format": "avro"}
    if registry is not None:
        options["schema_registry"] = {"url": registry.url, "auth_env": AUTH_ENV, "timeout": "2s"}
    return {"kafka": options}


def pipeline(tmp_path: Path, registry: SchemaRegistryServer, **overrides: Any) -> Any:
    sinks = {"windows": [avro_sink(unique_topic("avro-out"), registry), {"delta": "target"}],
             "late": [{"delta": "late"}], "quarantine": [{"delta": "quarantine"}]}
    return write_pipeline(tmp_path, sinks=sinks, **overrides)


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


def key(row: dict[str, Any]) -> str:
    """A row as comparable text (keys spread rows over partitions: compare sorted)."""
    return json.dumps(canonical_row(row), sort_keys=True, default=str)


def window_rows(config: Any) -> pa.Table:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [{"key": k, "window_start": start, "window_end": start, "count": n,
             "sum": Decimal(n) / 3 if n else None, "min": None, "max": Decimal("1.5"),
             "avg": 0.25 * n, "epoch": 0} for n, k in enumerate(["a", "b", None])]
    schema = windows_schema(config)
    return pa.Table.from_pylist([{name: r[name] if name != "sum" else (
        None if r["sum"] is None else r["sum"].quantize(Decimal("1e-9"))) for name in schema.names}
        for r in rows], schema=schema)


def test_a_registry_that_is_down_fails_the_commit_transiently_with_nothing_written(
        tmp_path: Path, kafka: str, registry: SchemaRegistryServer) -> None:
    config = pipeline(tmp_path, registry)
    topic = config.sinks.windows[0]["kafka"].topic
    rows = window_rows(config)
    out = sink(config, f"kafka:{topic}")
    registry.stop()
    try:
        with pytest.raises(SinkUnavailable, match="did not answer registering the value schema"):
            out.commit(0, rows, "h0")
    finally:
        registry.start()
    marks = topic_watermarks(client_settings(), topic)
    assert sum(high for _, high in marks.values()) == 0  # not a record, not a marker
    assert out.committed_epoch() == -1
    assert out.commit(0, rows, "h0").outcome is Outcome.COMMITTED
    assert registry.subjects[f"{topic}-value"] == [registry.subjects[f"{topic}-value"][0]]
    assert sorted(map(key, out.read_back())) == sorted(map(key, rows.to_pylist()))
    # A rerun (a fresh sink, a fresh registry client) encodes the same rows to the same bytes.
    again = AvroValues(out.options.schema_registry, topic, config.name)
    assert again.encode(rows) == out.avro_values().encode(rows)


def test_a_downstream_avro_deserializer_reads_our_windows_exactly(
        tmp_path: Path, kafka: str, spark: Any, registry: SchemaRegistryServer) -> None:
    spec = GeneratorSpec(events=3000, keys=12, disorder_ms=500, late_fraction=0.02,
                         late_delay_ms=20_000, bad_fraction=0.01, seed=29)
    config = pipeline(tmp_path, registry, epoch={"max_records": 1000, "staging_retention": 2},
                      compute={"mode": "connect", "session": "task"})
    produce(spec, config.kafka.topic, client_settings(), progress=False)
    assert len(run_until_caught_up(config, "avro-sink", spark=spark)) >= 3
    report = audit(config)
    assert report.ok, report.render()
    topic = config.sinks.windows[0]["kafka"].topic
    assert report.second_readings[f"kafka:{topic}"][1] > 0  # read again by the audit's decoder

    client = SchemaRegistryClient({"url": registry.url, "basic.auth.user.info": registry.user_info})
    deserialize = AvroDeserializer(client)
    context = SerializationContext(topic, MessageField.VALUE)
    c = consumer(client_settings(), group="downstream-avro", **{"auto.offset.reset": "earliest"})
    seen = []
    try:
        marks = topic_watermarks(client_settings(), topic)
        c.assign([ck.TopicPartition(topic, p, low) for p, (low, _) in marks.items()])
        left = sum(high - low for low, high in marks.values())
        while left:
            message = c.poll(10.0)
            assert message is not None and not message.error()
            left -= 1
            assert message.value()[0] == 0  # the wire format's magic byte
            seen.append(deserialize(message.value(), context))
    finally:
        c.close()
    target = read_table(delta_path(config, "target")).to_pylist()
    assert len(seen) == len(target) > 20
    assert sorted(map(key, seen)) == sorted(map(key, target))
    registered = json.loads(registry.version(f"{topic}-value", "latest")["schema"])
    assert {f["name"] for f in registered["fields"]} == set(windows_schema(config).names)
