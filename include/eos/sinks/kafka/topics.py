"""Topics a Kafka sink writes to (its output and its marker topic): named within Kafka's rules,
made to exist, a marker topic checked to keep its markers, asked whether an open transaction
holds a partition back, and the broker's errors told apart."""

from __future__ import annotations

import logging
from typing import Any

from eos.core.errors import MarkerTopicUnsafe, SinkRejected, SinkUnavailable

log = logging.getLogger(__name__)

TIMEOUT_S = 30.0
CREATE_TIMEOUT_S = 15.0
MAX_TOPIC_NAME = 249  # Kafka refuses longer topic names (kafka.common.internals.Topic)


def kafka_error(error: BaseException) -> Any:
    return error.args[0] if error.args else None


def ensure_topic(settings: dict[str, Any], topic: str, partitions: int | None,
                 topic_config: dict[str, str] | None = None) -> None:
    """Make sure ``topic`` exists: create it (CreateTopics) where the broker allows, else rely on
    the broker's auto-creation; a clear ``SinkRejected`` when neither works.

    The embedded broker does not implement CreateTopics (a request hangs until it times out,
    docs/guarantees.md), so there only auto-creation is asked for."""
    from concurrent.futures import TimeoutError as FutureTimeout

    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    from eos.core.kafka import is_embedded_broker

    admin = AdminClient(settings)
    try:
        if topic in admin.list_topics(timeout=TIMEOUT_S).topics:
            return
    except ck.KafkaException as error:
        raise SinkUnavailable(f"Kafka at {settings['bootstrap.servers']} did not answer: "
                              f"{kafka_error(error)}") from None
    reason: Any = "not implemented by the embedded broker"
    if not is_embedded_broker(settings):
        created = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions or -1, replication_factor=-1,
                      config=topic_config or {})], request_timeout=CREATE_TIMEOUT_S)
        try:
            created[topic].result(CREATE_TIMEOUT_S + 5)
            return
        except ck.KafkaException as error:
            reason = kafka_error(error)
            if reason is not None and reason.code() == ck.KafkaError.TOPIC_ALREADY_EXISTS:
                return
        except FutureTimeout:
            reason = f"no answer within {CREATE_TIMEOUT_S:.0f}s"
    # A producer's metadata request auto-creates the topic where the broker allows it.
    probe = ck.Producer({**settings, "allow.auto.create.topics": True})
    probe.list_topics(topic, timeout=TIMEOUT_S)
    if topic not in admin.list_topics(timeout=TIMEOUT_S).topics:
        raise SinkRejected(
            f"output topic '{topic}' does not exist and could not be created "
            f"(CreateTopics: {reason}; auto-creation is off); create it, or let this "
            "pipeline's principal create topics"
        )


# What decides whether a topic deletes records, with Kafka's defaults (a broker's own defaults
# are in DescribeConfigs' answer: the values that apply to the topic).
_RETENTION = {"cleanup.policy": "delete", "retention.ms": "604800000", "retention.bytes": "-1"}
MARKER_TOPIC_CONFIG = {"cleanup.policy": "compact"}  # what a marker topic is created with


def marker_loss(configs: dict[str, str]) -> str | None:
    """How a topic with these configs deletes records (``cleanup.policy=delete with
    retention.ms=3600000``), or None when it never does: ``compact`` without ``delete`` (the
    last record of each key stays, the only marker a sink reads), or no finite retention.

    ``compact,delete`` with a finite retention still deletes by time or size: refused too."""
    found = {key: configs.get(key) or default for key, default in _RETENTION.items()}
    policies = {p.strip() for p in found["cleanup.policy"].split(",")}
    limits = [f"{key}={found[key]}" for key in ("retention.ms", "retention.bytes")
              if int(found[key]) >= 0]
    if "delete" not in policies or not limits:
        return None
    return f"cleanup.policy={found['cleanup.policy']} with {' and '.join(limits)}"


def missing_operations(settings: dict[str, Any], wanted: dict[str, tuple[str, ...]]
                       ) -> dict[str, list[str]]:
    """Per topic, the operations (``WRITE``, ``READ``, ``DESCRIBE``) ``wanted`` of it that this
    client's principal is not allowed: what the broker tells through DescribeTopics' authorized
    operations. A topic the principal may not even describe lacks all of them. Empty where the
    broker does not tell (the embedded broker implements no ACLs)."""
    from concurrent.futures import TimeoutError as FutureTimeout

    import confluent_kafka as ck
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    from eos.core.kafka import is_embedded_broker

    if is_embedded_broker(settings):
        return {}
    admin = AdminClient(settings)
    described = admin.describe_topics(TopicCollection(list(wanted)),
                                      include_authorized_operations=True,
                                      request_timeout=TIMEOUT_S)
    missing: dict[str, list[str]] = {}
    for topic, future in described.items():
        try:
            told = future.result(TIMEOUT_S + 5).authorized_operations
        except ck.KafkaException as error:
            failure = kafka_error(error)
            if failure is None or failure.code() != ck.KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise SinkUnavailable(f"Kafka at {settings['bootstrap.servers']} did not "
                                      f"describe topic '{topic}': {failure}") from None
            told = []  # not even DESCRIBE
        except FutureTimeout:
            raise SinkUnavailable(f"Kafka at {settings['bootstrap.servers']} did not describe "
                                  f"topic '{topic}' within {TIMEOUT_S:.0f}s") from None
        if told is None:  # the broker does not say
            continue
        allowed = {op.name for op in told}
        lacking = [op for op in wanted[topic] if op not in allowed and "ALL" not in allowed]
        if lacking:
            missing[topic] = lacking
    return missing


