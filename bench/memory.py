"""Memory figures: ``ru_maxrss`` from ``getrusage`` and a sampled peak RSS of the process tree.

``getrusage(RUSAGE_CHILDREN)`` only covers children that have exited and been waited for (the
broker, every ``spark-submit``), not the JVM that PySpark keeps alive for the in-process session
nor Spark's Python workers. So a thread also samples the RSS of this process and all of its live
descendants (JVM, Python workers, broker) from ``/proc`` and keeps the peak of the sum.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MB = 1024 * 1024


def rusage_peaks_mb() -> dict[str, float]:
    """Peak RSS of this process and of the largest waited-for descendant, in MiB."""
    scale = 1 if sys.platform == "darwin" else 1024  # Linux reports KiB, macOS bytes
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / MB
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale / MB
    return {"self": round(own, 1), "children": round(children, 1)}


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def tree_rss_bytes(root: int | None = None) -> int:
    """RSS of ``root`` (default: this process) plus every live descendant."""
    root = root or os.getpid()
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


class TreeSampler:
    """Samples the tree's RSS in the background; ``peak_mb()`` is the peak since ``reset()``."""

    def __init__(self, interval_s: float = 0.25) -> None:
        self.interval_s = interval_s
        self.available = Path("/proc/self/statm").exists()
        self._peak = 0
        self._overall = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> TreeSampler:
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        if not self.available:
            return
        rss = tree_rss_bytes()
        self._peak = max(self._peak, rss)
        self._overall = max(self._overall, rss)

    def reset(self) -> None:
        self.sample()
        self._peak = 0
        self.sample()

    def peak_mb(self) -> float | None:
        self.sample()
        return round(self._peak / MB, 1) if self.available else None

    def overall_mb(self) -> float | None:
        self.sample()
        return round(self._overall / MB, 1) if self.available else None


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _is_jvm(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    except OSError:
        return False


class DriverSampler:
    """Peak RSS of the Spark *driver* while a ``with`` block runs: this Python process (the
    PySpark driver in-process) and, separately, the JVM(s) under it (Spark's driver JVM with the
    executors of ``local[2]``). The Python workers Spark forks are executors, not the driver,
    and are left out. Sampled every ``interval_s`` from ``/proc``."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.python = 0
        self.jvm = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="driver-sampler", daemon=True)

    def __enter__(self) -> DriverSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        me = os.getpid()
        self.python = max(self.python, _rss(me))
        jvms = [pid for pid in _descendants(me) if pid != me and _is_jvm(pid)]
        self.jvm = max(self.jvm, sum(_rss(pid) for pid in jvms))

    def peaks_mb(self) -> dict[str, float]:
        return {"python": round(self.python / MB, 1), "jvm": round(self.jvm / MB, 1),
                "driver": round((self.python + self.jvm) / MB, 1)}
