"""Where a deployment keeps its pipelines, tables and data: found from the project's checkout
and overridden by environment variables, so tests, benches and deployments can point one run at
directories of their own without editing a config."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[4]  # include/eos/core/config/paths.py
PIPELINES_DIR = PROJECT_ROOT / "include" / "pipelines"
PIPELINES_DIR_ENV = "EOS_PIPELINES_DIR"  # another directory of pipeline YAMLs (tests, benches)
TABLES_BASE_ENV = "EOS_TABLES_BASE"


def tables_base() -> str:
    """Where relative table roots live: ``$EOS_TABLES_BASE`` (a local path or a store URI),
    else the data directory."""
    return os.environ.get(TABLES_BASE_ENV, "").strip() or str(data_dir())


def data_dir() -> Path:
    """Base directory for tables and broker state: ``EOS_DATA_DIR`` or ``<project>/data``."""
    return Path(os.environ.get("EOS_DATA_DIR") or PROJECT_ROOT / "data").resolve()


def pipelines_dir() -> Path:
    """Where the pipelines live: ``$EOS_PIPELINES_DIR``, else ``include/pipelines``. The DAG
    file, ``--pipeline NAME`` and the epochs view all read this one directory."""
    override = os.environ.get(PIPELINES_DIR_ENV)
    return Path(override) if override else PIPELINES_DIR


def pipeline_path(name: str) -> Path:
    """The file ``--pipeline NAME`` means: a pipeline's name is its file's stem."""
    return pipelines_dir() / f"{name}.yaml"


def list_pipelines() -> list[Path]:
    """Every pipeline of the deployment, in a stable order (the DAG file builds one DAG each)."""
    return sorted(pipelines_dir().glob("*.yaml"))
