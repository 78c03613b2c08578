"""The pipelines directory as Airflow components see it: an explicit directory, else
``$EOS_PIPELINES_DIR``, else the Airflow Variable ``eos_pipelines_dir``, else ``./pipelines``
(``eos.core.config.paths`` without the Variable, which only Airflow has).

The Variable is read only when neither of the first two is set, so a deployment that sets the
environment pays no lookup at parse time. A Variable that does not exist means ``./pipelines``,
not an exception; in Airflow's DAG processor, though, Airflow's own API client logs "Variable
not found" for each such parse, so a deployment names the directory (the environment, the
Variable, or the DAG file's argument) rather than relying on the last default."""

from __future__ import annotations

import os
from pathlib import Path

from eos.core.config import PIPELINES_DIR_ENV
from eos.core.config import pipelines_dir as configured_dir

PIPELINES_DIR_VARIABLE = "eos_pipelines_dir"


def pipelines_dir(explicit: str | Path | None = None) -> Path:
    """The directory of the deployment's pipeline YAMLs (see the module's docstring)."""
    if explicit or os.environ.get(PIPELINES_DIR_ENV, "").strip():
        return configured_dir(explicit)
    return configured_dir(_variable())


def _variable() -> str | None:
    """The Variable's value, or None when it does not exist."""
    from airflow.sdk import Variable

    value = Variable.get(PIPELINES_DIR_VARIABLE, default=None)
    if value is None:
        return None
    return str(value).strip() or None
