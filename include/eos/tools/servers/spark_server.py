"""The Spark Connect server ``eos spark start | stop | status`` supervises on this machine.

``SparkConnectServer`` from the pyspark wheel, run with ``spark-submit --class`` in the
background, bound to 127.0.0.1, its token generated once and kept in
``<data dir>/spark-connect.token`` (mode 0600). The token reaches the server through its
environment (``SPARK_CONNECT_AUTHENTICATE_TOKEN``), never its command line (``ps`` shows that),
and is never logged or printed. A state file says where it listens (clients read it:
``eos.compute.connect.resolve_endpoint``); its log is ``<data dir>/spark-connect.log``.
Abandoned sessions (a client that died) expire after ``session_timeout``; executions whose
client went away are interrupted after ``detached_timeout``.

The driver's own listeners (its RPC endpoint, ``spark.driver.port``, and its block manager,
which binds where the driver does) are on 127.0.0.1 too when the executors run on this machine
(``local[N]``, or a standalone master on loopback: ``eos.tools.servers.spark_cluster``): left to
Spark, they bind the address of the machine's host name (a non-loopback interface when the
name resolves to loopback), reachable by every host that reaches the machine. With a master
elsewhere the executors must reach the driver, so Spark's defaults stay (``--conf`` sets
``spark.driver.bindAddress`` and ``spark.driver.host`` for such a deployment).
"""

from __future__ import annotations

import contextlib
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

from eos.compute.connect import (
    CONNECT_MARKS,
    DEFAULT_PORT,
    Endpoint,
    fail_fast,
    reachable,
    read_state,
    read_token,
    state_path,
    stop_session,
    token_path,
)
from eos.compute.spark import spark_submit_binary, submit_env, worker_python
from eos.core.config import data_dir
from eos.core.errors import ComputeNotStarted
from eos.core.processes import alive, group_members, restored_environ

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"  # where the server reads its token
START_TIMEOUT_S = 180.0


def log_path(base: Path | None = None) -> Path:
    return (base or data_dir()) / "spark-connect.log"


def _ensure_token(base: Path) -> str:
    """The deployment's token: generated once, owner-only, reused across restarts (so Airflow's
    connection stays valid)."""
    path = token_path(base)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    os.chmod(path, 0o600)
    return read_token(base)


LOOPBACK = "127.0.0.1"
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


def on_this_machine(master: str) -> bool:
    """Whether every executor of ``master`` runs on this machine, so that the driver need
    listen on loopback only: ``local``, ``local[N]``, ``local-cluster[...]``, or a standalone
    master (``spark://``, one or several) on a loopback address."""
    if master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False
    hosts = [part.rsplit(":", 1)[0] if not part.endswith("]") else part
             for part in master[len("spark://"):].split(",")]
    return all(host in _LOOPBACK_HOSTS or host.startswith("127.") for host in hosts)


def server_command(port: int, master: str, driver_memory: str, host: str,
                   session_timeout: str, detached_timeout: str,
                   conf: dict[str, str]) -> list[str]:
    """The ``spark-submit`` command of the server; ``conf`` over every setting here."""
    # The driver's RPC endpoint and its block manager (bound where the driver binds) on
    # loopback when every executor is on this machine (module docstring).
    loopback = {"spark.driver.bindAddress": LOOPBACK, "spark.driver.host": LOOPBACK} \
        if on_this_machine(master) else {}
    settings = {
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.session.manager.defaultSessionTimeout": session_timeout,
        "spark.connect.execute.manager.detachedTimeout": detached_timeout,
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.pyspark.python": worker_python(),
        **loopback,
        **conf,
    }
    cmd = [spark_submit_binary(), "--master", master, "--driver-memory", driver_memory,
           "--name", "eos-spark-connect", "--class", SERVER_CLASS]
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, "spark-internal"]


