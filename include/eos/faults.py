"""Named fault points for crash testing: ``EOS_FAULTS=point[:times],...``; off by default.

A fault kills the process with SIGKILL, the way a crash or an OOM kill would: no ``finally``
blocks, no cleanup. ``times`` counts hits across processes (a counter file under the data dir),
so "crash once, then succeed on retry" works across Airflow task attempts and spark-submits.
"""

from __future__ import annotations

import os
import signal
from functools import cache
from pathlib import Path

POINTS = (
    "begin.after_log",  # plan logged, begin has not returned
    "precommit.before_write",  # Spark computed the epoch, nothing staged yet
    "precommit.mid_read",  # inside a Spark task, after its first batch was read
    "precommit.after_write",  # staged in Delta, the Spark app has not exited
    "commit.between_sinks",  # one side sink committed, the target not yet
    "commit.after_target",  # target committed, the task has not reported success
)


@cache
def _armed() -> dict[str, int]:
    armed = {}
    for item in filter(None, (s.strip() for s in os.environ.get("EOS_FAULTS", "").split(","))):
        point, _, times = item.partition(":")
        if point not in POINTS:
            raise ValueError(f"EOS_FAULTS names unknown fault point '{point}'; known: {POINTS}")
        armed[point] = int(times or 1)
    return armed


def _counter(point: str) -> Path:
    from eos.config import data_dir

    base = Path(os.environ.get("EOS_FAULTS_DIR") or data_dir() / "faults")
    base.mkdir(parents=True, exist_ok=True)
    return base / f"{point}.hits"


def hit(point: str) -> None:
    """Crash here if ``point`` is armed and has crashed fewer than its ``times``."""
    times = _armed().get(point)
    if not times:
        return
    counter = _counter(point)
    done = len(counter.read_text()) if counter.exists() else 0
    if done >= times:
        return
    with counter.open("a") as f:
        f.write("x")
    os.kill(os.getpid(), signal.SIGKILL)
