"""A Kafka sink in Avro (``{kafka: {topic, format: avro}}``): the value schema derived from the
output's columns, registered under ``<topic>-value`` before the transaction, values in the
Schema Registry wire format that confluent-kafka's ``AvroDeserializer`` reads.

Real broker (embedded, over TCP), real Spark and Delta for the end-to-end test; the registry is
``eos.tools.servers.schema_registry``, a Schema-Registry-compatible stand-in (not Confluent's
server,
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
from eos.core.delta import read_table
from eos.core.errors import SinkUnavailable
from eos.core.kafka import client_settings, consumer, topic_watermarks
from eos.core.outcomes import Outcome
from eos.core.outputs import rows_schema, windows_schema
from eos.sinks.kafka.avro import AvroValues
from eos.tools.audit.independent.compare import canonical_row
from eos.tools.audit.verify import audit
from eos.tools.generator import GeneratorSpec
from eos.tools.pipelines import unique_topic, write_pipeline
from eos.tools.produce import produce
from eos.tools.servers.schema_registry import SchemaRegistryServer

from support.harness import delta_path, sink
from support.registry_formats import AUTH_ENV

with warnings.catch_warnings():  # authlib (imported by the client) warns on import
    import authlib.deprecate  # noqa: F401  its import adds an "always" filter: then ours
    warnings.simplefilter("ignore")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer

pytestmark = [pytest.mark.integration]


def avro_sink(topic: str, registry: SchemaRegistryServer | None) -> dict[str, Any]:
    options: dict[str, Any] = {"topic": topic, "format": "avro"}
    if registry is not None:
        options["schema_registry"] = {"url": registry.url, "auth_env": AUTH_ENV, "timeout": "2s"}
    return {"kafka": options}


def pipeline(tmp_path: Path, registry: SchemaRegistryServer, **overrides: Any) -> Any:
    sinks = {"windows": [avro_sink(unique_topic("avro-out"), registry), {"delta": "target"}],
             "late": [{"delta": "late"}], "quarantine": [{"delta": "quarantine"}]}
    return write_pipeline(tmp_path, sinks=sinks, **overrides)


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


def test_a_pipeline_without_windows_writes_its_rows_in_avro(
        tmp_path: Path, kafka: str, registry: SchemaRegistryServer) -> None:
    """Rows through the same sink: their columns as the value schema (the coordinates and the
    epoch never null), read back exactly."""
    topic = unique_topic("avro-rows")
    config = write_pipeline(tmp_path, group_by=None, window=None, aggregations=None,
                            sinks={"rows": [avro_sink(topic, registry)],
                                   "quarantine": [{"delta": "quarantine"}]})
    rows = pa.Table.from_pylist(
        [{"key": k, "value": Decimal("1.5") if k else None, "kafka_topic": "in",
          "kafka_partition": 0, "kafka_offset": n, "epoch": 0}
         for n, k in enumerate(["a", "b", None])], schema=rows_schema(config))
    out = sink(config, f"kafka:{topic}")
    assert out.commit(0, rows, "h0").outcome is Outcome.COMMITTED
    assert sorted(map(key, out.read_back())) == sorted(map(key, rows.to_pylist()))
    registered = json.loads(registry.version(f"{topic}-value", "latest")["schema"])
    types = {f["name"]: f["type"] for f in registered["fields"]}
    assert list(types) == rows_schema(config).names
    assert types["kafka_partition"] == "int" and types["key"] == ["null", "string"]
