"""Airflow's logging config for this project's local Airflow (``eos ui``, the tests' standalone):
Airflow's default, less the lines every Airflow process prints again and again and no person
reads. Warnings and errors of every logger still print.

Named by ``AIRFLOW__LOGGING__LOGGING_CONFIG_CLASS`` (``eos.airflow.environment``); Airflow imports
this module in each process before it logs anything.

- ``alembic``: ``Context impl ...`` and ``Will assume ... DDL`` at INFO each time a process
  opens alembic's migration context (every component checks the metadata DB's migrations at
  start), and ``setup plugin ...`` where Airflow does not silence it itself. A stdlib logger:
  its level is set in the dict config.
- ``airflow.sdk.definitions.connection``: a warning about the ``_`` in ``spark_connect`` (the
  provider's own connection type) on every read of that connection.
- The DAG processor's manager: ``Not time to refresh bundle dags-folder`` every five seconds.
  Airflow's own loggers are structlog loggers, filtered by a per-logger table that Airflow's
  ``[logging]`` section cannot set; it is filled here, before any of them is created (an
  Airflow without that table keeps its levels).
"""

from __future__ import annotations

import contextlib
from copy import deepcopy
from typing import Any

from airflow.config_templates.airflow_local_settings import (  # noqa: F401  # read by Airflow
    DEFAULT_LOGGING_CONFIG,
    DEFAULT_REMOTE_CONN_ID,
    REMOTE_TASK_LOG,
)

QUIET = {  # logger -> the least level it prints
    "alembic": "WARNING",
    "airflow.dag_processing.manager.DagFileProcessorManager": "WARNING",
    # "Connection schemes (type: spark_connect) shall not contain '_' according to RFC3986",
    # logged on every read of a connection of the Spark provider's own type.
    "airflow.sdk.definitions.connection": "ERROR",
}

LOGGING_CONFIG: dict[str, Any] = deepcopy(DEFAULT_LOGGING_CONFIG)
LOGGING_CONFIG["loggers"].update({name: {"level": level} for name, level in QUIET.items()})


def _quiet_structlog_loggers() -> None:
    with contextlib.suppress(ImportError, AttributeError):
        from airflow._shared.logging.structlog import NAME_TO_LEVEL, PER_LOGGER_LEVELS

        for name, level in QUIET.items():
            PER_LOGGER_LEVELS[name] = NAME_TO_LEVEL[level.lower()]


_quiet_structlog_loggers()
