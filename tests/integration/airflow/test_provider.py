"""eos is an Airflow provider: ``airflow providers list`` shows it (Admin -> Providers reads the
same registry) at the installed version, with the integrations it declares, and what it
declares passes Airflow's own runtime schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import eos
from eos.airflow.provider import get_provider_info

pytestmark = [pytest.mark.integration, pytest.mark.airflow]


def airflow(home: Path, *args: str) -> str:
    env = {**os.environ, "AIRFLOW_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "airflow", *args], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_airflow_lists_eos_as_a_provider(tmp_path: Path) -> None:
    listed = json.loads(airflow(tmp_path, "providers", "list", "-o", "json"))
    (ours,) = [p for p in listed if p["package_name"] == "eos-pipeline"]
    assert ours["version"] == eos.__version__
    assert "Exactly-once micro-batches from Kafka" in ours["description"]
    shown = json.loads(airflow(tmp_path, "providers", "get", "eos-pipeline", "-o", "json"))
    assert shown == [{"Provider": "eos-pipeline", "Version": eos.__version__}]


def test_the_provider_info_passes_airflows_schema() -> None:
    from airflow.providers_manager import _create_provider_info_schema_validator

    info = get_provider_info()
    _create_provider_info_schema_validator().validate(info)
    # The epochs view registers once, through the airflow.plugins entry point: listed here
    # too, Airflow would warn "already registered" in every process.
    assert "plugins" not in info
    tags = {tag for i in info["integrations"] for tag in i["tags"]}
    assert {"connection-type:kafka", "connection-type:spark_connect",
            "connection-type:postgres", "connection-type:aws"} <= tags
