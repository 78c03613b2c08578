"""``eos verify`` in the background, for the epochs view's button: one audit per pipeline at a
time, in a process of its own, its output in a file the page shows.

The audit re-reads every committed epoch from Kafka; that can take minutes, so it never runs
inside the API server's process. The run is a plain ``eos verify --config <yaml>``: the same
command an operator runs, recording its verdict the same way (``eos.core.verdicts``).
The state of the
last run lives in ``EOS_DATA_DIR/verify/<pipeline>.json`` (pid, its start time, the log), so any
API server worker sees it; a file lock makes "start unless one runs" one step.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

from eos.core.config import PipelineConfig, data_dir
from eos.core.errors import ConfigError

LOG_TAIL_CHARS = 20_000


@dataclass(frozen=True)
class VerifyRun:
    """One background ``eos verify`` of a pipeline, running or finished."""

    pipeline: str
    pid: int
    started_at: datetime
    log: Path
    running: bool

    def output(self, chars: int = LOG_TAIL_CHARS) -> str:
        """The last ``chars`` of what the audit printed so far."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def _dir() -> Path:
    path = data_dir() / "verify"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _locked(config: PipelineConfig) -> Iterator[None]:
    with (_dir() / f"{config.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def current(config: PipelineConfig) -> VerifyRun | None:
    """The last background run of ``config``'s audit (None: never started here)."""
    try:
        state = json.loads((_dir() / f"{config.name}.json").read_text())
    except (OSError, ValueError):
        return None
    return VerifyRun(config.name, state["pid"], datetime.fromisoformat(state["started_at"]),
                     Path(state["log"]), _running(state["pid"], state["created"]))


def start(config: PipelineConfig) -> VerifyRun:
    """Start ``eos verify`` for ``config`` unless one already runs (then return that one)."""
    if not config.source_path:
        raise ConfigError(f"pipeline {config.name} has no config file to verify from")
    with _locked(config):
        running = current(config)
        if running is not None and running.running:
            return running
        log = _dir() / f"{config.name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "eos.tools.cli", "verify", "--config",
                 str(config.source_path)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        started_at = datetime.now(UTC)
        state = {"pid": proc.pid, "created": psutil.Process(proc.pid).create_time(),
                 "started_at": started_at.isoformat(), "log": str(log)}
        (_dir() / f"{config.name}.json").write_text(json.dumps(state))
        return VerifyRun(config.name, proc.pid, started_at, log, True)


def _running(pid: int, created: float) -> bool:
    """Whether ``pid`` is still that audit (not a later process that reused the pid)."""
    try:
        process = psutil.Process(pid)
        if process.create_time() != created:
            return False
        if process.status() == psutil.STATUS_ZOMBIE:
            process.wait(timeout=0)  # our own child: reap it
            return False
        return True
    except (psutil.NoSuchProcess, psutil.TimeoutExpired):
        return False
