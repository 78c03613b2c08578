"""A Kafka client setting read from the environment is never shown.

``${VAR}`` is expanded in any ``kafka.client`` key, and ``KAFKA_SASL_*``-style variables become
settings, but redaction went by the key's name only: ``client.id: ${MY_SECRET}`` showed the
secret in begin's ``begin.watermarks`` line, in ``eos status``'s JSON and in the epochs view.
Every place that shows or logs client settings is checked here: the value must not appear;
what the config wrote (the ``${VAR}`` template) may.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from eos.core.config import PipelineConfig
from eos.core.kafka import client_settings, redact
from eos.core.plan import KafkaSource

from support.pipelines import IN_MEMORY, make_pipeline

SECRET = "s3cr3t-value-from-the-environment"  # a test value, nothing real


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The secret in a variable a config refers to, and one the library reads by its name;
    a broker address configured (nothing contacts it), so the settings resolve."""
    monkeypatch.setenv("MY_SECRET", SECRET)
    monkeypatch.setenv("KAFKA_SSL_CA_LOCATION", f"/etc/{SECRET}/ca.pem")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")


@pytest.fixture
def leaky(tmp_path: Path, secret_env: None) -> PipelineConfig:
    """A pipeline whose non-secret-looking client settings are expanded from the environment."""
    return make_pipeline(tmp_path, base=IN_MEMORY, kafka={"topic": "in-memory", "client": {
        "client.id": "${MY_SECRET}", "client.rack": "rack-${MY_SECRET}", "acks": "all"}})


def test_redact_shows_the_template_of_a_setting_read_from_the_environment(
        secret_env: None) -> None:
    settings = client_settings({"client.id": "${MY_SECRET}", "client.rack": "r-${MY_SECRET}",
                                "sasl.password": "${MY_SECRET}", "acks": "all"}, "b:9092")
    assert settings["client.id"] == SECRET  # the client itself gets the value
    shown = redact(settings)
    assert shown["client.id"] == "${MY_SECRET}" and shown["client.rack"] == "r-${MY_SECRET}"
    assert shown["ssl.ca.location"] == "${KAFKA_SSL_CA_LOCATION}"
    assert shown["sasl.password"] == "***"
    assert shown["acks"] == "all" and shown["bootstrap.servers"] == "b:9092"
    assert SECRET not in json.dumps(shown)
    # Copies of the settings (``{**settings, ...}``, as callers build them) keep the provenance,
    # and printing the settings themselves shows no value either.
    assert SECRET not in json.dumps(redact({**settings, "group.id": "g"}))
    assert SECRET not in repr(settings) and SECRET not in f"{settings}"


def test_the_begin_log_line_shows_no_value_from_the_environment(leaky: PipelineConfig) -> None:
    """``KafkaSource.describe`` is what ``begin`` logs as ``begin.watermarks``."""
    settings = client_settings(leaky.kafka.client)
    assert settings["client.id"] == SECRET
    logged = json.dumps(KafkaSource(settings).describe(leaky))
    assert SECRET not in logged and "${MY_SECRET}" in logged, logged


def test_eos_status_and_the_epochs_view_show_no_value_from_the_environment(
        leaky: PipelineConfig) -> None:
    from eos.airflow.epochs_cache import recorded_status
    from eos.core.pipeline_status import pipeline_status, render

    status = pipeline_status(leaky, limit=5, with_lag=False)
    assert status.client["client.id"] == "${MY_SECRET}", status.client
    assert SECRET not in json.dumps(status.to_json()) and SECRET not in render(status)
    page = recorded_status(leaky, limit=5)
    assert page.client["client.rack"] == "rack-${MY_SECRET}", page.client
    assert SECRET not in json.dumps(page.to_json())


def test_a_phase_line_naming_the_settings_shows_no_value(
        leaky: PipelineConfig, caplog: pytest.LogCaptureFixture) -> None:
    """The phase line as the library writes it (``log_phase``), not only the dict it gets."""
    from eos.core.phaselog import log_phase

    settings = client_settings(leaky.kafka.client)
    with caplog.at_level(logging.INFO, logger="eos"):
        log_phase("begin.watermarks", epoch=0, **KafkaSource(settings).describe(leaky))
    assert "begin.watermarks" in caplog.text and SECRET not in caplog.text, caplog.text
