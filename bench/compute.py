"""``python -m bench.compute``: the two compute modes side by side, in one run (the figures:
docs/benchmarks.md).

``compute.mode: connect`` (the default: a long-lived Spark Connect server) against ``submit``
(``spark-submit`` per epoch), as deployed, next to the at-least-once baseline:

1. **Empty epochs through ``eos run``**: the per-epoch seconds ``eos run`` prints (median, the
   first epoch of each process apart) and the wall time of a one-epoch ``eos run`` process.
2. **Throughput as deployed**: ``--events`` records produced ``--epoch-records`` at a time (what
   the embedded broker retains); each epoch is one fresh ``eos run --epochs 1`` process, as each
   Airflow task is a fresh process, once per compute mode, and the at-least-once baseline
   (``bench.scenarios.alo_epoch``: the same Spark read and aggregation in-process, appended to
   Delta, no protocol) runs over the very same offset ranges. Warm-up epochs run first, so the
   figures are a running deployment's (the Connect session of a pipeline keeps its workers).
3. **One epoch as an Airflow DAG run** (``DAG.test``, connect): begin / precommit / commit task
   durations and the Airflow time between and around them, for a cold and a warm epoch.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import scenarios as sc
from bench.env import Env, environment

_SECONDS = re.compile(r"(\d+(?:\.\d+)?)s$")
MODES = ("connect", "submit")
PARTS = ("empty", "deployed", "dagrun")
DEPLOYED_TOPIC = "bench-deployed"


def eos_run(config_path: str, epochs: int) -> tuple[float, list[float], list[int]]:
    """``eos run`` in a fresh process: wall seconds, per-epoch seconds, records per epoch."""
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "eos.tools.cli", "run", "--config", config_path,
                          "--epochs", str(epochs)], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise RuntimeError(f"eos run failed ({out.returncode}): {out.stderr[-2000:]}")
    lines = [line for line in out.stdout.splitlines() if line.startswith("epoch")]
    seconds = [float(_SECONDS.search(line.strip()).group(1)) for line in lines]
    records = [int(line.split("records")[1].split()[0]) for line in lines]
    return wall, seconds, records


def mode_config(env: Env, mode: str, name: str, topic: str, max_records: int) -> Any:
    """A pipeline file (what ``eos run`` reads) computing on ``mode``."""
    return env.config(f"{name}-{mode}", topic, max_records=max_records, compute={"mode": mode})


@dataclass
class Deployed:
    """Seconds spent per compute mode and by the ALO baseline over the same ranges."""

    events: int = 0
    epochs: int = 0
    eo: dict[str, float] = field(default_factory=lambda: dict.fromkeys(MODES, 0.0))
    alo: float = 0.0

    def rates(self) -> dict[str, float]:
        return {**{f"eo_{m}": self.events / s for m, s in self.eo.items() if s},
                "alo": self.events / self.alo if self.alo else 0.0}


def empty_epochs(env: Env, count: int, log: Any) -> dict[str, Any]:
    """Per-epoch seconds of empty epochs on each mode, and a one-epoch process's wall time."""
    sc.produce_topic(env, "bench-empty", 1_000)
    out: dict[str, Any] = {}
    for mode in MODES:
        config = mode_config(env, mode, "empty", "bench-empty", 10_000)
        eos_run(str(config.source_path), 2)  # reads the 1,000 records, then one empty epoch
        _, seconds, records = eos_run(str(config.source_path), count)
        assert not any(records), f"{mode}: expected empty epochs, got {records}"
        walls = [eos_run(str(config.source_path), 1)[0] for _ in range(3)]
        out[mode] = {"first_in_process": seconds[0],
                     "median_after_first": statistics.median(seconds[1:] or seconds),
                     "process_wall_median": statistics.median(walls)}
        log(f"empty epochs, {mode}: {out[mode]}")
    return out


