"""Spark Connect (``compute.mode: connect``) as a client sees it: where the long-lived server
is, and the session one precommit opens on it (the server this machine supervises:
``eos.tools.servers.spark_server``).

Why: starting Spark costs 12-17 s, which ``spark-submit`` pays every epoch. A Connect server pays
it once; each precommit is then a short Python process (an Airflow task) that opens a session,
registers the Kafka data source in it (data sources are registered per session), computes epoch
N on the server, writes staging itself with delta-rs, and releases the session.

The endpoint comes from an Airflow connection (``airflow_endpoint``), ``EOS_SPARK_REMOTE``, or
the state file of the server ``eos spark start`` runs here (``resolve_endpoint``); the token is
never logged or printed.

A zombie on a shared server: a precommit whose client died keeps running server-side for a
while, but it cannot stage anything: the staging write is made by the client, which is gone.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlparse

from eos.core.config import PipelineConfig, data_dir
from eos.core.errors import ComputeUnavailable, ConfigError, EosError
from eos.core.phaselog import log_phase
from eos.core.processes import alive, restored_environ

DEFAULT_PORT = 15002
REMOTE_ENV = "EOS_SPARK_REMOTE"  # outside Airflow: sc://host:port/;token=... of another server
# Session settings precommit needs on every server (a cluster's server may default otherwise).
SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ansi.enabled": "true",  # a long overflow fails the epoch instead of wrapping
    # Precommit caches its parsed input for one epoch's jobs (read once, used three times);
    # compressing that cache costs more time than it saves. Nothing else is cached.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}


# -- where a server is ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Endpoint:
    """Where a Spark Connect server listens and how to authenticate; ``address`` is safe to
    print, ``url()`` holds the token and goes only to pyspark."""

    host: str
    port: int
    token: str | None = field(default=None, repr=False)
    use_ssl: bool = False
    source: str = ""  # where this came from, for error messages
    # The connection accepts sending the token in plaintext to a host that is not this machine
    # (``allow_insecure_token``: a private network the operator trusts); never the default.
    allow_insecure_token: bool = False

    def checked(self) -> Endpoint:
        """This endpoint, or a ``ConfigError`` when it would send its token as a plaintext
        bearer header across a network: a token with no TLS goes only to a loopback host,
        unless the connection says ``allow_insecure_token`` explicitly. The message never
        holds the token."""
        if self.token and not self.use_ssl and not self.allow_insecure_token \
                and not loopback(self.host):
            raise ConfigError(
                f"{self.source}: refusing to send the Spark Connect token in plaintext to "
                f"{self.address}, which is not a loopback address: turn TLS on (use_ssl: true "
                "in the Airflow connection's extra, or ;use_ssl=true in the URL), or accept "
                "the risk explicitly (allow_insecure_token: true in the extra, or "
                ";allow_insecure_token=true in the URL)")
        return self

    @property
    def address(self) -> str:
        return f"sc://{self.host}:{self.port}"

    def url(self, session_id: str | None = None) -> str:
        params = ["user_agent=eos"]
        if session_id:
            params.append(f"session_id={session_id}")
        if self.use_ssl:
            params.append("use_ssl=true")
        if self.token and self.use_ssl:
            params.append(f"token={quote(self.token, safe='')}")
        elif self.token:
            # pyspark sends `token` only over TLS (or to the literal host "localhost"); the server
            # checks the same bearer header either way, so send it as request metadata.
            params.append(f"authorization={quote('Bearer ' + self.token, safe='')}")
        return f"{self.address}/;{';'.join(params)}"

    @classmethod
    def from_url(cls, url: str, source: str) -> Endpoint:
        """``sc://host:port/;token=...;use_ssl=true`` (pyspark's connection string)."""
        # urlparse splits ";params" only for schemes it knows: parse as http, as pyspark does.
        rest = url.split("://", 1)[1] if "://" in url else url
        parsed = urlparse(f"http://{rest}")
        params = dict(p.split("=", 1) for p in parsed.params.split(";") if "=" in p)
        if ("://" in url and not url.startswith("sc://")) or not parsed.hostname:
            raise ConfigError(f"{source}: not a Spark Connect URL (sc://host:port)")
        token = params.get("token")
        return cls(parsed.hostname, parsed.port or DEFAULT_PORT,
                   unquote(token) if token else None,
                   params.get("use_ssl", "").lower() == "true", source,
                   params.get("allow_insecure_token", "").lower() == "true").checked()


