"""Shared fixtures: a real Kafka-protocol broker over TCP, a real Spark Connect server and a
session on it, temp tables.

The broker is the embedded one (``eos.tools.servers.broker``, the same code as ``eos broker
start``) unless
``KAFKA_BOOTSTRAP_SERVERS`` names another broker, in which case every test runs against that.
Spark is the default compute (``compute.mode: connect``): one server for the whole run (the same
code as ``eos spark start``), found by ``eos`` processes through the data directory and by
Airflow tasks through ``AIRFLOW_CONN_SPARK_CONNECT_DEFAULT``.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from eos.tools.pipelines import write_pipeline
from eos.tools.servers import broker as embedded
from eos.tools.servers.schema_registry import SchemaRegistryServer

from support.harness import free_port
from support.pipelines import SHIPPED_PIPELINES

# Property tests run beside Spark jobs on two workers: a per-example time limit would fail them
# for the machine's load, not for a wrong answer. Each test still bounds its examples.
settings.register_profile("eos", deadline=None)
settings.load_profile("eos")

# The embedded object store's, the test Spark cluster's and Apache Kafka's fixtures, started only
# when asked for, and the fault points a test arms.
pytest_plugins = ["support.store", "support.cluster", "support.fault_points",
                  "support.apache_kafka"]

# The repository's settings, as ./dev exports them, for a pytest started directly: the package
# finds nothing through the checkout (eos.core.config.paths).
REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("EOS_PIPELINES_DIR", str(SHIPPED_PIPELINES))
os.environ.setdefault("EOS_DATA_DIR", str(REPO / "data"))
os.environ.setdefault("AIRFLOW_HOME", str(REPO / "airflow_home"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# The test Schema Registry's credentials (eos.tools.servers.schema_registry), made per run and set
# before the Spark Connect server starts, so its Python workers read them as a deployment's would.
os.environ.setdefault("EOS_TEST_SR_AUTH", f"eos:{secrets.token_urlsafe(12)}")
# py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after
# pytest has closed the captured streams: keep it quiet instead of printing a logging error.
logging.getLogger("py4j").setLevel(logging.WARNING)


# The longest test files, longest first: dispatched first (``--dist loadfile`` hands out whole
# files in collection order), so that the short ones fill both workers at the end instead of
# one worker running a ten-minute file alone while the other waits. Measured in CI's
# ``--durations`` list; a file missing here only runs later.
LONGEST_FIRST = (
    "integration/storage/test_cluster_storage.py",
    "integration/pipeline/test_faults.py",
    "integration/airflow/test_epochs_view.py",
    "integration/airflow/test_dags.py",
    "integration/compute/test_connect.py",
    "integration/pipeline/test_rewind.py",
    "integration/storage/test_storage.py",
    "integration/airflow/test_airflow_scheduler.py",
    "integration/packaging/test_wheel.py",
    "integration/sinks/test_kafka_sink.py",
    "integration/airflow/test_stall_alert_airflow.py",
    "integration/airflow/test_several_machines.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first (``LONGEST_FIRST``), every other in collection order; a file's
    tests stay together and in order (a stable sort)."""
    tests = Path(__file__).parent
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def key(item: pytest.Item) -> int:
        try:
            name = item.path.relative_to(tests).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(name, len(rank))

    items.sort(key=key)


@pytest.fixture(scope="module")
def registry() -> Iterator[SchemaRegistryServer]:
    """A Schema-Registry-compatible stand-in (``eos.tools.servers.schema_registry``, not Confluent's
    server) with this run's credentials, per test module (the format unit tests have their own,
    per test)."""
    user, password = os.environ["EOS_TEST_SR_AUTH"].split(":", 1)
    with SchemaRegistryServer(user, password) as server:
        yield server


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("eos-data")
    previous = os.environ.get("EOS_DATA_DIR")
    os.environ["EOS_DATA_DIR"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("EOS_DATA_DIR", None)
    else:
        os.environ["EOS_DATA_DIR"] = previous


@pytest.fixture(scope="session")
def kafka(data_dir: Path) -> Iterator[str]:
    """Bootstrap address of the broker under test."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    state = embedded.start()
    try:
        yield state["bootstrap"]
    finally:
        embedded.stop()


@pytest.fixture(scope="session")
def spark_server(data_dir: Path, kafka: str) -> Iterator[dict]:
    """The Spark Connect server every test shares; stopped (no process left) at the end."""
    from eos.compute import connect
    from eos.tools.servers import spark_server
    # A session idle while other tests run must not expire under the test session's fixture.
    state = spark_server.start(base=data_dir, port=free_port(), session_timeout="4h")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT",
                  connect.airflow_connection(state, data_dir))
        yield state
    spark_server.stop(data_dir)


@pytest.fixture(scope="session")
def spark(data_dir: Path, kafka: str, spark_server: dict):
    """One Spark Connect session for the whole run, on the shared server."""
    from eos.compute import connect

    config = write_pipeline(data_dir, compute={"mode": "connect", "session": "task"})
    with connect.session(config, connect.resolve_endpoint(data_dir)) as session:
        yield session
