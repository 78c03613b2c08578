"""A throwaway PostgreSQL server for the demo, ``eos chaos`` and the tests: Debian's server
binaries (``initdb``, ``postgres``, package ``postgresql``) run by eos itself, in a temporary
directory, listening on 127.0.0.1 only (a free port, no Unix socket), with a generated password
and SCRAM authentication for every connection. Its data is deleted when it stops.

PostgreSQL refuses to run as root; when eos runs as root (CI does), the server runs as an
unprivileged user (``nobody``) through ``runuser``, in a directory that user owns.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eos.core.errors import ConfigError
from eos.core.processes import restored_environ

__all__ = ["PostgresServer", "missing_reason", "postgres_server", "require_server", "serving"]

BIN_GLOB = "/usr/lib/postgresql/*/bin"
UNPRIVILEGED_USER = "nobody"
START_TIMEOUT_S = 60.0
USER = "airflow"
DATABASE = "airflow"
PIPELINE_DATABASE = "eos"  # a pipeline's tables, on a server started for its postgres sinks


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    database: str
    password: str = field(repr=False)

    def sqlalchemy_url(self) -> str:
        """The URL Airflow's ``[database] sql_alchemy_conn`` takes (holds the password)."""
        return (f"postgresql+psycopg2://{self.user}:{self.password}@{self.host}:{self.port}/"
                f"{self.database}")

    def dsn(self) -> str:
        """The libpq DSN a ``postgres`` sink takes from its ``dsn_env`` (holds the password)."""
        return (f"host={self.host} port={self.port} user={self.user} "
                f"password={self.password} dbname={self.database}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_bin() -> Path | None:
    """The newest installed server's ``bin`` directory (Debian: one per major version)."""
    found = sorted(Path("/").glob(BIN_GLOB.lstrip("/")),
                   key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    found = [path for path in found if (path / "initdb").exists() and (path / "postgres").exists()]
    return found[-1] if found else None


def missing_reason() -> str | None:
    """Why no server can run here, or None."""
    if server_bin() is None:
        return ("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb): install "
                "Debian's postgresql package (apt-get install postgresql; ./dev test does it "
                "when root)")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: PostgreSQL refuses to run as root"
    return None


def require_server() -> None:
    """``ConfigError`` naming what to install when no server can run here."""
    problem = missing_reason()
    if problem is not None:
        raise ConfigError(problem)


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", UNPRIVILEGED_USER, "--", *command] if os.geteuid() == 0 else command


def _own(path: Path) -> None:
    """Give ``path`` to the server's user (root only; otherwise it is already ours)."""
    if os.geteuid() == 0:
        entry = pwd.getpwnam(UNPRIVILEGED_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _initdb(bindir: Path, base: Path, password: str) -> Path:
    data = base / "data"
    pwfile = base / "pwfile"
    pwfile.write_text(password + "\n")
    os.chmod(pwfile, 0o600)
    _own(pwfile)
    subprocess.run(_as_server_user([
        str(bindir / "initdb"), "-D", str(data), "-U", USER, "--pwfile", str(pwfile),
        "--auth", "scram-sha-256", "--encoding", "UTF8", "--no-sync", "--no-instructions",
    ]), check=True, capture_output=True, timeout=120, cwd=base)
    pwfile.unlink()
    return data


def _ready(server: PostgresServer) -> bool:
    import psycopg2

    try:
        psycopg2.connect(host=server.host, port=server.port, user=server.user,
                         password=server.password, dbname="postgres", connect_timeout=3).close()
    except psycopg2.OperationalError:
        return False
    return True


def _create_database(server: PostgresServer) -> None:
    import psycopg2

    connection = psycopg2.connect(host=server.host, port=server.port, user=server.user,
                                  password=server.password, dbname="postgres")
    connection.autocommit = True  # CREATE DATABASE runs outside a transaction
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {server.database}")
    finally:
        connection.close()


@contextlib.contextmanager
def postgres_server(database: str = DATABASE,
                    durable: bool = False) -> Iterator[PostgresServer]:
    """A running server with an empty ``database``; stopped and deleted afterwards. It runs
    without ``fsync`` and ``synchronous_commit`` (nothing in it must survive a power cut: it is
    deleted at the end); ``durable`` keeps PostgreSQL's defaults, for timings a deployment
    would see."""
    require_server()
    bindir = server_bin()
    assert bindir is not None
    base = Path(tempfile.mkdtemp(prefix="eos-postgres-"))
    _own(base)
    password = secrets.token_urlsafe(18)
    server = PostgresServer("127.0.0.1", _free_port(), USER, database, password)
    proc: subprocess.Popen | None = None
    try:
        data = _initdb(bindir, base, password)
        with (base / "postgres.log").open("wb") as log:
            proc = subprocess.Popen(_as_server_user([
                str(bindir / "postgres"), "-D", str(data), "-h", server.host,
                "-p", str(server.port), "-k", "", "-c", "max_connections=200",
                *([] if durable else ["-c", "fsync=off", "-c", "synchronous_commit=off"]),
            ]), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=base)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _ready(server):
            if proc.poll() is not None or time.monotonic() > deadline:
                log_text = (base / "postgres.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"PostgreSQL did not start ({proc.returncode}):\n{log_text}")
            time.sleep(0.3)
        _create_database(server)
        yield server
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(base, ignore_errors=True)


def _stop(proc: subprocess.Popen) -> None:
    """A fast shutdown (SIGINT), then SIGKILL of its process group if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _postgres_sinks(config: Any) -> list[Any]:
    """The options of each ``postgres`` sink of ``config``."""
    found = []
    for _, spec in config.sinks.by_output():
        ((kind, options),) = spec.items()
        if kind == "postgres":
            found.append(options)
    return found


def _hand_over(server: PostgresServer, sinks: list[Any]) -> dict[str, str]:
    """The variables that give every sink ``server``: its ``dsn_env`` (the command line, the
    audit) and its Airflow connection as ``AIRFLOW_CONN_<ID>`` (the DAG runs' tasks)."""
    from urllib.parse import quote

    variables = {}
    uri = (f"postgres://{quote(server.user, safe='')}:{quote(server.password, safe='')}@"
           f"{server.host}:{server.port}/{server.database}")
    for options in sinks:
        if options.dsn_env is None:
            raise ConfigError(f"a local PostgreSQL server hands its credentials over in the "
                              f"environment: set dsn_env on the postgres sink "
                              f"{options.table}")
        variables[options.dsn_env] = server.dsn()
        variables[f"AIRFLOW_CONN_{options.connection.upper()}"] = uri
    return variables


@contextlib.contextmanager
def serving(config: Any, reuse: bool = False) -> Iterator[PostgresServer | None]:
    """For a pipeline with ``postgres`` sinks, a local server for the block (None without
    such sinks, or with ``reuse`` when each sink's ``dsn_env`` already names a DSN: that
    server is used). Its credentials go into this process's environment (``_hand_over``),
    so the ``eos`` processes, the DAG runs and the audit started from here inherit them;
    they are never printed, and are taken out again when the block ends."""
    sinks = _postgres_sinks(config)
    if not sinks or (reuse and all(os.environ.get(o.dsn_env or "") for o in sinks)):
        yield None
        return
    with postgres_server(PIPELINE_DATABASE) as server:
        variables = _hand_over(server, sinks)
        with restored_environ(variables):
            os.environ.update(variables)
            yield server
