"""The environment a local Airflow (``airflow standalone``) runs this project's DAGs in: for
``eos ui``, the demo's DAG runs and the tests' Airflow instances alike."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from eos.core.config import PROJECT_ROOT, PipelineConfig

AIRFLOW_HOME = PROJECT_ROOT / "airflow_home"  # gitignored; the default when AIRFLOW_HOME is unset
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"
# Chatter nobody reads, silenced unless the environment sets these itself: alembic's "setup
# plugin" lines and the DAG processor's "Not time to refresh bundle"
# (``eos.airflow.logging_config``), and the deprecation warnings Airflow 3.1.8 and its libraries
# raise about their own code in every process (Airflow shows its DeprecationWarnings only when
# PYTHONWARNINGS is unset: any value gives Python's defaults back; the entries also name the
# FutureWarning that would still print).
# Errors, and warnings about this project's code, still print.
KNOWN_DEPRECATIONS = (
    "ignore:The `airflow.operators.:FutureWarning",  # the standard provider's compat imports
    "ignore:'HTTP_422_UNPROCESSABLE_ENTITY' is deprecated:DeprecationWarning",  # starlette
    "ignore:The anyio.abc.BlockingPortal alias is deprecated:DeprecationWarning",  # anyio
)
QUIET_ENV = {
    "AIRFLOW__LOGGING__LOGGING_CONFIG_CLASS": "eos.airflow.logging_config.LOGGING_CONFIG",
    "PYTHONWARNINGS": ",".join(KNOWN_DEPRECATIONS),
}


def airflow_home() -> Path:
    """Where a local Airflow keeps its DB, logs and generated passwords: ``$AIRFLOW_HOME`` as
    Airflow itself reads it, else ``airflow_home/`` in the project."""
    home = os.environ.get("AIRFLOW_HOME", "").strip()
    return Path(home).expanduser().resolve() if home else AIRFLOW_HOME


def airflow_env(configs: list[PipelineConfig], home: Path | None = None,
                port: int = 8080) -> dict[str, str]:
    """The environment ``airflow standalone`` runs in (in ``home``, ``airflow_home()`` by
    default); settings already in the env win."""
    home = home or airflow_home()
    port = int(os.environ.get("AIRFLOW__API__PORT") or port)
    masters = {config.spark.master for config in configs}
    master = os.environ.get("EOS_SPARK_MASTER") or (
        masters.pop() if len(masters) == 1 else "local[2]"
    )
    env = {
        **_spark_connect_connection(),
        # Without a spark_default connection, SparkSubmitOperator would submit to yarn.
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": master}),
        "AIRFLOW__API__PORT": str(port),
        # The API server (UI, REST API, the epochs view) listens on loopback only.
        "AIRFLOW__API__HOST": "127.0.0.1",
        # SQLite: wait for the lock instead of failing `airflow backfill create` while the
        # scheduler writes.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}?timeout=60",
        # LocalExecutor forks this many workers up front; the tasks here are few and Spark-heavy.
        "AIRFLOW__CORE__PARALLELISM": "4",
        # No AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME: Airflow's default 1 s, not
        # compose's 0.2 s. On SQLite the faster loop's extra transactions make the API server's
        # backfill insert fail with "database is locked".
        # bench.dag_runs sets 0.2 s, as deployed.
        # Task processes report to the API server; its default URL assumes port 8080.
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        **QUIET_ENV,
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    # Every component (and every task) must run this interpreter: the project's venv.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _spark_connect_connection() -> dict[str, str]:
    """``spark_connect_default`` for the server ``eos spark start`` runs, if one does (its
    token goes into the child's environment only, never to the terminal)."""
    from eos.compute import connect

    state = connect.read_state()
    if state is None:
        return {}
    return {"AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": connect.airflow_connection(state)}
