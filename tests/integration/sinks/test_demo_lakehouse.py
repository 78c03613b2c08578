"""``./dev demo --pipeline clicks_lakehouse`` end to end, as a person runs it: its own data
directory, embedded broker and Spark Connect server, and a PostgreSQL server the demo starts
itself (Debian's postgresql, 127.0.0.1, a generated password handed over in the environment);
the windows committed to Delta, PostgreSQL, Hive-partitioned Parquet files and Iceberg, then the
independent audit's verdict. Lean: 3,000 events in epochs of 1,000 records.

It runs in a child process: the demo restarts the embedded broker, which this test session's
other tests share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from eos.tools.servers.postgres_server import missing_reason

pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))]

ROOT = Path(__file__).resolve().parents[3]


def test_the_lakehouse_demo_starts_postgresql_and_the_audit_agrees(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "include" / "pipelines" / "clicks_lakehouse.yaml").read_text())
    data["epoch"]["max_records"] = 1000  # a few epochs of the 3,000 events
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "clicks_lakehouse.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    env = {k: v for k, v in os.environ.items()
           if k not in ("KAFKA_BOOTSTRAP_SERVERS", "EOS_POSTGRES_DSN", "EOS_SPARK_REMOTE",
                        "AIRFLOW_CONN_POSTGRES_DEFAULT", "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT")}
    env.update(EOS_DATA_DIR=str(tmp_path / "data"), EOS_PIPELINES_DIR=str(pipelines),
               PYTHONPATH=os.pathsep.join([str(ROOT / "include"), env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "eos.tools.cli", "demo", "--pipeline",
                           "clicks_lakehouse", "--via", "cli", "--events", "3000"],
                          env=env, capture_output=True, text=True, timeout=900)
    try:
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-4000:]
        assert "PostgreSQL server (Debian's postgresql) at 127.0.0.1:" in out
        assert "its DSN is in $EOS_POSTGRES_DSN" in out
        assert "verdict: OK" in out, out[-3000:]
        assert "3000 records re-read from Kafka" in out
        for sink in ("delta:target (windows)", "postgres:eos.clicks_per_minute (windows)",
                     "files:files/windows (windows)",
                     "iceberg:clicks_lakehouse.eos.clicks_per_minute (windows)"):
            assert sink in out, out[-3000:]
        assert "stopped the PostgreSQL server the demo started" in out
        assert "password=" not in out  # the DSN never reaches the output
    finally:
        subprocess.run([sys.executable, "-m", "eos.tools.cli", "broker", "stop"], env=env,
                       capture_output=True, timeout=60)
    # The files: Hive-style directories per key, each epoch's manifest listing them.
    files = tmp_path / "data" / "clicks_lakehouse" / "files" / "windows"
    manifests = sorted((files / "_eos" / "manifests").glob("*.json"))
    assert len(manifests) >= 3
    listed = [f["path"] for m in manifests for f in json.loads(m.read_text())["files"]]
    assert listed and all(p.startswith("key=") and p.endswith(".parquet") for p in listed)
    assert all((files / p).is_file() for p in listed)
