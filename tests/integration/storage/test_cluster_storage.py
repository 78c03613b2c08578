"""Beyond one machine: every table on the embedded S3 store, Spark on a standalone cluster of two
workers (separate JVMs, one core each) with the Connect server on it. Nothing shares a disk
with anything: the executors read Kafka, aggregate, and write staging to the store with pyarrow;
the driver (this process, or an ``eos`` process) commits to the store with delta-rs.

The cluster itself first: two workers, one core each, executors in JVMs and Python workers of
their own, which see the environment the workers were started with (how the store's
credentials reach them) and import the library; every JVM authenticates and binds loopback.
(One module: a session-scoped cluster is started once per test worker that needs it.)

The failure matrix's crash and race rows run here unchanged (imported from
``support.failure_matrix``, as tests/integration/pipeline/test_faults.py does: the same
functions, with this module's ``spark`` and every pipeline's tables on the store), then
an end-to-end run with its audit and ``eos verify``, a chaos run, and a search of the local
disks for any file of the pipeline.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from eos.compute.connect import REMOTE_ENV
from eos.compute.epochs import run_until_caught_up
from eos.core.config import TABLES_BASE_ENV, PipelineConfig
from eos.core.kafka import client_settings
from eos.core.layout import tables_for
from eos.core.processes import alive
from eos.tools.chaos import chaos
from eos.tools.generator import GeneratorSpec, generate
from eos.tools.pipelines import write_pipeline
from eos.tools.produce import send

from support.failure_matrix import (  # noqa: F401  # the rows and the fixtures they take
    mode,
    pipeline,
    test_clearing_a_committed_run_changes_nothing,
    test_crash_after_begin_reruns_with_the_logged_plan,
    test_crash_after_the_checkpoint_retry_is_a_noop,
    test_crash_before_the_checkpoint_retry_only_checkpoints,
    test_crash_between_sink_commits_retry_skips_committed_sinks,
    test_two_commits_released_before_the_checkpoint_append_it_once,
    test_two_commits_released_before_their_first_sink_write_write_it_once,
    test_zombie_precommit_after_commit_changes_nothing,
)
from support.harness import eos_cli
from support.pipelines import kafka_sinks, make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHAOS_EPOCHS = 12  # the short CI version; docs/operating.md records a 40-epoch run


@pytest.fixture(scope="module")
def cluster_env(object_store: Any, spark_cluster: Any) -> Iterator[str]:
    """For this module, every pipeline the factory writes keeps its tables on the store, and
    every ``eos`` process finds the cluster's Connect server."""
    base = f"s3://{object_store.bucket}/cluster-{uuid.uuid4().hex[:8]}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(TABLES_BASE_ENV, base)
        mp.setenv(REMOTE_ENV, spark_cluster.remote)
        yield base


@pytest.fixture(scope="module")
def spark(cluster_env: str, data_dir: Path) -> Iterator[Any]:
    """A Spark Connect session on the cluster's server (replaces conftest's local one)."""
    from eos.compute import connect
    from eos.tools.pipelines import write_pipeline

    config = write_pipeline(data_dir, compute={"mode": "connect", "session": "task"})
    with connect.session(config, connect.resolve_endpoint(data_dir)) as session:
        yield session


@pytest.fixture(autouse=True)
def _on_cluster(cluster_env: str) -> None:
    """Every test of this module runs with the store and the cluster (see ``cluster_env``)."""


def local_files_naming(*needles: str) -> list[str]:
    """Files on this machine's local disks (the data directory, the temp directory, the
    cluster's work directories, the working directory) whose path contains a needle."""
    roots = {tempfile.gettempdir(), os.getcwd(), os.environ.get("EOS_DATA_DIR", "")}
    found = []
    for root in filter(None, roots):
        for directory, _, files in os.walk(root):
            for name in files:
                path = os.path.join(directory, name)
                if any(n in path for n in needles):
                    found.append(path)
    return found


