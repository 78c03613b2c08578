"""An epoch inside any DAG: ``epoch_task_group("clicks")`` puts one pipeline's phases (begin,
precommit, commit, and abort when precommit failed) in a task group of the DAG being built, so
a team's own DAG can run an epoch between its own tasks::

    from eos.airflow import epoch_task_group

    with DAG("clicks_daily", schedule="@hourly", max_active_runs=1, ...):
        extract >> epoch_task_group("clicks") >> publish_report

One run of that DAG is one epoch of the pipeline, exactly as a run of the pipeline's own DAG:
the same tasks, the same protocol (clear-and-rerun is the abort), the same assets. The group
ends in ``done``, which succeeds only when the epoch committed, so what follows the group runs
after a commit and never after an abort (abort is skipped on success, which would otherwise
skip what follows).

The pipeline's own DAG takes epochs of the same pipeline too: set ``airflow: {dag: false}`` in
the pipeline file so only the groups run its epochs (two DAGs taking turns lose nothing, the
protocol fences them, but each run then commits whichever epoch is next). Its rewind DAG stays.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import TaskGroup, TriggerRule

from eos.airflow.assets import sink_assets
from eos.airflow.deployment import pipelines_dir as deployment_pipelines_dir
from eos.airflow.pipeline_dag import epoch_phases
from eos.core.config import PipelineConfig, load_config

DONE = "done"


def epoch_task_group(pipeline: str | PipelineConfig, *, group_id: str | None = None,
                     pipelines_dir: str | Path | None = None) -> TaskGroup:
    """One epoch of ``pipeline`` (its name in the deployment's pipelines directory, or a loaded
    config) as a task group of the DAG being built, ``eos_<name>`` unless ``group_id`` says
    otherwise."""
    config = (pipeline if isinstance(pipeline, PipelineConfig)
              else load_config(deployment_pipelines_dir(pipelines_dir) / f"{pipeline}.yaml"))
    group_id = group_id or f"eos_{config.name}"
    with TaskGroup(group_id=group_id, tooltip=f"one epoch of eos pipeline {config.name}",
                   prefix_group_id=True) as group:
        _, last = epoch_phases(config, sink_assets(config), group_id)
        done = EmptyOperator(task_id=DONE, trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS,
                             doc_md="The epoch committed: what follows the group runs.")
        for task in last:
            task >> done
    return group


def group_done(group: Any) -> str:
    """The id of the task that ends ``group`` (``<group_id>.done``)."""
    return f"{group.group_id}.{DONE}"
