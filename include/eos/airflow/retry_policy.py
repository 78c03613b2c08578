"""The protocol's retry policy (``eos.core.errors``) in Airflow's terms: a ``TransientError`` (or
anything unexpected) fails the attempt and Airflow retries it with backoff; a ``PermanentError``
(protocol violation, data loss, bad config) fails the task at once, without retries, with the
error's message. Also how often and how long the phases' tasks are retried."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from eos.core.config import PipelineConfig

PRECOMMIT_RETRIES = {"retries": 2, "retry_delay": timedelta(seconds=30),
                     "execution_timeout": timedelta(minutes=30)}
COMMIT_RETRIES = {
    # Commit must eventually succeed: idempotent, so retried for a long time.
    "retries": 100, "retry_delay": timedelta(seconds=15), "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=10),
}


def precommit_retries(config: PipelineConfig) -> dict[str, Any]:
    """Precommit's policy with the retries and delay the pipeline's ``airflow`` section sets:
    a failed precommit is aborted and retried, so any count is safe."""
    from eos.airflow.dag_settings import configured_retries

    return {**PRECOMMIT_RETRIES, **configured_retries(config)}


def airflow_error(error: Exception) -> Exception:
    """The protocol's retry policy in Airflow's terms: a PermanentError becomes an
    AirflowFailException (no retries, the message as the failure reason)."""
    from eos.core.errors import is_permanent

    if is_permanent(error):
        return AirflowFailException(f"{type(error).__name__}: {error}")
    return error


def phase_call(config: PipelineConfig) -> Callable[[Any], Any]:
    """Run a library phase of ``config``'s pipeline inside a task: log its lines, give it the
    store's credentials when its tables live on one, the Kafka connection's settings and the
    postgres sinks' connections (``eos.airflow.connections``), apply the retry policy to its
    errors."""

    def decorate(func: Any) -> Any:
        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            from eos.airflow.connections import export_kafka_connection, export_postgres_connections
            from eos.airflow.storage import export_credentials
            from eos.core.storage import is_remote

            _phase_logging()
            if is_remote(config.root):
                export_credentials()  # its connection, if one exists (never logged)
            export_kafka_connection()  # Kafka's, if one exists (never logged)
            export_postgres_connections(config)  # each postgres sink's (never logged)
            try:
                return func(*args, **kwargs)
            except Exception as error:
                mapped = airflow_error(error)
                if mapped is error:
                    raise
                raise mapped from error

        return run

    return decorate


def _phase_logging() -> None:
    """Send the library's ``phase=...`` lines (logger "eos") to the task log, without Airflow's
    warning that a connection type should not contain '_', which it logs on every read of a
    connection of the Spark provider's own type ``spark_connect`` (in any deployment, not only
    where ``eos.airflow.logging_config`` is the logging config)."""
    import logging

    from eos.core.phaselog import configure

    configure()
    logging.getLogger("airflow.sdk.definitions.connection").setLevel(logging.ERROR)
