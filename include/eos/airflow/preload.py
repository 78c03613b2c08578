"""Import what the epoch's tasks import once, in the scheduler, before it forks them.

Airflow's LocalExecutor runs each task in a process forked from one of its workers, which are
forked from the scheduler (``airflow.sdk.execution_time.supervisor``: ``os.fork()``). A module
imported there before the fork is already in every task; one imported by the task is paid by
every task, every epoch: ~2.3-3.7 s for pyarrow, deltalake, confluent-kafka and Spark
Connect's client (which imports pandas) on this machine (``python -m bench.task_startup``).

Importing is all this does: no client, connection, thread or file is created here, so nothing
crosses the fork that a child could find half-used (gRPC and librdkafka start their threads
when a channel or client is created, in the task). ``plugins/airflow_local_settings.py`` calls
``preload_in_scheduler`` in every Airflow component; only the scheduler imports anything (an API
server or DAG processor would only grow).
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
    "eos.core.rewind",
    "eos.sinks.delta",
    "eos.sinks.kafka",
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


_took: dict[str, float] = {}  # what the first preload of this process took


def preload_in_scheduler(argv: Sequence[str] | None = None) -> None:
    """``preload`` when this process is the scheduler (see the module's docstring), once: the
    plugins manager imports the settings file a second time, as a plugin, when logging is set
    up, which is when the first preload's figures are logged."""
    if not is_scheduler(sys.argv if argv is None else argv):
        return
    if not _took:
        _took.update(preload())
    log.info("eos preload: %d modules for the tasks, imported in %.2f s at scheduler start",
             len(_took), sum(_took.values()))
