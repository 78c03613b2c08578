"""Apache Kafka itself, a single node in KRaft mode, run by eos on this machine.

The embedded default broker is librdkafka's mock cluster (``eos.tools.servers.mock_cluster``):
quick to
start, but a test double that neither filters ``read_committed`` nor fences transactional ids.
Everything that depends on what a broker guarantees (transactions, fencing, isolation,
DescribeConfigs, retention, ACLs, SASL) is exercised here, on the broker users run, through the
same state file (``broker.json``) clients already find the embedded broker by.

The broker's jars come from Maven Central at one pinned version (``VERSION``; the same image tag
``docker-compose.yaml`` runs), listed with their SHA-256 sums in ``apache_kafka_jars.txt``, and
are fetched once (``eos broker fetch``) into a cache outside any checkout. Each ``start``:

- formats a fresh log directory under the data directory (nothing survives a stop);
- listens on 127.0.0.1 only, on three free ports, every one of them authenticated:
  ``CLIENT`` (SASL/SCRAM-SHA-256: what pipelines and tools use), ``INTERNAL`` (the broker's own
  replication traffic, SASL/PLAIN) and ``CONTROLLER`` (KRaft, SASL/PLAIN);
- generates every password anew, writes them only to files this user alone can read, and never
  puts one on a command line;
- enables ACLs (``StandardAuthorizer``, nothing allowed without an ACL but to the super users),
  so a principal's missing WRITE or transactional-id grant is refused as it is in production.

The client user, a super user, is created through the Admin API once the broker answers, so its
SCRAM credential exists in the cluster's metadata like any user an operator adds.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from eos.core.errors import BrokerUnavailable

VERSION = "4.1.0"
KIND = "apache-kafka"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
REPOSITORY_ENV = "EOS_MAVEN_REPOSITORY"  # a Maven mirror's base URL, where Central is not reached
CACHE_ENV = "EOS_CACHE_DIR"
MECHANISM = "SCRAM-SHA-256"
CLIENT_USER = "eos"
BROKER_USER = "eos-broker"  # the broker's own principal on INTERNAL and CONTROLLER
START_TIMEOUT_S = 90.0
HEAP = "-Xmx1g"  # a test broker: a few hundred MB live; 1 GiB leaves room beside Spark
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"


# -- the pinned jars -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Jar:
    """One Maven artifact of the broker's classpath and the SHA-256 its bytes must have."""

    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    @property
    def url_path(self) -> str:
        """Its path in a Maven repository (the standard layout)."""
        return (f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/"
                f"{self.file_name}")


def jars() -> list[Jar]:
    """The pinned classpath, as shipped with the package (``apache_kafka_jars.txt``)."""
    text = resources.files("eos.tools.servers").joinpath("apache_kafka_jars.txt").read_text()
    listed = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        coordinates, sha256 = line.split()
        group, artifact, version = coordinates.split(":")
        listed.append(Jar(group, artifact, version, sha256))
    return listed


def cache_dir() -> Path:
    """Where the jars live: ``$EOS_CACHE_DIR``, else ``$XDG_CACHE_HOME/eos``, else
    ``~/.cache/eos``; one directory per version, shared by every checkout and data directory."""
    root = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "eos")
    return Path(root) / f"apache-kafka-{VERSION}"


def missing(where: Path | None = None) -> list[Jar]:
    """The pinned jars not (yet) in the cache. Sums are checked when fetched (a file is renamed
    into place only after), so a present file is one that passed its check."""
    where = where or cache_dir()
    return [jar for jar in jars() if not (where / jar.file_name).is_file()]


def fetch(report: Callable[[Jar], None] | None = None, where: Path | None = None) -> Path:
    """Download every missing jar, check its SHA-256, and return the cache directory.

    A jar is written under a temporary name and renamed only once its sum matches, so an
    interrupted or corrupted download never leaves a file that passes for the jar."""
    where = where or cache_dir()
    where.mkdir(parents=True, exist_ok=True)
    base = os.environ.get(REPOSITORY_ENV, MAVEN_CENTRAL).rstrip("/")
    for jar in missing(where):
        if report is not None:
            report(jar)
        url = f"{base}/{jar.url_path}"
        partial = where / f".{jar.file_name}.part"
        digest = hashlib.sha256()
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as out:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        except OSError as error:
            partial.unlink(missing_ok=True)
            raise BrokerUnavailable(f"could not fetch {url}: {error} (set {REPOSITORY_ENV} to a "
                                    "Maven mirror this machine reaches)") from error
        if digest.hexdigest() != jar.sha256:
            partial.unlink(missing_ok=True)
            raise BrokerUnavailable(f"{url} has SHA-256 {digest.hexdigest()}, not the pinned "
                                    f"{jar.sha256}: refused (a mirror serving other bytes?)")
        partial.replace(where / jar.file_name)
    return where


