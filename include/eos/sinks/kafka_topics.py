"""Topics a Kafka sink writes to (its output and its marker topic): made to exist, and the
broker's errors told apart."""

from __future__ import annotations

from typing import Any

from eos.core.errors import SinkRejected, SinkUnavailable

TIMEOUT_S = 30.0
CREATE_TIMEOUT_S = 15.0


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