def deployed(env: Env, events: int, chunk: int, log: Any) -> Deployed:
    """``events`` through each mode, one fresh ``eos run`` process per epoch, and ALO."""
    from eos.core.layout import tables_for
    from eos.core.plan import plan_of

    topic = DEPLOYED_TOPIC
    configs = {mode: mode_config(env, mode, "deployed", topic, chunk) for mode in MODES}
    alo_path = str(env.workdir / "tables" / "deployed-alo")
    records = sc.generator(events + chunk // 10)
    warm = chunk // 10
    sc.send_chunk(env, topic, records, warm)  # warm-up epoch: not measured
    for config in configs.values():
        eos_run(str(config.source_path), 1)
    sc.alo_epoch(env, configs["connect"], plan_of(tables_for(configs["connect"]), 0), alo_path)
    result = Deployed()
    done = 0
    while done < events:
        count = min(chunk, events - done)
        sc.send_chunk(env, topic, records, count)
        done += count
        for mode, config in configs.items():
            wall, _, got = eos_run(str(config.source_path), 1)
            assert got == [count], f"{mode}: planned {got}, produced {count}"
            result.eo[mode] += wall
        plan = plan_of(tables_for(configs["connect"]), result.epochs + 1)
        result.alo += sc.alo_epoch(env, configs["connect"], plan, alo_path).seconds
        result.epochs += 1
        result.events += count
        log(f"deployed: {done:,}/{events:,} events; seconds so far {result.eo} alo "
            f"{result.alo:.1f}")
    return result


def dag_runs(env: Env, chunk: int, log: Any) -> list[dict[str, Any]]:
    """A cold and a warm ``chunk``-record epoch as Airflow DAG runs (connect)."""
    from eos.airflow.dag_runs import DagRunner

    topic = "bench-dagrun"
    config = mode_config(env, "connect", "dagrun", topic, chunk)
    # dags/ builds DAGs from the YAMLs in EOS_PIPELINES_DIR: only this one.
    dags_dir = env.workdir / "dag-pipelines"
    dags_dir.mkdir(exist_ok=True)
    (dags_dir / Path(config.source_path).name).write_text(Path(config.source_path).read_text())
    os.environ["EOS_PIPELINES_DIR"] = str(dags_dir)
    records = sc.generator(2 * chunk)
    runner = DagRunner(config)
    out = []
    for i, label in enumerate(("cold (first epoch of the pipeline's session)", "warm")):
        sc.send_chunk(env, topic, records, chunk)
        line = runner.run_next(i)
        tasks = line["tasks"]
        busy = sum(t["seconds"] for t in tasks.values())
        out.append({"label": label, "records": line["records"], "seconds": line["seconds"],
                    **{t: tasks[t]["seconds"] for t in ("begin", "precommit", "commit")},
                    "airflow_overhead": line["seconds"] - busy,
                    "gaps": _gaps(tasks)})
        log(f"DAG run {label}: {out[-1]}")
    return out


def _gaps(tasks: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Seconds between one task's end and the next one's start."""
    order = ["begin", "precommit", "commit"]
    return {f"{a}->{b}": round(tasks[b]["start"] - tasks[a]["end"], 2)
            for a, b in itertools.pairwise(order)}


def render(results: dict[str, Any]) -> str:
    """The tables of the parts that ran."""
    lines = ["## Compute modes side by side (python -m bench.compute)", ""]
    if "empty" in results:
        lines += _render_empty(results["empty"])
    if "deployed" in results:
        lines += _render_deployed(results["deployed"])
    if "dag_runs" in results:
        lines += _render_dag_runs(results["dag_runs"])
    return "\n".join(lines)


def _render_empty(empty: dict[str, Any]) -> list[str]:
    lines = ["| empty epoch through `eos run` (s) | connect | submit |", "| --- | ---: | ---: |"]
    for key, label in (("median_after_first", "per epoch (median, 2nd epoch on)"),
                       ("first_in_process", "first epoch of a process"),
                       ("process_wall_median", "`eos run --epochs 1` process, wall")):
        lines.append(f"| {label} | {empty['connect'][key]:.2f} | {empty['submit'][key]:.2f} |")
    return [*lines, ""]


def _render_deployed(d: Deployed) -> list[str]:
    rates = d.rates()
    lines = [f"| {d.events:,} events, {d.epochs} epochs as deployed | seconds | events/s "
             "| / ALO |", "| --- | ---: | ---: | ---: |"]
    for mode in MODES:
        lines.append(f"| exactly-once, {mode} (a fresh `eos run` process per epoch) | "
                     f"{d.eo[mode]:.1f} | {rates[f'eo_{mode}']:,.0f} | "
                     f"{rates[f'eo_{mode}'] / rates['alo']:.2f}x |")
    lines.append(f"| at-least-once baseline (in-process, same ranges) | {d.alo:.1f} | "
                 f"{rates['alo']:,.0f} | 1.00x |")
    return [*lines, ""]


def _render_dag_runs(runs: list[dict[str, Any]]) -> list[str]:
    lines = ["| Airflow DAG run (connect) | records | run (s) | begin | precommit | commit "
             "| Airflow overhead | gaps between tasks |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for run in runs:
        gaps = ", ".join(f"{k} {v:.1f}s" for k, v in run["gaps"].items())
        lines.append(f"| {run['label']} | {run['records']:,} | {run['seconds']:.1f} | "
                     f"{run['begin']:.1f} | {run['precommit']:.1f} | {run['commit']:.1f} | "
                     f"{run['airflow_overhead']:.1f} | {gaps} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compute", description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--epoch-records", type=int, default=sc.MAX_RETAINED_EVENTS)
    p.add_argument("--partitions", type=int, default=sc.DEFAULT_PARTITIONS,
                   help="partitions of the throughput topic; the embedded broker keeps 5 MiB "
                        "per partition, ~50,000 of these records (default: %(default)s)")
    p.add_argument("--empty-epochs", type=int, default=6)
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                   help="which measurements to run (default: all, in this order)")
    args = p.parse_args(argv)
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)


    from eos.tools.servers import spark_server
    try:
        sc.check_retained(args.epoch_records, args.partitions)
    except ValueError as error:
        p.error(str(error))
    results: dict[str, Any] = {}
    with environment(topics=[f"{DEPLOYED_TOPIC}:{args.partitions}"]) as env:
        base = Path(os.environ["EOS_DATA_DIR"])
        log(f"bench: broker {env.bootstrap}; starting a Spark Connect server")
        state = spark_server.start(base=base, port=0)
        try:
            log(f"Spark Connect server on port {state['port']}")
            if "empty" in args.parts:
                results["empty"] = empty_epochs(env, args.empty_epochs, log)
            if "deployed" in args.parts:
                results["deployed"] = deployed(env, args.events, args.epoch_records, log)
            if "dagrun" in args.parts:
                results["dag_runs"] = dag_runs(env, args.epoch_records, log)
        finally:
            print(render(results), flush=True)  # whatever ran, even if a later part failed
            spark_server.stop(base)
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
