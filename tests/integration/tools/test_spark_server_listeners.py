"""``eos spark start`` on this machine listens on loopback only: the Connect server's gRPC port,
and the driver's own RPC and block-manager ports (which Spark binds to the machine's host name
unless told otherwise, where any host that reaches the machine reaches them)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from eos.core.processes import group_members
from eos.tools.servers import spark_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[dict]:
    state = spark_server.start(base=tmp_path, port=0, driver_memory="1g")
    try:
        yield state
    finally:
        spark_server.stop(tmp_path)


def listening(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket the processes listen on."""
    found = []
    for pid in pids:
        try:
            connections = psutil.Process(pid).net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        found += [(pid, c.laddr.ip, c.laddr.port) for c in connections
                  if c.status == psutil.CONN_LISTEN]
    return found


def loopback(address: str) -> bool:
    """127.0.0.0/8 or ::1, also as an IPv4-mapped IPv6 address (a JVM's dual-stack socket)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def test_the_server_and_its_driver_listen_on_loopback_only(server: dict) -> None:
    """Before: the driver's RPC and block-manager ports listened on the address of the
    machine's host name (any interface Spark resolves it to, 0.0.0.0 where that is how the
    JVM binds it). Now every socket of the server's process group is on loopback."""
    sockets = listening(group_members(int(server["pid"])))
    ports = {port for _, _, port in sockets}
    assert server["port"] in ports  # the Connect server's gRPC port is among them
    assert len(ports) >= 3, sockets  # ... and the driver's RPC and block-manager ports
    assert not [s for s in sockets if s[1] in ("0.0.0.0", "::")], sockets
    exposed = [s for s in sockets if not loopback(s[1])]
    assert exposed == [], f"listening beyond loopback: {exposed}"
