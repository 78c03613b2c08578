"""How precommit is launched: ``spark-submit`` of ``spark_apps/precommit.py``, the same way from
``eos run`` and from the DAG's SparkSubmitOperator, so both run exactly one code path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def run_precommit(config: PipelineConfig, epoch: int, plan_hash: str | None = None) -> str:
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
