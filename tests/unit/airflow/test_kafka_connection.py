"""Kafka settings from the Kafka provider's ``kafka`` connection (``eos.airflow.connections``),
read through Airflow's connection API from ``AIRFLOW_CONN_*`` (the first secrets backend a
process asks), with no Airflow running.

What is pinned: the precedence (the connection's extra as the base, the pipeline's
``kafka.client`` on top, the ``KAFKA_SASL_*``-style variables not mixed in), that without the
connection everything is as the environment says, that no value of the connection shows in what
eos shows or Airflow logs, and how the settings reach a child process (a 0600 file, never its
command line) and an executor (only the names of the security settings).
"""

from __future__ import annotations

import json
import os
import pickle
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eos.core.bootstrap import (
    SETTINGS_FILE_ENV,
    FromConnection,
    handed_to_children,
    supplied_settings,
    supply_settings,
)
from eos.core.errors import ConfigError
from eos.core.kafka import client_settings, redact, security_keys

PASSWORD = "pw-a1b2c3d4e5f6"  # test values, nothing real
CLIENT_ID = "client-id-7f3e9a0c"
EXTRA = {"bootstrap.servers": "kafka-1.example:9093,kafka-2.example:9093",
         "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
         "sasl.username": "eos-user-x", "sasl.password": PASSWORD,
         "client.id": CLIENT_ID, "group.id": "my-group", "socket.keepalive.enable": True}


