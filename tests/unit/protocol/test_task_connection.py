"""The Spark Connect connection eos writes for a server it runs (``eos.compute.connect.
airflow_connection``) is the Spark provider's own ``spark_connect`` type in Airflow's JSON form:
the provider's ``SparkConnectHook`` reads it as any user-made one (the token as the password,
``use_ssl`` in extra), and so does eos inside a task.

The task's context is Airflow's own: with ``SUPERVISOR_COMMS`` set, a task reads a connection
through the workers' secrets chain, whose first backend reads ``AIRFLOW_CONN_*``. Airflow 3.1 logs
an RFC 3986 warning for the ``_`` of the type on each read; eos's logging config quiets that
logger (``eos.airflow.logging_config``)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest

TOKEN = "tok/with+odd=chars"


def test_the_connection_eos_writes_is_the_providers_type_and_reads_back_in_a_task(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.sdk.execution_time import task_runner

    from eos.airflow.logging_config import QUIET
    from eos.compute import connect

    connect.token_path(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    connect.token_path(tmp_path).write_text(TOKEN + "\n")
    value = connect.airflow_connection({"host": "127.0.0.1", "port": 15123}, tmp_path)
    assert json.loads(value)["conn_type"] == "spark_connect"
    monkeypatch.setenv("AIRFLOW_CONN_EOS_TASK_CONN_TEST", value)
    assert SparkConnectHook("eos_task_conn_test").get_connection_url() == (
        f"sc://127.0.0.1:15123/;token={quote(TOKEN)};use_ssl=False")
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", object(), raising=False)
    endpoint = connect.airflow_endpoint("eos_task_conn_test")
    assert (endpoint.host, endpoint.port, endpoint.token) == ("127.0.0.1", 15123, TOKEN)
    assert not endpoint.use_ssl
    assert QUIET["airflow.sdk.definitions.connection"] == "ERROR"
