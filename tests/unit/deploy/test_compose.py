"""Checks of the production-like stack description (docker-compose.yaml).

The stack itself cannot run here (no Docker engine), but `docker compose config` needs no engine:
it parses, interpolates and validates the file against the Compose specification. That check runs
wherever the compose CLI is installed; the structural checks below run everywhere.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yaml"

EXPECTED_SERVICES = {
    "kafka",
    "postgres",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "spark-master",
    "spark-worker-1",
    "spark-worker-2",
    "spark-connect",
    "s3",
}

# `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?message}`, `${VAR?message}`
INTERPOLATION = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(?:(?::?-|:?\?)[^}]*)?\}$")


def _compose_unavailable_reason() -> str | None:
    """Why `docker compose` cannot be used here, or None if it can."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed, so `docker compose config` cannot run"
    try:
        probe = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`docker compose version` could not run: {exc}"
    if probe.returncode != 0:
        detail = (probe.stderr or probe.stdout).strip().splitlines()
        return (
            "the docker CLI has no compose plugin (`docker compose version` exited "
            f"{probe.returncode}: {detail[0] if detail else 'no output'})"
        )
    return None


def _compose(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE_FILE), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _environment(service: dict) -> dict[str, object]:
    """A service's environment as a dict, whichever of the two Compose forms it uses."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return dict(env)


def test_docker_compose_config_validates() -> None:
    reason = _compose_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)

    checked = _compose("config", "--quiet")
    assert checked.returncode == 0, f"docker compose config failed:\n{checked.stderr}"

    listed = _compose("config", "--services")
    assert listed.returncode == 0, listed.stderr
    missing = EXPECTED_SERVICES - set(listed.stdout.split())
    assert not missing, f"missing services: {sorted(missing)}"


def test_compose_file_structure_and_secrets() -> None:
    spec = yaml.safe_load(COMPOSE_FILE.read_text())
    services = spec["services"]

    missing = EXPECTED_SERVICES - set(services)
    assert not missing, f"missing services: {sorted(missing)}"

    # Kafka runs in KRaft mode (no ZooKeeper): the node must take the controller role.
    kafka_env = _environment(services["kafka"])
    roles = {r.strip() for r in str(kafka_env.get("KAFKA_PROCESS_ROLES", "")).split(",")}
    assert "controller" in roles, f"KAFKA_PROCESS_ROLES={kafka_env.get('KAFKA_PROCESS_ROLES')!r}"

    # The images that the stack builds must exist where the build sections point.
    for name, service in services.items():
        build = service.get("build")
        if build is None:
            continue
        if isinstance(build, str):
            build = {"context": build}
        context = REPO_ROOT / build.get("context", ".")
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"

    # No committed secrets: every *PASSWORD* value is an interpolation, and every URL that
    # carries credentials takes its password from an interpolation too.
    checked_passwords = 0
    for name, service in services.items():
        for key, value in _environment(service).items():
            if "PASSWORD" in key.upper():
                checked_passwords += 1
                assert isinstance(value, str) and INTERPOLATION.match(value), (
                    f"{name}: {key} must be a ${{...}} interpolation, not {value!r}"
                )
            if isinstance(value, str) and "://" in value and "@" in value:
                password = urlsplit(value).password
                if password is not None:
                    assert INTERPOLATION.match(password), (
                        f"{name}: {key} embeds a literal password; use ${{...}}"
                    )
    assert checked_passwords > 0, "expected at least the postgres password to be checked"

    # Spark Connect: the server takes its token from the environment, and Airflow's connection
    # to it carries the same interpolated token as its password; nothing literal.
    connect_env = _environment(services["spark-connect"])
    token = connect_env["SPARK_CONNECT_AUTHENTICATE_TOKEN"]
    assert isinstance(token, str) and INTERPOLATION.match(token), token
    assert not any("token" in str(arg) for arg in services["spark-connect"]["command"])
    airflow_env = _environment(services["airflow-scheduler"])
    # A URI, not JSON (which a task reads through the deprecated Connection.from_json), read
    # the way Airflow's environment-variable backend reads it.
    from airflow.models.connection import Connection

    value = airflow_env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"]
    assert not value.lstrip().startswith("{"), value
    connection = Connection(conn_id="spark_connect_default", uri=value)
    assert "_" not in str(connection.conn_type), connection.conn_type  # RFC 3986 scheme
    assert connection.host == "spark-connect" and connection.port == 15002
    assert connection.password == token
    # No TLS inside the compose network: the connection opts in explicitly, or every precommit
    # would be refused for sending the token in plaintext to a non-loopback host.
    assert connection.extra_dejson == {"allow_insecure_token": True}


def test_published_ports_listen_on_loopback_only() -> None:
    """The stack's servers are reachable from this machine only (the API server, the epochs
    view, Kafka, Spark's master and UI): every published port names 127.0.0.1."""
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    published = {name: service["ports"] for name, service in services.items()
                 if service.get("ports")}
    assert "airflow-apiserver" in published, published
    for name, ports in published.items():
        for port in ports:
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"


def test_nothing_shares_a_data_disk_and_every_table_is_on_the_store() -> None:
    """Beyond one machine: the tables live on the s3 service (EOS_TABLES_BASE), the Spark
    workers and the Connect server get the store's credentials as interpolations, the project
    is mounted only as an Airflow project is (its DAG, plugin, Spark app and pipeline folders,
    read-only, into the Airflow components: the images install the package), and no named
    volume is mounted by two services but the Airflow components' task logs."""
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    mounted: dict[str, set[str]] = {}
    project = {"./dags:/opt/airflow/dags:ro", "./plugins:/opt/airflow/plugins:ro",
               "./spark_apps:/opt/airflow/spark_apps:ro",
               "./include/pipelines:/opt/airflow/pipelines:ro"}
    for name, service in services.items():
        assert "PYTHONPATH" not in _environment(service), name
        volumes = {str(v) for v in service.get("volumes", [])}
        if name.startswith("airflow-"):
            assert project <= volumes, f"{name} lacks the project's folders"
            env = _environment(service)
            assert env["EOS_SPARK_APP"] == "/opt/airflow/spark_apps/eos_precommit.py", name
            assert env["EOS_PIPELINES_DIR"] == "/opt/airflow/pipelines", name
        for volume in volumes:
            source = str(volume).split(":")[0]
            if source.startswith("."):
                assert name.startswith("airflow-") and volume in project, \
                    f"{name} mounts the repository: {volume}"
                assert (REPO_ROOT / source).is_dir(), volume
                continue
            if not source.startswith("/"):
                mounted.setdefault(source, set()).add(name)
    shared = {v: users for v, users in mounted.items() if len(users) > 1}
    assert set(shared) <= {"airflow-logs"}, shared
    assert all(u.startswith("airflow-") for u in shared.get("airflow-logs", ())), shared
    for name in ("spark-worker-1", "spark-worker-2", "spark-connect", "airflow-scheduler"):
        env = _environment(services[name])
        assert env["EOS_TABLES_BASE"].startswith("s3://"), name
        assert env["AWS_ENDPOINT_URL"] == "http://s3:8333", name
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert INTERPOLATION.match(str(env[key])), f"{name}: {key} must be interpolated"
    assert "s3" not in {n for n, s in services.items() if s.get("ports")}
