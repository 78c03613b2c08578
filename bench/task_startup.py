"""``python -m bench.task_startup``: what an Airflow task of the epoch pays to start, without
and with the scheduler's preload (``eos.airflow.preload``), side by side in one run.

Each way, a fresh process stands in for a LocalExecutor worker: it imports ``airflow.sdk``
(as the scheduler it was forked from has) and, for "preloaded", runs ``preload()``; then it
forks ``--tasks`` children one after the other, as Airflow's supervisor does per task, and each
child times importing what begin, precommit (on Spark Connect) and commit import
(``TASK_MODULES``). Figures: the median child's seconds, and the worker's one-time preload.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

WORKER = r"""
import json, os, sys, time
import airflow.sdk  # noqa: F401  (what the scheduler has imported)
from eos.airflow.preload import TASK_MODULES, preload
took = sum(preload().values()) if sys.argv[1] == "preloaded" else 0.0
children = []
for _ in range(int(sys.argv[2])):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        started = time.perf_counter()
        import importlib
        for name in TASK_MODULES:
            importlib.import_module(name)
        os.write(write, str(time.perf_counter() - started).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    children.append(float(os.read(read, 64).decode()))
print(json.dumps({"preload_s": took, "tasks_s": children}))
"""


def measure(way: str, tasks: int) -> dict:
    done = subprocess.run([sys.executable, "-c", WORKER, way, str(tasks)], check=True,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.task_startup",
                                description=__doc__.split("\n")[0])
    p.add_argument("--tasks", type=int, default=5, help="tasks forked per way (default 5)")
    p.add_argument("--repeat", type=int, default=2, help="runs of each way, interleaved")
    args = p.parse_args(argv)
    runs: dict[str, list[dict]] = {"imports in the task": [], "preloaded": []}
    for _ in range(args.repeat):
        for way in runs:
            print(f"bench.task_startup: {way}", file=sys.stderr)
            runs[way].append(measure(way, args.tasks))
    before = statistics.median(t for r in runs["imports in the task"] for t in r["tasks_s"])
    after = statistics.median(t for r in runs["preloaded"] for t in r["tasks_s"])
    once = statistics.median(r["preload_s"] for r in runs["preloaded"])
    print("| figure | imports in the task | preloaded by the scheduler |")
    print("| --- | ---: | ---: |")
    print(f"| a task's start-up: importing its modules (median of {args.tasks * args.repeat}"
          f" tasks, s) | {before:.3f} | {after:.3f} |")
    print(f"| once per scheduler: the preload (s) | - | {once:.3f} |")
    print(f"\nsaved per task: {before - after:.3f} s; per epoch (begin, precommit, commit): "
          f"{3 * (before - after):.2f} s; measured {time.strftime('%Y-%m-%d')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
