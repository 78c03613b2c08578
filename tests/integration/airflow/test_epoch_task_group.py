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

from eos.core.protocol import checkpointed_epoch
from eos.tools.audit.verify import audit
from eos.tools.generator import GeneratorSpec

from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

airflow_db = af.airflow_db
pipelines_dir = af.pipelines_dir

SPEC = GeneratorSpec(events=1500, keys=10, interval_ms=200, bad_fraction=0.02, seed=7)


USER_DAG = """
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, task

from eos.airflow import epoch_task_group

MARKS = Path({marks!r})

with DAG({dag_id!r}, schedule=None, max_active_runs=1, start_date=datetime(2025, 1, 1)):

    @task
    def extract() -> None:
        (MARKS / "extract").write_text("ran")

    @task
    def report() -> None:
        # Runs after the commit: the checkpoint already holds this run's epoch.
        from eos.core.config import load_config
        from eos.core.protocol import checkpointed_epoch

        (MARKS / "report").write_text(str(checkpointed_epoch(load_config({path!r}))))

    extract() >> epoch_task_group({name!r}) >> report()
"""


def test_an_epoch_between_two_tasks_of_a_users_dag(
        airflow_db: Path, pipelines_dir: Path, data_dir: Path, kafka: str,
        spark_server: dict, tmp_path: Path) -> None:
    from eos.airflow import pipeline_dags

    config = make_pipeline(pipelines_dir, dag=(data_dir, "grouped"), records=SPEC,
                           compute={"mode": "connect"}, airflow={"dag": False})
    assert config.dag_id not in pipeline_dags() and f"{config.dag_id}__rewind" in pipeline_dags()
    marks = tmp_path / "marks"
    marks.mkdir()
    dag_id = f"team_{config.name}"
    # The team's DAG file beside eos's, in the DAG folder Airflow parses (removed after: the
    # other tests of this process parse the same folder).
    user_file = af.DAGS_DIR / f"{dag_id}.py"
    user_file.write_text(USER_DAG.format(marks=str(marks), dag_id=dag_id, name=config.name,
                                         path=str(config.source_path)))
    try:
        dag = af.load_dag(dag_id)
        prefix = f"eos_{config.name}"
        assert {t for t in dag.task_dict if t.startswith(prefix)} == {
            f"{prefix}.{t}" for t in ("begin", "precommit", "commit", "abort", "done")}
        for index in range(2):
            run = af.run_dag(dag, index)
            states = af.task_states(run)
            assert run.state == "success", states
            assert states[f"{prefix}.commit"] == "success", states
            assert states[f"{prefix}.abort"] == "skipped", states
            assert states["extract"] == states["report"] == "success", states
            assert (marks / "report").read_text() == str(index)  # one epoch per run, in order
    finally:
        user_file.unlink()

    assert checkpointed_epoch(config) == 1
    report = audit(config)
    assert report.ok, report.render()
