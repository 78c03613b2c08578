"""Kafka client settings and the broker facts the planner relies on (watermarks, partitions).

Bootstrap resolution is the same everywhere (``eos.core.bootstrap``): the connection's
``bootstrap.servers`` when this process was given connection settings, else
``KAFKA_BOOTSTRAP_SERVERS`` if set, else the embedded broker's published address, else an error
that says how to start one.

Precedence of client settings (``client_settings``), lowest first:

- with connection settings (``eos.core.bootstrap.supply_settings``: Airflow's ``kafka``
  connection): the connection's settings, then the pipeline's ``kafka.client`` (and a sink's
  ``client``). The ``KAFKA_SECURITY_*``/``KAFKA_SASL_*``/``KAFKA_SSL_*`` variables are not read:
  one source of credentials per process, never a mix of two;
- without: the bootstrap above, then ``kafka.client``, then those variables (the CLI's way).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import confluent_kafka as ck

from eos.core.bootstrap import FromConnection as FromConnection  # re-exported
from eos.core.bootstrap import Provided, bootstrap_servers, supplied_settings
from eos.core.bootstrap import broker_state_path as broker_state_path  # re-exported
from eos.core.bootstrap import local_broker as local_broker  # re-exported
from eos.core.errors import DataLoss, KafkaUnavailable, TimeLookupWrong, TopicMissing
from eos.core.topics import Marks, TopicPartition, matching

_ENV_PREFIXES = ("SECURITY_", "SASL_", "SSL_")
# Client settings whose value is a secret or says who we are (``redact``): passwords, keys and
# key stores (``ssl.key.*``, ``ssl.keystore.*``, ``ssl_key``), tokens, credentials, a
# kerberos keytab, the SASL user, and the OAUTHBEARER config and extensions (they carry a
# client secret or a principal). Matched anywhere in the name: a false positive only hides a
# harmless value.
_SECRET = re.compile(
    r"pass|secret|key|token|\.pem|credential|user|jaas|kinit|assertion"
    r"|sasl\.oauthbearer\.(config|extensions)",
    re.IGNORECASE)
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
METADATA_TIMEOUT_S = 10.0


def reachable(bootstrap: str, timeout: float = 2.0) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


class FromEnvironment(Provided):
    """A client setting's value read from the environment (``${VAR}`` in a config, or a
    ``KAFKA_SASL_*``-style variable): shown as the config wrote it (``template``), never as
    read (``eos.core.bootstrap.Provided``)."""


def _expand(value: Any) -> Any:
    """``${VAR}`` in a config value is read from the environment, so secrets stay out of files;
    a value that had one is a ``FromEnvironment`` (shown as written, never as read)."""
    if not isinstance(value, str) or not _ENV_REF.search(value):
        return value

    def lookup(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise KafkaUnavailable(f"Kafka client setting refers to ${{{name}}}, which is not set")
        return os.environ[name]

    return FromEnvironment(_ENV_REF.sub(lookup, value), value)


def env_client_settings() -> dict[str, str]:
    """``KAFKA_SASL_PASSWORD`` -> ``sasl.password``; only security, SASL and SSL settings
    (each a ``FromEnvironment``, shown as ``${KAFKA_...}``)."""
    settings: dict[str, str] = {}
    for name, value in os.environ.items():
        if not name.startswith("KAFKA_"):
            continue
        rest = name[len("KAFKA_") :]
        if rest.startswith(_ENV_PREFIXES):
            settings[rest.lower().replace("_", ".")] = FromEnvironment(value, f"${{{name}}}")
    return settings


def client_settings(
    client: dict[str, Any] | None = None, bootstrap: str | None = None
) -> dict[str, Any]:
    """Settings shared by every client of a pipeline, in the module's order of precedence.
    ``bootstrap``: the broker a driver resolved for its executors (it wins over the
    connection's and the environment's, not over ``client``)."""
    connection = supplied_settings()
    settings: dict[str, Any] = dict(connection)
    settings["bootstrap.servers"] = bootstrap or bootstrap_servers()
    settings.update({k: _expand(v) for k, v in (client or {}).items()})
    if not connection:
        settings.update(env_client_settings())
    return settings


def security_keys() -> list[str]:
    """The names of this process's connection settings a client cannot do without (security
    protocol, SASL, SSL): what an executor must also have, its values never sent to it."""
    return sorted(k for k in supplied_settings() if k.startswith(("security.", "sasl.", "ssl.")))


def redact(settings: dict[str, Any]) -> dict[str, Any]:
    """What may be shown or logged: a secret-looking setting as ``***``, and any value read
    from the environment or a connection as where it came from (``Provided.template``),
    whatever its key: ``client.id: ${MY_SECRET}`` is shown as ``${MY_SECRET}``, a connection's
    ``client.id`` as ``<Airflow connection 'kafka_default'>``. The deployment's bootstrap
    address (``eos.core.bootstrap``) is shown: it names where the pipeline reads."""
    return {k: "***" if _SECRET.search(k) else
            (v.template if isinstance(v, Provided) else v) for k, v in settings.items()}


class _CoordinatorTeardown(logging.Filter):
    """librdkafka looks up a consumer's group coordinator even when the group is never used
    (``group.id`` is required), and when the consumer closes while that connection is still
    authenticating (SASL) it logs the teardown as an error: "GroupCoordinator: SASL
    authentication error: ... Local: Broker transport failure". eos never joins or commits to
    the group, so that line says nothing; every other line of librdkafka's passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not ("GroupCoordinator" in text and "Broker transport failure" in text)


