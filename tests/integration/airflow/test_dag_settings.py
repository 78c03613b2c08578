"""A pipeline's ``airflow`` section shows on its DAGs as Airflow parses them (the DAG file
through a DagBag): owner, tags, pool, queue, retries and delay, the failure callback, access
control and docs; commit keeps retrying until it succeeds whatever ``retries`` says; a callback
that does not import makes that pipeline's DAG a placeholder naming the key, and only it."""

from __future__ import annotations

# Must come first: it points Airflow at a throwaway AIRFLOW_HOME before airflow is imported.
import support.airflow_home as af  # isort: skip

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from support.alert_notifier import task_failed
from support.pipelines import SHIPPED_PIPELINES

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

CLICKS = (SHIPPED_PIPELINES / "clicks.yaml").read_text()
SETTINGS = """
airflow:
  owner: data-platform
  tags: [team-clicks, tier-1]
  pool: kafka_pool
  queue: spark
  retries: 5
  retry_delay: 45s
  on_failure_callback: support.alert_notifier.task_failed
  access_control: {Op: [can_read, can_edit], Viewer: {DAGs: [can_read]}}
  doc_md: "Owned by **team clicks**: #clicks-oncall."
"""


def _dags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **files: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    for name, text in files.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    monkeypatch.setenv("EOS_PIPELINES_DIR", str(tmp_path))
    bag = DagBag(dag_folder=str(af.DAGS_DIR))
    assert not bag.import_errors, bag.import_errors
    return bag.dags


def test_the_airflow_section_shows_on_the_dag_and_every_task(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dags = _dags(tmp_path, monkeypatch, clicks=CLICKS + SETTINGS)
    dag = dags["eos_clicks"]
    assert dag.tags == {"eos", "clicks", "team-clicks", "tier-1"}
    assert dag.owner == "data-platform"
    assert dag.doc_md.startswith("Owned by **team clicks**: #clicks-oncall.")
    assert "Operating notes" in dag.doc_md  # eos's own notes stay
    assert dag.access_control == {"Op": {"DAGs": {"can_read", "can_edit"}},
                                  "Viewer": {"DAGs": {"can_read"}}}
    tasks = dag.task_dict
    for task in tasks.values():
        assert (task.owner, task.pool, task.queue) == ("data-platform", "kafka_pool", "spark")
        assert task.on_failure_callback == [task_failed], task.task_id
    for task_id in ("begin", "precommit", "abort"):
        assert tasks[task_id].retries == 5, task_id
        assert tasks[task_id].retry_delay == timedelta(seconds=45), task_id
    assert tasks["commit"].retries >= 50  # a pre-committed epoch must commit

    rewind = dags["eos_clicks__rewind"]
    assert {"team-clicks", "tier-1", "eos-maintenance"} <= rewind.tags
    assert rewind.task_dict["rewind"].owner == "data-platform"


def test_without_the_section_the_dag_is_as_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = _dags(tmp_path, monkeypatch, clicks=CLICKS)["eos_clicks"].task_dict
    assert {t.owner for t in tasks.values()} == {"eos"}
    assert (tasks["begin"].retries, tasks["precommit"].retries) == (3, 2)
    assert tasks["begin"].pool == "default_pool"


def test_a_callback_that_does_not_import_breaks_only_its_pipeline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = CLICKS + "airflow: {on_failure_callback: my_team.nowhere.page}\n"
    other = CLICKS.replace("\nname: clicks\n", "\nname: other\n")
    dags = _dags(tmp_path, monkeypatch, clicks=broken, other=other)
    assert "eos_other" in dags and "eos_clicks__rewind" not in dags
    placeholder = dags["eos_clicks"]
    assert "eos-broken" in placeholder.tags
    assert "airflow.on_failure_callback: cannot import 'my_team.nowhere.page'" in \
        placeholder.description


def test_a_task_process_builds_only_the_dag_it_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow's parsing context (set in a task process) names the DAG: only that pipeline's
    DAGs are built, and a broken file elsewhere is neither built nor logged there; a broken
    file's own placeholder keeps the id a full parse gives it."""
    broken = "name: [not, a, name\n"
    other = CLICKS.replace("\nname: clicks\n", "\nname: other\n")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "eos_other")
    assert set(_dags(tmp_path, monkeypatch, clicks=CLICKS, other=other, zbroken=broken)) == {
        "eos_other", "eos_other__rewind"}
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "eos_zbroken")
    assert set(_dags(tmp_path, monkeypatch)) == {"eos_zbroken"}
    monkeypatch.delenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID")
    assert set(_dags(tmp_path, monkeypatch)) == {
        "eos_clicks", "eos_clicks__rewind", "eos_other", "eos_other__rewind", "eos_zbroken"}
