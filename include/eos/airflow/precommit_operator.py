"""The ``precommit`` task of ``compute.mode: submit``: one ``spark-submit`` of
``eos/compute/app.py`` per epoch, with the protocol's retry policy."""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from eos.core.config import PipelineConfig

SPARK_CONN_ID = "spark_default"
ERROR_PREFIX = "eos: error:"  # how the app prints its error (eos.compute.app)

log = logging.getLogger(__name__)


class PrecommitOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` with the protocol's retry policy: when the precommit app fails with
    a permanent error (a protocol violation, data loss, a bad config; it exits with
    ``EXIT_PERMANENT``), the task fails at once with the app's error line instead of being
    retried. The app writes what it staged, or its error, to a result file
    (``--result-file``) this task reads: the error decides the retry policy, the result sends
    the epoch's precommit metrics, as the Spark Connect task does (``eos.airflow.metrics``).
    A driver on another host (cluster deploy mode) leaves no file here, and then no metrics
    (its failures are retried). Only the provider's public API is used: ``execute`` and the
    ``application_args`` field."""

    def __init__(self, *, eos_config: PipelineConfig | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.eos_config = eos_config

    def execute(self, context: Any) -> str | None:
        """The submit, with the Kafka connection's settings handed to the app and the local
        executors it forks in a file only this user reads (``handed_to_children``), never on
        its command line or in its Spark conf."""
        from eos.airflow.connections import export_kafka_connection
        from eos.core.bootstrap import handed_to_children

        export_kafka_connection()
        with handed_to_children():
            return self._submit(context)

    def _submit(self, context: Any) -> str | None:
        args = self.application_args
        with tempfile.TemporaryDirectory(prefix="eos-precommit-") as scratch:
            result_file = Path(scratch) / "result.json"
            self.application_args = [*(args or []), "--result-file", str(result_file)]
            try:
                super().execute(context)
            except AirflowException as error:
                message = permanent_error(result_file)
                if message is None:
                    raise
                raise AirflowFailException(message) from error
            finally:
                self.application_args = args
            return self._staged(result_file)

    def _staged(self, result_file: Path) -> str | None:
        """After a successful submit: send the precommit metrics of the app's result, and
        return its phase line (the task's XCom, as in Connect mode)."""
        from eos.airflow.metrics import precommit_metrics, safely
        from eos.core.protocol import StageResult

        try:
            result = StageResult.from_payload(json.loads(result_file.read_text())["result"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.info("eos precommit: no result file from the app (%s): no precommit metrics",
                     type(error).__name__)
            return None
        if self.eos_config is not None:
            safely(precommit_metrics, self.eos_config, result)
        return result.line


def permanent_error(result_file: Path) -> str | None:
    """The app's error line when its result file holds a permanent error (the app then exits
    with ``EXIT_PERMANENT``); None when it holds none, or a transient one. The line is the one
    the app printed: its first line, as the task log shows it."""
    from eos.core.errors import from_payload, is_permanent

    try:
        payload = json.loads(result_file.read_text())["error"]
        error = from_payload(payload)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not is_permanent(error):
        return None
    return f"{ERROR_PREFIX} {payload.get('type')}: {error}".splitlines()[0].strip()
