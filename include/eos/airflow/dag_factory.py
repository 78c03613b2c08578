"""Every pipeline's Airflow DAGs, for a deployment's DAG file: the DAG that runs its epochs
(``eos.airflow.pipeline_dag``) and its rewind DAG (``eos.airflow.rewind_dag``). Building them does
no I/O beyond reading the pipelines' YAML (and, when nothing else names the pipelines directory,
the Airflow Variable ``eos_pipelines_dir``: ``eos.airflow.deployment``).

A DAG file is two lines::

    from eos.airflow import pipeline_dags
    globals().update(pipeline_dags())

A file that does not load never raises out of the DAG file (Airflow would then drop every eos
DAG): it becomes a placeholder DAG that shows its error (``eos.airflow.broken_dag``), and the
other pipelines' DAGs load as usual. So do two files that declare one pipeline name: building
both would make one DAG silently replace the other.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from airflow.sdk import DAG

from eos.airflow.broken_dag import BrokenPipeline, build_broken_dag, placeholder_id
from eos.airflow.deployment import pipelines_dir as deployment_pipelines_dir
from eos.airflow.pipeline_dag import build_dag
from eos.airflow.rewind_dag import build_rewind_dag, rewind_dag_id
from eos.core.config import PipelineConfig, list_pipelines, load_config
from eos.core.errors import ConfigError

log = logging.getLogger(__name__)


class Pipelines(NamedTuple):
    """The pipelines directory, read: the configs that load, and the files that yield none."""

    configs: list[PipelineConfig]
    broken: list[BrokenPipeline]


def read_pipelines(pipelines_dir: str | Path | None = None) -> Pipelines:
    """Every ``*.yaml`` of the deployment's pipelines directory, each loaded on its own: one bad
    file stays one broken entry. Files that declare the same pipeline ``name`` are all broken,
    each naming the others (which one is meant is the operator's call, not the file order's)."""
    loaded: dict[Path, PipelineConfig] = {}
    broken: list[BrokenPipeline] = []
    for path in list_pipelines(deployment_pipelines_dir(pipelines_dir)):
        try:
            loaded[path] = load_config(path)
        except ConfigError as error:
            broken.append(BrokenPipeline(path, error))
    by_name: dict[str, list[Path]] = {}
    for path, config in loaded.items():
        by_name.setdefault(config.name, []).append(path)
    for name, paths in by_name.items():
        if len(paths) > 1:
            duplicate = ConfigError(
                f"{_files(len(paths))} declare pipeline '{name}': "
                f"{', '.join(path.name for path in paths)}; each pipeline needs a name of its "
                "own (its DAGs, tables and Delta application id follow it)")
            broken += [BrokenPipeline(path, duplicate) for path in paths]
            for path in paths:
                del loaded[path]
    return Pipelines(list(loaded.values()), sorted(broken, key=lambda b: b.path))


def pipeline_configs(pipelines_dir: str | Path | None = None) -> list[PipelineConfig]:
    """Every pipeline config in the deployment's pipelines directory, all or nothing: the first
    broken file's ``ConfigError`` raises (the DAG file uses ``read_pipelines`` instead)."""
    pipelines = read_pipelines(pipelines_dir)
    if pipelines.broken:
        raise pipelines.broken[0].error
    return pipelines.configs


def pipeline_dags(pipelines_dir: str | Path | None = None) -> dict[str, DAG]:
    """``{dag_id: DAG}`` for every pipeline in ``pipelines_dir`` (default: ``$EOS_PIPELINES_DIR``,
    else the Variable ``eos_pipelines_dir``, else ``./pipelines``), for a DAG file's globals():
    a placeholder DAG for each broken file, logged once per parse.

    A task process parses the DAG file only for its own DAG (Airflow's parsing context names
    it): then only that pipeline's DAGs are built, so a task pays for one pipeline, and its log
    carries no other pipeline's messages."""
    pipelines = read_pipelines(pipelines_dir)
    dags: dict[str, DAG] = {}
    broken_ones = list(pipelines.broken)
    wanted = _parsed_for()
    for config in pipelines.configs:
        if wanted is not None and wanted not in (config.dag_id, rewind_dag_id(config)):
            continue
        try:  # the airflow section resolves here (its failure callback is imported)
            dags.update(build_dags([config]))
        except ConfigError as error:
            broken_ones.append(BrokenPipeline(Path(str(config.source_path)), error))
    # Placeholder ids as a full parse gives them: a good pipeline keeps its DAG id.
    taken = {i for c in pipelines.configs for i in (c.dag_id, rewind_dag_id(c))}
    taken -= {i for b in broken_ones for c in pipelines.configs
              if Path(str(c.source_path)) == b.path for i in (c.dag_id, rewind_dag_id(c))}
    for broken in broken_ones:
        dag_id = placeholder_id(broken.path, taken | set(dags))
        if wanted is not None and dag_id != wanted:
            continue
        log.warning("eos: pipeline file %s does not load, its DAG %s is a placeholder that "
                    "fails: %s", broken.path, dag_id, broken.error.message)
        dags[dag_id] = build_broken_dag(broken, dag_id)
    return dags


def _parsed_for() -> str | None:
    """The DAG a task process parses the DAG file for (None: every DAG is wanted, as by the
    DAG processor)."""
    from airflow.sdk import get_parsing_context

    return get_parsing_context().dag_id


def build_dags(configs: Iterable[PipelineConfig] | None = None) -> dict[str, DAG]:
    """``{dag_id: DAG}`` for these pipeline configs (default: the deployment's, as
    ``pipeline_dags``): its epochs' DAG and its rewind DAG each."""
    if configs is None:
        return pipeline_dags()
    dags: dict[str, DAG] = {}
    for config in configs:
        if config.airflow.dag:  # else its epochs run in other DAGs' task groups only
            dags[config.dag_id] = build_dag(config)
        dags[rewind_dag_id(config)] = build_rewind_dag(config)
    return dags


def _files(count: int) -> str:
    """``two files``, ``three files``, ``4 files``: the duplicate-name message's subject."""
    return {2: "two files", 3: "three files"}.get(count, f"{count} files")
