"""A DAG run whose broker is known only through the Kafka provider's ``kafka`` connection
(``eos.airflow.connections``): ``KAFKA_BOOTSTRAP_SERVERS`` unset and the embedded broker's
published address out of sight (another ``EOS_DATA_DIR``), so every task (begin, precommit,
commit) and the Spark reads they start can reach the broker only through
``AIRFLOW_CONN_KAFKA_DEFAULT``. Its extra also holds a setting marked secret (``client.id``, which
the embedded broker accepts): it reaches the clients, and no log line shows it.

In ``compute.mode: submit`` the connection also sets ``security.protocol`` (PLAINTEXT, what the
embedded broker speaks): a setting Spark's executors must have, whose value never travels in the
read's options, so the ``spark-submit`` app and the local executors it forks can only have it
from the file the task hands them (``eos.core.bootstrap.handed_to_children``); without it they
refuse to read. In ``connect`` mode the executors are the Connect server's, with their own
environment: the connection holds no such setting there.

Through ``DAG.test()`` (support.airflow_home): the tasks run in this process, their log lines
are this process's output and log records (the spark-submit app's output included).
"""

from __future__ import annotations

# Must come first: it points Airflow at a throwaway AIRFLOW_HOME before airflow is imported.
import support.airflow_home as af  # isort: skip

import json
import secrets
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation, ResourceType

from eos.core import checkpoints
from eos.core.bootstrap import configured_bootstrap, supplied_settings, supply_settings
from eos.core.layout import tables_for
from eos.tools.generator import GeneratorSpec
from integration.sinks.test_kafka_acls import add_user, grant

from support.apache_kafka import ApacheKafka
from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

airflow_db = af.airflow_db
pipelines_dir = af.pipelines_dir

SPEC = GeneratorSpec(events=600, keys=10, interval_ms=250, late_fraction=0.0,
                     late_delay_ms=30_000, bad_fraction=0.0, seed=20260144)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["connect", "submit"])
def test_a_dag_run_reaches_the_broker_only_through_the_kafka_connection(
        mode: str, airflow_db: Path, pipelines_dir: Path, data_dir: Path, kafka: str,
        spark_server: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    config = make_pipeline(pipelines_dir, dag=(data_dir, "afconn"), records=SPEC,
                           compute={"mode": mode})
    secret = f"eos-secret-{secrets.token_hex(8)}"
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("EOS_DATA_DIR", str(tmp_path / "no-broker-here"))
    assert configured_bootstrap() is None  # no way to the broker but the connection
    extra = {"bootstrap.servers": kafka, "client.id": secret, "group.id": "ignored-by-eos"}
    if mode == "submit":
        extra["security.protocol"] = "PLAINTEXT"
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT",
                       json.dumps({"conn_type": "kafka", "extra": extra}))
    dag = af.load_dag(config.dag_id)
    capfd.readouterr()
    try:
        run = af.run_dag(dag, 0)
        assert af.task_states(run) == {"begin": "success", "precommit": "success",
                                       "commit": "success", "abort": "skipped"}
        assert str(supplied_settings()["client.id"]) == secret  # what the clients were given
    finally:
        supply_settings(None)
    out = capfd.readouterr()
    logs = out.out + out.err + caplog.text + "".join(
        p.read_text(errors="replace") for p in (airflow_db / "logs").rglob("*") if p.is_file())
    assert secret not in logs
    # begin logs its source's settings: the secret shown as where it came from.
    assert "<Airflow connection 'kafka_default'>" in logs
    assert checkpoints.last_checkpointed(tables_for(config), config.app_id) == 0


@pytest.mark.timeout(600)
def test_a_dag_run_on_apache_kafka_authenticates_with_the_connections_scram_credentials(
        airflow_db: Path, pipelines_dir: Path, data_dir: Path, apache_kafka: ApacheKafka,
        spark_server: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """SASL/SCRAM through the connection alone, on a broker that refuses anyone else: a user
    made for the test (no super user), granted what the pipeline needs, its password in the
    connection's extra only. Every task, and the spark-submit app's executors (the settings
    handed to them), authenticate; the password is in no log."""
    user, password = f"airflow-{secrets.token_hex(4)}", secrets.token_urlsafe(16)
    add_user(apache_kafka, user, password)
    config = make_pipeline(pipelines_dir, dag=(data_dir, "afscram"), records=SPEC,
                           compute={"mode": "submit"})
    grant(apache_kafka, user, ResourceType.TOPIC, config.kafka.sole_topic,
          AclOperation.READ, AclOperation.DESCRIBE)
    for name in apache_kafka.env:
        monkeypatch.delenv(name)
    monkeypatch.setenv("EOS_DATA_DIR", str(tmp_path / "no-broker-here"))
    assert configured_bootstrap() is None  # no way to the broker but the connection
    extra = {"bootstrap.servers": apache_kafka.bootstrap, "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT",
                       json.dumps({"conn_type": "kafka", "extra": extra}))
    dag = af.load_dag(config.dag_id)
    capfd.readouterr()
    try:
        run = af.run_dag(dag, 0)
        assert af.task_states(run) == {"begin": "success", "precommit": "success",
                                       "commit": "success", "abort": "skipped"}
    finally:
        supply_settings(None)
    out = capfd.readouterr()
    logs = out.out + out.err + caplog.text + "".join(
        p.read_text(errors="replace") for p in (airflow_db / "logs").rglob("*") if p.is_file())
    assert password not in logs
    checkpoint = checkpoints.last(tables_for(config), 0)
    assert checkpoint is not None and sum(checkpoint.until.values()) == SPEC.events
