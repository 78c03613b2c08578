"""Import what the epoch's tasks import once, in the process that forks them, before it does.

An Airflow task runs in a process forked from a long-lived one: Airflow's supervisor
(``airflow.sdk.execution_time.supervisor``) calls ``os.fork()`` in
- a LocalExecutor worker, itself forked from the scheduler;
- a Celery worker's pool process (``airflow celery worker``), forked from the worker's main
  process.
A module imported in that ancestor before the fork is already in every task; one imported by
the task is paid by every task, every epoch: ~2-3.7 s for pyarrow, deltalake, confluent-kafka
and Spark Connect's client (which imports pandas) (docs/benchmarks.md, "Task start-up").

Airflow imports ``airflow_local_settings`` in every component as it starts, the Celery worker's
main process included (before its pool forks); that file calls ``preload_in_scheduler``, which
preloads only where tasks are forked: in the scheduler when one of its executors is the
LocalExecutor, and in a Celery worker. An API server, DAG processor, triggerer, or a scheduler
that only hands tasks to Celery would only grow.

Importing is all this does: no client, connection, thread or file is created here, so nothing
crosses the fork that a child could find half-used (gRPC and librdkafka start their threads
when a channel or client is created, in the task). A deployment's ``airflow_local_settings.py``
holds the lines of ``eos.airflow.environment.LOCAL_SETTINGS``.
"""

from __future__ import annotations

import importlib
import logging
import sys
import time
from collections.abc import Sequence

log = logging.getLogger(__name__)

# What begin, precommit (on Spark Connect), commit and abort import, including what they load
# only when first used (listed by a forked task's new ``sys.modules`` after an epoch).
TASK_MODULES = (
    "pyspark.sql.connect.session",  # pandas, grpc, protobuf
    "pyarrow.parquet",
    "pyarrow.compute",
    "pyarrow.fs",
    "pyarrow.dataset",  # pyarrow.parquet.read_table: N-1's state files
    "deltalake",
    "confluent_kafka",
    "confluent_kafka.admin",  # begin's topic metadata
    "grpc._channel",  # loaded when the first channel opens
    "encodings.idna",  # a channel's target host name
    "pyspark.sql.connect.datasource",  # registering the reader
    "eos.compute.connect",
    "eos.compute.spark",
    "eos.compute.precommit.stager",  # and the rest of eos.compute.precommit
    "eos.compute.reader",  # and the parser: the driver builds its options
    "eos.core.protocol",
    "eos.core.filters",  # and sqlglot: the columns a filter or select reads, asked by precommit
    "eos.core.rewind",
    "eos.sinks.delta.sink",
    "eos.sinks.kafka.sink",
)


def preload(modules: Sequence[str] = TASK_MODULES) -> dict[str, float]:
    """Import ``modules``; returns the seconds each took (0 when already imported). A module
    that fails to import is logged and skipped: the task will import it and fail clearly."""
    took = {}
    for name in modules:
        started = time.perf_counter()
        try:
            importlib.import_module(name)
        except Exception as error:  # a preload never stops the scheduler
            log.warning("eos preload: %s did not import (%s); tasks import it themselves",
                        name, error)
            continue
        took[name] = time.perf_counter() - started
    return took


def is_scheduler(argv: Sequence[str]) -> bool:
    """``airflow scheduler`` (``airflow standalone`` starts one as a child process)."""
    return len(argv) > 1 and argv[1] == "scheduler"


def is_celery_worker(argv: Sequence[str]) -> bool:
    """``airflow celery worker``: its pool processes fork the tasks."""
    return list(argv[1:3]) == ["celery", "worker"]


def runs_local_executor() -> bool:
    """Whether this deployment's ``[core] executor`` list holds the LocalExecutor (the only
    executor whose tasks are forked from the scheduler)."""
    from airflow.configuration import conf

    return "LocalExecutor" in conf.get("core", "executor", fallback="LocalExecutor")


def forks_tasks(argv: Sequence[str]) -> bool:
    """This process is the ancestor of task processes: a Celery worker, or a scheduler running
    the LocalExecutor."""
    return is_celery_worker(argv) or (is_scheduler(argv) and runs_local_executor())


_took: dict[str, float] = {}  # what the first preload of this process took


def preload_in_scheduler(argv: Sequence[str] | None = None) -> None:
    """``preload`` when this process forks the tasks (see the module's docstring), once: the
    plugins manager imports the settings file a second time, as a plugin, when logging is set
    up, which is when the first preload's figures are logged. (The name predates the Celery
    worker's case; it is what a deployment's ``airflow_local_settings`` calls.)"""
    argv = sys.argv if argv is None else argv
    if not forks_tasks(argv):
        return
    if not _took:
        _took.update(preload())
    where = "Celery worker" if is_celery_worker(argv) else "scheduler"
    log.info("eos preload: %d modules for the tasks, imported in %.2f s at %s start",
             len(_took), sum(_took.values()), where)
