"""An epoch inside a team's own DAG: ``extract >> epoch_task_group(pipeline) >> report`` runs
the pipeline's begin, precommit and commit between the DAG's own tasks, one epoch per run, on
Spark Connect, under Airflow (``DAG.test`` on the session's metadata DB). What follows the
group runs after the commit; the audit says OK. A pipeline with ``airflow: {dag: false}`` gets
no DAG of its own (its rewind DAG stays)."""

from __future__ import annotations

# Must come first: it points Airflow at a throwaway AIRFLOW_HOME before airflow is imported.
import support.airflow_home as af  # isort: skip

from pathlib import Path

import pytest

from eos.core.layout import tables_for
from eos.core.protocol import checkpointed_epoch
from eos.tools.audit import audit
from eos.tools.generator import GeneratorSpec

from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

airflow_db = af.airflow_db
pipelines_dir = af.pipelines_dir

SPEC = GeneratorSpec(events=1500, keys=10, interval_ms=200, bad_fraction=0.02, seed=7)


def test_an_epoch_between_two_tasks_of_a_users_dag(
        airflow_db: Path, pipelines_dir: Path, data_dir: Path, kafka: str,
        spark_server: dict, tmp_path: Path) -> None:
    from airflow.sdk import DAG, task

    from eos.airflow import epoch_task_group, pipeline_dags

    config = make_pipeline(pipelines_dir, dag=(data_dir, "grouped"), records=SPEC,
                           compute={"mode": "connect"}, airflow={"dag": False})
    assert config.dag_id not in pipeline_dags() and f"{config.dag_id}__rewind" in pipeline_dags()
    marks = tmp_path / "marks"
    marks.mkdir()

    with DAG(f"team_{config.name}", schedule=None, max_active_runs=1,
             start_date=af.BASE_DATE) as dag:

        @task
        def extract() -> None:
            (marks / "extract").write_text("ran")

        @task
        def report() -> None:
            # Runs after the commit: the checkpoint already holds the run's epoch.
            (marks / "report").write_text(str(checkpointed_epoch(config)))

        group = epoch_task_group(config.name)
        extract() >> group >> report()

    prefix = f"eos_{config.name}"
    assert {t for t in dag.task_dict if t.startswith(prefix)} == {
        f"{prefix}.{t}" for t in ("begin", "precommit", "commit", "abort", "done")}

    for index in range(2):
        run = af.run_dag(dag, index)
        states = af.task_states(run)
        assert run.state == "success", states
        assert states[f"{prefix}.commit"] == "success" and states[f"{prefix}.abort"] == "skipped"
        assert states["report"] == "success", states
        assert (marks / "report").read_text() == str(index)  # one epoch per run, in order

    assert checkpointed_epoch(config) == 1
    assert tables_for(config)  # the pipeline's own tables, as its own DAG would use
    report = audit(config)
    assert report.ok, report.render()
