"""``python -m bench.verify_span``: what ``eos verify`` holds in memory and takes on a long
history, whole and for its last epochs.

Builds one pipeline of ``--epochs`` committed epochs of ``--epoch-records`` records each (the
clicks windows into Delta, through the epoch loop and an in-process Spark session, on the
broker ``bench.env`` starts), then runs ``eos verify`` in a process of its own each way: every
epoch, ``--last 5`` and ``--since`` half-way. Each row is that process's peak resident memory
(``ru_maxrss``, from ``wait4``) and wall time. ``--apache-kafka`` runs it on Apache Kafka
(the embedded broker keeps ~200,000 such records in all).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.env import Env, environment

WAYS = (("every epoch", ()), ("--last 5", ("--last", "5")))


def build(env: Env, epochs: int, records: int, log: Any) -> Any:
    """A pipeline with ``epochs`` committed epochs of ``records`` records."""
    from eos.compute.epochs import run_epoch
    from eos.tools.generator import GeneratorSpec
    from eos.tools.produce import produce

    topic = f"bench-verify-{uuid.uuid4().hex[:8]}"
    config = env.config("verify_span", topic, window="10s", lateness="2s",
                        max_records=records, retention=1)
    produce(GeneratorSpec(events=epochs * records, keys=200, interval_ms=20, disorder_ms=500,
                          late_fraction=0.01, bad_fraction=0.01, seed=5),
            topic, env.settings(), progress=False)
    started = time.perf_counter()
    for i in range(epochs):
        run_epoch(config, f"verify-span-{i}", spark=env.spark)
        if (i + 1) % 25 == 0:
            log(f"{i + 1} epochs committed ({time.perf_counter() - started:.0f} s)")
    return config


def verify(config: Any, args: tuple[str, ...]) -> dict[str, Any]:
    """``eos verify`` in a process of its own: exit code, peak RSS (MiB) and seconds."""
    cmd = [sys.executable, "-m", "eos.tools.cli", "verify", "--config",
           str(config.source_path), *args]
    started = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    stdout = process.stdout.read() if process.stdout else ""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    verdict = next((line for line in stdout.splitlines() if line.startswith("verdict:")), "")
    return {"exit": process.returncode, "rss_mib": usage.ru_maxrss / 1024,
            "seconds": time.perf_counter() - started, "verdict": verdict[:40],
            "span": stdout.splitlines()[0] if stdout else ""}


def render(rows: list[tuple[str, dict[str, Any]]], epochs: int, records: int,
           notes: list[str]) -> str:
    lines = [f"eos verify on {epochs} committed epochs of {records:,} records "
             f"({epochs * records:,} in all)", "",
             "| audit | peak RSS | time | verdict |", "|---|---:|---:|---|"]
    lines += [f"| `eos verify {way}` | {r['rss_mib']:.0f} MiB | {r['seconds']:.1f} s | "
              f"{r['verdict']} |" for way, r in rows]
    return "\n".join([*lines, "", *notes])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.verify_span",
                                description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--epoch-records", type=int, default=1_000)
    p.add_argument("--workdir", type=Path, help="keep tables here instead of a temp dir")
    p.add_argument("--apache-kafka", action="store_true",
                   help="on Apache Kafka itself (eos broker start --apache-kafka)")
    args = p.parse_args(argv)

    def log(msg: str) -> None:
        print(f"bench.verify_span: {msg}", file=sys.stderr, flush=True)

    with environment(args.workdir,
                     broker_kind="apache-kafka" if args.apache_kafka else "mock") as env:
        config = build(env, args.epochs, args.epoch_records, log)
        ways = [*WAYS, (f"--since {args.epochs // 2}", ("--since", str(args.epochs // 2)))]
        rows = []
        for way, extra in ways:
            rows.append((way, verify(config, extra)))
            log(f"eos verify {way}: {rows[-1][1]}")
        notes = list(env.notes)
    print(render(rows, args.epochs, args.epoch_records, notes))
    return 0 if all(r["exit"] == 0 for _, r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