def loopback(host: str) -> bool:
    """Whether ``host`` is this machine's loopback (127.0.0.0/8, ::1, ``localhost``): the only
    place a token may go without TLS. A name other than ``localhost`` is not trusted to
    resolve there."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def _flag(value: Any) -> bool:
    """A connection extra's boolean, written true/false or as text."""
    return str(value).strip().lower() == "true"


def airflow_endpoint(conn_id: str) -> Endpoint:
    """The server named by an Airflow connection of the Spark provider's ``spark_connect`` type
    (host, port, the token in the password, ``use_ssl`` in extra: where its
    ``SparkConnectHook`` reads them; what eos writes, ``airflow_connection``), read through the
    provider's hook. A host given as ``sc://host:port`` and a URI-form connection
    ``sc://:<token>@host:port`` are read too."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    try:
        conn = SparkConnectHook.get_connection(conn_id)
    except Exception as error:  # AirflowNotFoundException: no such connection
        raise ConfigError(
            f"Airflow connection '{conn_id}' (type spark_connect) is not defined: create it, e.g. "
            f"AIRFLOW_CONN_{conn_id.upper()}='{{\"conn_type\": \"spark_connect\", \"host\": "
            f"\"127.0.0.1\", \"port\": {DEFAULT_PORT}, \"password\": \"<token>\"}}' "
            f"({type(error).__name__})") from None
    host = str(conn.host or "")
    parsed = urlparse(host if "://" in host else f"sc://{host}")
    extra = conn.extra_dejson
    return Endpoint(parsed.hostname or "127.0.0.1", int(conn.port or parsed.port or DEFAULT_PORT),
                    conn.password or None, _flag(extra.get("use_ssl", False)),
                    f"Airflow connection '{conn_id}'",
                    _flag(extra.get("allow_insecure_token", False))).checked()


def resolve_endpoint(base: Path | None = None) -> Endpoint:
    """Outside Airflow: ``EOS_SPARK_REMOTE`` if set, else the server ``eos spark start`` runs."""
    remote = os.environ.get(REMOTE_ENV)
    if remote:
        return Endpoint.from_url(remote, REMOTE_ENV)
    state = read_state(base)
    if state is None:
        raise ComputeUnavailable(
            f"no Spark Connect server is running for {base or data_dir()}: start it with "
            f"`eos spark start`, set {REMOTE_ENV}, or use compute.mode: submit")
    # Not ``checked``: the state file names the server this machine runs, at an address of
    # this machine, so the token never leaves it.
    return Endpoint(state["host"], int(state["port"]), read_token(base), False,
                    "the server `eos spark start` runs")


# -- the session one precommit uses ---------------------------------------------------

def reachable(endpoint: Endpoint, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout):
            return True
    except OSError:
        return False


def _unreachable(endpoint: Endpoint) -> ComputeUnavailable:
    return ComputeUnavailable(
        f"Spark Connect server {endpoint.address} ({endpoint.source}) is not reachable: start it "
        "with `eos spark start` (or fix the connection); nothing was staged")


SERVER_STOPPING_SIGNS = (
    "Stream removed", "Socket closed", "RST_STREAM", "Connection reset", "StatusCode.CANCELLED",
    "Application error processing RPC", "SparkContext was shut down",
    "Cannot call methods on a stopped SparkContext", "SparkContext has been shutdown",
    "BlockManagerMaster.driverEndpoint()\" is null")


def compute_error(error: BaseException, endpoint: Endpoint) -> EosError | None:
    """The typed error for a Connect failure that is about the server, not the epoch: an
    unreachable server, a refused token, a session the server no longer knows (it restarted or
    expired the session). None for anything else (a failed job keeps its own error)."""
    from pyspark.errors import PySparkException

    if not isinstance(error, PySparkException):
        return None
    text = f"{error.getCondition() or ''} {error}"
    where = f"Spark Connect server {endpoint.address} ({endpoint.source})"
    if "UNAUTHENTICATED" in text:
        reason = next((r for r in ("No authentication token provided",
                                   "Invalid authentication token") if r in text), "refused")
        return ComputeUnavailable(
            f"{where} refused the token ({reason}): set the connection's password to the "
            "server's token (`eos spark status` says where it is kept); nothing was staged")
    if any(sign in text for sign in ("INVALID_HANDLE", "SESSION_NOT_FOUND", "NO_ACTIVE_SESSION")):
        return ComputeUnavailable(
            f"{where} lost this session (it restarted or expired it): the epoch is retried; "
            f"nothing was staged ({str(error).splitlines()[0][:200]})")
    if "UNAVAILABLE" in text or "Connection refused" in text or "failed to connect" in text:
        return _unreachable(endpoint)
    # The client's own retries (``fail_fast``: ~15 s) ran out on a server that went away
    # mid-epoch and was not back yet (seen in CI under load): the server, not the epoch.
    if "RETRIES_EXCEEDED" in text:
        return ComputeUnavailable(
            f"{where} did not answer for the client's retries (it stopped or restarted "
            f"mid-epoch): the epoch is retried; nothing was staged")
    # A server stopping (or restarting) mid-request drops the stream, fails the RPC itself, or
    # answers from a SparkContext being torn down (seen in CI: an NPE from the block manager
    # whose driver endpoint was already gone, or jobs cancelled by the shutdown).
    if any(sign in text for sign in SERVER_STOPPING_SIGNS):
        return ComputeUnavailable(
            f"{where} dropped the connection mid-epoch (it stopped or restarted): the epoch is "
            f"retried; nothing was staged ({str(error).splitlines()[0][:200]})")
    return None


def fail_fast(spark: Any) -> None:
    """Retry a lost server for ~15 s, not pyspark's default ~10 min: a restart mid-epoch should
    fail the attempt soon and let the task's retry (a new session) redo the epoch."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    spark.client.set_retry_policies([DefaultPolicy(max_retries=6, max_backoff=5000)])