def connection(monkeypatch: pytest.MonkeyPatch, extra: dict, conn_id: str = "kafka_default",
               conn_type: str = "kafka") -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}",
                       json.dumps({"conn_type": conn_type, "extra": extra}))


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No connection settings left in this process, and none in the environment."""
    for name in list(os.environ):
        if name.startswith(("KAFKA_", "AIRFLOW_CONN_KAFKA")) or name in (
                "EOS_KAFKA_CONN_ID", SETTINGS_FILE_ENV):
            monkeypatch.delenv(name)
    supply_settings(None)
    yield
    supply_settings(None)


def test_the_connection_is_the_base_and_the_pipeline_client_goes_on_top(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from eos.airflow.connections import export_kafka_connection

    connection(monkeypatch, EXTRA)
    # What the command line would use is not mixed in when a connection exists.
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "from-the-environment")
    assert export_kafka_connection()
    settings = client_settings({"client.id": "from-the-yaml", "acks": "all"})
    assert settings["bootstrap.servers"] == EXTRA["bootstrap.servers"]
    assert settings["sasl.password"] == PASSWORD and settings["sasl.username"] == "eos-user-x"
    assert settings["client.id"] == "from-the-yaml" and settings["acks"] == "all"
    assert settings["socket.keepalive.enable"] == "true"  # librdkafka's spelling
    assert "group.id" not in settings  # eos names its own groups
    # A driver's resolved bootstrap (what an executor is told) wins over the connection's.
    assert client_settings({}, bootstrap="b:1")["bootstrap.servers"] == "b:1"


def test_without_the_connection_the_environment_decides_as_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from eos.airflow.connections import export_kafka_connection

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "from-the-environment")
    before = client_settings({"acks": "all"})
    assert not export_kafka_connection()
    assert client_settings({"acks": "all"}) == before == {
        "bootstrap.servers": "127.0.0.1:1", "acks": "all", "sasl.password": "from-the-environment"}
    assert security_keys() == []


def test_eos_kafka_conn_id_names_another_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    from eos.airflow.connections import export_kafka_connection

    connection(monkeypatch, {"bootstrap.servers": "staging:9092"}, conn_id="kafka_staging")
    assert not export_kafka_connection()
    monkeypatch.setenv("EOS_KAFKA_CONN_ID", "kafka_staging")
    assert export_kafka_connection()
    assert client_settings()["bootstrap.servers"] == "staging:9092"


def test_no_value_of_the_connection_is_shown_or_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk._shared.secrets_masker.secrets_masker import redact as airflow_redact

    from eos.airflow.connections import export_kafka_connection

    connection(monkeypatch, EXTRA)
    assert export_kafka_connection()
    settings = client_settings({"acks": "all"})
    shown = json.dumps(redact(settings))
    for value in (PASSWORD, CLIENT_ID, "eos-user-x"):
        assert value not in shown and value not in repr(settings) and value not in f"{settings}"
        # Airflow's log masker hides it in any line of this process, whatever its key.
        assert value not in str(airflow_redact(f"a log line with {value} in it"))
    assert redact(settings)["client.id"] == "<Airflow connection 'kafka_default'>"
    assert redact(settings)["bootstrap.servers"] == EXTRA["bootstrap.servers"]
    # The provenance survives a copy and a pickle (Spark ships settings that way).
    copied = pickle.loads(pickle.dumps({**settings}))
    assert isinstance(copied["client.id"], FromConnection) and copied["client.id"] == CLIENT_ID
    assert CLIENT_ID not in json.dumps(redact(copied))


@pytest.mark.parametrize(("conn_type", "extra", "named"), [
    ("spark", {"bootstrap.servers": "h:1"}, "type 'spark'"),
    ("kafka", {"bootstrap.servers": "h:1", "sasl.oauthbearer.config": {"a": PASSWORD}},
     "sasl.oauthbearer.config"),
    ("kafka", {"bootstrap.servers": "h:1", "oauth_cb": "my.module.token"}, "oauth_cb"),
])
def test_a_connection_eos_cannot_use_is_refused_naming_the_key(
        monkeypatch: pytest.MonkeyPatch, conn_type: str, extra: dict, named: str) -> None:
    from eos.airflow.connections import export_kafka_connection

    connection(monkeypatch, extra, conn_type=conn_type)
    with pytest.raises(ConfigError) as refused:
        export_kafka_connection()
    assert named in str(refused.value) and PASSWORD not in str(refused.value)


def test_a_child_process_reads_them_from_a_file_only_this_user_reads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    supply_settings({"bootstrap.servers": "h:1", "sasl.password": PASSWORD}, "the connection")
    child = [sys.executable, "-c", "from eos.core.bootstrap import supplied_settings as s; "
             "print({k: str.__str__(v) for k, v in s().items()})"]
    with handed_to_children():
        path = Path(os.environ[SETTINGS_FILE_ENV])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        out = subprocess.run(child, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}).stdout
        assert PASSWORD in out and "h:1" in out
    assert SETTINGS_FILE_ENV not in os.environ and not path.exists()
    assert PASSWORD not in " ".join(child)


def test_an_executor_without_the_security_settings_fails_naming_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the names travel in the read's options; an executor that has neither the handed
    file nor the variables refuses instead of connecting without SASL."""
    from eos.compute.reader import KafkaRangeReader

    supply_settings({"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
                     "sasl.password": PASSWORD, "client.id": CLIENT_ID}, "the connection")
    keys = security_keys()
    assert keys == ["sasl.password", "security.protocol"]
    options = {"topic": "t", "ranges": "[]", "bootstrap": "h:1",
               "connection_keys": json.dumps(keys)}
    assert PASSWORD not in json.dumps(options)
    supply_settings(None)  # the executor: another process, no connection of its own
    with pytest.raises(ConfigError) as refused:
        KafkaRangeReader(options)._settings()
    assert "sasl.password" in str(refused.value) and "security.protocol" in str(refused.value)
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", PASSWORD)
    assert KafkaRangeReader(options)._settings()["bootstrap.servers"] == "h:1"


def test_a_task_process_with_no_connection_forgets_an_earlier_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from eos.airflow.connections import export_kafka_connection

    connection(monkeypatch, EXTRA)
    assert export_kafka_connection()
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_DEFAULT")
    assert not export_kafka_connection()
    assert supplied_settings() == {}