def test_end_to_end_on_the_cluster_and_the_store(tmp_path: Path, kafka: str, spark: Any,
                                                 cluster_env: str) -> None:
    """Exactly once, end to end: Kafka and Delta sinks, the audit and its second readers,
    ``eos verify``; every staged file was written to the store by an executor, and no file of
    the pipeline but its YAML exists on a local disk."""
    from eos.core.staging import files_holding
    from eos.core.tables import handle
    from eos.tools.audit.verify import audit

    config = make_pipeline(tmp_path, base=kafka_sinks(),
                           epoch={"max_records": 700, "staging_retention": 2},
                                 spark={"shuffle_partitions": 2, "collect_rows": 0})
    assert config.root.startswith(cluster_env)
    spec = GeneratorSpec(events=3000, keys=25, interval_ms=20, disorder_ms=600,
                         late_fraction=0.02, late_delay_ms=20_000, bad_fraction=0.02, seed=21)
    send(generate(spec), spec.events, config.kafka.topic, client_settings(), progress=False)
    results = run_until_caught_up(config, "cluster", spark=spark)
    assert len(results) >= 4
    assert {r.staged.written_by for r in results} == {"executors"}
    report = audit(config)
    assert report.ok, report.render()
    assert report.records == spec.events
    verified = eos_cli(config, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    tables = tables_for(config)
    staging = handle(tables, tables.staging)
    state_files = [*files_holding(staging, results[-1].epoch, "state"),  # a snapshot, or
                   *files_holding(staging, results[-1].epoch, "change")]  # the epoch's changes
    assert state_files and all(f.startswith("s3://") for f in state_files)
    attempts = {part for f in state_files for part in f.split("/") if part.startswith("attempt-")}
    assert attempts
    # The pipeline's YAML is the one local file it has (its config, not a table's).
    found = local_files_naming(config.name, *attempts)
    assert found == [str(config.source_path)], found


def test_chaos_on_the_cluster_and_the_store(tmp_path: Path, kafka: str, spark: Any) -> None:
    """`eos chaos` with every table on the store and Spark on the cluster: 12 epochs and at
    least 8 faults (crashes in every phase; commit races are the race rows above), nothing
    lost, nothing doubled."""
    config = write_pipeline(tmp_path, compute={"mode": "connect"})
    report = chaos(config, epochs=CHAOS_EPOCHS, seed=31, fault_rate=0.6, events_per_epoch=100,
                   spark=spark)
    print(report.render())
    assert report.epochs >= CHAOS_EPOCHS and sum(report.faults.values()) >= 8, report.faults
    assert report.lost == 0 and report.doubled == 0
    assert report.ok, report.render()


def test_pipeline_tables_are_on_the_store(pipeline: PipelineConfig,  # noqa: F811
                                          cluster_env: str) -> None:
    """The imported rows really run on the store (the factory honours ``EOS_TABLES_BASE``)."""
    assert pipeline.root.startswith(cluster_env)


# -- the cluster itself -------------------------------------------------------------------------

def test_two_workers_run_the_tasks_with_the_store_credentials(spark_cluster: Any) -> None:
    from pyspark.sql import SparkSession

    from eos.compute.connect import Endpoint

    def where(batches: Any) -> Any:
        """Per task: the Python worker's parent (its executor's daemon), the store's
        credentials seen, the library imported. Local, so it is pickled by value (this test
        module is not importable on the executors)."""
        import eos.core.storage

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{
                "executor": os.getppid(), "aws": "AWS_SECRET_ACCESS_KEY" in os.environ,
                "eos": eos.core.storage.__name__}])

    spark = SparkSession.builder.remote(
        Endpoint.from_url(spark_cluster.remote, "the test cluster").url()).create()
    try:
        rows = (spark.range(0, 16, 1, 16).mapInArrow(where, "executor long, aws boolean, "
                                                     "eos string").collect())
    finally:
        spark.stop()
    executors = {r.executor for r in rows}
    assert len(executors) == 2, executors  # one executor per worker, neither is the server
    assert spark_cluster.server["pid"] not in executors
    assert all(r.aws for r in rows) and {r.eos for r in rows} == {"eos.core.storage"}


def test_the_cluster_keeps_its_secret_and_binds_loopback(spark_cluster: Any) -> None:
    from eos.tools.servers import spark_cluster as cluster
    state = cluster.status(spark_cluster.base)
    assert state is not None and len(state["pids"]) == 3  # a master and two workers
    home = cluster.home(spark_cluster.base)
    for name in ("secret", "connect.conf"):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600
    secret = (home / "secret").read_text().strip()
    for pid in state["pids"]:
        assert secret not in Path(f"/proc/{pid}/cmdline").read_text()
        assert alive(pid)
    listening = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    mine = [line.split()[3] for line in listening.splitlines()
            if any(f"pid={pid}," in line for pid in state["pids"])]
    assert len(mine) >= 3, listening  # the master's RPC and UI, each worker's
    assert all(address.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:")) for address in mine), mine
