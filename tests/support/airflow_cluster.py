"""Airflow as a deployment on several machines runs it, on one host for tests: PostgreSQL as the
metadata database, CeleryExecutor with Redis as broker and result backend, the scheduler, DAG
processor, API server and triggerer as separate processes sharing a "central" AIRFLOW_HOME,
and Celery workers (``airflow celery worker``) that each have a home, a working directory, a
DAGs folder, a pipelines directory, a data directory and a logs folder of their own: nothing
on disk is shared between a worker and any other process. What reaches a worker is what a
remote machine would get: environment (Airflow settings, connections as ``AIRFLOW_CONN_*``,
``KAFKA_BOOTSTRAP_SERVERS``) and TCP (PostgreSQL, Redis, the API server, the broker, Spark
Connect, the object store).

Every process runs in a process group of its own, so a test can SIGKILL one worker, the
Celery worker and every task it forked, the way a machine dies. Nothing here imports
``airflow``: every Airflow process is a child.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from eos.airflow.environment import airflow_env
from eos.core.config import PipelineConfig

from support.airflow_standalone import (
    AIRFLOW,
    TESTS_DIR,
    seed_passwords,
    stop_process_tree,
    wait_for,
)
from support.harness import free_port
from support.postgres import PostgresServer
from support.redis_server import RedisServer

__all__ = ["AirflowCluster", "Worker", "airflow_cluster", "dag_file_text", "worker_hostname"]

CENTRAL = ("api-server", "scheduler", "dag-processor", "triggerer")
WORKER_NAME_ENV = "EOS_TEST_WORKER_NAME"
STARTUP_TIMEOUT_S = 300.0
MIGRATE_TIMEOUT_S = 300.0
# Airflow's settings for a quick test of a dead worker (defaults: 300 s and 10 s): a task whose
# supervisor stopped heartbeating for 20 s is failed and, with retries left, retried.
HEARTBEAT_SETTINGS = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "3",
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
}


# A deployment's local settings (docs/airflow-executors.md): the preload in the processes that
# fork the tasks.
LOCAL_SETTINGS = ("from eos.airflow.preload import preload_in_scheduler\n\n"
                  "preload_in_scheduler()\n")


def worker_hostname() -> str:
    """``[core] hostname_callable`` of the test's workers: two "machines" on one host need
    names of their own, which the task instance records as its ``hostname``."""
    return os.environ[WORKER_NAME_ENV]


def dag_file_text() -> str:
    """A user's DAG file, the documented lines (whichever this version of eos offers)."""
    import eos.airflow

    if hasattr(eos.airflow, "pipeline_dags"):
        return "from eos.airflow import pipeline_dags\n\nglobals().update(pipeline_dags())\n"
    return ("from eos.airflow.dag_factory import build_dags\n\n"
            "globals().update(build_dags())\n")


@dataclass
class Worker:
    """One Celery worker, the only process of its "machine"."""

    name: str
    home: Path
    env: dict[str, str] = field(repr=False)
    proc: subprocess.Popen | None = None

    @property
    def faults_dir(self) -> Path:
        return Path(self.env["EOS_FAULTS_DIR"])

    @property
    def logs(self) -> Path:
        return Path(self.env["AIRFLOW__LOGGING__BASE_LOG_FOLDER"])

    def start(self, concurrency: int) -> None:
        with (self.home / "worker.out").open("ab") as out:
            self.proc = subprocess.Popen(
                [str(AIRFLOW), "celery", "worker", "--celery-hostname", f"{self.name}@%h",
                 "--concurrency", str(concurrency), "--skip-serve-logs"],
                env=self.env, cwd=self.home / "work", stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)

    def kill(self) -> list[int]:
        """SIGKILL this machine: the worker's process group and every descendant (a task's
        supervisor and task process); returns the pids killed."""
        assert self.proc is not None
        tree = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(True)]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for process in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        self.proc.wait(timeout=30)
        psutil.wait_procs(tree, timeout=30)
        return [process.pid for process in tree]

    def tail(self, chars: int = 4000) -> str:
        with contextlib.suppress(OSError):
            return (self.home / "worker.out").read_text(errors="replace")[-chars:]
        return ""


