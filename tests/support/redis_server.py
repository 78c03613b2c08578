"""A throwaway Redis server for tests (Debian's ``redis-server``): 127.0.0.1 only, a free port,
``requirepass`` generated, no persistence, in a temporary directory. The password is passed in
a config file (never on a command line another user could read in ``ps``)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from support.harness import free_port

__all__ = ["RedisServer", "missing_reason", "redis_server"]

START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RedisServer:
    host: str
    port: int
    password: str = field(repr=False)

    def url(self, db: int = 0) -> str:
        """A ``redis://`` URL with the password (Celery's broker_url / result_backend)."""
        return f"redis://:{quote(self.password, safe='')}@{self.host}:{self.port}/{db}"


def binary() -> str | None:
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)


def missing_reason() -> str | None:
    if binary() is None:
        return "no redis-server: apt-get install redis-server (./dev test does it when root)"
    return None


def _ready(server: RedisServer) -> bool:
    import redis

    try:
        return bool(redis.Redis(host=server.host, port=server.port, password=server.password,
                                socket_connect_timeout=2).ping())
    except redis.RedisError:
        return False


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    """A running server; stopped (no process left) and its directory deleted afterwards."""
    path = binary()
    assert path is not None, missing_reason()
    base = Path(tempfile.mkdtemp(prefix="eos-redis-"))
    server = RedisServer("127.0.0.1", free_port(), secrets.token_urlsafe(18))
    conf = base / "redis.conf"
    conf.write_text("\n".join([
        f"bind {server.host}", f"port {server.port}", f"requirepass {server.password}",
        f"dir {base}", 'save ""', "appendonly no", "daemonize no", "protected-mode yes",
        f"logfile {base / 'redis.log'}", "",
    ]))
    os.chmod(conf, 0o600)
    proc: subprocess.Popen | None = None
    try:
        proc = subprocess.Popen([path, str(conf)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, cwd=base)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _ready(server):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (base / "redis.log").read_text(errors="replace")[-2000:] if (
                    base / "redis.log").exists() else ""
                raise RuntimeError(f"redis-server did not start ({proc.returncode}):\n{log}")
            time.sleep(0.2)
        yield server
    finally:
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        shutil.rmtree(base, ignore_errors=True)
