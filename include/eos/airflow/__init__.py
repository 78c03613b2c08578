"""eos in Airflow: the DAGs (``pipeline_dags`` for a deployment's DAG file), an epoch inside any
DAG (``epoch_task_group``), their tasks, the epochs view (an Airflow plugin,
``eos.airflow.plugin``) and the scheduler's preload.

Both are imported on first use: importing a submodule of this package (for example
``eos.airflow.environment``, before Airflow's home is set) never imports Airflow itself.
"""

from __future__ import annotations

from typing import Any

__all__ = ["epoch_task_group", "pipeline_dags"]


def __getattr__(name: str) -> Any:
    if name == "pipeline_dags":
        from eos.airflow.dag_factory import pipeline_dags

        return pipeline_dags
    if name == "epoch_task_group":
        from eos.airflow.task_group import epoch_task_group

        return epoch_task_group
    raise AttributeError(f"module 'eos.airflow' has no attribute {name!r}")
