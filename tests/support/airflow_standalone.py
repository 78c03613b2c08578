"""A real ``airflow standalone`` for tests (tests/integration/airflow/test_airflow_scheduler.py,
tests/integration/airflow/test_epochs_view.py): started in a process group of its own with a
throwaway AIRFLOW_HOME (SQLite), the project's dags/ and plugins/ folders and the environment
``eos ui`` gives Airflow (``eos.airflow.environment.airflow_env``); helpers to read it through
its REST API as a person's UI would, and to backfill a pipeline's DAG. Nothing here imports
``airflow``: every Airflow process is a child.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from eos.airflow.environment import PASSWORDS_FILE, airflow_env
from eos.core.config import PipelineConfig
from eos.core.phaselog import PHASE_KEYS

from support.harness import free_port

EPOCH_PHASES = ("begin", "precommit", "commit", "abort")  # their lines share PHASE_KEYS

RUNS = 3
# eos.core.faults: SIGKILL after the first sink, before the rest
COMMIT_FAULT = "commit.between_sinks"
SCHEDULE = "0 0 1 * *"  # monthly: the backfill's logical dates are the first of a month
STARTUP_TIMEOUT_S = 420.0  # db migrate + four components on a loaded 2-core machine
PARSE_TIMEOUT_S = 300.0
BACKFILL_TIMEOUT_S = 1200.0
CLI_TIMEOUT_S = 300.0
POLL_S = 3.0
AIRFLOW = Path(sys.executable).parent / "airflow"
TESTS_DIR = Path(__file__).resolve().parents[1]  # holds the support package
# DagScopedAuthManager's grants: {"username": ["dag_id", ...]}; a user not named may use any DAG.
DAG_GRANTS_ENV = "EOS_TEST_DAG_GRANTS"
DAG_SCOPED_AUTH_MANAGER = "support.airflow_standalone.DagScopedAuthManager"
# ``airflow standalone`` replaces any ``[core] auth_manager`` with SimpleAuthManager before it
# starts the components; this is the same command keeping the one configured.
STANDALONE_KEEPING_AUTH_MANAGER = """
import os
from airflow.cli.commands.standalone_command import StandaloneCommand
from airflow.configuration import write_default_airflow_configuration_if_needed

class KeepingAuthManager(StandaloneCommand):
    def calculate_env(self):
        wanted = os.environ["AIRFLOW__CORE__AUTH_MANAGER"]
        env = super().calculate_env()
        env["AIRFLOW__CORE__AUTH_MANAGER"] = os.environ["AIRFLOW__CORE__AUTH_MANAGER"] = wanted
        return env

write_default_airflow_configuration_if_needed()  # as `airflow` does: the shared JWT secret
KeepingAuthManager().run()
"""


def __getattr__(name: str) -> Any:
    """``DagScopedAuthManager``, built on first use: Airflow's API server imports it by name
    (``[core] auth_manager``), while the test process, which must not import ``airflow`` before
    support.airflow_home has set AIRFLOW_HOME, never asks for it."""
    if name == "DagScopedAuthManager":
        return _dag_scoped_auth_manager()
    raise AttributeError(name)


def _dag_scoped_auth_manager() -> type:
    """Airflow's SimpleAuthManager (its users, passwords, roles, login and JWTs, unchanged) with
    one addition: a user may be granted some DAGs only. SimpleAuthManager's roles are global
    (a viewer may read every DAG), so per-DAG rules, which FAB or Keycloak managers express as
    permissions on ``DAG:<dag_id>``, need a manager that looks at ``DagDetails.id``; this one
    does, as those do: a DAG not granted is refused for every method, and a request about all
    DAGs (no id) is refused to a user limited to some."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    grants = {user: set(dags) for user, dags in json.loads(os.environ.get(DAG_GRANTS_ENV)
                                                            or "{}").items()}

    class DagScopedAuthManager(SimpleAuthManager):
        def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None,
                              details: Any = None) -> bool:
            allowed = grants.get(user.get_name())
            if allowed is not None and (details is None or details.id not in allowed):
                return False
            return super().is_authorized_dag(method=method, user=user,
                                             access_entity=access_entity, details=details)

    return DagScopedAuthManager

def seed_passwords(home: Path, users: str = "admin:admin") -> dict[str, str]:
    """Write SimpleAuthManager's passwords file before Airflow starts, one generated password
    per user in ``users`` (its ``name:role,...`` setting). The manager keeps a password it
    finds, so the test knows every password without waiting for the API server to write the
    file, and a login that works proves the API server answering is this one."""
    passwords = {entry.split(":")[0]: secrets.token_urlsafe(12)
                 for entry in users.split(",") if entry.strip()}
    path = home / PASSWORDS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(passwords) + "\n")
    path.chmod(0o600)
    return passwords


