"""``event.format: avro`` end to end: real broker, real Spark (the reader's Python workers decode),
real Delta, and the audit, which decodes the records with its own reader (``eos.tools.audit_avro``:
urllib and fastavro, not the pipeline's decoder).

The registry is ``eos.tools.schema_registry``, a Schema-Registry-compatible test stand-in
(not Confluent's server, which does not install here), on 127.0.0.1 with basic auth; the Spark
workers read its credentials from ``EOS_TEST_SR_AUTH`` (set by conftest before the Spark server
starts), as the pipeline's ``schema_registry.auth_env`` names."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from eos.compute.epochs import run_epoch, run_until_caught_up
from eos.core.delta import read_table
from eos.core.errors import SchemaRegistryUnavailable
from eos.core.kafka import client_settings
from eos.tools.audit import audit
from eos.tools.schema_registry import SchemaRegistryServer

from support import delta_path, unique_topic, write_pipeline

with warnings.catch_warnings():  # authlib (imported by the client) warns on import
    import authlib.deprecate  # noqa: F401  its import adds an "always" filter: then ours
    warnings.simplefilter("ignore")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AUTH_ENV = "EOS_TEST_SR_AUTH"
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
START = datetime(2026, 1, 1, tzinfo=UTC)
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


def order(i: int) -> dict[str, Any]:
    return {"id": f"o-{i}", "ts": START + timedelta(milliseconds=i * 150),
            "customer": {"id": i % 7, "tier": ("BASIC", "GOLD")[i % 2]},
            "amount": Decimal(i * 37 % 1000) / 100}


def produce(topic: str, values: list[tuple[bytes, int]]) -> None:
    producer = ck.Producer(client_settings())
    for value, ts in values:
        producer.produce(topic, value=value, timestamp=ts, partition=0)  # in order: none late
    assert producer.flush(30) == 0


def expected_windows(orders: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[int, Decimal]]:
    out: dict[tuple[str, int], tuple[int, Decimal]] = {}
    for o in orders:
        ms = (o["ts"] - START) // timedelta(milliseconds=1) + BASE_MS
        key = (o["customer"]["tier"], ms - ms % 10_000)
        n, total = out.get(key, (0, Decimal(0)))
        out[key] = (n + 1, total + o["amount"])
    return out


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


# -- the scenario every Schema Registry format's end-to-end test runs ---------------------------

def orders_pipeline(tmp_path: Path, topic: str, registry: SchemaRegistryServer,
                    fmt: str) -> Any:
    """The orders pipeline over ``topic`` in ``fmt``, reading writer schemas from ``registry``:
    10 s windows per customer tier, 100-record epochs, each precommit in its own Connect
    session as a DAG's task runs it."""
    event = {"format": fmt,
             "schema_registry": {"url": registry.url, "auth_env": AUTH_ENV, "timeout": "2s"},
             "time": {"field": "ts", "format": "epoch_ms"},
             "fields": {"tier": {"path": "customer.tier", "type": "string"},
                        "amount": "decimal(12,2)",
                        "coupon": {"type": "string", "optional": True}}}
    return write_pipeline(
        tmp_path, kafka={"topic": topic, "read_timeout": "30s", "split_records": 60},
        event=event, group_by=["tier"],
        window={"type": "tumbling", "size": "10s", "allowed_lateness": "1s"},
        aggregations={"n": "count(*)", "total": "sum(amount)", "coupons": "count(coupon)"},
        epoch={"max_records": 100, "staging_retention": 2},
        compute={"mode": "connect", "session": "task"})


def run_and_check(config: Any, name: str, spark: Any, records: int, hostile: dict[bytes, str],
                  orders: list[dict[str, Any]]) -> None:
    """Run epochs until caught up (several, each read by the reader's Python workers); the
    audit agrees over ``records``, exactly the ``hostile`` values are quarantined with reasons
    starting as given, and the windows are those of ``orders``."""
    assert len(run_until_caught_up(config, name, spark=spark)) >= 3
    report = audit(config)
    assert report.ok, report.render()
    assert report.records == records
    quarantined = {r["raw_value"]: r["reason"] for r in committed(config, "quarantine")}
    assert set(quarantined) == set(hostile)
    for raw, reason in hostile.items():
        assert quarantined[raw].startswith(reason), (quarantined[raw], reason)
    check_windows(config, orders)


def outage_then_the_same_rows(config: Any, name: str, spark: Any,
                              registry: SchemaRegistryServer, records: int,
                              hostile: dict[bytes, str], orders: list[dict[str, Any]]) -> None:
    """With records of a writer schema no worker has seen in the topic, the registry stops:
    the epoch fails transiently and commits (and quarantines) nothing; after a restart the
    same rows are committed and the audit agrees over ``records``."""
    before = table_rows(config)
    registry.stop()
    try:
        # As a DAG's precommit runs it (its own Connect session): the worker's error comes
        # back as its class, transient, so the task retries.
        with pytest.raises(SchemaRegistryUnavailable, match="did not answer fetching schema"):
            run_epoch(config, f"{name}-outage")
        assert table_rows(config) == before  # nothing quarantined, nothing committed for it
    finally:
        registry.start()
    run_until_caught_up(config, f"{name}-back", spark=spark)
    report = audit(config)
    assert report.ok, report.render()
    assert report.records == records
    assert set(r["raw_value"] for r in committed(config, "quarantine")) == set(hostile)
    check_windows(config, orders)


def committed(config: Any, table: str) -> list[dict[str, Any]]:
    return read_table(delta_path(config, table)).to_pylist()


def table_rows(config: Any) -> dict[str, int]:
    return {t: len(committed(config, t)) for t in ("target", "quarantine", "late")}


def check_windows(config: Any, orders: list[dict[str, Any]]) -> None:
    """Every committed window equals one computed here from the records (and there are many)."""
    expected = expected_windows(orders)
    rows = committed(config, "target")
    assert len(rows) >= 6
    assert committed(config, "late") == []
    tiers = Counter(r["tier"] for r in rows)
    assert set(tiers) == {"BASIC", "GOLD"}
    for r in rows:
        start = (r["window_start"].replace(tzinfo=UTC) - START) // timedelta(
            milliseconds=1) + BASE_MS
        n, total = expected[(r["tier"], start)]
        assert (r["n"], r["total"]) == (n, total), r
