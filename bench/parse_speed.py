"""Read+parse speed by event shape: the general parser on the clicks shape and on page views.

``python -m bench.parse_speed [--events N] [--repeat R]`` produces N records of each shape to
the embedded broker (a topic per shape), then times precommit's read+parse stage on 2 cores
(``eos_kafka`` + ``mapInArrow(Parser.parse_batch)``, ``count()``, no cache; the same Spark calls
``eos.compute.precommit.frames.epoch_frames`` makes) and, single-threaded in this process,
``Parser.parse_batch`` on the same records. Prints figures and ratios side by side; the median
of R runs each.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.env import Env, environment
from eos.core.config import PipelineConfig
from eos.core.plan import Plan

# The clicks shape as the benchmark pipelines read it; page views as the demo reads them, once
# with revenue as an exact decimal and once as a double (the same JSON number).
PAGEVIEWS = {
    "time": {"field": "ts", "format": "iso8601"},
    "fields": {"page": "string", "country": {"path": "user.country", "type": "string"},
               "user": {"path": "user.id", "type": "string"}, "revenue": "decimal(12,2)",
               "referrer": {"path": "referrer", "type": "string", "optional": True}},
}
PAGEVIEWS_DOUBLE = {**PAGEVIEWS, "fields": {**PAGEVIEWS["fields"], "revenue": "double"}}


def _pipeline(env: Env, name: str, topic: str, event: dict[str, Any] | None) -> PipelineConfig:
    if event is None:
        return env.config(name, topic, max_records=10_000_000)
    return env.config(name, topic, max_records=10_000_000, event=event, group_by=["page"],
                      aggregations={"views": "count(*)"})


def _produce(env: Env, shape: str, events: int) -> str:
    from eos.tools.generator import GeneratorSpec
    from eos.tools.produce import produce

    topic = f"parse-{shape}-{time.time_ns()}"
    spec = GeneratorSpec(events=events, keys=50, users=500, bad_fraction=0.005, seed=7,
                         shape=shape)
    produce(spec, topic, env.settings(), progress=False)
    return topic


def _plan(config: PipelineConfig) -> Plan:
    from eos.core.plan import new_plan

    return new_plan(config, 0, {})


def spark_rate(env: Env, config: PipelineConfig, plan: Plan, repeat: int) -> float:
    from eos.compute.precommit.read import read_ranges

    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        n = read_ranges(env.spark, config, plan, parse=True).count()
        samples.append(time.perf_counter() - started)
        assert n == plan.records, "read+parse lost records"
    return plan.records / statistics.median(samples)


def python_rate(env: Env, config: PipelineConfig, plan: Plan, repeat: int) -> float:
    from eos.compute.formats.json import Parser
    from eos.compute.reader import read_split
    from eos.compute.splits import splits_of

    ranges = [{"partition": r.partition, "start": r.start, "until": r.until} for r in plan.ranges]
    batches = [b for split in splits_of(ranges, max(1, plan.records))
               for b in read_split(plan.topic, split, env.settings(), 60.0)]
    parser = Parser(config.event)
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        for batch in batches:
            parser.parse_batch(batch)
        samples.append(time.perf_counter() - started)
    return plan.records / statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.parse_speed", description=__doc__)
    p.add_argument("--events", type=int, default=100_000,
                   help="records per shape (the embedded broker keeps ~100k page views)")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    with environment() as env:
        clicks_topic, pageviews_topic = (_produce(env, s, args.events)
                                         for s in ("clicks", "pageviews"))
        cases = [("clicks (epoch_ms, decimal(38,9))", _pipeline(env, "pc", clicks_topic, None)),
                 ("page views (iso8601, nested, decimal(12,2))",
                  _pipeline(env, "pv", pageviews_topic, PAGEVIEWS)),
                 ("page views, revenue as double",
                  _pipeline(env, "pvd", pageviews_topic, PAGEVIEWS_DOUBLE))]
        rows = []
        for label, config in cases:
            plan = _plan(config)
            spark_rate(env, config, plan, 1)  # warm-up: Python workers, imports
            rows.append((label, spark_rate(env, config, plan, args.repeat),
                         python_rate(env, config, plan, args.repeat)))
    base = rows[0][1]
    print(f"read+parse, {args.events:,} records per shape, median of {args.repeat}")
    print(f"{'shape':<46} {'Spark 2 cores ev/s':>19} {'vs clicks':>10} "
          f"{'parse_batch 1 core ev/s':>24}")
    for label, spark, python in rows:
        print(f"{label:<46} {spark:>19,.0f} {spark / base:>9.2f}x {python:>24,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
