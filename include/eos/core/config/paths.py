"""Where a deployment keeps its pipelines, tables and data: settings, never the location of the
installed package, so the same package serves a checkout, a container and an existing Airflow.

- Pipelines: an explicit directory (``--pipelines-dir``, ``pipeline_dags(pipelines_dir=)``), else
  ``$EOS_PIPELINES_DIR``, else (in Airflow only, ``eos.airflow.dag_factory``) the Variable
  ``eos_pipelines_dir``, else ``./pipelines`` under the current directory.
- Data (the embedded broker's and servers' state, relative table roots): ``$EOS_DATA_DIR``, else
  ``$XDG_DATA_HOME/eos``, else ``~/.local/share/eos``.
"""

from __future__ import annotations

import os
from pathlib import Path

PIPELINES_DIR_ENV = "EOS_PIPELINES_DIR"
DATA_DIR_ENV = "EOS_DATA_DIR"
TABLES_BASE_ENV = "EOS_TABLES_BASE"
DEFAULT_PIPELINES_DIR = "pipelines"  # under the current directory


def tables_base() -> str:
    """Where relative table roots live: ``$EOS_TABLES_BASE`` (a local path or a store URI),
    else the data directory."""
    return os.environ.get(TABLES_BASE_ENV, "").strip() or str(data_dir())


def data_dir() -> Path:
    """Base directory for tables and local state: ``$EOS_DATA_DIR``, else the XDG data home's
    ``eos`` (``$XDG_DATA_HOME``, else ``~/.local/share``)."""
    explicit = os.environ.get(DATA_DIR_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser().resolve()
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return (base / "eos").resolve()


def pipelines_dir(explicit: str | Path | None = None) -> Path:
    """Where the pipelines live: ``explicit``, else ``$EOS_PIPELINES_DIR``, else
    ``./pipelines``. The DAG file, ``--pipeline NAME`` and the epochs view all read this one
    directory."""
    chosen = explicit or os.environ.get(PIPELINES_DIR_ENV, "").strip() or DEFAULT_PIPELINES_DIR
    return Path(chosen).expanduser().resolve()


def pipeline_path(name: str) -> Path:
    """The file ``--pipeline NAME`` means: a pipeline's name is its file's stem."""
    return pipelines_dir() / f"{name}.yaml"


def list_pipelines(directory: str | Path | None = None) -> list[Path]:
    """Every pipeline of the deployment, in a stable order (the DAG file builds one DAG each)."""
    return sorted(pipelines_dir(directory).glob("*.yaml"))
