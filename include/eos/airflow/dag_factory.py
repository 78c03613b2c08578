"""Every pipeline's Airflow DAGs, for a deployment's DAG file: the DAG that runs its epochs
(``eos.airflow.pipeline_dag``) and its rewind DAG (``eos.airflow.rewind_dag``). Building them does
no I/O beyond reading the pipelines' YAML (and, when nothing else names the pipelines directory,
the Airflow Variable ``eos_pipelines_dir``: ``eos.airflow.deployment``).

A DAG file is two lines::

    from eos.airflow import pipeline_dags
    globals().update(pipeline_dags())
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from airflow.sdk import DAG

from eos.airflow.deployment import pipelines_dir as deployment_pipelines_dir
from eos.airflow.pipeline_dag import build_dag
from eos.airflow.rewind_dag import build_rewind_dag, rewind_dag_id
from eos.core.config import PipelineConfig, list_pipelines, load_config


def pipeline_configs(pipelines_dir: str | Path | None = None) -> list[PipelineConfig]:
    """Every pipeline config in the deployment's pipelines directory (``*.yaml``)."""
    directory = deployment_pipelines_dir(pipelines_dir)
    return [load_config(path) for path in list_pipelines(directory)]


def pipeline_dags(pipelines_dir: str | Path | None = None) -> dict[str, DAG]:
    """``{dag_id: DAG}`` for every pipeline in ``pipelines_dir`` (default: ``$EOS_PIPELINES_DIR``,
    else the Variable ``eos_pipelines_dir``, else ``./pipelines``), for a DAG file's globals()."""
    return build_dags(pipeline_configs(pipelines_dir))


def build_dags(configs: Iterable[PipelineConfig] | None = None) -> dict[str, DAG]:
    """``{dag_id: DAG}`` for these pipeline configs (default: the deployment's): its epochs' DAG
    and its rewind DAG each."""
    configs = pipeline_configs() if configs is None else configs
    dags: dict[str, DAG] = {}
    for config in configs:
        dags[config.dag_id] = build_dag(config)
        dags[rewind_dag_id(config)] = build_rewind_dag(config)
    return dags
