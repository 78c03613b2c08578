"""Stall alerts (``alerts.stall_after``) as an Airflow Deadline Alert on every DAG run.

Each run of a pipeline's DAG gets a deadline ``stall_after`` after it was queued
(``DeadlineReference.DAGRUN_QUEUED_AT``). A run that succeeds in time is forgotten (Airflow
prunes its deadline); one that has not succeeded by then (failed, or still running: waiting behind
an earlier run in ``begin``, or slow) makes the scheduler hand ``stall_alert`` to the
triggerer (an ``AsyncCallback``, which the triggerer runs). ``stall_alert`` then
looks at the pipeline itself (``eos.core.pipeline_status.check_stall``: the checkpoint's age and
the lag
from the broker's watermarks): a missed deadline alone is no stall (a backfill queues many runs at
once; a quiet topic has nothing to commit). Only a stall is reported: one structured log line
(``eos alert: stall ...``, in the triggerer's log) and the configured notifier
(``alerts.notifier``).

Not covered, because no run exists to carry a deadline: a paused DAG, a stopped scheduler, a
schedule that creates no runs. A stopped triggerer runs no callbacks (Airflow's own health
checks cover the scheduler and triggerer). One stall yields one alert per run that missed its
deadline (with ``max_active_runs=1``: the failed run and the run stuck behind it), not a
reminder every ``stall_after``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from datetime import timedelta
from typing import Any

from eos.core.config import PipelineConfig

log = logging.getLogger(__name__)

ALERT_KEY = "eos_stall"  # the stall's fields in the notifier's context


def stall_deadline(config: PipelineConfig) -> Any:
    """The DAG's ``deadline`` for ``config``'s ``alerts.stall_after`` (None when unset)."""
    if config.alerts.stall_after is None:
        return None
    from airflow.sdk.definitions.deadline import AsyncCallback, DeadlineAlert, DeadlineReference

    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(milliseconds=config.alerts.stall_after),
        callback=AsyncCallback(stall_alert, kwargs={"config_path": str(config.source_path)}),
    )


async def stall_alert(config_path: str, context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The deadline callback (in the triggerer): check the pipeline, and when it is stalled log
    the alert and tell the notifier. Returns the check's fields (Airflow keeps them in the
    callback's event). The notifier's failure fails the callback, after the log line."""
    from eos.airflow.connections import aexport_kafka_connection
    from eos.airflow.storage import aexport_credentials
    from eos.core.config import load_config
    from eos.core.pipeline_status import check_stall
    from eos.core.storage import is_remote

    context = dict(context or {})
    config = load_config(config_path)
    if is_remote(config.root):  # the store's connection, as the tasks export it
        await aexport_credentials()
    await aexport_kafka_connection()  # the stall check reads the broker's watermarks
    check = await asyncio.to_thread(check_stall, config)
    run = context.get("dag_run") or {}  # Airflow's DAG run as its REST API shows it
    fields = {"pipeline": config.name, "dag_id": run.get("dag_id", config.dag_id),
              "run_id": run.get("dag_run_id"), **check.fields()}
    line = " ".join(f"{k}={v}" for k, v in fields.items())
    if not check.stalled:
        log.info("eos alert: no stall %s", line)
        return fields
    log.error("eos alert: stall %s", line)
    if config.alerts.notifier:
        await notify(config, {**context, ALERT_KEY: fields, "message": check.message()})
    return fields


async def notify(config: PipelineConfig, context: dict[str, Any]) -> None:
    """Tell ``alerts.notifier``: an Airflow notifier class is built with ``notifier_kwargs`` and
    sent the context (``async_notify`` when it has one, else ``notify`` in a thread); a notifier
    instance is sent the context; a function is called with the context and
    ``notifier_kwargs`` (awaited when it is a coroutine function)."""
    from airflow.sdk import BaseNotifier
    from airflow.sdk.module_loading import import_string

    target = import_string(str(config.alerts.notifier))
    kwargs = dict(config.alerts.notifier_kwargs)
    if isinstance(target, type) and issubclass(target, BaseNotifier):
        target = target(**kwargs)
    if isinstance(target, BaseNotifier):
        if type(target).async_notify is not BaseNotifier.async_notify:
            target.context = context  # what ``await notifier`` renders and sends
            await target
        else:
            await asyncio.to_thread(target, context)
    elif inspect.iscoroutinefunction(target):
        await target(context, **kwargs)
    else:
        await asyncio.to_thread(target, context, **kwargs)
    log.info("eos alert: notified %s pipeline=%s", config.alerts.notifier, config.name)