def wait_for(what: str, check: Callable[[], Any], timeout_s: float,
             alive: Callable[[], str | None] = lambda: None) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        problem = alive()
        if problem:
            pytest.fail(f"while waiting for {what}: {problem}")
        try:
            last = check()
        except (httpx.HTTPError, OSError, ValueError) as error:  # not up yet, or mid-restart
            last = repr(error)
        else:
            if last:
                return last
        time.sleep(POLL_S)
    pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}; last seen: {last!r}")


def first_of_month(year: int, month: int) -> datetime:
    while month < 1:
        year, month = year - 1, month + 12
    return datetime(year, month, 1, tzinfo=UTC)


@dataclass
class Airflow:
    """A running ``airflow standalone`` and what a person needs to talk to it."""

    proc: subprocess.Popen
    home: Path
    env: dict[str, str]
    base: str
    output: Path
    password: str = ""  # admin's, generated by the simple auth manager on the first start
    token: str = ""  # a JWT for admin (the REST API's bearer token)
    passwords: dict[str, str] = field(default_factory=dict)  # every user's, generated

    def login(self, username: str) -> str:
        """A JWT for ``username``, from Airflow's own login endpoint (its real password)."""
        response = httpx.post(f"{self.base}/auth/token", timeout=30,
                              json={"username": username, "password": self.passwords[username]})
        response.raise_for_status()
        return response.json()["access_token"]

    def problem(self) -> str | None:
        if self.proc.poll() is not None:
            return f"airflow standalone exited with {self.proc.returncode}\n{self.tail()}"
        return None

    def tail(self, chars: int = 6000) -> str:
        try:
            return self.output.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        response = httpx.request(method, f"{self.base}{path}", headers=headers, timeout=60,
                                 **kwargs)
        response.raise_for_status()
        return response.json() if response.content else None

    def arm_commit_crash(self, armed: bool) -> Path:
        """Let the next commit task crash once between two sinks (or never); the counter file."""
        counter = Path(self.env["EOS_FAULTS_DIR"]) / f"{COMMIT_FAULT}.hits"
        counter.parent.mkdir(parents=True, exist_ok=True)
        counter.unlink(missing_ok=True)
        if not armed:
            counter.write_text("x")  # the one allowed hit is used up: the fault never fires
        return counter

    def run_cli(self, *args: str) -> subprocess.CompletedProcess:
        """Run an ``airflow`` command against this instance (same home, same metadata DB)."""
        return subprocess.run([str(AIRFLOW), *args], env=self.env, capture_output=True,
                              text=True, timeout=CLI_TIMEOUT_S, check=False)

    def cli(self, *args: str) -> str:
        """``run_cli``, asserting success.

        SQLite has one writer at a time; with the scheduler, DAG processor and API server all
        writing, a CLI transaction can still lose the lock after the 60 s busy timeout, so it is
        retried (a command that writes in several transactions needs more: ``create_backfill``).
        """
        for _ in range(3):
            proc = self.run_cli(*args)
            if proc.returncode == 0 or "database is locked" not in proc.stderr + proc.stdout:
                break
        assert proc.returncode == 0, (
            f"airflow {' '.join(args)} failed ({proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
        return proc.stdout


def stop_process_tree(proc: subprocess.Popen) -> list[str]:
    """SIGINT the group (Ctrl-C), then SIGTERM, then SIGKILL; return whatever still lives.

    Descendants are collected first, so a process that left the group (a new session) is
    stopped too: everything here was started by this test.
    """
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for sig, grace_s in ((signal.SIGINT, 30.0), (signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        for process in tree:
            try:
                if process.is_running() and os.getpgid(process.pid) != proc.pid:
                    process.send_signal(sig)
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass
        proc.poll()  # reap the group leader
        _, alive = psutil.wait_procs(tree, timeout=grace_s)
        if not alive:
            break
    proc.wait(timeout=10)
    leftovers = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    return [f"{p.pid} {' '.join(p.cmdline())[:200]}" for p in leftovers]


@contextlib.contextmanager
def running_airflow(home: Path, configs: list[PipelineConfig], data_dir: Path, *,
                    users: str | None = None, dag_grants: dict[str, list[str]] | None = None,
                    extra_env: dict[str, str] | None = None) -> Iterator[Airflow]:
    """``airflow standalone`` for ``configs`` (whose YAMLs share a directory), logged in as admin;
    stopped with everything it started (the test fails if any process survives).

    ``users``: SimpleAuthManager's ``name:role,...`` (default: admin only); ``dag_grants``:
    users limited to some DAGs, through ``DagScopedAuthManager`` instead of SimpleAuthManager
    (and ``STANDALONE_KEEPING_AUTH_MANAGER``, since ``airflow standalone`` would replace it).
    ``extra_env``: set last (bench.dag_runs: its own DAGs folder and the Spark Connect server).
    """
    port = free_port()
    env = airflow_env(configs, home, port)
    env.update({
        # This instance's own settings, whatever the outer environment says (tests/
        # support/airflow_home.py points AIRFLOW_* at another home for the DAG.test() tests).
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        # SQLite allows one writer at a time: wait for the lock up to a minute, not the default
        # five seconds (the scheduler, the DAG processor, the API server and the CLI all write).
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}?timeout=60",
        # Log servers on free ports: another Airflow on this machine may hold the defaults.
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "EOS_PIPELINES_DIR": str(Path(configs[0].source_path).parent),
        "EOS_DATA_DIR": str(data_dir),
        "PYSPARK_PYTHON": sys.executable,
        # One crash of a commit task between two sinks, armed per test (see arm_commit_crash).
        "EOS_FAULTS": f"{COMMIT_FAULT}:1",
        "EOS_FAULTS_DIR": str(home / "faults"),
    })
    for name in ("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS",
                 "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "AIRFLOW__CORE__EXECUTOR",
                 "AIRFLOW__CORE__AUTH_MANAGER", DAG_GRANTS_ENV):
        env.pop(name, None)
    if users:
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = users
    if dag_grants is not None:
        env["AIRFLOW__CORE__AUTH_MANAGER"] = DAG_SCOPED_AUTH_MANAGER
        env[DAG_GRANTS_ENV] = json.dumps(dag_grants)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_DIR),
                                                          env.get("PYTHONPATH")]))
    env.update(extra_env or {})
    instance_passwords = seed_passwords(home, users or "admin:admin")
    output = home / "standalone.out"
    with output.open("wb") as sink:
        command = ([sys.executable, "-c", STANDALONE_KEEPING_AUTH_MANAGER]
                   if dag_grants is not None else [str(AIRFLOW), "standalone"])
        proc = subprocess.Popen(command, env=env, cwd=home, stdout=sink,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    instance = Airflow(proc, home, env, f"http://127.0.0.1:{port}", output)
    instance.passwords = instance_passwords
    instance.password = instance_passwords["admin"]
    try:
        def healthy() -> bool:
            health = httpx.get(f"{instance.base}/api/v2/monitor/health", timeout=10).json()
            return all(health.get(part, {}).get("status") == "healthy"
                       for part in ("metadatabase", "scheduler", "dag_processor"))

        wait_for("the API server, scheduler and DAG processor to report healthy", healthy,
                 STARTUP_TIMEOUT_S, instance.problem)
        instance.token = wait_for("a token for admin", lambda: instance.login("admin"), 60,
                                  instance.problem)
        yield instance
    finally:
        leftovers = stop_process_tree(proc)
        assert not leftovers, f"Airflow processes survived the teardown: {leftovers}"


# ---------------------------------------------------------------------------------------------

def dag_runs(airflow: Airflow, dag_id: str) -> list[dict[str, Any]]:
    runs = airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns",
                       params={"order_by": "logical_date", "limit": 100})["dag_runs"]
    # An asset-triggered run has no logical date: such runs sort by when they were due.
    return sorted(runs, key=lambda run: (run["logical_date"] or run["run_after"],
                                         run["run_after"]))


