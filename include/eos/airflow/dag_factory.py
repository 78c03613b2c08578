"""Every pipeline's Airflow DAGs, for the DAG file (``dags/eos_pipelines.py``): the DAG that runs
its epochs (``eos.airflow.pipeline_dag``) and its rewind DAG (``eos.airflow.rewind_dag``).
Building them does no I/O beyond reading the pipelines' YAML."""

from __future__ import annotations

from collections.abc import Iterable

from airflow.sdk import DAG

from eos.airflow.pipeline_dag import build_dag
from eos.airflow.rewind_dag import build_rewind_dag, rewind_dag_id
from eos.core.config import PipelineConfig, list_pipelines, load_config


def pipeline_configs() -> list[PipelineConfig]:
    """Every pipeline config: ``include/pipelines/*.yaml``, or ``$EOS_PIPELINES_DIR/*.yaml``."""
    return [load_config(path) for path in list_pipelines()]


def build_dags(configs: Iterable[PipelineConfig] | None = None) -> dict[str, DAG]:
    """``{dag_id: DAG}`` for every pipeline config (its epochs' DAG and its rewind DAG), for a
    DAG file's globals()."""
    configs = pipeline_configs() if configs is None else configs
    dags: dict[str, DAG] = {}
    for config in configs:
        dags[config.dag_id] = build_dag(config)
        dags[rewind_dag_id(config)] = build_rewind_dag(config)
    return dags
