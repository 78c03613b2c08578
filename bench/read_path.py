"""``python -m bench.read_path``: the Spark read stage (raw, and read+parse as precommit reads)
against a bare consumer, interleaved in one run on the same ranges.

One epoch's plan over ``--events`` records in ``--partitions`` partitions, as the main benchmark's
1M-record epochs: Spark reads it as precommit does (splits planned on the driver, read by
``mapInArrow``: ``eos.compute.reader.planned_read``) and counts (raw, and read+parse), with the
reader's splits (ranges packed into ``max(spark.shuffle_partitions, records / split_records)``
splits). For comparison: read+parse through the ``eos_kafka`` data source (Spark plans the splits in
Python processes of its own), and with a split per partition range. One plain confluent-kafka
consumer (one process, one core) reads the same ranges counting records. The planning costs the same
whatever the epoch holds: ``--events 20000`` shows it best.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bench import scenarios as sc
from bench.env import Env, environment
from eos.core.config import PipelineConfig
from eos.core.plan import Plan

BARE = "bare consumer"


def timed_count(read: Callable[[], Any], records: int) -> float:
    """Seconds to build the read's DataFrame and count it: building it is where the
    ``eos_kafka`` data source asks a Python process of Spark's for its schema."""
    started = sc.now()
    n = read().count()
    took = sc.now() - started
    if n != records:
        raise AssertionError(f"read {n} records of a plan of {records}")
    return took


def measure(env: Env, topic: str, events: int, repeat: int) -> tuple[Plan, dict[str, list[float]]]:
    """Seconds of each way over one plan of ``events`` records of ``topic``, interleaved."""
    from eos.compute.precommit.read import Planner, read_ranges
    from eos.core.protocol import begin

    sc.send_chunk(env, topic, sc.generator(events), events)
    config = env.config("read-path", topic, max_records=events)
    plan = begin(config, run_id="read-path")
    per_partition = max(r.records for r in plan.ranges)
    split_each = config.model_copy(update={
        "kafka": config.kafka.model_copy(update={"split_records": per_partition}),
        "spark": config.spark.model_copy(update={"shuffle_partitions": len(plan.ranges)})})
    ways: dict[str, tuple[PipelineConfig, bool, Planner]] = {
        "Spark read stage": (config, False, "driver"),
        "Spark read+parse": (config, True, "driver"),
        "Spark read+parse, through the eos_kafka data source": (config, True, "source"),
        "Spark read+parse, a split per partition": (split_each, True, "driver")}
    seconds: dict[str, list[float]] = {way: [] for way in [*ways, BARE]}
    for r in range(repeat):
        print(f"bench.read_path: repetition {r + 1}", file=sys.stderr)
        for way, (way_config, parse, planner) in ways.items():
            seconds[way].append(timed_count(partial(
                read_ranges, env.spark, way_config, plan, parse=parse, planner=planner),
                plan.records))
        seconds[BARE].append(sc.bare_read(env, [plan]))
    return plan, seconds


def render(plan: Plan, seconds: dict[str, list[float]]) -> str:
    bare = statistics.median(seconds[BARE])
    lines = [f"{plan.records:,} records, {len(plan.ranges)} partitions, median of "
             f"{len(seconds[BARE])}", "",
             "| way | seconds | events/s | / bare consumer |", "| --- | ---: | ---: | ---: |"]
    for way, took in seconds.items():
        median = statistics.median(took)
        lines.append(f"| {way} | {median:.2f} | {plan.records / median:,.0f} | "
                     f"{bare / median:.1%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.read_path",
                                description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", type=Path)
    args = p.parse_args(argv)
    topic = "bench-read-path"
    with environment(args.workdir, topics=(f"{topic}:{args.partitions}",)) as env:
        print(f"bench.read_path: producing {args.events:,} events", file=sys.stderr)
        sc.check_retained(args.events, args.partitions)
        plan, seconds = measure(env, topic, args.events, args.repeat)
    print("\n" + render(plan, seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