def _configure(spark: Any, config: PipelineConfig) -> None:
    settings = {**SESSION_CONF,
                "spark.sql.shuffle.partitions": str(config.spark.shuffle_partitions),
                **config.spark.conf}
    for key, value in settings.items():
        try:
            spark.conf.set(key, value)
        except Exception as error:
            error_class = getattr(error, "getCondition", lambda: None)() or ""
            if not error_class.startswith("CANNOT_MODIFY"):
                raise
            raise ConfigError(
                f"spark.conf {key} cannot be set per session on Spark Connect: set it on the "
                f"server (`eos spark start --conf {key}=...`) or use compute.mode: submit "
                f"({str(error).splitlines()[0][:160]})") from None


# A pipeline's session id changes every hour and, within the hour, moves to its next generation
# when the server refuses the current one as closed. Spark Connect closes a session that idled
# past the server's session timeout (``eos spark start``: 15 min) and then refuses that id for
# good (it keeps the closed ids); a fixed id made every later precommit of a pipeline that
# idled that long fail the same way, retried forever. The hour bounds how many closed
# generations one precommit may have to step over; past ``SESSION_GENERATIONS`` the precommit
# runs in a session of its own (``compute.session: task``'s kind), so nothing ever halts on it.
SESSION_ROTATION_MS = 3_600_000
SESSION_GENERATIONS = 8


def pipeline_session_id(config: PipelineConfig, generation: int = 0,
                        now_ms: int | None = None) -> str:
    """The server session the precommits of this pipeline join (``compute.session:
    pipeline``): derived from the pipeline's identity, the hour and ``generation``, so every
    process finds the same one."""
    hour = (int(time.time() * 1000) if now_ms is None else now_ms) // SESSION_ROTATION_MS
    return str(uuid.uuid5(uuid.NAMESPACE_URL,
                          f"{config.app_id}@{config.root}#{hour}.{generation}"))


def session_closed(error: BaseException) -> bool:
    """Whether the server refused a session id because it closed that session (idle past its
    timeout, or released): the id is dead for good on this server, another one works."""
    condition = getattr(error, "getCondition", lambda: None)() or ""
    return "SESSION_CLOSED" in f"{condition} {error}"


CONNECT_MARKS = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


