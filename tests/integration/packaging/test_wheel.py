"""The package as a new user gets it: the wheel built from this repository, installed alone into
a new virtual environment (its dependencies from the package index, the lock as constraints,
the Airflow image's extras, by ``docker/install-eos.sh``, the script the images run), then used
from an empty directory outside the checkout with nothing of the repository in the environment.

There, a pipeline YAML of its own (JSON events, one-minute windows, the default Delta sinks)
goes through the installed commands: ``eos broker start``, ``eos spark start``, ``eos produce``,
``eos run``, ``eos verify`` (verdict OK); then one DAG run of the same pipeline under a real
scheduler of the Airflow installed the same way (``eos ui``: ``airflow standalone`` with the
DAG file and local settings it writes into ``$AIRFLOW_HOME``, the epochs view's plugin from the
package's entry point), and the audit OK again over both epochs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.harness import free_port

pytestmark = [pytest.mark.slow, pytest.mark.airflow]

REPO = Path(__file__).resolve().parents[3]
UV = Path(sys.executable).parent / "uv"
PIPELINE = """\
name: mini
kafka:
  topic: mini
  read_timeout: 60s
event:
  format: json
  time: {field: ts, format: epoch_ms}
  fields:
    key: string
    value: decimal(38,9)
group_by: [key]
window: {type: tumbling, size: 60s, allowed_lateness: 10s}
aggregations: {count: count(*), sum: sum(value)}
epoch: {max_records: 100000}
tables: {root: mini}
spark: {master: "local[1]", shuffle_partitions: 1, driver_memory: 1g}
"""
SOURCE = ("include/eos", "pyproject.toml", "README.md", "LICENSE")
PARSE_TIMEOUT_S = 240.0
RUN_TIMEOUT_S = 300.0


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n" \
                                 f"{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from the package's files alone."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"  # tracked files only: the build leaves nothing in the checkout
    for name in SOURCE:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / name, source / name)
    _run([str(UV), "build", "--quiet", "--wheel", "-o", str(root / "dist"), str(source)])
    (built,) = (root / "dist").glob("eos_pipeline-*.whl")
    return built


def _install(wheel: Path, root: Path, extras: str) -> Path:
    """A new virtual environment under ``root`` with only the wheel and ``extras`` (and what
    they declare) installed, by the script the images run, the lock as constraints."""
    _run([str(UV), "venv", "--quiet", "--python", sys.executable, str(root / "venv")])
    python = root / "venv" / "bin" / "python"
    env = {**_bare_env(root), **_index_access(), "PATH": f"{UV.parent}{os.pathsep}/usr/bin:/bin"}
    _run(["bash", str(REPO / "docker" / "install-eos.sh"), str(python), f"{wheel}{extras}",
          str(REPO / "requirements.txt")], env=env, timeout=900)
    return root / "venv"


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed with the extras the Airflow image installs, by the script it runs."""
    extras = re.search(r'"/opt/eos/src(\[[^\]]*\])"',
                       (REPO / "docker" / "airflow.Dockerfile").read_text())
    assert extras is not None and "airflow" in extras[1]
    return _install(wheel, tmp_path_factory.mktemp("image"), extras[1])


