"""Fixtures of Apache Kafka itself (``eos.tools.servers.apache_kafka``): one single-node KRaft
broker per
test process, started only when a test asks for it, for every test that relies on what a broker
guarantees (transactions, fencing, ``read_committed``, DescribeConfigs, retention, ACLs, SASL).

The suite's default broker stays the embedded mock cluster (it starts in well under a second and
runs the ~1,400 other tests); a test that asks for ``apache_kafka`` talks to Apache Kafka for its
duration: ``KAFKA_BOOTSTRAP_SERVERS`` and the ``KAFKA_SASL_*`` variables name it, as they would
for any ``eos`` command.

The client user's password is chosen when this module is imported, before any server starts, so
the Spark server's Python workers (the executors) inherit it: a pipeline on Apache Kafka writes
``sasl.password: ${EOS_TEST_KAFKA_PASSWORD}`` in its ``kafka.client`` (``PIPELINE_CLIENT``), the
way a deployment hands secrets to its executors. Missing jars are fetched (never a skip).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = ["PIPELINE_CLIENT", "ApacheKafka", "apache_kafka", "apache_kafka_broker"]

USER_ENV, PASSWORD_ENV = "EOS_TEST_KAFKA_USER", "EOS_TEST_KAFKA_PASSWORD"
os.environ.setdefault(USER_ENV, "eos")
os.environ.setdefault(PASSWORD_ENV, secrets.token_urlsafe(18))

# A pipeline's ``kafka.client`` on Apache Kafka: secrets by reference, resolved by each process
# (driver and executors) from its own environment.
PIPELINE_CLIENT = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                   "sasl.username": f"${{{USER_ENV}}}", "sasl.password": f"${{{PASSWORD_ENV}}}"}


@dataclass(frozen=True)
class ApacheKafka:
    """A running broker: where it listens and the settings of its client (a super user)."""

    bootstrap: str
    settings: dict[str, str] = field(repr=False)  # librdkafka settings, the password included
    home: Path
    pid: int

    @property
    def env(self) -> dict[str, str]:
        """The variables an ``eos`` process reads to talk to this broker."""
        return {"KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
                "KAFKA_SECURITY_PROTOCOL": self.settings["security.protocol"],
                "KAFKA_SASL_MECHANISM": self.settings["sasl.mechanism"],
                "KAFKA_SASL_USERNAME": self.settings["sasl.username"],
                "KAFKA_SASL_PASSWORD": self.settings["sasl.password"]}

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({**self.settings, "log_level": 0})


@pytest.fixture(scope="session")
def apache_kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    """The broker, for the whole session of this test process."""
    from eos.tools.servers import apache_kafka as ak
    if ak.missing():
        ak.fetch()
    user = ak.Credentials(os.environ[USER_ENV], os.environ[PASSWORD_ENV])
    home = tmp_path_factory.mktemp("apache-kafka")
    process, state = ak.start_broker(home / "broker", user=user)
    try:
        yield ApacheKafka(state["bootstrap"], ak.client_settings(state["bootstrap"], user),
                          home / "broker", process.pid)
    finally:
        from eos.core.kafka import forget_clients

        forget_clients(state["bootstrap"])
        process.terminate()
        try:
            process.wait(timeout=30)
        except Exception:
            process.kill()
            process.wait()


@pytest.fixture
def apache_kafka(apache_kafka_broker: ApacheKafka,
                 monkeypatch: pytest.MonkeyPatch) -> ApacheKafka:
    """This test talks to Apache Kafka: its variables are set for the test's duration."""
    for name, value in apache_kafka_broker.env.items():
        monkeypatch.setenv(name, value)
    return apache_kafka_broker


def kafka_section(**extra: Any) -> dict[str, Any]:
    """A pipeline's ``kafka`` section on Apache Kafka: a topic of its own, the harness's read
    settings, and ``PIPELINE_CLIENT``."""
    from eos.tools.pipelines import unique_topic

    return {"topic": unique_topic(), "read_timeout": "30s", "split_records": 4000,
            "client": dict(PIPELINE_CLIENT), **extra}