def _server_env(token: str) -> dict[str, str]:
    import pyspark

    env = submit_env()
    env[TOKEN_ENV] = token
    env.setdefault("SPARK_HOME", str(Path(pyspark.__file__).parent))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def healthy(endpoint: Endpoint) -> bool:
    """An authenticated round trip: open a session, run a trivial query, release it."""
    if not reachable(endpoint):
        return False
    from pyspark.sql import SparkSession

    with restored_environ(CONNECT_MARKS):
        try:
            spark = SparkSession.builder.remote(endpoint.url()).create()
            try:
                fail_fast(spark)
                return spark.range(1).count() == 1
            finally:
                stop_session(spark)
        except Exception:
            return False


def start(base: Path | None = None, port: int = DEFAULT_PORT, master: str | None = None,
          driver_memory: str = "4g", host: str = "127.0.0.1", session_timeout: str = "15min",
          detached_timeout: str = "2min", conf: dict[str, str] | None = None,
          env: dict[str, str] | None = None, properties: Path | None = None
          ) -> dict[str, Any]:
    """Start the server in the background unless one runs for this data dir; wait until it
    answers an authenticated query; return its state (no token in it). ``port=0``: a free one.
    ``env`` adds to its environment; ``properties`` is a Spark properties file (a cluster's RPC
    secret: ``eos.tools.servers.spark_cluster.connect_properties``)."""
    base = base or data_dir()
    base.mkdir(parents=True, exist_ok=True)
    existing = read_state(base)
    if existing is not None:
        return existing
    token = _ensure_token(base)
    port = port or _free_port()
    master = master or os.environ.get("EOS_SPARK_MASTER", "local[2]")
    log = log_path(base)
    cmd = server_command(port, master, driver_memory, host, session_timeout, detached_timeout,
                         conf or {})
    if properties is not None:
        cmd[1:1] = ["--properties-file", str(properties)]
    # Whatever else of the JVM asks Spark for "this machine's address" gets loopback too (as
    # the standalone cluster's daemons do), unless the caller's environment says otherwise.
    local_ip = {"SPARK_LOCAL_IP": LOOPBACK} if on_this_machine(master) else {}
    with log.open("ab") as out:
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL,
                                 env={**local_ip, **_server_env(token), **(env or {})},
                                 start_new_session=True)  # its own group: stop kills the tree
    state = {"host": "127.0.0.1" if host in ("0.0.0.0", "::") else host, "port": port,
             "pid": child.pid, "master": master, "started_at": time.time(), "log": str(log),
             "token_file": str(token_path(base))}
    endpoint = Endpoint(state["host"], port, token, False, "eos spark start")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise ComputeNotStarted(f"Spark Connect server exited with code {child.returncode} "
                           f"(port {port} in use?); see {log}")
        if healthy(endpoint):
            tmp = state_path(base).with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
            tmp.replace(state_path(base))
            return state
        time.sleep(0.5)
    _kill_group(child.pid, 5.0)
    raise ComputeNotStarted(f"Spark Connect server did not answer within "
                            f"{START_TIMEOUT_S:.0f}s; see {log}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_group(pid: int, timeout: float) -> None:
    """SIGTERM the server's process group (JVM and its Python workers), SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    # The JVM's Python workers are in the group too: wait until every member is gone.
    deadline = time.monotonic() + 30
    while (alive(pid) or group_members(pid)) and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        time.sleep(0.05)


def stop(base: Path | None = None, timeout: float = 20.0) -> bool:
    """Stop the server; True if one was running. Leaves no process behind."""
    state = read_state(base)
    state_path(base).unlink(missing_ok=True)
    if state is None:
        return False
    _kill_group(int(state["pid"]), timeout)
    return True


def status(base: Path | None = None) -> dict[str, Any] | None:
    state = read_state(base)
    if state is None:
        return None
    endpoint = Endpoint(state["host"], int(state["port"]), read_token(base), False, "status")
    return {**state, "address": endpoint.address, "healthy": healthy(endpoint)}


