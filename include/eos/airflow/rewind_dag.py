"""The maintenance DAG of each pipeline: one manual run is one rewind (``eos.core.rewind``)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from airflow.sdk import DAG, Param, task

from eos.airflow.dag_settings import dag_arguments, task_defaults
from eos.airflow.pipeline_dag import START_DATE
from eos.airflow.retry_policy import phase_call
from eos.core.config import PipelineConfig

log = logging.getLogger(__name__)

REWIND_SUFFIX = "__rewind"
REWIND_DOC = """
### Rewind (`eos.core.rewind`)
One manual run takes the pipeline back to committed epoch `to_epoch`: every Delta sink, staging
and the checkpoint table are restored (Delta `RESTORE`, visible in each table's history) to the
version at which that epoch was committed, with their markers saying it. The pipeline DAG's
next runs then replay the later epochs from their logged plans, with the current code and
config. Pause the pipeline DAG while this runs.

- `to_epoch`: the last epoch that stays committed; -1 replays everything (needed after a change
  of what rows mean: parsing, grouping, windows, aggregations).
- `republish`: also rewind sinks that cannot withdraw records (Kafka topics); their consumers
  then see the replayed epochs a second time.

Retries: a refusal (`RewindRefused`: not allowed as asked, nothing changed) or an unfinished
rewind to another epoch fails at once; anything else is retried, and a retry finishes the same
rewind (each step is idempotent).
"""


def rewind_dag_id(config: PipelineConfig) -> str:
    return config.dag_id + REWIND_SUFFIX


def build_rewind_dag(config: PipelineConfig, **dag_kwargs: Any) -> DAG:
    """The maintenance DAG of one pipeline: each manual run is one rewind (``REWIND_DOC``)."""
    kwargs: dict[str, Any] = {
        "dag_id": rewind_dag_id(config),
        "description": f"rewind '{config.name}' to a committed epoch; its next runs replay",
        "schedule": None,
        "start_date": START_DATE,
        "catchup": False,
        "max_active_runs": 1,
        "default_args": {**task_defaults(config), "retry_exponential_backoff": True,
                         "execution_timeout": timedelta(minutes=30)},
        "params": {
            "to_epoch": Param(type="integer", minimum=-1,
                              description="the last epoch that stays committed (-1: none)"),
            "republish": Param(False, type="boolean",
                               description="also rewind Kafka sinks: consumers see the replayed "
                               "epochs again"),
        },
        **dag_arguments(config, ["eos", "eos-maintenance", config.name], REWIND_DOC),
        **dag_kwargs,
    }
    with DAG(**kwargs) as dag:

        @task(task_id="rewind")
        @phase_call(config)
        def rewind(**context: Any) -> dict[str, Any]:
            """Restore every table to the epoch asked for (idempotent: a retry finishes it)."""
            from eos.core.rewind import rewind as rewind_pipeline

            params = context["params"]
            result = rewind_pipeline(config, int(params["to_epoch"]),
                                     republish=bool(params["republish"]),
                                     run_id=context["run_id"])
            summary = result.summary()
            log.info("eos rewind: %s", summary)
            return summary

        rewind()
    return dag
