"""``python -m bench.avro_read [--events N] [--partitions P] [--repeat R]``: Spark read+parse of
Avro next to JSON, the same order events, in one run on 2 cores (``local[2]``).

N order events (``bench.avro_parse``'s: a nested customer, a decimal amount, an optional coupon,
a millisecond time) go to two topics of P partitions: once as JSON, once as Avro in the Schema
Registry wire format (Confluent's ``AvroSerializer``). One epoch's plan over each topic is read
by Spark through ``eos_kafka`` and counted, raw and read+parse (as precommit reads), the four
ways interleaved R times after an uncounted warm-up round; the medians are printed. The Avro
reader's Python workers fetch the writer schema from ``eos.tools.servers.schema_registry`` (the
Schema-Registry-compatible stand-in, on 127.0.0.1 with basic auth; its credentials reach the
workers in ``EOS_BENCH_SR_AUTH``), once per worker: what is measured is decoding, not the
registry.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import warnings
from functools import partial
from pathlib import Path
from typing import Any

from bench import scenarios as sc
from bench.avro_parse import FIELDS, SCHEMA, _json, _orders
from bench.env import Env, environment
from bench.read_path import timed_count
from eos.core.plan import Plan
from eos.tools.generator import GeneratedRecord
from eos.tools.produce import send

AUTH_ENV = "EOS_BENCH_SR_AUTH"
BASE_MS = 1_767_225_600_000
JSON_BYTES_PER_EVENT = 120  # sizes the partitions for the embedded broker's 5 MiB each


def _event(fmt: str, registry_url: str) -> dict[str, Any]:
    registry = ({"schema_registry": {"url": registry_url, "auth_env": AUTH_ENV}}
                if fmt == "avro" else {})
    return {"format": fmt, **registry, "time": {"field": "ts", "format": "epoch_ms"},
            "fields": FIELDS}


def _avro_values(orders: list[dict[str, Any]], url: str, user_info: str) -> list[bytes]:
    with warnings.catch_warnings():  # authlib (imported by the client) warns on import
        import authlib.deprecate  # noqa: F401
        warnings.simplefilter("ignore")
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": url, "basic.auth.user.info": user_info})
    serialize = AvroSerializer(client, json.dumps(SCHEMA))
    context = SerializationContext("bench-avro-read", MessageField.VALUE)
    return [serialize(o, context) for o in orders]


def _send(env: Env, topic: str, values: list[bytes]) -> None:
    records = (GeneratedRecord(None, v, BASE_MS + i, "good") for i, v in enumerate(values))
    summary = send(records, len(values), topic, env.settings(), progress=False)
    assert summary.records == len(values)


def measure(env: Env, events: int, repeat: int, url: str, user_info: str
            ) -> tuple[dict[str, Plan], dict[str, float], dict[str, list[float]]]:
    from eos.compute.precommit.read import read_ranges
    from eos.core.protocol import begin

    orders = _orders(events)
    values = {"json": [_json(o) for o in orders], "avro": _avro_values(orders, url, user_info)}
    plans, configs, sizes = {}, {}, {}
    for fmt, encoded in values.items():
        topic = f"bench-avro-read-{fmt}"
        print(f"bench.avro_read: producing {events:,} {fmt} events", file=sys.stderr)
        _send(env, topic, encoded)
        # The epoch cap is spread evenly over partitions: twice the events, so the plan takes
        # every record however the producer spread them.
        configs[fmt] = env.config(f"avro-read-{fmt}", topic, max_records=2 * events,
                                  event=_event(fmt, url), group_by=["tier"],
                                  aggregations={"n": "count(*)"})
        plans[fmt] = begin(configs[fmt], run_id=f"avro-read-{fmt}")
        assert plans[fmt].records == events, (fmt, plans[fmt].records)
        sizes[fmt] = sum(map(len, encoded)) / events
    del values, orders
    seconds: dict[str, list[float]] = {f"{fmt} {way}": [] for fmt in plans
                                       for way in ("read", "read+parse")}
    for r in range(repeat + 1):  # round 0 warms the JVM and the workers up: not counted
        print(f"bench.avro_read: {f'repetition {r}' if r else 'warm-up'}", file=sys.stderr)
        for fmt, plan in plans.items():
            for way, parse in (("read", False), ("read+parse", True)):
                took = timed_count(
                    partial(read_ranges, env.spark, configs[fmt], plan, parse=parse),
                    plan.records)
                if r:
                    seconds[f"{fmt} {way}"].append(took)
    return plans, sizes, seconds


def render(plans: dict[str, Plan], sizes: dict[str, float],
           seconds: dict[str, list[float]]) -> str:
    median = {way: statistics.median(took) for way, took in seconds.items()}
    records = plans["json"].records
    lines = [f"{records:,} order events per format, {len(plans['json'].ranges)} partitions, "
             f"local[2], median of {len(seconds['json read'])}", "",
             "| format | bytes a record | Spark read, s | Spark read+parse, s | read+parse "
             "events/s | / JSON's |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for fmt in plans:
        parse = median[f"{fmt} read+parse"]
        lines.append(f"| {fmt} | {sizes[fmt]:.0f} | {median[f'{fmt} read']:.2f} | {parse:.2f} | "
                     f"{records / parse:,.0f} | {median['json read+parse'] / parse:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from eos.tools.servers.schema_registry import SchemaRegistryServer

    p = argparse.ArgumentParser(prog="python -m bench.avro_read",
                                description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=400_000)
    p.add_argument("--partitions", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", type=Path)
    args = p.parse_args(argv)
    # Before Spark starts: its Python workers inherit the variable, as a deployment's would.
    user, password = "bench", secrets.token_urlsafe(12)
    os.environ[AUTH_ENV] = f"{user}:{password}"
    per_partition = sc.max_retained_events(args.partitions) * 90 // JSON_BYTES_PER_EVENT
    if args.events > per_partition:
        raise SystemExit(f"{args.events:,} JSON events do not fit the embedded broker's "
                         f"{args.partitions} partitions (about {per_partition:,}); raise "
                         "--partitions")
    topics = tuple(f"bench-avro-read-{fmt}:{args.partitions}" for fmt in ("json", "avro"))
    with SchemaRegistryServer(user, password) as registry, \
            environment(args.workdir, topics=topics) as env:
        plans, sizes, seconds = measure(env, args.events, args.repeat, registry.url,
                                        registry.user_info)
    print("\n" + render(plans, sizes, seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