def check_marker_topic(settings: dict[str, Any], topic: str) -> None:
    """Refuse a marker topic that deletes records (``marker_loss``): a lost marker makes the sink
    look behind the checkpoint, which halts the pipeline (``ProtocolViolation``) long after the
    setting was made. Checked whenever the sink prepares, so a topic created by someone else
    (or auto-created with the broker's defaults) is refused before any epoch is written to it.

    A broker that does not answer DescribeConfigs (the embedded broker never does; a principal
    without DescribeConfigs on the topic) leaves it unchecked: said in the log, not refused."""
    configs = _topic_configs(settings, topic)
    if configs is None:
        return
    loss = marker_loss(configs)
    if loss is not None:
        raise MarkerTopicUnsafe(
            f"marker topic '{topic}' has {loss}: Kafka will delete this sink's markers, and "
            "without its last marker the sink cannot say which epoch it holds (the pipeline "
            f"halts). Make it compacted: kafka-configs --alter --entity-type topics "
            f"--entity-name {topic} --add-config cleanup.policy=compact (or keep delete and set "
            "retention.ms=-1 and retention.bytes=-1)")


def _topic_configs(settings: dict[str, Any], topic: str) -> dict[str, str] | None:
    """The configs that apply to ``topic`` (DescribeConfigs), or None when the broker does not
    tell (logged, with why)."""
    from concurrent.futures import TimeoutError as FutureTimeout

    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    from eos.core.kafka import is_embedded_broker

    if is_embedded_broker(settings):  # it never answers: the request would only time out
        reason: Any = "the embedded broker does not implement DescribeConfigs"
    else:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        admin = AdminClient(settings)  # held while waiting: its end fails the request
        futures = admin.describe_configs([resource], request_timeout=CREATE_TIMEOUT_S)
        try:
            answer = futures[resource].result(CREATE_TIMEOUT_S + 5)
            return {name: entry.value for name, entry in answer.items()
                    if entry.value is not None}
        except ck.KafkaException as error:
            reason = kafka_error(error)
        except FutureTimeout:
            reason = f"no answer within {CREATE_TIMEOUT_S:.0f}s"
    if topic not in _UNCHECKED:  # once per process: asked at every begin and before every seal
        _UNCHECKED.add(topic)
        log.warning("marker topic '%s': its cleanup.policy and retention were not checked "
                    "(%s); if it deletes records by time or size, this sink's markers will be "
                    "lost", topic, reason)
    return None


_UNCHECKED: set[str] = set()  # marker topics this process could not check (said once each)


def check_topic_name(name: str, what: str) -> str:
    """``name`` if Kafka accepts it as a topic name (the characters are checked by the options'
    pattern); a ValueError naming ``what`` and the limit otherwise, so a config fails when it
    loads instead of at the first commit."""
    if len(name) > MAX_TOPIC_NAME:
        raise ValueError(f"{what} '{name[:40]}...' is {len(name)} characters long; Kafka topic "
                         f"names have at most {MAX_TOPIC_NAME}")
    if name in (".", ".."):
        raise ValueError(f"{what} may not be '{name}' (Kafka refuses it as a topic name)")
    return name


def held_back(settings: dict[str, Any], topic: str, partition: int) -> tuple[int, int] | None:
    """(last stable offset, high watermark) of one partition when an open transaction holds the
    first below the second, None when nothing is open there.

    The high watermark is asked first: a last stable offset read afterwards that reaches it
    means every record below it is decided (committed or aborted), so a ``read_committed`` read
    from now on sees all of them. The embedded broker answers both with the high watermark
    (it does not filter ``read_committed``, docs/guarantees.md)."""
    from concurrent.futures import TimeoutError as FutureTimeout

    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(settings)
    wanted = ck.TopicPartition(topic, partition)
    found: list[int] = []
    for level in (ck.IsolationLevel.READ_UNCOMMITTED, ck.IsolationLevel.READ_COMMITTED):
        try:
            futures = admin.list_offsets({wanted: OffsetSpec.latest()}, isolation_level=level,
                                         request_timeout=TIMEOUT_S)
            found.append(next(iter(futures.values())).result(TIMEOUT_S + 5).offset)
        except (ck.KafkaException, FutureTimeout) as error:
            reason = kafka_error(error) or f"no answer within {TIMEOUT_S:.0f}s"
            raise SinkUnavailable(f"Kafka at {settings['bootstrap.servers']} did not list the "
                                  f"offsets of {topic}[{partition}]: {reason}") from None
    high, stable = found
    return (stable, high) if stable < high else None
