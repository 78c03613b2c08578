"""The broker eos runs on this machine: librdkafka's mock cluster (the embedded default) or
Apache Kafka itself (``kind="apache-kafka"``, ``eos.tools.servers.apache_kafka``).

Both publish the same state file under the data directory (``broker.json``: ``bootstrap``,
``pid``, ``topics``, and for Apache Kafka ``kind`` and the client user's ``client`` settings),
which is how every client on this machine finds the broker (``eos.core.bootstrap``). The file
holds a password when the broker has one, so only this user can read it.

The embedded default:

The mock cluster lives exactly as long as the client that created it, so ``start`` spawns a
detached process that owns it and publishes its bootstrap address in a state file under the
data directory; every other client (planner, Spark reader, producer, tests) connects over TCP.

Topics named at start are created with the partitions asked for (``NAME:PARTITIONS``; the
mock's default is 4). The mock keeps at most 5 MiB per partition, so a topic that must hold more
needs more partitions (``eos.tools.servers.mock_cluster``); any other topic is auto-created on
first use.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eos.core.config import data_dir
from eos.core.errors import BrokerUnavailable, ConfigError
from eos.core.kafka import broker_state_path, local_broker, reachable, redact
from eos.core.processes import alive
from eos.tools.servers import apache_kafka
from eos.tools.servers.mock_cluster import DEFAULT_PARTITIONS, MockCluster

START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create at start: ``NAME`` or ``NAME:PARTITIONS``.

    Without a count the topic gets the mock's default (4), as a topic auto-created on first use
    does, so a running broker without it is fine. A Kafka topic name cannot contain ``:``, so
    the suffix is unambiguous.
    """

    name: str
    partitions: int | None = None

    @classmethod
    def parse(cls, text: str | TopicSpec) -> TopicSpec:
        if isinstance(text, TopicSpec):
            return text
        name, sep, count = text.partition(":")
        if not name or (sep and (not count.isdigit() or int(count) < 1)):
            raise ConfigError(f"topic {text!r}: expected NAME or NAME:PARTITIONS (at least 1)")
        return cls(name, int(count) if sep else None)

    @property
    def created_with(self) -> int:
        return self.partitions or DEFAULT_PARTITIONS

    def __str__(self) -> str:
        return self.name if self.partitions is None else f"{self.name}:{self.partitions}"


def serve(state_file: Path, topics: Sequence[TopicSpec]) -> None:
    """Own a mock cluster until SIGTERM; the state file exists exactly while it serves."""
    cluster = MockCluster(brokers=1)
    try:
        for topic in topics:
            cluster.create_topic(topic.name, topic.created_with)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        state = {
            "bootstrap": cluster.bootstrap,
            "pid": os.getpid(),
            "started_at": time.time(),
            "topics": {topic.name: topic.created_with for topic in topics},
        }
        publish(state_file, state)
        try:
            while not stop.is_set():
                cluster.serve(500)
        finally:
            state_file.unlink(missing_ok=True)
    finally:
        cluster.close()


MOCK = "mock"
KINDS = (MOCK, apache_kafka.KIND)


