"""Named fault points for crash and race testing: ``EOS_FAULTS=point[:times|:fail|:wait],...``.

Off by default. Three kinds of fault:

- ``point`` or ``point:times``: the process kills itself with SIGKILL, the way a crash or an OOM
  kill would: no ``finally`` blocks, no cleanup. ``times`` counts hits across processes (a
  counter file under ``EOS_FAULTS_DIR``), so "crash once, then succeed on retry" works across
  Airflow task attempts and spark-submits.
- ``point:fail``: the first process to reach the point raises ``InjectedFault`` (a transient
  error), once across processes: what a retry policy must absorb (a broker blip, a lost race).
- ``point:wait``: a barrier instead of a crash. Each process that reaches the point waits until
  ``EOS_BARRIER_PARTIES`` (default 2) processes have reached it as often as it has, then all go
  on together: two attempts of one step released at the same instant, the race a zombie and its
  retry can produce. With ``EOS_BARRIER_STAGGER_MS=D`` the k-th process to arrive goes on
  ``(k-1)*D`` ms after the barrier opens: every attempt has checked before any writes, but the
  later ones write after the first has committed (a zombie that checked long ago). A barrier that
  is not complete within ``EOS_BARRIER_TIMEOUT_S`` (default 60) lets the process go on alone, so
  a test that expected a race sees none and fails its assertion instead of hanging.
"""

from __future__ import annotations

import os
import signal
import time
from functools import cache
from pathlib import Path

POINTS = (
    "begin.before_log",  # no plan found for the epoch; the fenced plan append is next
    "begin.after_log",  # plan logged, begin has not returned
    "precommit.before_write",  # Spark computed the epoch, nothing staged yet
    "precommit.mid_read",  # inside a Spark task, after its first batch was read
    "precommit.after_write",  # staged in Delta, the Spark app has not exited
    "commit.after_seal",  # N sealed in staging (abort and rewind now refused), no sink written
    "commit.between_sinks",  # a sink committed epoch N, the next sink not yet
    "commit.before_checkpoint",  # every sink holds N, the checkpoint row not yet appended
    "commit.after_checkpoint",  # checkpoint appended, the task has not reported success
    "sink.before_write",  # a sink checked its marker (< N) and is about to write N
    "sink.kafka.before_write",  # a Kafka sink fenced earlier producers; its transaction is next
    "sink.kafka.in_transaction",  # a Kafka sink produced and flushed N, not yet committed
    "checkpoint.before_write",  # the checkpoint check (< N) passed, the append is next
    "rewind.before_log",  # a rewind was planned and checked, its start not yet logged
    "rewind.after_log",  # the rewind's start is logged, no table restored yet
    "rewind.after_fence",  # staging fenced (in-flight precommits superseded), nothing restored
    "rewind.between_tables",  # one table restored (sink, staging), the next not yet
    "rewind.before_checkpoints",  # sinks and staging restored, the checkpoint table not yet
    "rewind.before_done",  # every table restored, the rewind not yet logged as finished
)
WAIT = "wait"
FAIL = "fail"
SETTINGS = ("EOS_FAULTS", "EOS_FAULTS_DIR", "EOS_BARRIER_PARTIES", "EOS_BARRIER_TIMEOUT_S",
            "EOS_BARRIER_STAGGER_MS")


@cache
def _armed() -> dict[str, str]:
    armed = {}
    for item in filter(None, (s.strip() for s in os.environ.get("EOS_FAULTS", "").split(","))):
        point, _, how = item.partition(":")
        if point not in POINTS:
            raise ValueError(f"EOS_FAULTS names unknown fault point '{point}'; known: {POINTS}")
        if how not in ("", WAIT, FAIL) and not how.isdigit():
            raise ValueError(f"EOS_FAULTS: '{item}' must be point, point:times, point:fail or "
                             "point:wait")
        armed[point] = how or "1"
    return armed


def _faults_dir() -> Path:
    from eos.core.config import data_dir

    base = Path(os.environ.get("EOS_FAULTS_DIR") or data_dir() / "faults")
    base.mkdir(parents=True, exist_ok=True)
    return base


def settings() -> dict[str, str]:
    """This process's fault settings, for code that runs elsewhere: Spark executors on a Connect
    server do not inherit the client's environment, so the reader carries them in its options."""
    found = {k: os.environ[k] for k in SETTINGS if k in os.environ}
    if found.get("EOS_FAULTS"):
        found["EOS_FAULTS_DIR"] = str(_faults_dir())  # resolved here: executors may lack it
    return found


def adopt(given: dict[str, str]) -> None:
    """Arm exactly ``given`` in this process (a reused Spark Python worker must forget the
    previous task's faults)."""
    for key in SETTINGS:
        if key in given:
            os.environ[key] = given[key]
        else:
            os.environ.pop(key, None)
    _armed.cache_clear()


_waited: dict[str, int] = {}


def hit(point: str) -> None:
    """Crash (or wait at the barrier) here if ``point`` is armed."""
    how = _armed().get(point)
    if how is None:
        return
    if how == WAIT:
        _barrier(point)
        return
    counter = _faults_dir() / f"{point}.hits"
    done = len(counter.read_text()) if counter.exists() else 0
    if done >= (1 if how == FAIL else int(how)):
        return
    with counter.open("a") as f:
        f.write("x")
    if how == FAIL:
        from eos.core.errors import InjectedFault

        raise InjectedFault(f"fault injected at {point} (EOS_FAULTS); a retry will succeed")
    os.kill(os.getpid(), signal.SIGKILL)


def _barrier(point: str) -> None:
    """Wait until every party has reached ``point`` as many times as this process has."""
    parties = int(os.environ.get("EOS_BARRIER_PARTIES", "2"))
    timeout = float(os.environ.get("EOS_BARRIER_TIMEOUT_S", "60"))
    generation = _waited.get(point, 0) + 1
    _waited[point] = generation
    stagger_s = float(os.environ.get("EOS_BARRIER_STAGGER_MS", "0")) / 1000
    arrivals = _faults_dir() / f"{point}.arrivals"
    with arrivals.open("a") as f:  # one byte per arrival; O_APPEND writes do not interleave
        f.write("x")
    rank = arrivals.stat().st_size - parties * (generation - 1)  # 1 for the first to arrive
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(arrivals.read_text()) >= parties * generation:
            break
        time.sleep(0.005)
    time.sleep(max(0, rank - 1) * stagger_s)
