"""Where precommit's Spark work runs (``compute.mode``), in one place for ``eos run`` and the DAG.

- ``connect`` (default): this process opens a session on the long-lived Spark Connect server
  (``eos.connect``) and runs ``eos.protocol.precommit`` with it.
- ``submit``: ``spark-submit`` of ``spark_apps/precommit.py``, the same command the DAG's
  SparkSubmitOperator runs: one Spark application per epoch, the same precommit inside.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from eos.config import PROJECT_ROOT, PipelineConfig
from eos.errors import EXIT_PERMANENT, PermanentError, TransientError

PRECOMMIT_APP = PROJECT_ROOT / "spark_apps" / "precommit.py"


def worker_python() -> str:
    """The interpreter Spark's Python workers run: ``PYSPARK_PYTHON`` when set (a cluster's
    workers have their own path, e.g. docker-compose sets ``python3``), else this one."""
    return os.environ.get("PYSPARK_PYTHON") or sys.executable


def spark_conf(config: PipelineConfig) -> dict[str, str]:
    return {
        "spark.sql.shuffle.partitions": str(config.spark.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # no progress bars in task logs
        "spark.driver.memory": config.spark.driver_memory,
        "spark.pyspark.python": worker_python(),
        "spark.pyspark.driver.python": sys.executable,
        **config.spark.conf,
    }


def app_args(config: PipelineConfig, epoch: int | str, plan_hash: str | None = None) -> list[str]:
    args = ["--config", str(config.source_path), "--epoch", str(epoch)]
    if plan_hash:
        args += ["--plan-hash", plan_hash]
    return args


def submit_env() -> dict[str, str]:
    """Spark's Python workers must run this interpreter, not whatever python3 is on PATH."""
    env = dict(os.environ)
    # pyspark marks a process that opened a Connect session in its environment; a child that
    # inherited the mark would try to open a Connect session instead of starting Spark.
    from eos.connect import CONNECT_MARKS

    for key in CONNECT_MARKS:
        env.pop(key, None)
    env["PYSPARK_PYTHON"] = worker_python()
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def spark_submit_binary() -> str:
    local = Path(sys.executable).parent / "spark-submit"
    return str(local) if local.exists() else "spark-submit"


def submit_command(config: PipelineConfig, epoch: int, plan_hash: str | None = None) -> list[str]:
    master = os.environ.get("EOS_SPARK_MASTER", config.spark.master)
    cmd = [spark_submit_binary(), "--master", master, "--name", f"eos-precommit-{config.name}"]
    for key, value in spark_conf(config).items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, str(PRECOMMIT_APP), *app_args(config, epoch, plan_hash)]


def local_session(config: PipelineConfig) -> Any:
    """A classic (in-process JVM) session: the submit app's, and tools' that want no server.
    Under spark-submit, submit's own settings take precedence."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from eos.connect import SESSION_CONF

    builder = (
        SparkSession.builder.appName(f"eos-precommit-{config.name}")
        .master(os.environ.get("EOS_SPARK_MASTER", config.spark.master))
        .config("spark.sql.shuffle.partitions", str(config.spark.shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # pyspark records the Python call site of every Column call for error messages; with
        # IPython absent it retries that import each time: ~0.1 s of plan building per epoch.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
    )
    for key, value in {**SESSION_CONF, **config.spark.conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    from eos.reader import KafkaRangeDataSource

    spark.dataSource.register(KafkaRangeDataSource)
    return spark


def run_precommit(config: PipelineConfig, epoch: int, plan_hash: str | None = None) -> str:
    """Stage epoch N where ``compute.mode`` says; return its phase line, or raise a typed error.
    Connect mode uses the server ``eos.connect.resolve_endpoint`` finds (the DAG passes the one
    of its Airflow connection to ``connect_precommit`` itself)."""
    if config.compute.mode == "submit":
        return submit_precommit(config, epoch, plan_hash)
    return connect_precommit(config, epoch, plan_hash)


def connect_precommit(config: PipelineConfig, epoch: int, plan_hash: str | None = None,
                      endpoint: Any = None) -> str:
    """precommit in this process, its Spark work on the Connect server. An ``EosError`` raised on
    an executor (data loss, a broker that does not answer) keeps its class and retry policy."""
    from pyspark.errors import PySparkException

    from eos import connect
    from eos.errors import SparkJobFailed, describe_failure, wrapped_error_class
    from eos.protocol import precommit

    endpoint = endpoint or connect.resolve_endpoint()
    with connect.session(config, endpoint) as spark:
        try:
            result = precommit(config, epoch, spark=spark, expected_hash=plan_hash)
        except Exception as error:
            wrapped = wrapped_error_class(error)
            if wrapped is not None:
                raise wrapped(describe_failure(error).split(": ", 1)[-1]) from error
            if isinstance(error, PySparkException) and connect.compute_error(
                    error, endpoint) is None:
                raise SparkJobFailed(f"precommit of epoch {epoch} failed on {endpoint.address}: "
                                     f"{describe_failure(error)}") from error
            raise
    return result.line


def submit_precommit(config: PipelineConfig, epoch: int, plan_hash: str | None = None) -> str:
    """Run the Spark app for epoch N; return its result line, or raise with its error."""
    proc = subprocess.run(
        submit_command(config, epoch, plan_hash),
        env=submit_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    result = [line for line in proc.stdout.splitlines() if "phase=precommit " in line]
    if proc.returncode != 0:
        # spark-submit merges the Python driver's stderr into its stdout: look in both.
        output = proc.stdout.splitlines() + proc.stderr.splitlines()
        errors = [line for line in output if line.startswith("eos: error")]
        detail = errors[-1][len("eos: error: "):] if errors else "\n".join(output[-15:])
        kind = PermanentError if proc.returncode == EXIT_PERMANENT else TransientError
        raise kind(f"precommit of epoch {epoch} failed (spark-submit exit "
                   f"{proc.returncode}): {detail}")
    return result[-1][result[-1].index("phase=precommit "):] if result else ""
