"""Helpers for tests that run real Airflow DAG runs in-process (the test modules that do import
this module first).

Airflow reads AIRFLOW_HOME and its settings when it is first imported, so importing this module
points Airflow at a throwaway home (SQLite metadata DB, no examples, the DAG file a deployment
writes in its ``dags/``, ``eos.airflow.environment.DAG_FILE``; the epochs view's plugin comes
from the package's entry point) before anything imports ``airflow``. The DB is created once per
session by the ``airflow_db`` fixture (a fresh DB is created from the ORM models: the same as
``airflow db migrate`` on an empty database, in about three seconds).

DAG runs go through ``DAG.test()``: it runs the scheduler's dependency checks
(``DagRun.update_state``: trigger rules, depends_on_past, retries with their delays) and executes
each task in-process through the Task SDK runner and an in-process Execution API. With an
explicit ``run_after``, the run id is ``manual__<run_after>``; calling it again for the same
logical date deletes that run's Airflow records and re-creates the run with the same run id,
which is what an operator's clear-and-rerun looks like to the pipeline.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from eos.airflow.environment import prepare_home

BASE_DATE = datetime(2026, 1, 1, tzinfo=UTC)
LOCAL_SPARK = json.dumps({"conn_type": "spark", "host": "local[2]"})

_HOME = Path(tempfile.mkdtemp(prefix="eos-airflow-home-"))
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
prepare_home(_HOME)  # the DAG file and the local settings, as `eos ui` writes them
DAGS_DIR = _HOME / "dags"
AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(_HOME),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME / 'airflow.db'}",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_DIR),
}
os.environ.update(AIRFLOW_ENV)
# spark_default names the master; without a connection the provider would fall back to yarn.
os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", LOCAL_SPARK)


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[Path]:
    """A fresh Airflow metadata DB in the throwaway AIRFLOW_HOME, once per session."""
    from airflow import settings
    from airflow.utils.db import initdb

    if str(_HOME) not in str(settings.SQL_ALCHEMY_CONN):
        pytest.fail(
            "airflow was imported before support.airflow_home could point AIRFLOW_HOME at a "
            f"temporary directory (it uses {settings.SQL_ALCHEMY_CONN}); import "
            "support.airflow_home first"
        )
    initdb()
    yield _HOME


@pytest.fixture(scope="module")
def pipelines_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The pipeline YAMLs the DAG file builds DAGs from during a module's tests
    (module-scoped: later modules' ``--pipeline NAME`` means the shipped pipelines again)."""
    path = tmp_path_factory.mktemp("af-pipelines")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EOS_PIPELINES_DIR", str(path))
        yield path


def load_dag(dag_id: str) -> Any:
    """Parse the DAG folder the way the dag processor does and return one DAG (fails on import
    errors)."""
    from airflow.dag_processing.dagbag import DagBag  # never loads Airflow's examples

    bag = DagBag(dag_folder=str(DAGS_DIR))
    assert not bag.import_errors, bag.import_errors
    dag = bag.dags.get(dag_id)
    assert dag is not None, f"{dag_id} not among {sorted(bag.dag_ids)}"
    return dag


def logical_date(index: int) -> datetime:
    return BASE_DATE + timedelta(minutes=index)


def run_dag(dag: Any, index: int) -> Any:
    """Run (or clear and rerun) the DAG run at logical date ``index``; the run id is stable."""
    when = logical_date(index)
    return dag.test(logical_date=when, run_after=when)


def run_dag_marking_success(dag: Any, index: int, pattern: str) -> Any:
    """Like ``run_dag``, but tasks whose id matches ``pattern`` are marked success unrun (what an
    operator's "mark success" does)."""
    when = logical_date(index)
    return dag.test(logical_date=when, run_after=when, mark_success_pattern=pattern)


def task_states(dag_run: Any) -> dict[str, str | None]:
    return {ti.task_id: ti.state for ti in dag_run.get_task_instances()}


def asset_events(uri: str) -> list[dict[str, Any]]:
    """Asset events recorded for the asset with this URI, oldest first (their ``extra``)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = (
            select(AssetEvent.extra)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri == uri)
            .order_by(AssetEvent.id)
        )
        return [dict(extra or {}) for extra in session.scalars(query)]


def rendered_fields(dag_run: Any, task_id: str) -> dict[str, Any]:
    """The template fields of a task instance as Airflow rendered and stored them."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields

    ti = next(ti for ti in dag_run.get_task_instances() if ti.task_id == task_id)
    return RenderedTaskInstanceFields.get_templated_fields(ti) or {}
