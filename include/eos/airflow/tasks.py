"""The tasks of a pipeline's DAG and the phase callables they run: ``begin``, ``precommit`` (on
Spark Connect, or one spark-submit per epoch), ``commit`` and ``abort``, or the one ``epoch``
task of ``compute.tasks: one``. Each runs a phase of ``eos.core.protocol`` and records its try.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset, TriggerRule, task

from eos.airflow.assets import asset_extra, source_assets
from eos.airflow.precommit_operator import SPARK_CONN_ID, PrecommitOperator
from eos.airflow.retry_policy import (
    COMMIT_RETRIES,
    PRECOMMIT_RETRIES,
    phase_call,
    precommit_retries,
)
from eos.airflow.run_order import wait_for_earlier_runs
from eos.airflow.task_tries import attempt, record_try
from eos.compute.spark import (
    app_args,
    precommit_app,
    spark_conf,
    spark_submit_binary,
    submit_env,
)
from eos.core.config import PipelineConfig
from eos.core.errors import EXIT_PERMANENT

BEGIN_XCOM = "ti.xcom_pull(task_ids='{begin}')"
EPOCH_TASK = "epoch"
PLAN_XCOM = "plan"  # the one-task DAG's plan, pushed as soon as begin returns (for abort)

log = logging.getLogger(__name__)

PRECOMMIT_DOC = ("Stage epoch N in one Delta commit (no-op when staged for the same plan hash or "
                 "already committed). Retried on a transient failure (a server or broker that "
                 "does not answer, a lost Spark Connect session); a permanent one (data loss, a "
                 "bad config, a protocol violation) fails at once. ")
EPOCH_DOC = (
    "The whole epoch in one task (`compute.tasks: one`): begin, precommit on the Spark Connect "
    "server of connection `{connection}`, then commit, each phase logged and fenced exactly as "
    "in the three-task DAG. A retry re-runs all three: begin takes the logged plan, precommit "
    "finds it staged (or re-stages it after an abort), commit is idempotent. Retried like "
    "commit (it must eventually succeed); a permanent error fails it at once.")


def phase_tasks(config: PipelineConfig) -> dict[str, str]:
    """The task of the pipeline's DAG that runs each phase (the epochs view links its logs)."""
    if config.compute.tasks == "one":
        return {"begin": EPOCH_TASK, "precommit": EPOCH_TASK, "commit": EPOCH_TASK}
    return {"begin": "begin", "precommit": "precommit", "commit": "commit"}


# -- the tasks ----------------------------------------------------------------------------------

def begin_task(config: PipelineConfig) -> Any:
    """``begin``: plan epoch N before anything reads data."""

    @task(task_id="begin")
    @phase_call(config)
    def begin(**context: Any) -> dict[str, Any]:
        """Plan epoch N (or reuse this run's / the logged plan) before anything reads data."""
        return _begin(config, context, "begin")

    return begin()


def connect_precommit_task(config: PipelineConfig) -> Any:
    """precommit on the Spark Connect server of connection ``compute.connection``."""

    @task(task_id="precommit", doc_md=PRECOMMIT_DOC + "Runs on the Spark Connect server of "
          f"connection `{config.compute.connection}` (type spark_connect, token in the "
          "password); start a local one with `eos spark start`.", inlets=source_assets(config),
          **precommit_retries(config))
    @phase_call(config)
    def precommit(**context: Any) -> str:
        return _connect_stage(config, context, "precommit", _planned(config, context))

    return precommit()


