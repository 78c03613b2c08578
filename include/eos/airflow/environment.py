"""The environment a local Airflow (``airflow standalone``) runs eos's DAGs in: for ``eos ui``,
the demo's DAG runs and the tests' Airflow instances alike.

Its home (``$AIRFLOW_HOME``, else ``~/airflow``) gets the two files a deployment of its own writes
by hand, each only when absent: the DAG file in ``dags/`` (``DAG_FILE``) and, in ``config/``
(on Airflow's ``sys.path``), local settings that preload the tasks' modules in the scheduler
(``LOCAL_SETTINGS``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from eos.core.config import PIPELINES_DIR_ENV, PipelineConfig, pipelines_dir

AIRFLOW_HOME = Path("~/airflow")  # Airflow's own default when AIRFLOW_HOME is unset
DAG_FILE_NAME = "eos_pipelines.py"
# What a deployment's DAG folder holds for eos: one DAG per pipeline YAML (and its rewind DAG).
DAG_FILE = '''"""eos: the DAGs of every pipeline in the pipelines directory."""

from eos.airflow import pipeline_dags

globals().update(pipeline_dags())
'''
# What a deployment's ``airflow_local_settings.py`` adds: the scheduler imports the tasks'
# modules once, so the tasks it forks start with them (eos.airflow.preload).
LOCAL_SETTINGS = '''from eos.airflow.preload import preload_in_scheduler

preload_in_scheduler()
'''
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"
# Chatter nobody reads, silenced unless the environment sets these itself: alembic's "setup
# plugin" lines and the DAG processor's "Not time to refresh bundle"
# (``eos.airflow.logging_config``), and the deprecation warnings Airflow and its libraries
# raise about their own code in every process (Airflow shows its DeprecationWarnings only when
# PYTHONWARNINGS is unset: any value gives Python's defaults back; the entries also name the
# FutureWarning that would still print).
# Errors, and warnings about this project's code, still print.
KNOWN_DEPRECATIONS = (
    "ignore:The `airflow.operators.:FutureWarning",  # the standard provider's compat imports
    "ignore:'HTTP_422_UNPROCESSABLE_ENTITY' is deprecated:DeprecationWarning",  # starlette
    "ignore:The anyio.abc.BlockingPortal alias is deprecated:DeprecationWarning",  # anyio
    # starlette 1.x, on the API server's import of fastapi.testclient (a UserWarning subclass)
    "ignore:Using `httpx` with `starlette.testclient` is deprecated:UserWarning",
)
QUIET_ENV = {
    "AIRFLOW__LOGGING__LOGGING_CONFIG_CLASS": "eos.airflow.logging_config.LOGGING_CONFIG",
    "PYTHONWARNINGS": ",".join(KNOWN_DEPRECATIONS),
}


def airflow_home() -> Path:
    """Where a local Airflow keeps its DB, logs, DAG file and generated passwords:
    ``$AIRFLOW_HOME`` as Airflow itself reads it, else ``~/airflow``."""
    home = os.environ.get("AIRFLOW_HOME", "").strip()
    return Path(home or AIRFLOW_HOME).expanduser().resolve()


def airflow_env(configs: list[PipelineConfig], home: Path | None = None,
                port: int = 8080) -> dict[str, str]:
    """The environment ``airflow standalone`` runs in (in ``home``, ``airflow_home()`` by
    default); settings already in the env win, except the DAG folder (``home/dags``, with the DAG
    file written if absent). Its pipelines directory is this process's, made absolute."""
    home = home or airflow_home()
    prepare_home(home)
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
        PIPELINES_DIR_ENV: str(pipelines_dir()),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    # Every component (and every task) must run this interpreter: the project's venv.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def prepare_home(home: Path) -> None:
    """The DAG file in ``home/dags`` and the local settings in ``home/config``, each written only
    when absent: a file someone wrote there stays theirs."""
    write_once(home / "dags" / DAG_FILE_NAME, DAG_FILE)
    write_once(home / "config" / "airflow_local_settings.py", LOCAL_SETTINGS)


def write_once(path: Path, text: str) -> Path:
    """``path`` with ``text``, unless the file exists (then it is left as it is)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with path.open("x") as out:
            out.write(text)
    except FileExistsError:
        pass
    return path


def _spark_connect_connection() -> dict[str, str]:
    """``spark_connect_default`` for the server ``eos spark start`` runs, if one does (its
    token goes into the child's environment only, never to the terminal)."""
    from eos.compute import connect

    state = connect.read_state()
    if state is None:
        return {}
    return {"AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": connect.airflow_connection(state)}