def test_the_airflow_extra_alone_carries_no_audit_engine_and_parses_the_dag_file(
        wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """What Airflow's scheduler, DAG processor, triggerer and API server need: ``[airflow]``
    alone installs neither DuckDB nor a sink's own libraries, and the DAG file parses there
    (one DAG per pipeline, no import error); ``eos verify`` says which extra it needs."""
    root = tmp_path_factory.mktemp("airflow-only")
    python = _install(wheel, root, "[airflow]") / "bin" / "python"
    absent = ["duckdb", "aiokafka", "pyiceberg", "psycopg", "psycopg2", "fastavro"]
    found = _run([str(python), "-c", "import importlib.util as u, sys; print([m for m in "
                  "sys.argv[1:] if u.find_spec(m) is not None])", *absent]).stdout
    assert found.strip() == "[]", found
    pipelines = root / "pipelines"
    pipelines.mkdir()
    (pipelines / "mini.yaml").write_text(PIPELINE)
    dags = root / "dags"
    dags.mkdir()
    (dags / "eos_pipelines.py").write_text((REPO / "dags" / "eos_pipelines.py").read_text())
    env = {**_bare_env(root), "AIRFLOW_HOME": str(root / "airflow"),
           "EOS_PIPELINES_DIR": str(pipelines), "PATH": "/usr/bin:/bin"}
    parsed = _run([str(python), "-c", "from airflow.dag_processing.dagbag import DagBag; "
                   f"b = DagBag(dag_folder={str(dags)!r}); "
                   "print(sorted(b.dag_ids), b.import_errors)"], env=env, cwd=root).stdout
    assert parsed.strip().endswith("['eos_mini', 'eos_mini__rewind'] {}"), parsed
    refused = subprocess.run([str(python), "-m", "eos.tools.cli", "verify", "--pipeline",
                              "mini"], env=env, cwd=root, capture_output=True, text=True,
                             check=False)
    assert refused.returncode != 0
    assert "eos verify needs the 'audit' extra" in refused.stderr, refused.stderr[-2000:]


def _index_access() -> dict[str, str]:
    """How this machine reaches the package index (proxies, CA bundles, pip/uv settings): the
    installer's network settings, nothing of the repository's."""
    keep = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
    return {key: value for key, value in os.environ.items()
            if key in keep or key.lower().endswith("_proxy") or key.startswith(("PIP_", "UV_"))}


def _bare_env(root: Path) -> dict[str, str]:
    """A user's environment: none of the repository's settings (no PYTHONPATH, no EOS_*, no
    AIRFLOW_*, no PYSPARK_*), a home and data directory of its own."""
    env = {"HOME": str(root / "home"), "XDG_DATA_HOME": str(root / "xdg"),
           "LANG": "C.UTF-8", "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    (root / "home").mkdir(exist_ok=True)
    return env


class User:
    """Runs the installed commands from an empty directory outside the checkout."""

    def __init__(self, venv: Path, root: Path) -> None:
        self.cwd = root / "work"
        self.cwd.mkdir()
        self.env = {**_bare_env(root), "PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin:/bin",
                    "AIRFLOW_HOME": str(root / "airflow")}
        self.bin = venv / "bin"

    def eos(self, *args: str, timeout: float = 300) -> str:
        proc = _run([str(self.bin / "eos"), *args], cwd=self.cwd, env=self.env, timeout=timeout)
        return proc.stdout


@pytest.fixture(scope="module")
def user(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[User]:
    person = User(venv, tmp_path_factory.mktemp("user"))
    assert not person.cwd.is_relative_to(REPO)
    (person.cwd / "pipelines").mkdir()
    (person.cwd / "pipelines" / "mini.yaml").write_text(PIPELINE)
    try:
        yield person
    finally:
        for service in ("spark", "broker"):
            subprocess.run([str(person.bin / "eos"), service, "stop"], cwd=person.cwd,
                           env=person.env, capture_output=True, timeout=120, check=False)
        _kill_left_over(person.cwd.parent)


def _kill_left_over(home: Path) -> None:
    """SIGKILL every process still working under this user's directory: when ``eos ui`` is
    killed before it has stopped Airflow (its own stop escalates over 45 s; a loaded machine
    can take longer than the test waits), ``airflow standalone`` runs on in a session of its
    own and would outlive the suite. Matched by working directory, which Airflow's children
    inherit (their environment is not readable: Airflow rewrites its process titles over it)."""
    import psutil

    for proc in psutil.process_iter():
        try:
            if Path(proc.cwd()).is_relative_to(home):
                proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue


def test_the_installed_commands_run_a_pipeline_of_its_own(user: User) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert user.eos("--version").strip() == f"eos {project['version']}"
    user.eos("broker", "start", "--topic", "mini")
    user.eos("spark", "start", "--port", str(free_port()), "--driver-memory", "1g")
    user.eos("produce", "--pipeline", "mini", "--events", "3000", "--late-fraction", "0.01",
             "--bad-fraction", "0.01")
    user.eos("run", "--pipeline", "mini")
    verdict = user.eos("verify", "--pipeline", "mini")
    assert "verdict: OK" in verdict, verdict
    # Everything it wrote is in the data directory the settings name, none in the checkout.
    assert (Path(user.env["XDG_DATA_HOME"]) / "eos" / "mini").is_dir()


def test_a_dag_run_of_it_under_the_installed_airflow(user: User) -> None:
    user.eos("produce", "--pipeline", "mini", "--events", "1000")
    port = free_port()
    log = user.cwd.parent / "eos-ui.log"
    with log.open("w") as out:
        ui = subprocess.Popen([str(user.bin / "eos"), "ui", "--port", str(port)], cwd=user.cwd,
                              env=user.env, stdout=out, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        airflow = Airflow(port, Path(user.env["AIRFLOW_HOME"]), ui, log)
        home = Path(user.env["AIRFLOW_HOME"])
        assert (home / "dags" / "eos_pipelines.py").read_text().count("pipeline_dags") == 2
        assert "preload_in_scheduler()" in (home / "config" / "airflow_local_settings.py"
                                            ).read_text()
        plugins = airflow.api("GET", "/api/v2/plugins")["plugins"]
        assert "eos_epochs" in {plugin["name"] for plugin in plugins}
        airflow.api("PATCH", "/api/v2/dags/eos_mini", {"is_paused": False})
        run = airflow.api("POST", "/api/v2/dags/eos_mini/dagRuns", {"logical_date": None})
        airflow.wait_success("eos_mini", run["dag_run_id"])
    finally:
        os.killpg(ui.pid, signal.SIGINT)
        try:
            ui.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()
    verdict = user.eos("verify", "--pipeline", "mini")
    assert "verdict: OK" in verdict, verdict
    # The terminal got eos's lines; Airflow's own went to the file it named.
    shown = log.read_text()
    airflow_log = Path(user.env["AIRFLOW_HOME"]) / "standalone.log"
    assert f"Airflow's own log: {airflow_log}" in shown, shown[-2000:]
    assert "next_dagrun_info" not in shown and "dag_processor" not in shown.lower(), shown[-2000:]
    assert "scheduler" in airflow_log.read_text().lower()


class Airflow:
    """The REST API of the Airflow ``eos ui`` started, as its admin."""

    def __init__(self, port: int, home: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.base, self.proc, self.log = f"http://127.0.0.1:{port}", proc, log
        passwords = home / "simple_auth_manager_passwords.json.generated"
        self._wait("the API server and the DAG", lambda: passwords.exists() and self._parsed(
            json.loads(passwords.read_text())["admin"]), PARSE_TIMEOUT_S)

    def _parsed(self, password: str) -> bool:
        try:
            self.token = self._request("POST", "/auth/token",
                                       {"username": "admin", "password": password},
                                       auth=False)["access_token"]
            dags = self.api("GET", "/api/v2/dags")["dags"]
        except OSError:
            return False
        return "eos_mini" in {dag["dag_id"] for dag in dags}

    def _request(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, headers=headers,
                                         method=method)
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read()
        return json.loads(text) if text else None

    def api(self, method: str, path: str, body: Any = None) -> Any:
        return self._request(method, path, body)

    def wait_success(self, dag_id: str, run_id: str) -> None:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}"
        self._wait(f"run {run_id}", lambda: self._done(path), RUN_TIMEOUT_S)

    def _done(self, path: str) -> bool:
        state = self.api("GET", path)["state"]
        if state == "failed":
            tis = self.api("GET", f"{path}/taskInstances")["task_instances"]
            states = [(ti["task_id"], ti["state"]) for ti in tis]
            raise AssertionError(f"the DAG run failed: {states}\n{self.log.read_text()[-4000:]}")
        return state == "success"

    def _wait(self, what: str, done: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"eos ui exited {self.proc.returncode}:\n"
                                     f"{self.log.read_text()[-4000:]}")
            if done():
                return
            time.sleep(2)
        raise AssertionError(f"{what} not ready within {timeout:.0f}s:\n"
                             f"{self.log.read_text()[-4000:]}")
