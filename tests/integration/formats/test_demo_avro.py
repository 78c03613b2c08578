"""``./dev demo --pipeline orders_avro`` end to end, as a person runs it: its own data directory,
embedded broker, Spark Connect server and Schema-Registry-compatible stand-in
(``eos.tools.servers.schema_registry``, started by the demo on 127.0.0.1 with credentials it makes
and
hands over in the environment), Avro produced through the registry with a writer-schema change
halfway, epochs on real Spark into real Delta, then the independent audit (``eos verify``'s).

It runs in a child process: the demo restarts the embedded broker, which this test session's
other tests share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from eos.core.config import load_config

from support.harness import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]


def test_the_orders_avro_demo_runs_end_to_end_and_the_audit_agrees(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "include" / "pipelines" / "orders_avro.yaml").read_text())
    port = free_port()  # the shipped url's port may be taken on a shared machine
    data["event"]["schema_registry"]["url"] = f"http://127.0.0.1:{port}"
    data["epoch"]["max_records"] = 1500  # several epochs of the 4,000 events
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    path = pipelines / "orders_avro.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {k: v for k, v in os.environ.items()
           if k not in ("KAFKA_BOOTSTRAP_SERVERS", "EOS_SCHEMA_REGISTRY_AUTH", "EOS_SPARK_REMOTE",
                        "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT")}
    env.update(EOS_DATA_DIR=str(tmp_path / "data"), EOS_PIPELINES_DIR=str(pipelines),
               PYTHONPATH=os.pathsep.join([str(ROOT / "include"), env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "eos.tools.cli", "demo", "--pipeline",
                           "orders_avro", "--via", "cli", "--events", "4000"],
                          env=env, capture_output=True, text=True, timeout=900)
    try:
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-4000:]
        assert "Schema Registry stand-in (eos.tools.servers.schema_registry) at " in out
        assert "writer schema version 2 from event 2000" in out
        assert "verdict: OK" in out, out[-3000:]
        assert "4000 records re-read from Kafka" in out
        assert "quarantined" in out
        assert "schema id" in out  # quarantine reasons name the writer schema
        assert "kafka:orders-per-minute (windows)" in out
        assert "value=Avro, schema id" in out  # the Avro sink's records, decoded back
        # The generated credentials never reach the output (they were in the child's env only).
        assert "eos-demo:" not in out
        config = load_config(path)
        assert config.event.schema_registry is not None
    finally:
        subprocess.run([sys.executable, "-m", "eos.tools.cli", "broker", "stop"], env=env,
                       capture_output=True, timeout=60)