def submit_precommit_task(config: PipelineConfig, group: str | None = None) -> Any:
    """precommit as one spark-submit per epoch (connection ``spark_default`` names the master);
    ``group``: the task group it is built in (``epoch_task_group``), whose begin it reads."""
    planned = BEGIN_XCOM.format(begin=f"{group}.begin" if group else "begin")
    return PrecommitOperator(
        task_id="precommit",
        application=precommit_app(),
        application_args=app_args(
            config, f"{{{{ {planned}['epoch'] }}}}", f"{{{{ {planned}['plan_hash'] }}}}"
        ),
        conf=spark_conf(config),
        conn_id=SPARK_CONN_ID,
        spark_binary=spark_submit_binary(),
        env_vars={k: v for k, v in submit_env().items() if k.startswith("PYSPARK_")},
        name=f"eos-precommit-{config.name}",
        eos_config=config,
        doc_md=PRECOMMIT_DOC + f"Exit code {EXIT_PERMANENT} is permanent. Needs connection "
        "`spark_default` naming the master, e.g. "
        'AIRFLOW_CONN_SPARK_DEFAULT=\'{"conn_type": "spark", "host": "local[2]"}\'.',
        inlets=source_assets(config),
        **precommit_retries(config),
    )


def commit_task(config: PipelineConfig, assets: dict[str, Asset], timeout: timedelta) -> Any:
    """``commit``: promote the staged epoch into every sink, publishing the sinks' assets."""

    @task(task_id="commit", outlets=list(assets.values()), execution_timeout=timeout,
          **COMMIT_RETRIES)
    @phase_call(config)
    def commit(**context: Any) -> dict[str, Any]:
        """Promote staged epoch N into every sink, then checkpoint it (no-op when committed)."""
        return _commit(config, context, "commit", _planned(config, context), assets)

    return commit()


def epoch_task(config: PipelineConfig, assets: dict[str, Asset]) -> Any:
    """begin, precommit and commit in one task (``compute.tasks: one``): what an epoch saves is
    two task start-ups and two scheduler handovers (``python -m bench.dag_runs``)."""

    @task(task_id=EPOCH_TASK, doc_md=EPOCH_DOC.format(connection=config.compute.connection),
          inlets=source_assets(config), outlets=list(assets.values()),
          execution_timeout=PRECOMMIT_RETRIES["execution_timeout"], **COMMIT_RETRIES)
    @phase_call(config)
    def epoch(**context: Any) -> dict[str, Any]:
        planned = _begin(config, context, EPOCH_TASK)
        context["ti"].xcom_push(key=PLAN_XCOM, value=planned)
        _connect_stage(config, context, EPOCH_TASK, planned)
        return _commit(config, context, EPOCH_TASK, planned, assets)

    return epoch()


def abort_task(config: PipelineConfig, timeout: timedelta) -> Any:
    """``abort``: discard epoch N's staged rows once the task staging it failed."""

    @task(task_id="abort", trigger_rule=TriggerRule.ONE_FAILED, execution_timeout=timeout)
    @phase_call(config)
    def abort(**context: Any) -> str:
        """Discard epoch N's staged rows after precommit (or the one ``epoch`` task) failed;
        the run still fails. Refused once the epoch's commit has begun (``IN_COMMIT``)."""
        return _abort(config, context)

    return abort()


# -- the phases they run ------------------------------------------------------------------------

def _plan_of_run(config: PipelineConfig, context: Any) -> dict[str, Any] | None:
    """What ``begin`` returned for this run (epoch, plan_hash, records, ranges), if it ran: the
    ``begin`` task's value, or what the one-task DAG's ``epoch`` task pushed once it began."""
    if config.compute.tasks == "one":
        return context["ti"].xcom_pull(task_ids=_sibling(context, EPOCH_TASK), key=PLAN_XCOM)
    return context["ti"].xcom_pull(task_ids=_sibling(context, "begin"))


def _sibling(context: Any, task_id: str) -> str:
    """The id of the phase task ``task_id`` beside the running one: in the pipeline's own DAG
    the bare id, in a task group of another DAG (``epoch_task_group``) the group's."""
    group, _, _ = str(context["ti"].task_id).rpartition(".")
    return f"{group}.{task_id}" if group else task_id


