"""Reading the Spark Connect connection inside a task, as precommit does, logs no Airflow warning
(each precommit log used to carry two: ``Connection.from_json`` from ``airflow.models`` is
deprecated, and a ``spark_connect`` scheme holds a ``_``, against RFC 3986).

The task's context is Airflow's own: with ``SUPERVISOR_COMMS`` set, a task reads a connection
through the workers' secrets chain, whose first backend reads ``AIRFLOW_CONN_*``."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest

TOKEN = "tok/with+odd=chars"


def test_the_connection_eos_writes_reads_back_in_a_task_without_warnings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    from airflow.sdk.execution_time import task_runner

    from eos.compute import connect

    connect.token_path(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    connect.token_path(tmp_path).write_text(TOKEN + "\n")
    value = connect.airflow_connection({"host": "127.0.0.1", "port": 15123}, tmp_path)
    monkeypatch.setenv("AIRFLOW_CONN_EOS_TASK_CONN_TEST", value)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", object(), raising=False)
    caplog.set_level(logging.DEBUG)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        endpoint = connect.airflow_endpoint("eos_task_conn_test")
    assert (endpoint.host, endpoint.port, endpoint.token) == ("127.0.0.1", 15123, TOKEN)
    assert not endpoint.use_ssl
    assert [str(w.message) for w in caught if "onnection" in str(w.message)] == []
    assert [r.getMessage() for r in caplog.records if "RFC3986" in r.getMessage()] == []
    assert "RFC3986" not in capsys.readouterr().err  # Airflow's structlog output
