"""Airflow on several machines: a worker dies in the middle of a commit, another finishes it.

The deployment (``support.airflow_cluster``): PostgreSQL as the metadata database, the
CeleryExecutor with Redis as broker and result backend, the scheduler, DAG processor, API server
and triggerer as separate processes, and two Celery workers, each with its own AIRFLOW_HOME,
working directory, DAGs folder (its own copy of the DAG file), pipelines directory (its own
copy of the YAML), data directory and logs: no disk shared between the workers. The pipeline's
tables live on the S3 store (its keys reach tasks only through the ``eos_object_store``
connection), its precommit runs on the standalone Spark cluster's Connect server, and Kafka is
the embedded broker, reached over TCP by every process.

What it proves:
- a DAG run goes end to end on the workers (epoch 0);
- the next run's commit is held between its two window sinks (``commit.between_sinks:wait``,
  a barrier nobody else reaches) on whichever worker took it; that worker's whole process
  group (the Celery worker, the task's supervisor and the task process) is SIGKILLed, as when
  a machine dies. The scheduler notices the missing heartbeats, Airflow retries the commit,
  the retry runs on the surviving worker and completes the epoch, skipping the sink the dead
  attempt had committed;
- the run after that still processes the next epoch on the surviving worker, and the
  independent audit finds every record exactly once in every sink (none lost, none doubled).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from eos.core import epochlog
from eos.core.config import PipelineConfig
from eos.core.layout import tables_for
from eos.core.protocol import checkpointed_epoch
from eos.tools.audit.verify import audit
from eos.tools.generator import GeneratorSpec

from support import postgres, redis_server
from support.airflow_cluster import AirflowCluster, Worker, airflow_cluster
from support.airflow_standalone import wait_for
from support.pipelines import kafka_sinks, make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]

MISSING = postgres.missing_reason() or redis_server.missing_reason()
if MISSING:
    pytestmark.append(pytest.mark.skip(reason=f"several-machines Airflow test: {MISSING}"))

EVENTS = 900  # epochs of 300: three runs, three epochs
SPEC = GeneratorSpec(events=EVENTS, keys=10, interval_ms=200, seed=20260444)
FAULT = "commit.between_sinks"
ARRIVALS = f"{FAULT}.arrivals"  # eos.core.faults' barrier file, one byte per arrival
RUN_TIMEOUT_S = 300.0
BASE_DATE = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, kafka: str,
             object_store: Any) -> PipelineConfig:
    """Windows to a Kafka topic and a Delta table (two sinks: a commit can die between them),
    late and quarantined events to Delta; every table on the S3 store; manual runs only."""
    root = f"s3://{object_store.bucket}/multi-{uuid.uuid4().hex[:10]}"
    return make_pipeline(tmp_path_factory.mktemp("multi-pipelines"), base=kafka_sinks(),
                         dag=(data_dir, "multi"), tables={"root": root}, max_records=300,
                         staging_retention=3, records=SPEC)


def connections(object_store: Any, spark_cluster: Any, kafka: str) -> dict[str, str]:
    """What every machine is given: the connections and the broker's address (no file)."""
    from eos.compute import connect

    store = object_store.env
    return {
        "AIRFLOW_CONN_EOS_OBJECT_STORE": json.dumps({
            "conn_type": "aws", "login": store["AWS_ACCESS_KEY_ID"],
            "password": store["AWS_SECRET_ACCESS_KEY"],
            "extra": {"endpoint_url": store["AWS_ENDPOINT_URL"],
                      "region_name": store["AWS_REGION"]}}),
        "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": connect.airflow_connection(
            spark_cluster.server, spark_cluster.base),
        "KAFKA_BOOTSTRAP_SERVERS": kafka,
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pipeline: PipelineConfig,
            object_store: Any, spark_cluster: Any, kafka: str) -> Iterator[AirflowCluster]:
    with postgres.postgres_server() as pg, redis_server.redis_server() as redis, \
            airflow_cluster(tmp_path_factory.mktemp("several-machines"), [pipeline],
                            postgres=pg, redis=redis,
                            connections=connections(object_store, spark_cluster, kafka),
                            worker_env={"EOS_FAULTS": f"{FAULT}:wait",
                                        "EOS_BARRIER_PARTIES": "2",
                                        "EOS_BARRIER_TIMEOUT_S": "900"}) as instance:
        yield instance


def hold_commits(workers: list[Worker], held: bool) -> None:
    """Hold the next commit on each worker at the fault's barrier until it is killed, or let
    every commit pass. The barrier (``eos.core.faults``) lets a process's k-th arrival go on
    once the file holds 2k bytes, one per arrival: an empty file holds the first arrival
    forever (no second party comes); a full one holds none (a commit reaches the point once
    per sink but the last)."""
    for worker in workers:
        (worker.faults_dir / ARRIVALS).write_text("" if held else "x" * 1000)


