"""Topics a Kafka sink writes to (its output and its marker topic): named within Kafka's rules,
made to exist, asked whether an open transaction holds a partition back, and the broker's errors
told apart."""

from __future__ import annotations

from typing import Any

from eos.core.errors import SinkRejected, SinkUnavailable

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
    DESIGN §2), so there only auto-creation is asked for."""
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
    (it does not filter ``read_committed``, DESIGN §2)."""
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
