"""``python -m bench.read_path``: the Spark read stage (raw, and read+parse as precommit reads)
against a bare consumer, interleaved in one run on the same ranges.

One epoch's plan over ``--events`` records in ``--partitions`` partitions (one split per
partition range, as the main benchmark's 1M-record epochs): Spark reads it through
``eos_kafka`` and counts (raw, and read+parse as precommit reads), each way, and one plain
confluent-kafka consumer (one process, one core) reads the same ranges counting records.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench import scenarios as sc
from bench.env import environment


def timed_count(frame: object, records: int) -> float:
    started = sc.now()
    n = frame.count()  # type: ignore[attr-defined]
    took = sc.now() - started
    if n != records:
        raise AssertionError(f"read {n} records of a plan of {records}")
    return took


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.read_path",
                                description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", type=Path)
    args = p.parse_args(argv)
    from eos.compute.stage import read_ranges
    from eos.core.protocol import begin

    topic = "bench-read-path"
    with environment(args.workdir, topics=(f"{topic}:{args.partitions}",)) as env:
        print(f"bench.read_path: producing {args.events:,} events", file=sys.stderr)
        sc.check_retained(args.events, args.partitions)
        sc.send_chunk(env, topic, sc.generator(args.events), args.events)
        config = env.config("read-path", topic, max_records=args.events)
        plan = begin(config, run_id="read-path")
        ways = {"Spark read stage": False, "Spark read+parse": True}
        seconds: dict[str, list[float]] = {way: [] for way in [*ways, "bare consumer"]}
        for r in range(args.repeat):
            print(f"bench.read_path: repetition {r + 1}", file=sys.stderr)
            for way, parse in ways.items():
                seconds[way].append(timed_count(
                    read_ranges(env.spark, config, plan, parse=parse), plan.records))
            seconds["bare consumer"].append(sc.bare_read(env, [plan]))
    bare = statistics.median(seconds["bare consumer"])
    print(f"\n{plan.records:,} records, {len(plan.ranges)} partitions, median of "
          f"{args.repeat}\n")
    print("| way | seconds | events/s | / bare consumer |")
    print("| --- | ---: | ---: | ---: |")
    for way, took in seconds.items():
        median = statistics.median(took)
        print(f"| {way} | {median:.2f} | {plan.records / median:,.0f} | {bare / median:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