def _planned(config: PipelineConfig, context: Any) -> dict[str, Any]:
    """This run's plan from ``begin`` (precommit and commit of the three-task DAG)."""
    from eos.core.errors import ProtocolViolation

    planned = _plan_of_run(config, context)
    if not planned:
        raise ProtocolViolation("this run has no plan from begin: clear the run from begin")
    return planned


def _begin(config: PipelineConfig, context: Any, task_id: str) -> dict[str, Any]:
    """Plan epoch N (or reuse this run's / the logged plan) before anything reads data."""
    from eos.airflow.metrics import begin_metrics, safely
    from eos.core.plan import plan_summary
    from eos.core.protocol import begin_epoch

    wait_for_earlier_runs(context)
    started = time.monotonic()
    began = begin_epoch(config, run_id=context["run_id"], attempt=attempt(context, task_id))
    plan = began.plan
    safely(begin_metrics, config, plan, (time.monotonic() - started) * 1000)
    record_try(config, context, task_id, plan.epoch, plan.hash, began.outcome)
    summary = plan_summary(plan)
    log.info("eos begin: %s", summary)
    return summary


def _connect_stage(config: PipelineConfig, context: Any, task_id: str,
                   planned: dict[str, Any]) -> str:
    """Stage the planned epoch on the Spark Connect server of ``compute.connection``."""
    from eos.airflow.metrics import precommit_metrics, safely
    from eos.compute.connect import airflow_endpoint
    from eos.compute.spark import connect_precommit

    endpoint = airflow_endpoint(config.compute.connection)
    log.info("eos precommit: epoch=%s plan_hash=%s on %s", planned["epoch"],
             planned["plan_hash"], endpoint.address)
    result = connect_precommit(config, planned["epoch"], planned["plan_hash"], endpoint,
                               attempt(context, task_id))
    safely(precommit_metrics, config, result)
    record_try(config, context, task_id, result.epoch, result.plan_hash, result.outcome)
    return result.line


def _commit(config: PipelineConfig, context: Any, task_id: str, planned: dict[str, Any],
            assets: dict[str, Asset]) -> dict[str, Any]:
    """Promote staged epoch N into every sink, then checkpoint it (no-op when committed), and
    say so in the sinks' asset events."""
    from eos.airflow.metrics import commit_metrics, safely
    from eos.core.errors import ProtocolViolation
    from eos.core.protocol import commit as commit_epoch

    result = commit_epoch(config, planned["epoch"], attempt=attempt(context, task_id))
    safely(commit_metrics, config, result)
    record_try(config, context, task_id, result.epoch, result.plan_hash, result.outcome)
    if result.plan_hash != planned["plan_hash"]:
        raise ProtocolViolation(
            f"epoch {result.epoch} committed plan {result.plan_hash} but this run "
            f"planned {planned['plan_hash']}"
        )
    summary = {**result.summary(), "ranges": planned["ranges"],
               "duration_ms": result.duration_ms}
    for name, asset in assets.items():
        context["outlet_events"][asset].extra = asset_extra(planned, result, name)
    log.info("eos commit: %s", summary)
    return summary


def _abort(config: PipelineConfig, context: Any) -> str:
    """Discard this run's staged epoch, if begin planned one, and record the try."""
    from eos.core.protocol import abort as abort_epoch

    planned = _plan_of_run(config, context)
    if not planned:
        log.info("eos abort: begin produced no plan in this run, nothing was staged")
        return "nothing to abort"
    reason = f"{phase_tasks(config)['precommit']} failed in run {context['run_id']}"
    outcome = abort_epoch(config, planned["epoch"], reason, attempt=attempt(context, "abort"))
    record_try(config, context, "abort", planned["epoch"], planned["plan_hash"], outcome)
    log.info("eos abort: epoch=%s plan_hash=%s outcome=%s",
             planned["epoch"], planned["plan_hash"], outcome)
    return str(outcome)