def task_instance(airflow: Airflow, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
    return airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")


def task_log(airflow: Airflow, dag_id: str, run_id: str, task_id: str) -> list[str]:
    """The lines of a task's last try, as the UI's log view gets them from the API server."""
    ti = task_instance(airflow, dag_id, run_id, task_id)
    content = airflow.api(
        "GET",
        f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{ti['try_number']}",
        params={"full_content": "true"},
    )["content"]
    lines: list[str] = []
    for entry in content:
        if isinstance(entry, dict):
            lines.extend(str(entry.get("event", "")).splitlines())
        else:
            lines.extend(str(entry).splitlines())
    return lines


def phase_line(lines: list[str], phase: str) -> dict[str, str]:
    """The fields of the (last) ``phase=<phase> k=v ...`` line in a log."""
    found = [line[line.index(f"phase={phase} "):] for line in lines if f"phase={phase} " in line]
    assert found, f"no 'phase={phase}' line in the log:\n" + "\n".join(lines[-80:])
    fields = {}
    for token in found[-1].split(" "):
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    if phase in EPOCH_PHASES:  # every epoch phase line starts with the documented keys
        assert list(fields)[1:len(PHASE_KEYS) + 1] == list(PHASE_KEYS), found[-1]
    return fields


def summarize(airflow: Airflow, dag_id: str) -> str:
    """The runs and their task states, for failure messages."""
    lines = []
    for run in dag_runs(airflow, dag_id):
        tis = airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}"
                                 "/taskInstances")["task_instances"]
        states = {ti["task_id"]: ti["state"] for ti in tis}
        lines.append(f"{run['dag_run_id']} {run['run_type']} {run['state']} {states}")
    return "\n".join(lines)


