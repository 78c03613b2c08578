"""The benchmark's world: a temp ``EOS_DATA_DIR``, the embedded broker, one shared Spark session.

Everything runs on the embedded default, as ``./dev demo`` does: the broker is started with
``eos.tools.servers.broker.start`` under a temporary data directory and stopped at the end, unless
``KAFKA_BOOTSTRAP_SERVERS`` names another broker (then that one is used and left alone). The
Spark session is ``eos.compute.session.local_session`` (``local[2]``), created once and shared
by every epoch, as the test suite does; the cost of starting Spark for each epoch the way
production does (``spark-submit``) is measured separately.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.memory import TreeSampler
from eos.core.config import PipelineConfig
from eos.core.kafka import local_broker
from eos.tools.pipelines import write_pipeline


@dataclass
class Env:
    workdir: Path
    bootstrap: str
    spark: Any
    sampler: TreeSampler
    spark_start_s: float | None = None  # first in-process session creation (JVM + context)
    notes: list[str] = field(default_factory=list)

    def settings(self) -> dict[str, Any]:
        from eos.core.kafka import client_settings

        return client_settings()

    def config(
        self,
        name: str,
        topic: str,
        *,
        window: str = "60s",
        lateness: str = "10s",
        max_records: int = 250_000,
        split_records: int = 250_000,
        retention: int = 3,
        log_retention_ms: int | None = None,
        sink_log_retention_ms: int | None = None,
        **sections: Any,
    ) -> PipelineConfig:
        """A pipeline config file under the work dir (spark-submit needs a real file), written
        and validated by the library's pipeline factory (``eos.tools.pipelines``): the clicks
        shape and aggregations, tumbling ``window`` windows; ``sections`` replace any other
        top-level section (``sinks``, ``compute``, ``event``, ...)."""
        config = write_pipeline(
            self.workdir / "configs",
            name=name,
            kafka={"topic": topic, "read_timeout": "60s", "split_records": split_records},
            window={"type": "tumbling", "size": window, "allowed_lateness": lateness},
            epoch={"max_records": max_records, "staging_retention": retention},
            **{"tables": {"root": str(self.workdir / "tables" / name)}, **sections},
        )
        # Retentions below the config's floor (1 h), so that 1,000 epochs built in minutes get
        # cleaned up: safe here, where no two attempts of an epoch ever run at once. So these
        # two, and only they, are set past validation, on the validated config.
        if log_retention_ms is not None:
            epoch = config.epoch.model_copy(update={"log_retention": log_retention_ms})
            config = config.model_copy(update={"epoch": epoch})
        if sink_log_retention_ms is not None and "sinks" not in sections:
            from eos.sinks.delta.sink import DeltaSinkOptions

            bounded = {output: [{"delta": DeltaSinkOptions.model_construct(
                table=table, log_retention=sink_log_retention_ms)}]
                for output, table in (("windows", "target"), ("late", "late"),
                                      ("quarantine", "quarantine"))}
            config = config.model_copy(
                update={"sinks": config.sinks.model_copy(update=bounded)})
        return config


def describe_broker(external: str, started: bool) -> str:
    """Which broker the figures are on, in words."""
    if external:
        return f"the one KAFKA_BOOTSTRAP_SERVERS names ({external})"
    state = local_broker() or {}
    if state.get("kind") == "apache-kafka":
        return (f"Apache Kafka {state.get('version')} on this machine (single KRaft node, "
                "SASL/SCRAM, eos broker start --apache-kafka)")
    where = "started for this run" if started else "the test suite's"
    return f"the embedded mock cluster (librdkafka's, in memory; {where})"


@contextlib.contextmanager
def environment(
    workdir: Path | None = None, spark: Any = None, keep: bool = False,
    topics: Sequence[str] = (), with_spark: bool = True, broker_kind: str = "mock",
) -> Iterator[Env]:
    """Set up (and tear down) broker, data dir and Spark; reuse a given session if any.

    ``topics`` (``NAME:PARTITIONS``) are created when this starts the embedded broker itself;
    with a broker already serving (the test suite's, or ``KAFKA_BOOTSTRAP_SERVERS``) a note
    says they were not, and a topic gets that broker's default partitions. ``with_spark=False``:
    no in-process session (``Env.spark`` is None; bench.dag_runs computes on Connect only).
    ``broker_kind``: the broker this starts, the embedded mock or ``apache-kafka``
    (``eos broker start --apache-kafka``); a note names it, so every figure says its broker.
    """
    from eos.tools.servers import broker
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    owned_dir = workdir is None
    root = Path(tempfile.mkdtemp(prefix="eos-bench-")) if owned_dir else Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    previous_data_dir = os.environ.get("EOS_DATA_DIR")
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    started_broker = False
    own_spark = spark is None and with_spark
    with TreeSampler() as sampler:
        try:
            if external:
                bootstrap = external
            elif spark is not None and previous_data_dir and local_broker() is not None:
                # Inside the test suite: its session-wide broker is already serving.
                bootstrap = local_broker()["bootstrap"]
            else:
                os.environ["EOS_DATA_DIR"] = str(root / "data")
                bootstrap = broker.start(topics, kind=broker_kind)["bootstrap"]
                started_broker = True
            env = Env(root, bootstrap, spark, sampler)
            env.notes.append(f"broker: {describe_broker(external, started_broker)}")
            if topics and not started_broker:
                env.notes.append(f"topics {', '.join(topics)} not created: the broker at "
                                 f"{bootstrap} was already serving")
            if own_spark:
                from eos.compute.session import local_session as spark_session

                started = time.perf_counter()
                env.spark = spark_session(env.config("bench-session", "bench-session"))
                env.spark_start_s = time.perf_counter() - started
            yield env
        finally:
            if own_spark and "env" in locals() and env.spark is not None:
                env.spark.stop()
            if started_broker:
                broker.stop()
            if previous_data_dir is None:
                os.environ.pop("EOS_DATA_DIR", None)
            else:
                os.environ["EOS_DATA_DIR"] = previous_data_dir
            if owned_dir and not keep:
                shutil.rmtree(root, ignore_errors=True)
