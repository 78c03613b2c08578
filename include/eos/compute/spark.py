"""Where precommit's Spark work runs (``compute.mode``), in one place for ``eos run`` and the DAG.

- ``connect`` (default): this process opens a session on the long-lived Spark Connect server
  (``eos.compute.connect``) and runs ``eos.core.protocol.precommit`` with it.
- ``submit``: ``spark-submit`` of ``eos/compute/app.py`` (the installed file), the same
  command the DAG's SparkSubmitOperator runs: one Spark application per epoch, the same
  precommit inside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eos.core.config import PipelineConfig
from eos.core.errors import (
    EXIT_PERMANENT,
    EosError,
    SparkJobFailed,
    carried,
    describe_failure,
    from_payload,
)

if TYPE_CHECKING:
    from eos.core.epochlog import Attempt
    from eos.core.protocol import StageResult

# The DAG file imports this module: what precommit needs is imported where it runs. The app is
# named by its file, not imported: spark-submit runs the file of the installed package, or the
# project's ``spark_apps/eos_precommit.py`` (a thin caller of it) when ``EOS_SPARK_APP`` names it.
PRECOMMIT_APP = Path(__file__).resolve().with_name("app.py")
SPARK_APP_ENV = "EOS_SPARK_APP"


def precommit_app() -> str:
    """The file spark-submit runs for precommit: ``$EOS_SPARK_APP``, else the package's app.
    ``ConfigError`` when the variable names no file (every submit would fail the same way)."""
    from eos.core.errors import ConfigError

    named = os.environ.get(SPARK_APP_ENV, "").strip()
    if not named:
        return str(PRECOMMIT_APP)
    if not Path(named).is_file():
        raise ConfigError(f"{SPARK_APP_ENV}={named}: no such file (the Spark application of "
                          "precommit, e.g. spark_apps/eos_precommit.py of the project)")
    return named


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
    from eos.compute.connect import CONNECT_MARKS

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
    return [*cmd, precommit_app(), *app_args(config, epoch, plan_hash)]


def run_precommit(config: PipelineConfig, epoch: int,
                  plan_hash: str | None = None) -> StageResult:
    """Stage epoch N where ``compute.mode`` says; return what precommit did, or raise its typed
    error. Connect mode uses the server ``eos.compute.connect.resolve_endpoint`` finds (the DAG
    passes the one of its Airflow connection to ``connect_precommit`` itself)."""
    if config.compute.mode == "submit":
        return submit_precommit(config, epoch, plan_hash)
    return connect_precommit(config, epoch, plan_hash)


def connect_precommit(config: PipelineConfig, epoch: int, plan_hash: str | None = None,
                      endpoint: Any = None, attempt: Attempt | None = None) -> StageResult:
    """precommit in this process, its Spark work on the Connect server. A library error raised
    on an executor (data loss, a broker that does not answer) comes back as its own class, with
    its retry policy (``eos.core.errors.carried``). ``attempt``: the task try, named by the
    precommit row staged with N when it stages (``eos.core.staging.PRECOMMIT``)."""
    from pyspark.errors import PySparkException

    from eos.compute import connect
    from eos.compute.precommit.stager import SparkStager
    from eos.core.protocol import precommit

    endpoint = endpoint or connect.resolve_endpoint()
    with connect.session(config, endpoint) as spark:
        try:
            return precommit(config, epoch, SparkStager(spark), expected_hash=plan_hash,
                             attempt=attempt)
        except EosError:
            raise
        except Exception as error:
            inner = carried(str(error))
            if inner is not None:
                raise inner from error
            if isinstance(error, PySparkException) and connect.compute_error(
                    error, endpoint) is None:
                gone = _session_lost(spark, endpoint)
                if gone is not None:
                    raise gone from error
                raise SparkJobFailed(f"precommit of epoch {epoch} failed on {endpoint.address}: "
                                     f"{describe_failure(error)}") from error
            raise


def _session_lost(spark: Any, endpoint: Any) -> EosError | None:
    """After a job failed for no reason the client recognises, ask the session one trivial
    question: a server that stopped or restarted mid-job sometimes answers the running job with
    a teardown error of its own wording before the stream drops, and only the next request
    says the session is gone. Then the failure is the server's (``ComputeUnavailable``), not
    the epoch's."""
    from eos.compute import connect

    try:
        spark.range(1).count()
    except Exception as probe:  # classified below; else the job's own error stands
        return connect.compute_error(probe, endpoint)
    return None


def submit_precommit(config: PipelineConfig, epoch: int,
                     plan_hash: str | None = None) -> StageResult:
    """Run the Spark app for epoch N; return its result, or raise its error. The app writes both
    as JSON to a file this process names (``--result-file``): nothing is read from its log."""
    from eos.core.bootstrap import handed_to_children
    from eos.core.protocol import StageResult

    with tempfile.TemporaryDirectory(prefix="eos-precommit-") as scratch, handed_to_children():
        result_file = Path(scratch) / "result.json"
        proc = subprocess.run(
            [*submit_command(config, epoch, plan_hash), "--result-file", str(result_file)],
            env=submit_env(), capture_output=True, text=True, check=False,
        )
        try:
            outcome = json.loads(result_file.read_text())
        except (OSError, ValueError):
            outcome = None
    if outcome is not None and outcome.get("error"):
        raise from_payload(outcome["error"])
    if outcome is not None and outcome.get("result") and proc.returncode == 0:
        return StageResult.from_payload(outcome["result"])
    # No result: the app died before it could write one (the JVM, the driver, a signal).
    # spark-submit merges the Python driver's stderr into its stdout: show the tail of both.
    tail = "\n".join((proc.stdout.splitlines() + proc.stderr.splitlines())[-15:])
    failure = {"type": "SparkJobFailed", "retryable": proc.returncode != EXIT_PERMANENT,
               "message": f"precommit of epoch {epoch} failed (spark-submit exit "
                          f"{proc.returncode}) without a result: {tail}"}
    raise from_payload(failure)
