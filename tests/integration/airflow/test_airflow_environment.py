"""The environment ``eos ui`` (and the tests' standalone Airflow) runs Airflow in
(``eos.airflow.environment``): its home follows ``AIRFLOW_HOME``, and an Airflow process started
in it prints none of the start-up chatter every process used to print (alembic's INFO lines
on the migration check, deprecation warnings about Airflow's own imports) while errors still
print. Checked on real Airflow processes (``python -c 'import airflow ...'``), not by reading
the settings back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eos.airflow.environment import (
    AIRFLOW_HOME,
    QUIET_ENV,
    airflow_env,
    airflow_home,
)
from eos.core.config import PipelineConfig, load_config, pipeline_path

pytestmark = pytest.mark.airflow

# Imports Airflow and opens alembic's migration context on the metadata DB, as every Airflow
# component does when it checks the DB's migrations (alembic's INFO lines), imports through a
# deprecated path (Airflow's FutureWarning), then logs a warning and an error through alembic's
# logger.
PROBE = """
import logging
import airflow
from airflow import settings
from alembic.migration import MigrationContext
with settings.engine.connect() as connection:
    MigrationContext.configure(connection)
from airflow.operators.branch import BaseBranchOperator
logging.getLogger("alembic.runtime.plugins").warning("probe warning stays")
logging.getLogger("alembic").error("probe error stays")
"""


@pytest.fixture
def clicks() -> list[PipelineConfig]:
    return [load_config(pipeline_path("clicks"))]


def test_airflow_home_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              clicks: list[PipelineConfig]) -> None:
    # Settings of the environment win (another test module's Airflow home may have set them).
    for name in ("AIRFLOW_HOME", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # Airflow's default: ~/airflow
    assert airflow_home() == AIRFLOW_HOME.expanduser() == tmp_path / "user" / "airflow"
    assert airflow_env(clicks)["AIRFLOW_HOME"] == str(tmp_path / "user" / "airflow")

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    assert airflow_home() == tmp_path / "home"
    env = airflow_env(clicks)
    assert env["AIRFLOW_HOME"] == str(tmp_path / "home")
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith(
        f"sqlite:///{tmp_path / 'home' / 'airflow.db'}")
    # An explicit home (the tests' standalone, the demo's runner) still wins.
    assert airflow_env(clicks, tmp_path / "other")["AIRFLOW_HOME"] == str(tmp_path / "other")


def run_probe(env: dict[str, str], home: Path) -> str:
    env = {**env, "AIRFLOW_HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)}
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{home / 'airflow.db'}"
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    return proc.stdout + proc.stderr


def test_an_airflow_process_in_the_environment_prints_no_chatter_but_its_errors(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, clicks: list[PipelineConfig]) -> None:
    for name in (*QUIET_ENV, "AIRFLOW_HOME"):
        monkeypatch.delenv(name, raising=False)
    env = airflow_env(clicks, tmp_path / "quiet")
    quiet = run_probe(env, tmp_path / "quiet")
    assert "setup plugin" not in quiet and "Context impl" not in quiet
    assert "DeprecatedImportWarning" not in quiet and "is deprecated" not in quiet
    assert "probe warning stays" in quiet and "probe error stays" in quiet

    # The same process without the two settings: the chatter this removes (alembic's plugin
    # lines Airflow 3.3 already silences itself).
    loud = run_probe({k: v for k, v in env.items() if k not in QUIET_ENV}, tmp_path / "loud")
    assert "Context impl SQLiteImpl" in loud and "Will assume non-transactional DDL" in loud
    assert "DeprecatedImportWarning" in loud

    # A deployment's own settings win over the quiet defaults.
    monkeypatch.setenv("PYTHONWARNINGS", "default")
    monkeypatch.setenv("AIRFLOW__LOGGING__LOGGING_CONFIG_CLASS", "my.logging.CONFIG")
    own = airflow_env(clicks, tmp_path / "own")
    assert (own["PYTHONWARNINGS"], own["AIRFLOW__LOGGING__LOGGING_CONFIG_CLASS"]) == (
        "default", "my.logging.CONFIG")