def classpath() -> str:
    """The broker's classpath, or an error naming the one command that fetches it."""
    where = cache_dir()
    absent = missing(where)
    if absent:
        raise BrokerUnavailable(
            f"Apache Kafka {VERSION}'s jars are not in {where} ({len(absent)} missing): fetch "
            "them once with `eos broker fetch` (from Maven Central, checked by SHA-256)")
    return os.pathsep.join(str(where / jar.file_name) for jar in jars())


# -- one broker ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Credentials:
    """A SASL user name and its password (never shown)."""

    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class Layout:
    """Where one broker's files and ports are."""

    home: Path
    client_port: int
    internal_port: int
    controller_port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def internal_bootstrap(self) -> str:
        return f"127.0.0.1:{self.internal_port}"

    @property
    def properties(self) -> Path:
        return self.home / "server.properties"

    @property
    def log_dir(self) -> Path:
        return self.home / "data"

    @property
    def log_file(self) -> Path:
        return self.home / "server.log"


def client_settings(bootstrap: str, user: Credentials) -> dict[str, str]:
    """What a librdkafka client needs to talk to a broker started here as ``user``."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": MECHANISM, "sasl.username": user.username,
            "sasl.password": user.password}


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _plain_jaas(user: Credentials) -> str:
    """A PLAIN login that both presents ``user`` (as a client of the listener) and accepts it
    (as the listener's only user)."""
    return ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user.username}" password="{user.password}" '
            f'user_{user.username}="{user.password}";')


def server_properties(layout: Layout, broker: Credentials, client_user: str) -> str:
    """The broker's configuration: one node that is broker and controller, loopback only,
    every listener authenticated, ACLs on, and the replication settings one node can meet."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{layout.controller_port}",
        "listeners": (f"CLIENT://127.0.0.1:{layout.client_port},"
                      f"INTERNAL://127.0.0.1:{layout.internal_port},"
                      f"CONTROLLER://127.0.0.1:{layout.controller_port}"),
        "advertised.listeners": (f"CLIENT://127.0.0.1:{layout.client_port},"
                                 f"INTERNAL://127.0.0.1:{layout.internal_port}"),
        "listener.security.protocol.map":
            "CLIENT:SASL_PLAINTEXT,INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.client.sasl.enabled.mechanisms": MECHANISM,
        "listener.name.client.scram-sha-256.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": _plain_jaas(broker),
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": _plain_jaas(broker),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{broker.username};User:{client_user}",
        "allow.everyone.if.no.acl.found": "false",
        "log.dirs": str(layout.log_dir),
        # What the embedded broker gives an auto-created topic, so tests and tools agree.
        "num.partitions": "4",
        "auto.create.topics.enable": "true",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # A transaction past its timeout is aborted within a second, not ten.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        # No time retention unless a topic sets its own: records carry their event time
        # (CreateTime), and replayed or generated events from long ago would be deleted at the
        # next check. A topic that sets retention is checked every second, so deleted records
        # (the DataLoss path) show without a long wait.
        "log.retention.ms": "-1",
        "log.retention.check.interval.ms": "1000",
        "log.segment.delete.delay.ms": "0",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
"""


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise BrokerUnavailable("Apache Kafka needs Java 17+ (as Spark does); none was found")
    return java