LIBRDKAFKA_LOG = logging.getLogger("eos.librdkafka")
LIBRDKAFKA_LOG.addFilter(_CoordinatorTeardown())


def consumer(settings: dict[str, Any], group: str, **extra: Any) -> ck.Consumer:
    """A consumer that only ever uses assign(): offsets live in Delta, never in Kafka. Its
    log lines go through Python's logging (``eos.librdkafka``), less a benign one."""
    conf = {
        **settings,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "error",
        "logger": LIBRDKAFKA_LOG,
        **extra,
    }
    return ck.Consumer(conf)


END_WAIT_MS = 10  # how long a broker may hold a fetch at a partition's end (read_partition)


def read_partition(settings: dict[str, Any], topic: str, partition: int, start: int,
                   until: int | None = None, group: str = "eos-reader",
                   timeout_s: float = 30.0) -> Iterator[ck.Message]:
    """Every ``read_committed`` record of one partition from offset ``start``: up to ``until``
    (exclusive) when given, else up to the partition's end.

    With ``until``, an end-of-partition before it means "not there yet" (an open transaction
    holds the LSO back), so the read waits, up to ``timeout_s``; offsets may have gaps
    (transaction markers, compaction), so it stops by offset, never by count."""
    if until is not None and until <= start:
        return
    # The end of the partition is known only from a fetch that finds nothing more, and the
    # broker holds such a fetch for fetch.wait.max.ms (500 by default): every read to the end
    # (a sink's marker, at every begin and commit) paid half a second for it.
    c = consumer(settings, group=group, **{"enable.partition.eof": True,
                                           "fetch.wait.max.ms": END_WAIT_MS})
    try:
        check_in_log(c, topic, partition, start, until, settings["bootstrap.servers"])
        c.assign([ck.TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = c.poll(1.0)
            if message is None:
                continue
            if message.error() and about_the_group(message.error()):
                continue
            if message.error():
                if message.error().code() in OUT_OF_RANGE:  # removed while we read
                    check_in_log(c, topic, partition, start, until, settings["bootstrap.servers"])
                if message.error().code() != ck.KafkaError._PARTITION_EOF:
                    raise KafkaUnavailable(f"reading {topic}[{partition}] failed: "
                                           f"{message.error()}")
                if until is None or message.offset() >= until:
                    return
                continue
            if until is not None and message.offset() >= until:
                return
            yield message
            if until is not None and message.offset() == until - 1:
                return
        raise KafkaUnavailable(f"reading {topic}[{partition}] from offset {start} timed out "
                               f"after {timeout_s:.0f}s")
    finally:
        c.close()


# What a fetch from an offset the log no longer (or never) holds fails with: the broker's
# OFFSET_OUT_OF_RANGE, surfaced by librdkafka as _AUTO_OFFSET_RESET under "auto.offset.reset:
# error". Not a broker that is briefly away: retrying reads the same missing offsets.
OUT_OF_RANGE = (ck.KafkaError._AUTO_OFFSET_RESET, ck.KafkaError.OFFSET_OUT_OF_RANGE)


def about_the_group(error: ck.KafkaError) -> bool:
    """Whether a consumer's error is about its consumer group: librdkafka looks up the group's
    coordinator for any consumer with a ``group.id``, but eos's consumers only ever assign()
    (offsets live in Delta), so a principal without rights on the group loses nothing by it:
    such an error is not a failed read."""
    return bool(error.code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED)


def check_in_log(c: ck.Consumer, topic: str, partition: int, start: int, until: int | None,
                 bootstrap: str, *, until_in_log: bool = False, what: str = "range",
                 consequence: str = "they cannot be read") -> None:
    """``DataLoss`` naming the offsets when a read of ``[start, until)`` cannot be served:
    records before the log start are gone (retention), or ``start`` is past the end
    (truncation), as ``begin``, the epoch's reader and the audit all report them, instead of a
    retried "Offset out of range". ``until_in_log``: ``until`` must be in the log already (a
    planned range was below the high watermark when planned; a shorter log was truncated)."""
    low, high = watermarks(c, topic, partition, bootstrap)
    if start < low:
        raise DataLoss.gone(topic, partition, start, low, until, what, consequence)
    if start > high:
        raise DataLoss.beyond(topic, partition, start, high)
    if until_in_log and until is not None and until > high:
        raise DataLoss.beyond(topic, partition, until, high, f"the {what} until")


def _metadata(c: ck.Consumer, topic: str | None, bootstrap: str) -> Any:
    """The broker's metadata about ``topic`` (None: every topic) and the cluster, asked now."""
    try:
        return c.list_topics(topic, timeout=METADATA_TIMEOUT_S)
    except ck.KafkaException as error:
        raise KafkaUnavailable(
            f"Kafka at {bootstrap} did not answer a metadata request within "
            f"{METADATA_TIMEOUT_S:.0f}s ({error.args[0].str()}); is the broker running?"
        ) from None


def describe_topic(c: ck.Consumer, topic: str, bootstrap: str) -> list[int]:
    """Partition ids of ``topic``; a clear error when the broker or the topic is not there."""
    metadata = _metadata(c, topic, bootstrap)
    entry = metadata.topics.get(topic)
    if entry is None or entry.error is not None or not entry.partitions:
        reason = entry.error.str() if entry is not None and entry.error else "no partitions"
        raise TopicMissing(f"topic '{topic}' does not exist on Kafka at {bootstrap} ({reason})")
    return sorted(entry.partitions)


def watermarks(c: ck.Consumer, topic: str, partition: int, bootstrap: str) -> tuple[int, int]:
    """(log start, high watermark) of one partition, asked of the broker, never cached."""
    try:
        return c.get_watermark_offsets(
            ck.TopicPartition(topic, partition), timeout=METADATA_TIMEOUT_S, cached=False
        )
    except ck.KafkaException as error:
        raise KafkaUnavailable(
            f"Kafka at {bootstrap} did not return watermarks of {topic}[{partition}] "
            f"({error.args[0].str()})"
        ) from None


def topic_watermarks(settings: dict[str, Any], topic: str) -> dict[int, tuple[int, int]]:
    """(log start, high watermark) per partition of ``topic``, asked of the broker now."""
    bootstrap = settings["bootstrap.servers"]
    with metadata_client(settings) as c:
        return {p: watermarks(c, topic, p, bootstrap) for p in describe_topic(c, topic, bootstrap)}


def input_watermarks(settings: dict[str, Any], names: list[str] | None,
                     pattern: re.Pattern[str] | None) -> tuple[str | None, Marks]:
    """The cluster's id and (log start, high watermark) of every partition of a pipeline's
    input, asked of the broker now: the topics ``names`` (each must exist: ``TopicMissing``),
    else every topic ``pattern`` matches (``eos.core.topics.matching``) in one metadata
    request, so the topic set and its watermarks are of the same moment."""
    bootstrap = settings["bootstrap.servers"]
    with metadata_client(settings) as c:
        if names is None:
            assert pattern is not None
            metadata = _metadata(c, None, bootstrap)
            present = [t for t, m in metadata.topics.items() if m.error is None and m.partitions]
            partitions = {t: sorted(metadata.topics[t].partitions)
                          for t in matching(pattern, present)}
        else:
            partitions = {t: describe_topic(c, t, bootstrap) for t in names}
            metadata = _metadata(c, names[0], bootstrap)
        marks = {TopicPartition(t, p): watermarks(c, t, p, bootstrap)
                 for t, ps in partitions.items() for p in ps}
    return metadata.cluster_id or None, marks


def cluster_id(settings: dict[str, Any], topic: str) -> str | None:
    """The id of the Kafka cluster ``settings`` reach (KIP-78; the embedded broker reports one
    too, new at each start), from a metadata request about ``topic``: what, with the topic,
    a checkpoint's offsets belong to (``eos.core.identity``). None: the cluster reports none."""
    with metadata_client(settings) as c:
        return _metadata(c, topic, settings["bootstrap.servers"]).cluster_id or None


def offsets_for_time(settings: dict[str, Any], topic: str, ms: int) -> dict[int, int]:
    """Per partition of ``topic``, the first offset whose record's timestamp is ``>= ms``; the
    high watermark where no record is that late (Kafka's ListOffsets by timestamp)."""
    bootstrap = settings["bootstrap.servers"]
    with metadata_client(settings) as c:
        partitions = describe_topic(c, topic, bootstrap)
        try:
            found = c.offsets_for_times([ck.TopicPartition(topic, p, ms) for p in partitions],
                                        timeout=METADATA_TIMEOUT_S)
        except ck.KafkaException as error:
            raise KafkaUnavailable(f"Kafka at {bootstrap} did not return offsets of {topic} "
                                   f"for timestamp {ms} ({error.args[0].str()})") from None
        marks = {tp.partition: watermarks(c, topic, tp.partition, bootstrap) for tp in found}
        offsets = {tp.partition: tp.offset if tp.offset >= 0 else marks[tp.partition][1]
                   for tp in found}
    for partition, offset in offsets.items():
        check_time_offset(settings, topic, partition, offset, ms, marks[partition])
    return offsets


def check_time_offset(settings: dict[str, Any], topic: str, partition: int, offset: int,
                      ms: int, marks: tuple[int, int]) -> None:
    """The broker's answer checked against the records around it: the record before ``offset``
    is timestamped before ``ms`` and the one at it (if any) at or after. A broker that does not
    look offsets up by time (librdkafka's mock cluster, the embedded broker, answers the end of
    the log) would otherwise make a start or a move skip records silently; ``TimeLookupWrong``
    instead, before anything is planned."""
    low, high = marks
    for message in read_partition(settings, topic, partition, max(offset - 1, low),
                                  min(offset + 1, high), group="eos-time-check",
                                  timeout_s=10.0):
        stamp = message.timestamp()[1]
        wrong = stamp >= ms if message.offset() < offset else stamp < ms
        if wrong:
            raise TimeLookupWrong(
                f"Kafka at {settings['bootstrap.servers']} answered offset {offset} of "
                f"{topic}[{partition}] for timestamp {ms}, and the record at offset "
                f"{message.offset()} is timestamped {stamp}: this broker does not look offsets "
                "up by time (the embedded broker, librdkafka's mock cluster, does not). Start "
                "from earliest, latest or offsets:<p>=<o>,... instead")


# A process keeps one metadata consumer per client settings: a fresh one costs a connection and
# a metadata round trip (~25 ms on the embedded broker, a third of an empty epoch's begin), and
# its answers are never cached (``list_topics`` and ``cached=False`` watermarks ask the broker
# each time), so keeping it changes no answer. Lent to one caller at a time; one that failed a
# request is closed and dropped (the next caller connects afresh). Forked children never use
# their parent's (librdkafka's threads do not survive a fork): they are left alone, not closed.
_metadata_clients: dict[tuple[tuple[str, str], ...], list[ck.Consumer]] = {}
_metadata_lock = threading.Lock()
MOCK_CLUSTER_PREFIX = "mockCluster"  # the cluster id librdkafka's mock reports (rdkafka_mock.c)
_mock_clusters: dict[str, bool] = {}  # bootstrap -> whether its cluster is the mock
_metadata_pid = os.getpid()
_abandoned: list[Any] = []  # a forked child's copies of its parent's clients: never destroyed


@contextmanager
def metadata_client(settings: dict[str, Any]) -> Iterator[ck.Consumer]:
    """A consumer for metadata requests (partitions, watermarks), lent from the process's keep."""
    global _metadata_pid
    key = tuple(sorted((k, str(v)) for k, v in settings.items()))
    with _metadata_lock:
        if _metadata_pid != os.getpid():
            _abandoned.append(dict(_metadata_clients))
            _metadata_clients.clear()
            _metadata_pid = os.getpid()
        kept = _metadata_clients.get(key)
        c = kept.pop() if kept else None
    if c is None:
        c = consumer(settings, group="eos-metadata")
    try:
        yield c
    except BaseException:
        c.close()
        raise
    with _metadata_lock:
        if _metadata_pid == os.getpid():
            _metadata_clients.setdefault(key, []).append(c)
            return
    c.close()


@atexit.register
def forget_clients(bootstrap: str | None = None) -> None:
    """Close the kept metadata clients (of ``bootstrap`` only, when given): at exit, and when the
    embedded broker is stopped."""
    with _metadata_lock:
        if _metadata_pid != os.getpid():
            return
        keys = [k for k in _metadata_clients
                if bootstrap is None or dict(k).get("bootstrap.servers") == bootstrap]
        closing = [c for k in keys for c in _metadata_clients.pop(k)]
    for c in closing:
        c.close()


def is_embedded_broker(settings: dict[str, Any]) -> bool:
    """Whether ``settings`` point at the embedded broker (librdkafka's mock cluster), which
    neither fences transactional ids nor filters ``read_committed`` (docs/guarantees.md), and
    hangs on some admin requests (CreateTopics, DescribeConfigs, DescribeTopics) until they
    time out. This machine's state file says so when it names that address; a process that
    cannot see it (another data directory, an Airflow worker elsewhere) asks the cluster its id,
    which the mock names ``mockCluster...`` (once per address and process)."""
    bootstrap = str(settings.get("bootstrap.servers", ""))
    state = local_broker()
    if state is not None and state["bootstrap"] == bootstrap:
        return bool(state.get("kind", "mock") == "mock")
    with _metadata_lock:
        known = _mock_clusters.get(bootstrap)
    if known is None:
        try:
            with metadata_client(settings) as c:
                found = c.list_topics(timeout=METADATA_TIMEOUT_S).cluster_id or ""
        except ck.KafkaException:
            return False  # no answer: the caller's own request says what is wrong
        known = found.startswith(MOCK_CLUSTER_PREFIX)
        with _metadata_lock:
            _mock_clusters[bootstrap] = known
    return known
