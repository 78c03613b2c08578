"""``event.format: json_schema`` end to end: real broker, real Spark, real Delta, and the audit
(``eos.tools.audit.json_schema``). The shape and helpers are the Avro test's
(``support.orders_end_to_end``); records are written by Confluent's ``JSONSerializer`` through
``eos.tools.servers.schema_registry`` (the test stand-in for a Schema Registry), and a few by hand
where the
serializer would refuse them (a record that does not validate)."""

from __future__ import annotations

import json
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from eos.tools.pipelines import unique_topic
from eos.tools.servers.schema_registry import SchemaRegistryServer

from support.orders_end_to_end import (
    BASE_MS,
    START,
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
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

V1 = {"type": "object", "title": "Order",
      "properties": {"id": {"type": "string"}, "ts": {"type": "integer"},
                     "customer": {"type": "object", "required": ["id"], "properties": {
                         "id": {"type": "integer"}, "tier": {"enum": ["BASIC", "GOLD"]}}},
                     "amount": {"type": "number"}},
      "required": ["id", "ts", "customer", "amount"]}
V2 = {**V1, "properties": {**V1["properties"], "coupon": {"type": ["string", "null"]}}}
V3 = {**V2, "properties": {**V2["properties"], "channel": {"type": "string"}}}


def serializer(server: SchemaRegistryServer, schema: dict) -> Any:
    client = SchemaRegistryClient({"url": server.url, "basic.auth.user.info": server.user_info})
    ser = JSONSerializer(json.dumps(schema), client)
    return lambda topic, record: ser(record, SerializationContext(topic, MessageField.VALUE))


def as_json(o: dict[str, Any], **more: Any) -> dict[str, Any]:
    """The Avro test's order as a JSON record (ts in epoch ms, amount a JSON number)."""
    return {**o, "ts": (o["ts"] - START) // timedelta(milliseconds=1) + BASE_MS,
            "amount": float(o["amount"]), **more}


def test_two_writer_versions_and_hostile_records_end_to_end_then_a_registry_outage(
        tmp_path: Path, kafka: str, spark: Any,
        registry: SchemaRegistryServer) -> None:
    topic = unique_topic("jsonschema")
    v1, v2 = serializer(registry, V1), serializer(registry, V2)
    first = [order(i) for i in range(240)]
    values = [(v1(topic, as_json(o)) if i < 120 else v2(topic, as_json(o, coupon=None)),
               BASE_MS + i * 150) for i, o in enumerate(first)]
    good = values[0][0]
    v1_id = int.from_bytes(good[1:5], "big")
    hostile = {
        good[5:]: "not in the Schema Registry wire format (magic byte 0, a 4-byte schema id, "
                  "the payload): byte 0 is 123, not the magic byte 0",
        b"\x00" + (4242).to_bytes(4, "big") + good[5:]:
            "schema id 4242 is not known to the Schema Registry",
        good[:-3]: f"schema id {v1_id}: the payload is not JSON (JSONDecodeError",
        good[:5] + json.dumps(as_json(order(5), customer={"id": 1, "tier": "PLATINUM"})).encode():
            f"schema id {v1_id}: does not validate against its schema at customer/tier: "
            "'PLATINUM' is not one of ['BASIC', 'GOLD']",
        v1(topic, as_json(order(7), customer={"id": 1})):
            f"schema id {v1_id}: missing field 'tier' (path customer.tier)",
    }
    for n, raw in enumerate(hostile):
        values.insert(40 + 40 * n, (raw, BASE_MS + (40 + 40 * n) * 150))
    produce(topic, values)
    config = orders_pipeline(tmp_path, topic, registry, "json_schema")
    run_and_check(config, "jsonschema", spark, len(values), hostile, first)

    # The registry goes away; records of a schema no worker has seen yet arrive.
    later = [order(i) for i in range(240, 400)]
    new = serializer(registry, V3)
    later_values = [((v2 if i < 360 else new)(topic, as_json(
        o, coupon="C" if i % 3 == 0 else None, **({"channel": "app"} if i >= 360 else {}))),
        BASE_MS + i * 150) for i, o in zip(range(240, 400), later, strict=True)]
    produce(topic, later_values)
    outage_then_the_same_rows(config, "jsonschema", spark, registry,
                              len(values) + len(later), hostile, first + later)
