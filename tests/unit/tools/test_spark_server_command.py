"""Where ``eos spark start``'s driver listens, decided from the master alone (the listening
sockets themselves: tests/integration/tools/test_spark_server_listeners.py)."""

from __future__ import annotations

import pytest

from eos.tools.servers.spark_server import on_this_machine, server_command


def settings(master: str, **conf: str) -> dict[str, str]:
    cmd = server_command(15002, master, "1g", "127.0.0.1", "15min", "2min", conf)
    return dict(cmd[i + 1].split("=", 1) for i, arg in enumerate(cmd) if arg == "--conf")


@pytest.mark.parametrize(("master", "local"), [
    ("local[2]", True), ("local", True), ("local[*]", True), ("local-cluster[2,1,1024]", True),
    ("spark://127.0.0.1:7077", True), ("spark://localhost:7077", True),
    ("spark://[::1]:7077", True), ("spark://127.0.0.1:7077,127.0.0.2:7078", True),
    ("spark://spark-master:7077", False), ("spark://127.0.0.1:7077,10.0.0.5:7077", False),
    ("yarn", False), ("k8s://https://10.0.0.1:6443", False),
])
def test_the_driver_is_on_loopback_when_every_executor_is_on_this_machine(
        master: str, local: bool) -> None:
    assert on_this_machine(master) is local
    conf = settings(master)
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"
    if local:
        assert conf["spark.driver.bindAddress"] == conf["spark.driver.host"] == "127.0.0.1"
    else:  # executors elsewhere must reach the driver: Spark's defaults stay
        assert "spark.driver.bindAddress" not in conf and "spark.driver.host" not in conf


def test_the_callers_conf_has_the_last_word() -> None:
    conf = settings("spark://spark-master:7077", **{"spark.driver.host": "10.0.0.7"})
    assert conf["spark.driver.host"] == "10.0.0.7"
    assert settings("local[2]", **{"spark.driver.bindAddress": "0.0.0.0"})[
        "spark.driver.bindAddress"] == "0.0.0.0"
