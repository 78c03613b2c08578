"""``event.format: protobuf`` end to end: real broker, real Spark (the reader's Python workers
decode), real Delta, and the audit, which decodes the records with its own reader
(``eos.tools.audit.protobuf``: urllib, its own header and index reading, its own walk).

The shape and the helpers are the Avro test's (``support.orders_end_to_end``): the same orders,
windows and registry outage, written by Confluent's ``ProtobufSerializer`` (message classes
built at run time, ``support.protobuf_messages``) through ``eos.tools.servers.schema_registry``,
the test
stand-in for a Schema Registry (not Confluent's server, which does not install here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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
from support.protobuf_messages import order as message
from support.protobuf_messages import order_class, serializer

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def as_message(version: int, o: dict[str, Any], coupon: str | None = None) -> Any:
    """The Avro test's order (a dict) as a ``shop.Order`` of the writer version."""
    tier = o["customer"].get("tier")
    return message(version, o["id"], o["ts"], o["customer"]["id"], tier, o["amount"],
                   coupon=coupon)


def test_two_writer_versions_and_hostile_records_end_to_end_then_a_registry_outage(
        tmp_path: Path, kafka: str, spark: Any,
        registry: SchemaRegistryServer) -> None:
    topic = unique_topic("protobuf")
    v1, v2, v3 = (serializer(registry, order_class(v)) for v in (1, 2, 3))
    first = [order(i) for i in range(240)]
    values = [(v1(topic, as_message(1, o)) if i < 120 else v2(topic, as_message(2, o)),
               BASE_MS + i * 150) for i, o in enumerate(first)]
    good = values[0][0]
    v1_id = int.from_bytes(good[1:5], "big")
    v3_value = v3(topic, as_message(3, {**order(999), "customer": {"id": 1}}))
    v3_id = int.from_bytes(v3_value[1:5], "big")
    hostile = {
        b'{"id": "o-x"}': "not in the Schema Registry wire format (magic byte 0, a 4-byte "
                          "schema id, the payload): byte 0 is 123, not the magic byte 0",
        b"\x00" + (4242).to_bytes(4, "big") + good[5:]:
            "schema id 4242 is not known to the Schema Registry",
        good[:-3]: f"schema id {v1_id}: the payload does not decode (DecodeError",
        good[:5] + b"\x02\x08" + good[6:]:
            f"schema id {v1_id}: message indexes [4] name no message of the schema",
        v3_value: f"schema id {v3_id}: missing field 'tier' (path customer.tier)",
    }
    for n, raw in enumerate(hostile):
        values.insert(40 + 40 * n, (raw, BASE_MS + (40 + 40 * n) * 150))
    produce(topic, values)
    config = orders_pipeline(tmp_path, topic, registry, "protobuf")
    run_and_check(config, "protobuf", spark, len(values), hostile, first)

    # The registry goes away; records of a schema no worker has seen yet (a new message
    # class: version 2 with a field more) arrive.
    later = [order(i) for i in range(240, 400)]
    v2_values = [(v2(topic, as_message(2, o, "C" if i % 3 == 0 else None)), BASE_MS + i * 150)
                 for i, o in zip(range(240, 400), later, strict=True)]
    v4 = serializer(registry, order_class(4))
    fresh = [(v4(topic, as_message(4, o)), ts)
             for o, (_, ts) in zip(later[-40:], v2_values[-40:], strict=True)]
    produce(topic, v2_values[:-40] + fresh)
    outage_then_the_same_rows(config, "protobuf", spark, registry, len(values) + len(later),
                              hostile, first + later)
