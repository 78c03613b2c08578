"""``event.format: avro`` end to end: real broker, real Spark (the reader's Python workers decode),
real Delta, and the audit, which decodes the records with its own reader (``eos.tools.audit.avro``:
urllib and fastavro, not the pipeline's decoder).

The registry is ``eos.tools.servers.schema_registry``, a Schema-Registry-compatible test stand-in
(not Confluent's server, which does not install here), on 127.0.0.1 with basic auth; the Spark
workers read its credentials from ``EOS_TEST_SR_AUTH`` (set by conftest before the Spark server
starts), as the pipeline's ``schema_registry.auth_env`` names."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from eos.tools.pipelines import unique_topic
from eos.tools.servers.schema_registry import SchemaRegistryServer

from support.orders_end_to_end import (
    BASE_MS,
    order,
    orders_pipeline,
    outage_then_the_same_rows,
    produce,
    run_and_check,
)

with warnings.catch_warnings():  # authlib (imported by the client) warns on import
    import authlib.deprecate  # noqa: F401  its import adds an "always" filter: then ours
    warnings.simplefilter("ignore")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
        {"name": "id", "type": "long"},
        {"name": "tier", "type": {"type": "enum", "name": "Tier",
                                  "symbols": ["BASIC", "GOLD"]}}]}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                "precision": 12, "scale": 2}},
]}
V2 = {**V1, "fields": [  # amount at a finer scale, a new optional field
    *V1["fields"][:3],
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                "precision": 16, "scale": 4}},
    {"name": "coupon", "type": ["null", "string"], "default": None},
]}
V3 = {**V1, "fields": [  # lost customer.tier, which the pipeline groups by
    *V1["fields"][:2],
    {"name": "customer", "type": {"type": "record", "name": "Customer",
                                  "fields": [{"name": "id", "type": "long"}]}},
    V1["fields"][3],
]}


def serializer(registry: SchemaRegistryServer, schema: dict) -> Any:
    client = SchemaRegistryClient({"url": registry.url, "basic.auth.user.info": registry.user_info})
    ser = AvroSerializer(client, json.dumps(schema))
    return lambda topic, record: ser(record, SerializationContext(topic, MessageField.VALUE))


def test_two_writer_versions_and_hostile_records_end_to_end_then_a_registry_outage(
        tmp_path: Path, kafka: str, spark: Any, registry: SchemaRegistryServer) -> None:
    topic = unique_topic("avro")
    v1, v2, v3 = (serializer(registry, s) for s in (V1, V2, V3))
    first = [order(i) for i in range(240)]
    values = [(v1(topic, o) if i < 120 else v2(topic, {**o, "coupon": None}),
               BASE_MS + i * 150) for i, o in enumerate(first)]
    good = values[0][0]
    hostile = {
        b'{"id": "o-x"}': "not in the Schema Registry wire format (magic byte 0, a 4-byte "
                          "schema id, the payload): byte 0 is 123, not the magic byte 0",
        b"\x00" + (4242).to_bytes(4, "big") + good[5:]:
            "schema id 4242 is not known to the Schema Registry",
        good[:-3]: "schema id 1: the payload does not decode",
        v3(topic, {**order(999), "customer": {"id": 1}}):
            "schema id 3: missing field 'tier' (path customer.tier)",
    }
    for n, raw in enumerate(hostile):
        values.insert(40 + 50 * n, (raw, BASE_MS + (40 + 50 * n) * 150))
    produce(topic, values)
    config = orders_pipeline(tmp_path, topic, registry, "avro")
    run_and_check(config, "avro", spark, len(values), hostile, first)

    # The registry goes away; records of a schema no worker has seen yet arrive.
    later = [order(i) for i in range(240, 400)]
    v2_values = [(v2(topic, {**o, "coupon": "C" if i % 3 == 0 else None}), BASE_MS + i * 150)
                 for i, o in zip(range(240, 400), later, strict=True)]
    v4 = serializer(registry, {**V2, "fields": [*V2["fields"], {
        "name": "channel", "type": "string", "default": "web"}]})
    fresh = [(v4(topic, {**o, "coupon": None, "channel": "app"}), ts)
             for o, (_, ts) in zip(later[-40:], v2_values[-40:], strict=True)]
    produce(topic, v2_values[:-40] + fresh)
    outage_then_the_same_rows(config, "avro", spark, registry, len(values) + len(later),
                              hostile, first + later)




