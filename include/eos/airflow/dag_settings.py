"""A pipeline's ``airflow`` section (``eos.core.config.dag``) as Airflow arguments: the task
defaults every phase task starts from and the DAG's own arguments. The protocol's policies are
laid over them by the tasks (``eos.airflow.retry_policy``): commit keeps retrying until it
succeeds whatever ``retries`` says."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from eos.core.config import PipelineConfig
from eos.core.config.dag import DEFAULT_RETRIES
from eos.core.errors import ConfigError

RETRY_DELAY = timedelta(seconds=10)  # begin's and abort's first retry, unless configured


def task_defaults(config: PipelineConfig) -> dict[str, Any]:
    """Owner, pool, queue, failure callback and retries of every task of the pipeline's DAGs."""
    dag = config.airflow
    out: dict[str, Any] = {
        "owner": dag.owner,
        "retries": DEFAULT_RETRIES if dag.retries is None else dag.retries,
        "retry_delay": (RETRY_DELAY if dag.retry_delay is None
                        else timedelta(milliseconds=dag.retry_delay)),
    }
    if dag.pool is not None:
        out["pool"] = dag.pool
    if dag.queue is not None:
        out["queue"] = dag.queue
    if (callback := failure_callback(config)) is not None:
        out["on_failure_callback"] = callback
    return out


def configured_retries(config: PipelineConfig) -> dict[str, Any]:
    """The retries and first delay ``airflow`` sets, for a task whose own policy they replace
    (precommit); empty when unset."""
    dag = config.airflow
    out: dict[str, Any] = {}
    if dag.retries is not None:
        out["retries"] = dag.retries
    if dag.retry_delay is not None:
        out["retry_delay"] = timedelta(milliseconds=dag.retry_delay)
    return out


def dag_arguments(config: PipelineConfig, tags: list[str], doc_md: str) -> dict[str, Any]:
    """The DAG's tags (eos's, then the configured ones), its docs (the configured ones first)
    and its access control."""
    dag = config.airflow
    out: dict[str, Any] = {
        "tags": list(dict.fromkeys([*tags, *dag.tags])),
        "doc_md": f"{dag.doc_md}\n\n{doc_md}" if dag.doc_md else doc_md,
    }
    if dag.access_control:
        out["access_control"] = {role: set(p) if isinstance(p, list)
                                 else {kind: set(perms) for kind, perms in p.items()}
                                 for role, p in dag.access_control.items()}
    return out


def failure_callback(config: PipelineConfig) -> Callable[..., Any] | None:
    """``airflow.on_failure_callback`` imported; ``ConfigError`` naming it when it does not
    import or is not callable (the pipeline's DAG is then a placeholder showing that)."""
    path = config.airflow.on_failure_callback
    if path is None:
        return None
    from airflow.sdk.module_loading import import_string

    try:
        target = import_string(path)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"airflow.on_failure_callback: cannot import {path!r}: {error}") \
            from None
    if not callable(target):
        raise ConfigError(f"airflow.on_failure_callback: {path!r} is not callable")
    return target