def _cluster_id() -> str:
    """A KRaft cluster id: a random UUID, URL-safe base64 without padding (22 characters).
    One in 64 starts with ``-``, which the storage tool's parser would take for an option: it
    is passed as ``--cluster-id=<id>``."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def prepare(home: Path, client_user: str = CLIENT_USER) -> tuple[Layout, Credentials]:
    """A fresh, formatted log directory and configuration under ``home`` (anything there
    before is deleted), with new ports and a new broker password."""
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True, mode=0o700)
    client, internal, controller = _free_ports(3)
    layout = Layout(home, client, internal, controller)
    broker = Credentials(BROKER_USER, secrets.token_urlsafe(24))
    _write_private(layout.properties, server_properties(layout, broker, client_user))
    _write_private(home / "log4j2.properties", LOG4J2.format(log=layout.log_file))
    formatted = subprocess.run(
        [_java(), "-cp", classpath(), STORAGE_TOOL, "format", f"--cluster-id={_cluster_id()}",
         "--config", str(layout.properties), "--ignore-formatted"],
        capture_output=True, text=True, env=_jvm_env(), timeout=120)
    if formatted.returncode != 0:
        raise BrokerUnavailable(f"formatting Apache Kafka's log directory failed: "
                                f"{formatted.stderr.strip() or formatted.stdout.strip()}")
    return layout, broker


def _jvm_env() -> dict[str, str]:
    """The JVM's environment: the caller's, without ``JAVA_TOOL_OPTIONS`` (a caller's agent
    flags would print on every start and could slow the broker)."""
    return {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}


def launch(layout: Layout, log: Any) -> subprocess.Popen[bytes]:
    """The broker's JVM, in a session of its own (a Ctrl-C of the caller does not reach it)."""
    command = [_java(), HEAP, "-Xms256m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
               "-Djava.awt.headless=true",
               f"-Dlog4j2.configurationFile={layout.home / 'log4j2.properties'}",
               "-cp", classpath(), MAIN_CLASS, str(layout.properties)]
    return subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                            env=_jvm_env(), start_new_session=True)


def create_client_user(layout: Layout, broker: Credentials, user: Credentials,
                       deadline: float) -> None:
    """Add ``user``'s SCRAM credential through the Admin API on the INTERNAL listener, as the
    broker's own principal; retried until the broker answers or ``deadline`` passes."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": layout.internal_bootstrap,
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": broker.username, "sasl.password": broker.password,
                         "log_level": 0})
    upsert = UserScramCredentialUpsertion(
        user.username, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
        user.password.encode())
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            admin.alter_user_scram_credentials([upsert])[user.username].result(timeout=10)
            return
        except (KafkaException, TimeoutError) as error:  # not up yet: a loaded machine
            last = error
            time.sleep(0.5)
    raise BrokerUnavailable(f"Apache Kafka did not accept its client user in time: {last}")


def wait_until_serving(settings: dict[str, str], deadline: float) -> None:
    """Until a client with ``settings`` authenticates and reads the cluster's metadata: the
    credential is in the metadata log, and the broker has caught up to it."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**settings, "log_level": 0})
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if admin.list_topics(timeout=5).brokers:
                return
        except KafkaException as error:
            last = error
        time.sleep(0.3)
    raise BrokerUnavailable(f"Apache Kafka did not answer an authenticated client in time: {last}")


def create_topics(settings: dict[str, str], topics: Iterable[tuple[str, int]]) -> None:
    """Create the topics asked for at start (an existing one is left as it is)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    wanted = [NewTopic(name, partitions, 1) for name, partitions in topics]
    if not wanted:
        return
    admin = AdminClient({**settings, "log_level": 0})
    for name, future in admin.create_topics(wanted, operation_timeout=30).items():
        try:
            future.result(timeout=60)
        except TimeoutError:
            raise BrokerUnavailable(f"topic {name!r} was not created within 60 s") from None
        except KafkaException as error:
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise BrokerUnavailable(f"could not create topic {name!r}: {error}") from error


def start_broker(home: Path, topics: Iterable[tuple[str, int]] = (),
                 user: Credentials | None = None
                 ) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """Format, launch and wait for one broker under ``home``; its process and the state its
    clients need (``bootstrap``, the client user's ``client`` settings, ``kind``).

    ``user`` is the client user (a super user), by default ``eos`` with a new password; a
    caller that must hand the password to processes started before the broker (a test run's
    Spark server) chooses it first."""
    user = user or Credentials(CLIENT_USER, secrets.token_urlsafe(24))
    layout, broker = prepare(home, user.username)
    log = open(layout.home / "stdout.log", "ab")  # noqa: SIM115 - handed to the JVM
    process = launch(layout, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        create_client_user(layout, broker, user, deadline)
        settings = client_settings(layout.bootstrap, user)
        wait_until_serving(settings, deadline)
        create_topics(settings, topics)
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        log.close()
    if process.poll() is not None:
        raise BrokerUnavailable(f"Apache Kafka exited with code {process.returncode}; see "
                                f"{layout.log_file}")
    state = {"bootstrap": layout.bootstrap, "pid": process.pid, "kind": KIND,
             "version": VERSION, "started_at": time.time(),
             "client": {k: v for k, v in settings.items() if k != "bootstrap.servers"},
             "internal": layout.internal_bootstrap, "home": str(layout.home)}
    return process, state