def trigger(cluster: AirflowCluster, dag_id: str, index: int) -> str:
    when = (BASE_DATE + timedelta(days=index)).isoformat()
    run = cluster.api("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                      json={"dag_run_id": f"multi_{index}", "logical_date": when})
    return str(run["dag_run_id"])


def task_states(cluster: AirflowCluster, dag_id: str, run_id: str) -> dict[str, Any]:
    tis = cluster.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
    return {ti["task_id"]: ti for ti in tis["task_instances"]}


def wait_for_run(cluster: AirflowCluster, dag_id: str, run_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        run = cluster.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        if run["state"] == "failed":
            states = {k: v["state"] for k, v in task_states(cluster, dag_id, run_id).items()}
            pytest.fail(f"{run_id} failed: {states}")
        return run if run["state"] == "success" else None

    return wait_for(f"{run_id} to succeed", done, RUN_TIMEOUT_S, cluster.problem)


def tries(cluster: AirflowCluster, dag_id: str, run_id: str, task_id: str) -> list[dict]:
    """Every try of a task instance (hostname, state), oldest first."""
    found = cluster.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/"
                               f"{task_id}/tries")["task_instances"]
    return sorted(found, key=lambda t: t["try_number"])


def held_worker(cluster: AirflowCluster) -> Worker:
    """The worker whose commit reached the held barrier."""
    def arrived() -> Worker | None:
        return next((w for w in cluster.workers.values()
                     if (w.faults_dir / ARRIVALS).stat().st_size > 0), None)

    return wait_for("a commit to reach the held point between its sinks", arrived,
                    RUN_TIMEOUT_S, cluster.problem)


# Native libraries of modules eos.airflow.preload imports (each package's own directory).
PRELOADED = ("/pyarrow/", "/deltalake/", "/confluent_kafka/", "/grpc/")


def preloaded_in_pool(worker: Worker) -> dict[int, list[str]]:
    """For each of the worker's pool processes (the tasks' parents), the preloaded packages
    whose native libraries it has mapped: what it got from the Celery worker before the fork."""
    assert worker.proc is not None
    pool = psutil.Process(worker.proc.pid).children()
    assert pool, f"{worker.name} has no pool processes"
    return {child.pid: [lib for lib in PRELOADED
                        if any(lib in region.path for region in child.memory_maps())]
            for child in pool}


def commit_log(worker: Worker, dag_id: str, run_id: str) -> str:
    """The commit's log lines on ``worker``'s own disk (its logs folder)."""
    logs = sorted((worker.logs / f"dag_id={dag_id}" / f"run_id={run_id}" / "task_id=commit")
                  .glob("attempt=*.log"))
    return "\n".join(path.read_text(errors="replace") for path in logs)


@pytest.mark.timeout(900)
def test_a_worker_killed_mid_commit_and_the_epoch_finished_by_the_other(
        cluster: AirflowCluster, pipeline: PipelineConfig) -> None:
    started = time.monotonic()
    dag_id = pipeline.dag_id
    workers = list(cluster.workers.values())
    for worker in workers:  # airflow_local_settings ran eos's preload in the Celery worker
        pools = preloaded_in_pool(worker)
        assert all(libs == list(PRELOADED) for libs in pools.values()), (worker.name, pools)
    wait_for(f"the DAG processor to parse {dag_id}",
             lambda: cluster.api("GET", f"/api/v2/dags/{dag_id}")["dag_id"] == dag_id,
             RUN_TIMEOUT_S, cluster.problem)
    cluster.api("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False})

    hold_commits(workers, held=False)
    first = trigger(cluster, dag_id, 0)
    wait_for_run(cluster, dag_id, first)

    hold_commits(workers, held=True)
    second = trigger(cluster, dag_id, 1)
    dead = held_worker(cluster)
    survivor = next(w for w in workers if w is not dead)
    hold_commits([survivor], held=False)
    killed = dead.kill()
    wait_for_run(cluster, dag_id, second)
    third = trigger(cluster, dag_id, 2)
    wait_for_run(cluster, dag_id, third)

    commit_tries = tries(cluster, dag_id, second, "commit")
    hosts = [(t["hostname"], t["state"]) for t in commit_tries]
    assert commit_tries[0]["hostname"] == dead.name, (hosts, killed)
    assert commit_tries[-1]["hostname"] == survivor.name and len(commit_tries) >= 2, hosts
    assert all(host == survivor.name for host, _ in hosts[1:]), hosts
    # The dead try never finished its commit; the retry found the sink it had committed
    # holding the epoch and wrote only the others.
    died = commit_log(dead, dag_id, second)
    assert died and "phase=commit " not in died, died[-3000:]
    retried = commit_log(survivor, dag_id, second)
    assert "phase=commit" in retried and "already committed" in retried, retried[-3000:]

    tables = tables_for(pipeline)
    epochs = [(epochlog.plan_row_for_run(tables, run) or {}).get("epoch")
              for run in (first, second, third)]
    assert epochs == [0, 1, 2], epochs
    assert checkpointed_epoch(pipeline) == 2
    report = audit(pipeline)
    assert report.ok, report.render()
    assert report.records == EVENTS
    print(f"several machines: three epochs, one worker killed mid-commit, "
          f"{time.monotonic() - started:.0f} s after the cluster was up")
