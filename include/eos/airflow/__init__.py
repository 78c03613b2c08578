"""eos in Airflow: the DAGs (``pipeline_dags`` for a deployment's DAG file), their tasks, the
epochs view (an Airflow plugin, ``eos.airflow.plugin``) and the scheduler's preload.

``pipeline_dags`` is imported on first use: importing a submodule of this package (for example
``eos.airflow.environment``, before Airflow's home is set) never imports Airflow itself.
"""

from __future__ import annotations

from typing import Any

__all__ = ["pipeline_dags"]


def __getattr__(name: str) -> Any:
    if name == "pipeline_dags":
        from eos.airflow.dag_factory import pipeline_dags

        return pipeline_dags
    raise AttributeError(f"module 'eos.airflow' has no attribute {name!r}")