def monthly_dates(count: int) -> list[datetime]:
    """The ``count`` latest fire times of SCHEDULE, the current month's (already past) included.

    With catchup=False the scheduler creates a run for the latest fire time when the DAG is
    unpaused; the backfill already holds a run for that logical date, so the scheduler creates
    none of its own and the backfill's runs are the only ones.
    """
    now = datetime.now(UTC)
    return [first_of_month(now.year, now.month - back) for back in range(count - 1, -1, -1)]


def create_backfill(airflow: Airflow, dag_id: str, *args: str) -> None:
    """``airflow backfill create`` of RUNS runs, whole, on a paused DAG.

    Airflow 3.1 commits the backfill row first, then creates its runs one by one. Under SQLite
    lock contention the command can fail in between (seen in CI twice: the retry met "Another
    backfill is running", its own; once a retry was taken for success with 2 of 3 runs, and
    the scheduler then made the third a scheduled run). So after a failure: a backfill with
    every run is done; a partial one is cancelled and its runs deleted (the DAG is paused, so
    none started), and the create runs again.
    """
    for _ in range(3):
        proc = airflow.run_cli("backfill", "create", *args)
        if proc.returncode == 0:
            return
        made = airflow.api("GET", "/api/v2/backfills", params={"dag_id": dag_id})["backfills"]
        if made and len(dag_runs(airflow, dag_id)) == RUNS:
            return
        for backfill_row in made:
            if backfill_row.get("completed_at") is None:
                airflow.api("PUT", f"/api/v2/backfills/{backfill_row['id']}/cancel")
        for run in dag_runs(airflow, dag_id):
            airflow.api("DELETE", f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}")
    raise AssertionError(f"airflow backfill create {' '.join(args)} failed "
                         f"({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def backfill(airflow: Airflow, config: PipelineConfig, *options: str) -> list[dict[str, Any]]:
    """Wait for the DAG to be parsed, create a backfill of RUNS dates, unpause the DAG, wait.

    Returns the DAG's runs (logical-date order) once RUNS of them succeeded; fails on the first
    failed run, with every run's task states.
    """
    dag_id = config.dag_id

    def parsed() -> bool:
        errors = airflow.api("GET", "/api/v2/importErrors")["import_errors"]
        assert not errors, errors
        return airflow.api("GET", f"/api/v2/dags/{dag_id}")["dag_id"] == dag_id

    wait_for(f"the DAG processor to parse {dag_id}", parsed, PARSE_TIMEOUT_S, airflow.problem)
    dag = airflow.api("GET", f"/api/v2/dags/{dag_id}")
    assert dag["is_paused"], dag  # new DAGs start paused: nothing ran before the backfill
    assert dag["timetable_summary"] == SCHEDULE, dag

    dates = monthly_dates(RUNS)
    # The guide's command (docs/operating.md, "Backfill"): Airflow's defaults (reprocess
    # behaviour "none"), plus ``options``.
    create_backfill(airflow, dag_id, "--dag-id", dag_id, "--from-date", dates[0].isoformat(),
                    "--to-date", dates[-1].isoformat(), *options)
    airflow.cli("dags", "unpause", dag_id)

    def all_done() -> list[dict[str, Any]] | None:
        runs = dag_runs(airflow, dag_id)
        if any(run["state"] == "failed" for run in runs):
            pytest.fail("a run failed:\n" + summarize(airflow, dag_id))
        if len(runs) >= RUNS and all(run["state"] == "success" for run in runs):
            return runs
        return None

    runs = wait_for(f"{RUNS} backfill runs of {dag_id} to succeed", all_done, BACKFILL_TIMEOUT_S,
                    airflow.problem)

    # The scheduler marks a backfill complete in a later loop than its last run's success, and
    # until then Airflow refuses another backfill of the DAG (409): a test that backfills
    # again (the UI's dialog) starts only once this one is complete.
    def completed() -> bool:
        made = airflow.api("GET", "/api/v2/backfills", params={"dag_id": dag_id})["backfills"]
        return bool(made) and all(row.get("completed_at") for row in made)

    wait_for(f"the backfill of {dag_id} to be marked complete", completed, BACKFILL_TIMEOUT_S,
             airflow.problem)
    summary = summarize(airflow, dag_id)
    assert [run["run_type"] for run in runs] == ["backfill"] * RUNS, summary
    assert [datetime.fromisoformat(run["logical_date"]) for run in runs] == dates, summary
    return runs
