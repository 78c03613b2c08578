"""``eos.airflow.preload``: the scheduler imports what the epoch's tasks import, and tasks
forked from it run whole epochs on Spark Connect (a real server, broker and Delta): nothing
the preload imported is half-used across the fork (gRPC, librdkafka, delta-rs' runtime).
How much it saves is a benchmark's figure (``bench.task_startup``), not a test's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eos.airflow.preload import TASK_MODULES, forks_tasks, is_celery_worker, is_scheduler
from eos.core.kafka import client_settings
from eos.tools.audit.verify import audit
from eos.tools.generator import GeneratorSpec, generate
from eos.tools.pipelines import write_pipeline
from eos.tools.produce import send

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCHEDULER = r"""
import json, os, sys
import airflow.sdk  # noqa: F401  (the scheduler has it)
from eos.airflow.preload import TASK_MODULES, preload
preload()
missing = [m for m in TASK_MODULES if m not in sys.modules]
# What a task must not import itself: the libraries each epoch uses, and this project.
HEAVY = {"pyarrow", "pyspark", "deltalake", "confluent_kafka", "grpc", "pandas", "msgspec", "eos"}
outcomes = []
for i in range(2):  # two tasks, one after the other, each a fork of this process
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            from eos.compute.epochs import run_epoch
            from eos.core.config import load_config
            before = set(sys.modules)
            run = run_epoch(load_config(sys.argv[1]), f"forked-{i}")
            late = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in HEAVY)
            os.write(write, json.dumps([run.epoch, str(run.committed.outcome),
                                        run.plan.records, late]).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    outcomes.append(json.loads(os.read(read, 4096).decode() or "null"))
print(json.dumps({"missing": missing, "outcomes": outcomes}))
"""


def test_tasks_forked_from_a_preloaded_scheduler_run_epochs(tmp_path: Path, kafka: str,
                                                            spark: Any) -> None:
    import json

    spec = GeneratorSpec(events=600, keys=10, interval_ms=50, seed=3)
    config = write_pipeline(tmp_path, compute={"mode": "connect"},
                            epoch={"max_records": 300, "staging_retention": 1})
    send(generate(spec), spec.events, config.kafka.topic, client_settings(), progress=False)
    done = subprocess.run([sys.executable, "-c", SCHEDULER, str(config.source_path)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["missing"] == []
    # Epoch 0 starts from nothing; epoch 1 reads epoch 0's state: between them, every module
    # an epoch imports when first used. None may be left to the task (each costs every epoch).
    assert result["outcomes"] == [[0, "committed", 300, []], [1, "committed", 300, []]], (
        done.stderr[-3000:])
    report = audit(config)
    assert report.ok, report.render()
    assert report.records == spec.events


def test_only_the_scheduler_preloads() -> None:
    assert is_scheduler(["/venv/bin/airflow", "scheduler"])
    for other in (["airflow", "api-server"], ["airflow", "dag-processor"],
                  ["airflow", "standalone"], ["airflow"], ["python", "-m", "pytest"]):
        assert not is_scheduler(other), other
    assert "pyspark.sql.connect.session" in TASK_MODULES


def test_a_celery_worker_preloads() -> None:
    """Its pool processes fork the tasks (the scheduler's case needs its executor setting:
    the several-machines test sees the preload in a real worker's pool)."""
    assert is_celery_worker(["/venv/bin/airflow", "celery", "worker", "--concurrency", "2"])
    assert forks_tasks(["airflow", "celery", "worker"])
    for other in (["airflow", "celery", "flower"], ["airflow", "scheduler"], ["airflow"]):
        assert not is_celery_worker(other), other
