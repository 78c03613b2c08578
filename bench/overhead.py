"""``python -m bench.overhead``: the protocol's fixed cost per epoch vs the epochs it has logged.

The goal: ``begin`` and ``commit`` together take at most 0.1 s on an empty epoch of a pipeline with
1,000 epochs of history (docs/benchmarks.md has the figures). This builds that history for real (the
epoch loop, ``eos.compute.epochs.run_epoch``: ``begin``, ``precommit`` on the shared in-process
Spark session, ``commit``; every table, sink and maintenance run as in production) and times
``--probes`` more empty epochs at each ``--at`` count, counting every Delta call they make
(``bench.deltaops``). Precommit is not part of the figure (its Spark jobs over nothing cost ~0.4 s;
see docs/benchmarks.md).

Figures are medians; Delta calls are per epoch: table opens, writes, deletes (``deltaops``)
and reads (every ``eos.core.tables.scan``, delta-rs' engine, counted here).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import deltaops
from bench.env import Env, environment
from eos.compute.epochs import EpochResult, run_epoch
from eos.core.config import PipelineConfig, parse_duration_ms
from eos.core.kafka import local_broker


@dataclass
class Probe:
    epochs_logged: int
    begin_ms: float
    commit_ms: float
    calls: dict[str, dict[str, float]]  # phase -> Delta call -> calls per epoch

    @property
    def total_ms(self) -> float:
        return self.begin_ms + self.commit_ms


def epoch(config: PipelineConfig, spark: Any, run_id: str,
          in_phase: Callable[[str], AbstractContextManager[Any]] | None = None) -> EpochResult:
    """One empty epoch through the epoch loop (``in_phase``: see ``run_epoch``)."""
    run = run_epoch(config, run_id, spark=spark, in_phase=in_phase)
    if run.plan.records:
        raise AssertionError("the overhead probe expects epochs that read nothing")
    return run


def probe(config: PipelineConfig, spark: Any, logged: int, probes: int) -> Probe:
    """``probes`` empty epochs, timed and their Delta calls counted."""
    import eos.compute.precommit.resume
    import eos.core.checkpoints
    import eos.core.delta
    import eos.core.epochlog
    import eos.core.tables

    # every module calling ``scan`` (eos.core.delta's own readers, read_table and read_existing,
    # call it there)
    readers = (eos.core.epochlog, eos.core.checkpoints, eos.compute.precommit.resume,
               eos.core.tables, eos.core.delta)
    scans: dict[str, int] = {}
    phase = {"name": "other"}
    originals = {m: m.scan for m in readers}

    def counted(original: Any) -> Any:
        def scan(*args: Any, **kwargs: Any) -> Any:
            scans[phase["name"]] = scans.get(phase["name"], 0) + 1
            return original(*args, **kwargs)
        return scan

    @contextlib.contextmanager
    def in_phase(name: str) -> Iterator[None]:
        """Each phase of the loop: its Delta calls and its scans counted under its name."""
        with counter.in_phase(name):
            phase["name"] = name
            try:
                yield
            finally:
                phase["name"] = "other"

    begins, commits = [], []
    with deltaops.counting() as counter:
        try:
            for module, original in originals.items():
                module.scan = counted(original)
            for i in range(probes):
                run = epoch(config, spark, f"probe-{logged}-{i}", in_phase)
                begins.append(run.phases["begin"])
                commits.append(run.phases["commit"])
        finally:
            for module, original in originals.items():
                module.scan = original
    calls = {ph: {op: n for op, (n, _) in ops.items()}
             for ph, ops in counter.summary(probes).items()}
    for ph, n in scans.items():
        calls.setdefault(ph, {})["reads"] = n / probes
    return Probe(logged, statistics.median(begins) * 1000, statistics.median(commits) * 1000,
                 calls)


def measure(env: Env, at: list[int], probes: int, log: Any = print,
            log_retention_ms: int | None = None,
            sink_log_retention_ms: int | None = None) -> list[Probe]:
    """Build history up to each count in ``at`` and probe there."""

    config = env.config("overhead", "bench-overhead", log_retention_ms=log_retention_ms,
                        sink_log_retention_ms=sink_log_retention_ms)
    _ensure_topic(local_broker()["bootstrap"] if local_broker() else env.bootstrap,
                  config.kafka.topic)
    done, out = 0, []
    started = time.perf_counter()
    for target in sorted(at):
        while done < target:
            epoch(config, env.spark, f"history-{done}")
            done += 1
            if done % 100 == 0:
                log(f"bench.overhead: {done} epochs logged, {time.perf_counter() - started:.0f} s")
        out.append(probe(config, env.spark, done, probes))
        done += probes
    return out


def _ensure_topic(bootstrap: str, topic: str) -> None:
    """A metadata request from a producer creates the topic on the embedded broker; a real
    broker needs it to exist (or auto-creation)."""
    import confluent_kafka as ck

    from eos.core.kafka import client_settings

    settings = {**client_settings(), "bootstrap.servers": bootstrap, "log_level": 3}
    ck.Producer(settings).list_topics(topic, timeout=10)


def render(probes: list[Probe]) -> str:
    lines = ["| epochs logged | begin (ms) | commit (ms) | begin + commit (ms) | Delta calls "
             "per epoch: begin | commit |", "| ---: | ---: | ---: | ---: | --- | --- |"]
    for p in probes:
        lines.append(f"| {p.epochs_logged:,} | {p.begin_ms:.1f} | {p.commit_ms:.1f} | "
                     f"{p.total_ms:.1f} | {_calls(p.calls.get('begin', {}))} | "
                     f"{_calls(p.calls.get('commit', {}))} |")
    return "\n".join(lines)


def _calls(ops: dict[str, float]) -> str:
    return ", ".join(f"{op} {n:g}" for op, n in sorted(ops.items()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.overhead",
                                description=__doc__.split("\n")[0])
    p.add_argument("--at", type=int, nargs="+", default=[10, 100, 1000],
                   help="probe after this many epochs (default 10 100 1000)")
    p.add_argument("--probes", type=int, default=10, help="empty epochs timed at each count")
    p.add_argument("--workdir", type=Path, help="keep tables here instead of a temp dir")
    p.add_argument("--log-retention", type=parse_duration_ms, help="the pipeline's "
                   "epoch.log_retention, e.g. 0s (default: the config's, 24h; below the config's "
                   "1 h floor is allowed here, where attempts never race)")
    p.add_argument("--sink-log-retention", type=parse_duration_ms, help="the three Delta "
                   "sinks' log_retention option, e.g. 0s (default: none, Delta's 30 days; below "
                   "the option's 1 h floor is allowed here)")
    args = p.parse_args(argv)
    with environment(args.workdir) as env:
        probes = measure(env, args.at, args.probes,
                         log=lambda msg: print(msg, file=sys.stderr),
                         log_retention_ms=args.log_retention,
                         sink_log_retention_ms=args.sink_log_retention)
    print("\n" + render(probes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