def start(topics: Iterable[str | TopicSpec] = (), base: Path | None = None,
          kind: str = MOCK) -> dict[str, Any]:
    """Start a broker of ``kind`` in the background unless one runs; return its state.

    ``topics`` (``NAME`` or ``NAME:PARTITIONS``) are created at start. A broker already running
    is returned as it is (a plain ``NAME`` is auto-created on first use), unless it lacks a
    topic asked for with a partition count, or has it with another count: the mock cannot add
    partitions, so that is an error (stop it first).
    """
    base = base or data_dir()
    base.mkdir(parents=True, exist_ok=True)
    specs = [TopicSpec.parse(t) for t in topics]
    existing = local_broker(base)
    if existing is not None:
        if existing.get("kind", MOCK) != kind:
            raise ConfigError(f"a {existing.get('kind', MOCK)} broker already runs at "
                              f"{existing['bootstrap']}; stop it first (`eos broker stop`)")
        _check_topics(existing, specs)
        return existing
    path = broker_state_path(base)
    path.unlink(missing_ok=True)
    if kind == apache_kafka.KIND:
        return _start_apache_kafka(base, specs)
    if kind != MOCK:
        raise ConfigError(f"unknown broker kind {kind!r}; one of {', '.join(KINDS)}")
    log = open(base / "broker.log", "ab")  # noqa: SIM115 - handed to the child process
    cmd = [sys.executable, "-m", "eos.tools.servers.broker", "--state", str(path)]
    for topic in specs:
        cmd += ["--topic", str(topic)]
    child = subprocess.Popen(
        cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        state = local_broker(base)
        if state is not None and state["pid"] == child.pid:
            return state
        if child.poll() is not None:
            raise BrokerUnavailable(f"embedded broker exited with code {child.returncode}; "
                                    f"see {log.name}")
        time.sleep(0.1)
    child.kill()
    raise BrokerUnavailable(f"embedded broker did not start within {START_TIMEOUT_S:.0f}s; "
                            f"see {log.name}")


def _start_apache_kafka(base: Path, specs: list[TopicSpec]) -> dict[str, Any]:
    """Apache Kafka under ``base/apache-kafka``, its state published once it serves."""
    _process, state = apache_kafka.start_broker(
        base / "apache-kafka", [(t.name, t.created_with) for t in specs])
    state["topics"] = {t.name: t.created_with for t in specs}
    publish(broker_state_path(base), state)
    return state


def publish(path: Path, state: dict[str, Any]) -> None:
    """Write the state file atomically, readable by this user alone (it may hold a password)."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(state, handle)
    tmp.replace(path)


def _check_topics(state: dict[str, Any], wanted: list[TopicSpec]) -> None:
    """Refuse a running broker without a topic asked for with a partition count."""
    have = state.get("topics") or {}
    if isinstance(have, list):  # a broker started by an older version: names only
        have = dict.fromkeys(have, DEFAULT_PARTITIONS)
    for topic in wanted:
        if topic.partitions is not None and have.get(topic.name) != topic.partitions:
            found = (f"{have[topic.name]} partitions" if topic.name in have
                     else "no such topic created at start")
            raise ConfigError(f"the embedded broker at {state['bootstrap']} is already running "
                           f"without topic {topic} ({found}); stop it first "
                           "(`eos broker stop`)")


def stop(base: Path | None = None, timeout: float = 30.0) -> bool:
    """Stop the broker eos started; True if one was running. Leaves no process behind (a
    broker that does not shut down within ``timeout`` is killed)."""
    state = local_broker(base)
    if state is None:
        broker_state_path(base).unlink(missing_ok=True)
        return False
    pid = int(state["pid"])
    from eos.core.kafka import forget_clients

    forget_clients(state["bootstrap"])  # kept clients would reconnect to it, and log, forever
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        _reap(pid)
    broker_state_path(base).unlink(missing_ok=True)
    home = Path(state["home"]) if state.get("home") else None
    if home is not None and home == (base or data_dir()) / "apache-kafka":
        shutil.rmtree(home, ignore_errors=True)  # Apache Kafka's logs: nothing survives a stop
    return True


def _reap(pid: int) -> None:
    """Collect the exit status when the broker is our own child, so it is not left a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def status(base: Path | None = None) -> dict[str, Any] | None:
    """The running broker's state as it may be shown (its client password as ``***``)."""
    state = local_broker(base)
    if state is None:
        return None
    shown = {**state, "reachable": reachable(state["bootstrap"])}
    if "client" in shown:
        shown["client"] = redact(shown["client"])
    return shown


def _main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m eos.tools.servers.broker")
    parser.add_argument("--state", required=True, type=Path)
    parser.add_argument("--topic", action="append", default=[], type=TopicSpec.parse)
    args = parser.parse_args(argv)
    serve(args.state, args.topic)


if __name__ == "__main__":
    _main(sys.argv[1:])
