"""The scenario every Schema Registry format's end-to-end test runs (Avro, Protobuf, JSON
Schema): the orders pipeline over a topic in the format, epochs until caught up with the audit
and the windows checked, then a registry outage that commits nothing and, after a restart, the
same rows."""

from __future__ import annotations

import warnings
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from eos.compute.epochs import run_epoch, run_until_caught_up
from eos.core.delta import read_table
from eos.core.errors import SchemaRegistryUnavailable
from eos.core.kafka import client_settings
from eos.tools.audit.verify import audit
from eos.tools.pipelines import write_pipeline
from eos.tools.servers.schema_registry import SchemaRegistryServer

from support.harness import delta_path

with warnings.catch_warnings():  # authlib (imported by the client) warns on import
    import authlib.deprecate  # noqa: F401  its import adds an "always" filter: then ours
    warnings.simplefilter("ignore")


AUTH_ENV = "EOS_TEST_SR_AUTH"


BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


START = datetime(2026, 1, 1, tzinfo=UTC)


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