@dataclass
class AirflowCluster:
    home: Path
    env: dict[str, str] = field(repr=False)
    base: str
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    workers: dict[str, Worker] = field(default_factory=dict)
    token: str = field(default="", repr=False)
    password: str = field(default="", repr=False)

    def problem(self) -> str | None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                return f"airflow {name} exited with {proc.returncode}\n{self.tail(name)}"
        return None

    def tail(self, name: str, chars: int = 4000) -> str:
        with contextlib.suppress(OSError):
            return (self.home / f"{name}.out").read_text(errors="replace")[-chars:]
        return ""

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        response = httpx.request(method, f"{self.base}{path}", headers=headers, timeout=60,
                                 **kwargs)
        response.raise_for_status()
        return response.json() if response.content else None

    def run_cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(AIRFLOW), *args], env=self.env, capture_output=True,
                              text=True, timeout=MIGRATE_TIMEOUT_S, check=False, cwd=self.home)

    def start(self, name: str) -> None:
        with (self.home / f"{name}.out").open("ab") as out:
            self.procs[name] = subprocess.Popen(
                [str(AIRFLOW), name], env=self.env, cwd=self.home, stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _shared_settings(postgres: PostgresServer, redis: RedisServer, port: int,
                     connections: dict[str, str]) -> dict[str, str]:
    """What every component and worker of one deployment must agree on: the metadata DB, the
    Celery broker and result backend, the secrets that sign tokens and encrypt connections,
    where the Execution API is, and the connections."""
    return {
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.sqlalchemy_url(),
        "AIRFLOW__CELERY__BROKER_URL": redis.url(0),
        "AIRFLOW__CELERY__RESULT_BACKEND": redis.url(1),
        "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__CORE__PARALLELISM": "8",
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "PYSPARK_PYTHON": sys.executable,
        **HEARTBEAT_SETTINGS,
        **connections,
    }


def _home(path: Path, configs: list[PipelineConfig]) -> dict[str, str]:
    """A machine's own directories: AIRFLOW_HOME, its DAGs folder holding the DAG file, its
    local settings (the preload), its pipelines directory holding copies of the YAMLs, its
    data, faults and logs folders."""
    for sub in ("dags", "pipelines", "data", "faults", "logs", "work"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    if not any((path / "dags").glob("*.py")):  # eos's own helper may have written one
        (path / "dags" / "eos_pipelines.py").write_text(dag_file_text())
    settings = path / "config" / "airflow_local_settings.py"  # on Airflow's sys.path
    if not settings.exists():
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(LOCAL_SETTINGS)
    for config in configs:
        source = Path(str(config.source_path))
        shutil.copy(source, path / "pipelines" / source.name)
    return {
        "AIRFLOW_HOME": str(path),
        "AIRFLOW__CORE__DAGS_FOLDER": str(path / "dags"),
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(path / "logs"),
        "EOS_PIPELINES_DIR": str(path / "pipelines"),
        "EOS_DATA_DIR": str(path / "data"),
        "EOS_FAULTS_DIR": str(path / "faults"),
    }


def _without_local_services(env: dict[str, str]) -> dict[str, str]:
    """Drop what would let a process find a service through this host's disk or this test's
    own environment instead of its settings (the object store's keys: they come from the
    ``eos_object_store`` connection)."""
    return {key: value for key, value in env.items()
            if not key.startswith("AWS_") and key not in ("EOS_TABLES_BASE",)}


@contextlib.contextmanager
def airflow_cluster(base: Path, configs: list[PipelineConfig], *, postgres: PostgresServer,
                    redis: RedisServer, connections: dict[str, str],
                    worker_env: dict[str, str] | None = None, workers: int = 2,
                    concurrency: int = 2) -> Iterator[AirflowCluster]:
    """The central components and ``workers`` Celery workers for ``configs``; logged in as
    admin; every process stopped afterwards (fails if one survives).

    ``connections``: ``AIRFLOW_CONN_*`` and other settings every process gets;
    ``worker_env``: settings only the workers get (fault points, for instance)."""
    port = free_port()
    shared = _shared_settings(postgres, redis, port, connections)
    central_home = base / "central"
    env = _without_local_services({**airflow_env(configs, central_home, port), **shared,
                                   **_home(central_home, configs)})
    cluster = AirflowCluster(central_home, env, f"http://127.0.0.1:{port}")
    for index in range(1, workers + 1):
        name = f"worker{index}"
        home = base / name
        cluster.workers[name] = Worker(name, home, {
            **env, **_home(home, configs), **(worker_env or {}),
            WORKER_NAME_ENV: name,
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "support.airflow_cluster.worker_hostname",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS_DIR),
                                                        env.get("PYTHONPATH")])),
        })
    try:
        _migrate(cluster)
        cluster.password = seed_passwords(central_home)["admin"]
        for name in CENTRAL:
            cluster.start(name)
        for worker in cluster.workers.values():
            worker.start(concurrency)
        _wait_healthy(cluster)
        yield cluster
    finally:
        leftovers = [left for proc in [*cluster.procs.values(),
                                       *(w.proc for w in cluster.workers.values() if w.proc)]
                     for left in stop_process_tree(proc)]
        assert not leftovers, f"Airflow processes survived the teardown: {leftovers}"


def _migrate(cluster: AirflowCluster) -> None:
    done = cluster.run_cli("db", "migrate")
    assert done.returncode == 0, f"airflow db migrate failed:\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-3000:]}"


def _wait_healthy(cluster: AirflowCluster) -> None:
    """The API server answers, the scheduler, DAG processor and triggerer heartbeat, and both
    workers answer a Celery ping; then a token for admin."""

    def healthy() -> bool:
        health = httpx.get(f"{cluster.base}/api/v2/monitor/health", timeout=10).json()
        return all(health.get(part, {}).get("status") == "healthy"
                   for part in ("metadatabase", "scheduler", "dag_processor", "triggerer"))

    def workers_up() -> str | None:
        for worker in cluster.workers.values():
            if worker.proc is not None and worker.proc.poll() is not None:
                return f"{worker.name} exited with {worker.proc.returncode}\n{worker.tail()}"
        return cluster.problem()

    wait_for("the scheduler, DAG processor and triggerer to report healthy", healthy,
             STARTUP_TIMEOUT_S, workers_up)
    wait_for("both Celery workers to be ready",
             lambda: all("ready." in w.tail(100_000) for w in cluster.workers.values()),
             STARTUP_TIMEOUT_S, workers_up)
    password = cluster.password

    def login() -> str:
        response = httpx.post(f"{cluster.base}/auth/token", timeout=30,
                              json={"username": "admin", "password": password})
        response.raise_for_status()
        return str(response.json()["access_token"])

    cluster.token = wait_for("a token for admin", login, 60, cluster.problem)
