"""The DAG under the real Airflow scheduler: backfills, and per-phase task logs over the REST API.

tests/test_dags.py drives runs through ``DAG.test()``; here nothing is in-process. One
``airflow standalone`` (API server, scheduler with the LocalExecutor, DAG processor, triggerer)
runs in a process group of its own with a throwaway AIRFLOW_HOME (SQLite), the project's dags/
folder building two DAGs from test pipeline YAMLs (``EOS_PIPELINES_DIR``, monthly schedule), the
embedded broker (found by every task through ``EOS_DATA_DIR``) and ``spark_default`` naming
``local[2]``: the environment ``eos ui`` gives Airflow (``eos.ui.airflow_env``). Each pipeline's
topic holds 2,400 events, and ``epoch.max_records`` is 1,000: three non-empty epochs.

What it proves:
- ``airflow backfill create --max-active-runs 1`` over three logical dates creates three runs
  that the scheduler runs one after the other, each processing the next epoch (0, 1, 2 in
  logical-date order, none reprocessed, none skipped): the checkpoint ends at epoch 2 and
  the independent audit agrees with Kafka;
- a person reading the logs of ``begin``, ``precommit`` and ``commit`` through the API server
  (logged in as ``admin`` with the generated password) finds each phase's structured
  ``phase=... epoch=N plan_hash=H`` line, with the run's epoch and plan hash;
- with Airflow's default backfill (every run active at once, only ``depends_on_past`` and
  ``wait_for_downstream`` keep the order) and the first commit crashing between two sinks, the
  retried commit skips the sink already committed, and each run still processes the next epoch
  (a regression test for the ``begin >> commit`` edge in ``eos.dag_factory``).
Everything Airflow started (the whole process group and any descendant) is gone afterwards.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from eos import epochlog
from eos.audit import audit
from eos.config import PipelineConfig
from eos.kafka import client_settings
from eos.produce import GeneratorSpec, produce
from eos.protocol import committed_epoch
from eos.tables import tables_for
from eos.ui import PASSWORDS_FILE, airflow_env

from support import free_port, unique_topic, write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]

EVENTS = 2400  # epoch.max_records 1000: epochs of 1000, 1000 and 400 records
SPEC = GeneratorSpec(
    events=EVENTS, keys=20, interval_ms=250, late_fraction=0.02, late_delay_ms=30_000,
    bad_fraction=0.02, seed=20260102,
)
RUNS = 3
COMMIT_FAULT = "commit.between_sinks"  # eos.faults: SIGKILL after the first sink, before the rest
SCHEDULE = "0 0 1 * *"  # monthly: the backfill's logical dates are the first of a month
STARTUP_TIMEOUT_S = 420.0  # db migrate + four components on a loaded 2-core machine
PARSE_TIMEOUT_S = 300.0
BACKFILL_TIMEOUT_S = 1200.0
CLI_TIMEOUT_S = 300.0
POLL_S = 3.0
AIRFLOW = Path(sys.executable).parent / "airflow"


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
    token: str = ""

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
        return response.json()

    def arm_commit_crash(self, armed: bool) -> Path:
        """Let the next commit task crash once between two sinks (or never); the counter file."""
        counter = Path(self.env["EOS_FAULTS_DIR"]) / f"{COMMIT_FAULT}.hits"
        counter.parent.mkdir(parents=True, exist_ok=True)
        counter.unlink(missing_ok=True)
        if not armed:
            counter.write_text("x")  # the one allowed hit is used up: the fault never fires
        return counter

    def cli(self, *args: str) -> str:
        """Run an ``airflow`` command against this instance (same home, same metadata DB).

        SQLite has one writer at a time; with the scheduler, DAG processor and API server all
        writing, a CLI transaction can still lose the lock after the 60 s busy timeout (seen once
        in CI on ``backfill create``). Such a transaction rolled back whole, so it is retried.
        """
        for _ in range(3):
            proc = subprocess.run([str(AIRFLOW), *args], env=self.env, capture_output=True,
                                  text=True, timeout=CLI_TIMEOUT_S, check=False)
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


def make_pipeline(directory: Path, data_dir: Path, prefix: str) -> PipelineConfig:
    name = f"{prefix}_{unique_topic('')[1:]}"
    config = write_pipeline(
        directory,
        name=name,
        kafka={"topic": unique_topic(prefix), "read_timeout": "30s"},
        window={"size": "10s", "allowed_lateness": "2s"},
        epoch={"max_records": 1000, "staging_retention": 3},
        tables={"root": str(data_dir / name)},
        # A cron schedule gives the backfill its logical dates (Airflow 3: CronTriggerTimetable,
        # logical date = fire time, 00:00 UTC on the first of each month).
        schedule=SCHEDULE,
    )
    produce(SPEC, config.kafka.topic, client_settings(config.kafka.client), progress=False)
    return config


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, kafka: str
              ) -> dict[str, PipelineConfig]:
    """Two pipelines (two DAGs), each on its own topic holding SPEC's records."""
    directory = tmp_path_factory.mktemp("sched-pipelines")
    return {test: make_pipeline(directory, data_dir, prefix)
            for test, prefix in (("sequential", "afseq"), ("default", "afdef"))}


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory, pipelines: dict[str, PipelineConfig],
            data_dir: Path, kafka: str, spark_server: dict) -> Iterator[Airflow]:
    home = tmp_path_factory.mktemp("airflow-home")
    configs = list(pipelines.values())
    port = free_port()
    env = airflow_env(configs, home, port)
    env.update({
        # This instance's own settings, whatever the outer environment says (tests/
        # conftest_airflow.py points AIRFLOW_* at another home for the DAG.test() tests).
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{port}/execution/",
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
                 "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "AIRFLOW__CORE__EXECUTOR"):
        env.pop(name, None)
    output = home / "standalone.out"
    with output.open("wb") as sink:
        proc = subprocess.Popen([str(AIRFLOW), "standalone"], env=env, cwd=home, stdout=sink,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    instance = Airflow(proc, home, env, f"http://127.0.0.1:{port}", output)
    try:
        def healthy() -> bool:
            health = httpx.get(f"{instance.base}/api/v2/monitor/health", timeout=10).json()
            return all(health.get(part, {}).get("status") == "healthy"
                       for part in ("metadatabase", "scheduler", "dag_processor"))

        wait_for("the API server, scheduler and DAG processor to report healthy", healthy,
                 STARTUP_TIMEOUT_S, instance.problem)
        passwords = home / PASSWORDS_FILE
        wait_for(f"{passwords}", passwords.exists, 60, instance.problem)
        password = json.loads(passwords.read_text())["admin"]

        def login() -> str:
            response = httpx.post(f"{instance.base}/auth/token", timeout=30,
                                  json={"username": "admin", "password": password})
            response.raise_for_status()
            return response.json()["access_token"]

        instance.token = wait_for("a token for admin", login, 60, instance.problem)
        yield instance
    finally:
        leftovers = stop_process_tree(proc)
        assert not leftovers, f"Airflow processes survived the teardown: {leftovers}"


# ---------------------------------------------------------------------------------------------


def dag_runs(airflow: Airflow, dag_id: str) -> list[dict[str, Any]]:
    runs = airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns",
                       params={"order_by": "logical_date", "limit": 100})["dag_runs"]
    return sorted(runs, key=lambda run: run["logical_date"])


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


def backfill(airflow: Airflow, config: PipelineConfig, *options: str) -> list[dict[str, Any]]:
    """Wait for the DAG to be parsed, create a backfill of RUNS dates, unpause the DAG, wait.

    Returns the DAG's runs (logical-date order) once RUNS of them succeeded; fails on the first
    failed run, with every run's task states.
    """
    dag_id = f"eos_{config.name}"

    def parsed() -> bool:
        errors = airflow.api("GET", "/api/v2/importErrors")["import_errors"]
        assert not errors, errors
        return airflow.api("GET", f"/api/v2/dags/{dag_id}")["dag_id"] == dag_id

    wait_for(f"the DAG processor to parse {dag_id}", parsed, PARSE_TIMEOUT_S, airflow.problem)
    dag = airflow.api("GET", f"/api/v2/dags/{dag_id}")
    assert dag["is_paused"], dag  # new DAGs start paused: nothing ran before the backfill
    assert dag["timetable_summary"] == SCHEDULE, dag

    dates = monthly_dates(RUNS)
    # depends_on_past: Airflow requires a reprocess behaviour other than "none".
    airflow.cli("backfill", "create", "--dag-id", dag_id, "--from-date", dates[0].isoformat(),
                "--to-date", dates[-1].isoformat(), "--reprocess-behavior", "failed", *options)
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
    summary = summarize(airflow, dag_id)
    assert [run["run_type"] for run in runs] == ["backfill"] * RUNS, summary
    assert [datetime.fromisoformat(run["logical_date"]) for run in runs] == dates, summary
    return runs


def assert_one_epoch_per_run_in_order(airflow: Airflow, config: PipelineConfig,
                                      runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run i (logical-date order) processed epoch i, after run i-1 committed; return the plans."""
    dag_id = f"eos_{config.name}"
    summary = summarize(airflow, dag_id)
    tables = tables_for(config)
    plans = [epochlog.plan_row_for_run(tables, run["dag_run_id"]) for run in runs]
    assert all(plans), (plans, summary)
    begins = "\n".join(
        line for run in runs for line in task_log(airflow, dag_id, run["dag_run_id"], "begin")
        if "phase=begin " in line
    )
    assert [row["epoch"] for row in plans] == list(range(RUNS)), f"{summary}\n{begins}"
    ranges = [json.loads(row["plan"])["ranges"] for row in plans]
    assert [sum(r["until"] - r["start"] for r in rs) for rs in ranges] == [1000, 1000, 400]
    assert committed_epoch(config) == RUNS - 1

    tis = [{task: task_instance(airflow, dag_id, run["dag_run_id"], task)
            for task in ("begin", "precommit", "commit", "abort")} for run in runs]
    for ti in tis:
        assert {task: t["state"] for task, t in ti.items()} == {
            "begin": "success", "precommit": "success", "commit": "success", "abort": "skipped"
        }, summary
    # One after the other: run i+1's begin started only once run i's commit had succeeded.
    for earlier, later in itertools.pairwise(tis):
        began, committed = later["begin"]["start_date"], earlier["commit"]["end_date"]
        assert datetime.fromisoformat(began) >= datetime.fromisoformat(committed), summary

    report = audit(config)
    assert report.ok, report.render()
    assert report.records == EVENTS
    return plans


@pytest.fixture(scope="module")
def sequential(airflow: Airflow, pipelines: dict[str, PipelineConfig]) -> dict[str, Any]:
    """A backfill of RUNS dates with ``--max-active-runs 1``: Airflow starts one run at a time."""
    config = pipelines["sequential"]
    airflow.arm_commit_crash(False)
    runs = backfill(airflow, config, "--max-active-runs", "1")
    return {"config": config, "runs": runs}


@pytest.mark.timeout(3000)
def test_backfill_runs_one_epoch_per_logical_date_in_order(
    airflow: Airflow, sequential: dict[str, Any]
) -> None:
    assert_one_epoch_per_run_in_order(airflow, sequential["config"], sequential["runs"])


@pytest.mark.timeout(3000)
def test_task_logs_show_each_phase_with_epoch_and_plan_hash(
    airflow: Airflow, sequential: dict[str, Any]
) -> None:
    """What a person reads in the UI's log view of run 2 (epoch 1), fetched from the API server."""
    config: PipelineConfig = sequential["config"]
    dag_id = f"eos_{config.name}"
    run_id = sequential["runs"][1]["dag_run_id"]
    planned = epochlog.plan_row_for_run(tables_for(config), run_id)
    assert planned is not None and planned["epoch"] == 1
    expected = {"begin": "planned", "precommit": "staged", "commit": "committed"}
    for task_id, outcome in expected.items():
        fields = phase_line(task_log(airflow, dag_id, run_id, task_id), task_id)
        assert fields.get("epoch") == "1", (task_id, fields)
        assert fields.get("plan_hash") == planned["plan_hash"], (task_id, fields)
        assert fields.get("outcome") == outcome, (task_id, fields)


@pytest.mark.timeout(3000)
def test_default_backfill_with_a_retried_commit_still_runs_one_epoch_per_run(
    airflow: Airflow, pipelines: dict[str, PipelineConfig]
) -> None:
    """Airflow's default backfill (max_active_runs 10: every run is active at once) relies on
    the DAG's own ordering. The first commit crashes between two sinks and is retried >= 15s
    later: run 2 must not plan (or adopt) anything before run 1 has committed."""
    config = pipelines["default"]
    dag_id = f"eos_{config.name}"
    counter = airflow.arm_commit_crash(True)
    runs = backfill(airflow, config)

    # Run 1's commit was killed after a side sink and its retry committed the rest.
    assert counter.read_text() == "x"
    first_commit = task_instance(airflow, dag_id, runs[0]["dag_run_id"], "commit")
    assert first_commit["try_number"] >= 2, first_commit
    lines = task_log(airflow, dag_id, runs[0]["dag_run_id"], "commit")
    fields = phase_line(lines, "commit")
    assert (fields["epoch"], fields["outcome"]) == ("0", "committed"), fields
    # The retry skipped what the crashed attempt had committed (the first sink).
    commit_line = next(line for line in reversed(lines) if "phase=commit " in line)
    assert '"delta:target":{"outcome":"already committed"' in commit_line, commit_line

    tables = tables_for(config)
    epochs = [(epochlog.plan_row_for_run(tables, run["dag_run_id"]) or {}).get("epoch")
              for run in runs]
    # Regression: without the begin >> commit edge, run 2 adopted epoch 0 ([0, 0, 1]).
    assert epochs == [0, 1, 2], epochs
    assert_one_epoch_per_run_in_order(airflow, config, runs)
