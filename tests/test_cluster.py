"""The test Spark cluster itself: two workers, one core each, executors in JVMs and Python
workers of their own, which see the environment the workers were started with (how the store's
credentials reach them) and import the library; every JVM authenticates and binds loopback."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from eos.core.processes import alive

pytestmark = [pytest.mark.integration, pytest.mark.slow]


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
    from eos.tools import spark_cluster as cluster

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
