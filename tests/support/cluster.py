"""Fixtures of the test Spark cluster (``eos.tools.servers.spark_cluster``): a standalone master,
two
workers (one core each, JVMs of their own) and a Spark Connect server on it, started after the
object store so that the workers, their executors and the executors' Python workers inherit the
store's ``AWS_*`` credentials (nothing reaches them through Spark conf or plans)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = ["spark_cluster"]


@dataclass(frozen=True)
class SparkCluster:
    master: str
    server: dict[str, Any]
    remote: str = field(repr=False)  # EOS_SPARK_REMOTE for eos processes: holds the token
    base: Path = Path()


@pytest.fixture(scope="session")
def spark_cluster(data_dir: Path, object_store: Any) -> Iterator[SparkCluster]:
    from eos.compute import connect
    from eos.tools.servers import spark_cluster as cluster
    from eos.tools.servers import spark_server
    base = data_dir / "cluster"
    base.mkdir(exist_ok=True)
    state = cluster.start(base, workers=2, worker_memory="1g")
    try:
        server = spark_server.start(base=base, port=0, master=state["master"],
                                    driver_memory="1g", session_timeout="4h",
                                    conf=cluster.connect_conf(state),
                                    properties=cluster.connect_properties(base))
        endpoint = connect.resolve_endpoint(base)
        yield SparkCluster(state["master"], server,
                           f"{endpoint.address}/;token={endpoint.token}", base)
    finally:
        spark_server.stop(base)
        cluster.stop(base)
