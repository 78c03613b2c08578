"""A Spark standalone cluster on this machine, from the pyspark wheel: a master and N workers,
separate JVMs (``spark-class ...deploy.master.Master`` / ``...deploy.worker.Worker``), and the
Spark Connect server (``eos.tools.servers.spark_server``) running on it as the cluster's
application.

It is what a deployment that outgrew one process looks like, small enough for a test: the
pipeline's reads, aggregation and staging writes run in executors the workers launch, in JVMs
and Python workers of their own, with no disk shared with the driver (tables on an object
store: ``eos.core.storage``). Sized for a 2-core machine: one core and ``worker_memory`` each.

Every listener binds 127.0.0.1 (``SPARK_LOCAL_IP``); RPC requires a shared secret
(``spark.authenticate``), generated once into an owner-only file: the master and workers get
it in their environment (``_SPARK_AUTH_SECRET``), the Connect server's driver from an
owner-only properties file (``connect_properties``); never on a command line. Spark redacts it
wherever it shows conf; a Connect client could read it back, but such a client holds the
server's token and may run code on the executors anyway.

The workers pass their environment on to the executors they launch, and the executors to their
Python workers: that is how the ``AWS_*`` credentials of the store reach the staging writers
(docs/deploying.md, "Spark").
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from eos.compute.spark import submit_env
from eos.core.config import data_dir
from eos.core.errors import ComputeNotStarted
from eos.core.processes import alive

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DAEMON_SECRET_ENV = "_SPARK_AUTH_SECRET"
START_TIMEOUT_S = 90.0


def home(base: Path | None = None) -> Path:
    return (base or data_dir()) / "spark-cluster"


def _state_path(base: Path | None) -> Path:
    return home(base) / "state.json"


def spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _secret(directory: Path) -> str:
    path = directory / "secret"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
    return path.read_text().strip()


def daemon_env() -> dict[str, str]:
    """The environment of every JVM of the cluster: loopback, this interpreter for the Python
    workers (and, inherited, whatever credentials the caller's environment has)."""
    import pyspark

    env = submit_env()
    env.update({"SPARK_HOME": str(Path(pyspark.__file__).parent), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_NO_DAEMONIZE": "1"})
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> int:
    with log.open("ab") as out:
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    return child.pid


def _wait_for(predicate: Any, what: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise ComputeNotStarted(f"the Spark cluster's {what} did not come up within "
                            f"{START_TIMEOUT_S:.0f} s; see {log}")


def _registered_workers(log: Path) -> int:
    try:
        return log.read_text(errors="replace").count("Registering worker")
    except OSError:
        return 0


def start(base: Path | None = None, workers: int = 2, worker_memory: str = "1g"
          ) -> dict[str, Any]:
    """Start a master and ``workers`` workers (one core each); returns the state, with the
    ``master`` URL the Connect server is started against (``connect_conf``)."""
    running = status(base)
    if running is not None:
        return running
    directory = home(base)
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    properties = directory / "spark-defaults.conf"
    properties.write_text("spark.authenticate true\n")
    # The daemons read the secret from their environment (they ignore the secret file); the
    # Connect server's driver from the file (``connect_conf``): never a command line.
    env = {**daemon_env(), DAEMON_SECRET_ENV: _secret(directory)}
    port = _free_port()
    master_log = directory / "master.log"
    master_pid = _spawn([spark_class(), MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port),
                         "--webui-port", str(_free_port()), "--properties-file", str(properties)],
                        env, master_log)
    master = f"spark://127.0.0.1:{port}"
    state: dict[str, Any] = {"master": master, "pids": [master_pid], "workers": workers,
                             "logs": [str(master_log)], "started_at": time.time()}
    _write_state(base, state)
    try:
        _wait_for(lambda: _port_open(port), "master", master_log)
        for n in range(workers):
            log = directory / f"worker-{n}.log"
            work = directory / f"work-{n}"
            work.mkdir(exist_ok=True)
            state["pids"].append(_spawn(
                [spark_class(), WORKER_CLASS, master, "--host", "127.0.0.1", "--cores", "1",
                 "--memory", worker_memory, "--webui-port", str(_free_port()), "--work-dir",
                 str(work), "--properties-file", str(properties)], env, log))
            state["logs"].append(str(log))
            _write_state(base, state)
        _wait_for(lambda: _registered_workers(master_log) >= workers, "workers", master_log)
    except ComputeNotStarted:
        stop(base)
        raise
    return state


def connect_properties(base: Path | None = None) -> Path:
    """An owner-only properties file giving the Connect server's driver the cluster's secret
    (``spark-submit --properties-file``: a standalone driver reads it from its conf only, and
    a command line is visible to every local user)."""
    directory = home(base)
    path = directory / "connect.conf"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(f"spark.authenticate true\nspark.authenticate.secret "
                         f"{_secret(directory)}\n")
    return path


def connect_conf(state: dict[str, Any], executor_memory: str = "640m") -> dict[str, str]:
    """The Connect server's settings to run on this cluster: one one-core executor per worker
    (the cluster's only application takes every core); the secret comes from
    ``connect_properties``."""
    return {"spark.executor.cores": "1",
            "spark.cores.max": str(state["workers"]), "spark.executor.memory": executor_memory,
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s"}


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _write_state(base: Path | None, state: dict[str, Any]) -> None:
    path = _state_path(base)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(path)


def status(base: Path | None = None) -> dict[str, Any] | None:
    try:
        state = json.loads(_state_path(base).read_text())
    except (OSError, ValueError):
        return None
    return state if all(alive(int(pid)) for pid in state["pids"]) else None


def stop(base: Path | None = None, timeout: float = 20.0) -> bool:
    """Stop every JVM of the cluster (workers first, each with its process group: the
    executors they launched and their Python workers); True if any was running."""
    try:
        pids = [int(p) for p in json.loads(_state_path(base).read_text())["pids"]]
    except (OSError, ValueError, KeyError):
        return False
    was = any(alive(p) for p in pids)
    for pid in reversed(pids):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            deadline = time.monotonic() + timeout
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not alive(pid):
                break
    _state_path(base).unlink(missing_ok=True)
    return was
