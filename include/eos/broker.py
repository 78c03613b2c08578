"""The embedded Kafka-protocol broker: a librdkafka mock cluster owned by a small process.

The mock cluster lives exactly as long as the client that created it, so ``start`` spawns a
detached process that owns it and publishes its bootstrap address in a state file under the
data directory; every other client (planner, Spark reader, producer, tests) connects over TCP.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from eos.config import data_dir
from eos.errors import EosError
from eos.processes import alive

START_TIMEOUT_S = 30.0


def state_path(base: Path | None = None) -> Path:
    return (base or data_dir()) / "broker.json"


def _reachable(bootstrap: str, timeout: float = 2.0) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def read_state(base: Path | None = None) -> dict[str, Any] | None:
    """The running embedded broker's state, or None when there is none (stale files ignored)."""
    path = state_path(base)
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not alive(int(state.get("pid", -1))):
        return None
    return state


def serve(state_file: Path, topics: list[str]) -> None:
    """Own a mock cluster until SIGTERM; the state file exists exactly while it serves."""
    import confluent_kafka as ck

    owner = ck.Producer(
        {
            "test.mock.num.brokers": 1,
            "test.mock.broker.rtt": 0,
            "log_level": 3,
        }
    )
    brokers = owner.list_topics(timeout=10).brokers
    broker = next(iter(brokers.values()))
    bootstrap = f"{broker.host}:{broker.port}"
    if topics:
        # A metadata request from a producer auto-creates the topic on the mock cluster.
        creator = ck.Producer({"bootstrap.servers": bootstrap, "log_level": 3})
        for topic in topics:
            creator.list_topics(topic, timeout=10)
        creator.flush(5)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    state = {
        "bootstrap": bootstrap,
        "pid": os.getpid(),
        "started_at": time.time(),
        "topics": topics,
    }
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(state_file)
    try:
        while not stop.is_set():
            owner.poll(0.5)
    finally:
        state_file.unlink(missing_ok=True)


def start(topics: list[str] | None = None, base: Path | None = None) -> dict[str, Any]:
    """Start the embedded broker in the background unless one runs; return its state."""
    base = base or data_dir()
    base.mkdir(parents=True, exist_ok=True)
    existing = read_state(base)
    if existing is not None:
        return existing
    path = state_path(base)
    path.unlink(missing_ok=True)
    log = open(base / "broker.log", "ab")  # noqa: SIM115 - handed to the child process
    cmd = [sys.executable, "-m", "eos.broker", "--state", str(path)]
    for topic in topics or []:
        cmd += ["--topic", topic]
    child = subprocess.Popen(
        cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        state = read_state(base)
        if state is not None and state["pid"] == child.pid:
            return state
        if child.poll() is not None:
            raise EosError(f"embedded broker exited with code {child.returncode}; see {log.name}")
        time.sleep(0.1)
    child.kill()
    raise EosError(f"embedded broker did not start within {START_TIMEOUT_S:.0f}s; see {log.name}")


def stop(base: Path | None = None, timeout: float = 15.0) -> bool:
    """Stop the embedded broker; True if one was running. Leaves no process behind."""
    state = read_state(base)
    if state is None:
        state_path(base).unlink(missing_ok=True)
        return False
    pid = int(state["pid"])
    from eos.kafka import forget_clients

    forget_clients(state["bootstrap"])  # kept clients would reconnect to it, and log, forever
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        _reap(pid)
    state_path(base).unlink(missing_ok=True)
    return True


def _reap(pid: int) -> None:
    """Collect the exit status when the broker is our own child, so it is not left a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def status(base: Path | None = None) -> dict[str, Any] | None:
    state = read_state(base)
    if state is None:
        return None
    return {**state, "reachable": _reachable(state["bootstrap"])}


def _main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m eos.broker")
    parser.add_argument("--state", required=True, type=Path)
    parser.add_argument("--topic", action="append", default=[])
    args = parser.parse_args(argv)
    serve(args.state, args.topic)


if __name__ == "__main__":
    _main(sys.argv[1:])
