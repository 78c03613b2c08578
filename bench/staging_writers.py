"""Who writes staging, A/B: the same ranges staged by the driver and by the executors.

Two pipelines read one topic (the generator's clicks, 1,000 keys): one with the default
``spark.collect_rows`` (small epochs collected to the driver and written there), one with
``collect_rows: 0`` (the executors always write). Each epoch's records are produced once and
both pipelines stage and commit them, in alternating order so that neither always runs first.
Prints every epoch and the medians; asserts which writer each pipeline used.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import median
from typing import Any

from bench import scenarios as sc
from bench.env import Env, environment

PHASES = ("begin", "read_parse", "aggregate", "precommit_other", "commit", "total")


def measure(env: Env, epochs: int, epoch_records: int, warmup: int,
            log: Any = print) -> dict[str, list[sc.EpochTiming]]:
    """``epochs`` epochs of ``epoch_records`` per writer, after one warm-up epoch each."""
    topic = "bench-writers"
    driver = env.config("writers-driver", topic, max_records=epoch_records)
    executors = env.config("writers-executors", topic, max_records=epoch_records)
    executors = executors.model_copy(
        update={"spark": executors.spark.model_copy(update={"collect_rows": 0})})
    pipelines = {"driver": driver, "executors": executors}
    records = sc.generator(warmup + epochs * epoch_records)
    sc.send_chunk(env, topic, records, warmup)
    for name, config in pipelines.items():
        sc.eo_epoch(config, env.spark, f"{name}-warmup")
    timings: dict[str, list[sc.EpochTiming]] = {name: [] for name in pipelines}
    for n in range(epochs):
        sc.send_chunk(env, topic, records, epoch_records)
        order = list(pipelines) if n % 2 == 0 else list(reversed(pipelines))
        for name in order:
            plan, timing = sc.eo_epoch(pipelines[name], env.spark, f"{name}-{n}")
            if plan.records != epoch_records or timing.written_by != name:
                raise AssertionError(f"{name}: epoch {plan.epoch} read {plan.records} records, "
                                     f"staged by {timing.written_by}")
            timings[name].append(timing)
            log(f"bench.staging_writers: epoch {n} {name}: "
                + " ".join(f"{k} {getattr(timing, k):.3f}" for k in PHASES))
    return timings


def render(timings: dict[str, list[sc.EpochTiming]]) -> str:
    lines = ["| staged by | epochs | " + " | ".join(f"{k} (s)" for k in PHASES) + " |",
             "| --- | ---: |" + " ---: |" * len(PHASES)]
    for name, runs in timings.items():
        cells = [f"{median(getattr(t, k) for t in runs):.3f}" for k in PHASES]
        lines.append(f"| {name} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.staging_writers",
                                description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=6, help="measured epochs per writer")
    p.add_argument("--epoch-records", type=int, default=200_000)
    p.add_argument("--warmup-events", type=int, default=50_000)
    p.add_argument("--workdir", type=Path, help="keep tables here instead of a temp dir")
    args = p.parse_args(argv)
    with environment(args.workdir) as env:
        timings = measure(env, args.epochs, args.epoch_records, args.warmup_events,
                          log=lambda msg: print(msg, file=sys.stderr))
    print("\n" + render(timings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