@contextlib.contextmanager
def session(config: PipelineConfig, endpoint: Endpoint) -> Iterator[Any]:
    """A Connect session with this pipeline's settings and the ``eos_kafka`` source registered
    (sources are registered per session). ``compute.session: task``: a fresh session, released
    on the server when the block ends, however it ends. ``pipeline``: the pipeline's session,
    left open for the next precommit (the client connection is closed either way)."""
    if not reachable(endpoint):
        raise _unreachable(endpoint)
    # pyspark marks a process that opened a Connect session in ``os.environ`` and from then on
    # builds every DataFrame operation (even a classic session's) the Connect way: the marks
    # go back as they were when the Connect session is done with.
    with restored_environ(CONNECT_MARKS):
        yield from _session(config, endpoint)


def _session(config: PipelineConfig, endpoint: Endpoint) -> Iterator[Any]:

    from eos.compute.reader import KafkaRangeDataSource

    shared = config.compute.session == "pipeline"
    spark = None
    try:
        spark = _joined(config, endpoint) if shared else _opened(config, endpoint, None)
        spark.dataSource.register(KafkaRangeDataSource)
        yield spark
    except Exception as error:  # setting up or using the session: a server problem is typed
        typed = compute_error(error, endpoint)
        if typed is None:
            raise
        raise typed from error
    finally:
        if spark is not None:
            stop_session(spark)


def _opened(config: PipelineConfig, endpoint: Endpoint, session_id: str | None) -> Any:
    """A configured session: ``session_id``'s, left open when the client is done (the
    pipeline's), or a fresh one (None), released then."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(endpoint.url(session_id)).create()
    spark.release_session_on_close = session_id is None
    fail_fast(spark)
    try:
        _configure(spark, config)  # the first request: the server takes the id, or refuses it
    except BaseException:
        stop_session(spark)
        raise
    return spark


def _joined(config: PipelineConfig, endpoint: Endpoint) -> Any:
    """The pipeline's session (``pipeline_session_id``): the first generation of this hour the
    server has not closed; a fresh session past ``SESSION_GENERATIONS`` closed ones."""
    for generation in range(SESSION_GENERATIONS):
        try:
            return _opened(config, endpoint, pipeline_session_id(config, generation))
        except Exception as error:
            if not session_closed(error):
                raise
    log_phase("precommit.session", closed_generations=SESSION_GENERATIONS,
              session="a fresh one, released at the end")
    return _opened(config, endpoint, None)


def stop_session(spark: Any) -> None:
    """Stop a Connect session (a task session is released server-side; pyspark logs, never
    raises), then take its client away from pyspark's finalizer.

    ``SparkSession.__del__`` closes the client again, and closing any client shuts down the
    release thread pool that pyspark shares between all sessions (a class attribute), waiting on
    that pool's lock. The garbage collector runs the finalizer wherever a collection happens to
    start: inside that pool's ``submit``, which holds the lock, the process deadlocks (seen: end
    to end tests hung in ``reattach._release_until``). Stopped here, the finalizer finds no
    client and does nothing (``tests/integration/compute/test_connect.py``)."""
    spark.stop()
    vars(spark).pop("_client", None)


# -- the local server's state file --------------------------------------------------------------

def state_path(base: Path | None = None) -> Path:
    return (base or data_dir()) / "spark-connect.json"


def token_path(base: Path | None = None) -> Path:
    return (base or data_dir()) / "spark-connect.token"


def read_token(base: Path | None = None) -> str:
    return token_path(base).read_text().strip()


def read_state(base: Path | None = None) -> dict[str, Any] | None:
    """The running server's state, or None (a stale file from a dead server is ignored)."""
    try:
        state = json.loads(state_path(base).read_text())
    except (OSError, ValueError):
        return None
    return state if alive(int(state.get("pid", -1))) else None


def airflow_connection(state: dict[str, Any], base: Path | None = None) -> str:
    """``AIRFLOW_CONN_SPARK_CONNECT_DEFAULT`` for a running server (holds the token: pass it to
    a child process's environment, never print it): Airflow's JSON form of the Spark provider's
    ``spark_connect`` type, the token where its ``SparkConnectHook`` reads it (the password),
    ``use_ssl`` in extra, so the provider's own hook and UI read it as any user-made one."""
    return json.dumps({"conn_type": "spark_connect", "host": str(state["host"]),
                       "port": int(state["port"]), "password": read_token(base),
                       "extra": {"use_ssl": False}})
