"""A Kafka sink's marker topic: the resource it claims (its marker topic, not its output topic),
the length Kafka allows its name, and the topic settings under which markers would be deleted."""

from __future__ import annotations

import pytest

from eos.sinks.kafka.sink import KafkaSink
from eos.sinks.kafka.topics import marker_loss


def test_a_kafka_sink_claims_its_marker_topic_and_not_its_output_topic() -> None:
    default = KafkaSink.parse_options("out")
    assert KafkaSink.resources(default, "p1") == frozenset({"kafka-topic:out.eos-markers.p1"})
    explicit = KafkaSink.parse_options({"topic": "out", "marker_topic": "m"})
    assert KafkaSink.resources(explicit, "p1") == frozenset({"kafka-topic:m"})


def test_marker_topic_names_longer_than_kafka_allows_are_refused() -> None:
    with pytest.raises(ValueError, match="249"):
        KafkaSink.parse_options("t" * 250)
    with pytest.raises(ValueError, match="249"):
        KafkaSink.parse_options({"topic": "t", "marker_topic": "m" * 250})
    long_default = KafkaSink.parse_options("t" * 200)
    with pytest.raises(ValueError, match="249"):
        KafkaSink.resources(long_default, "p" * 40)


def test_a_topic_deletes_markers_when_it_deletes_by_time_or_size() -> None:
    """The rule ``check_marker_topic`` applies to what DescribeConfigs answers."""
    assert marker_loss({"cleanup.policy": "compact", "retention.ms": "3600000"}) is None
    assert marker_loss({"cleanup.policy": "delete", "retention.ms": "-1",
                        "retention.bytes": "-1"}) is None  # kept for ever: nothing lost
    assert marker_loss({"cleanup.policy": "compact,delete", "retention.ms": "-1"}) is None
    assert marker_loss({"cleanup.policy": "delete", "retention.ms": "604800000",
                        "retention.bytes": "-1"}) == (
        "cleanup.policy=delete with retention.ms=604800000")
    assert marker_loss({"cleanup.policy": "compact, delete", "retention.ms": "-1",
                        "retention.bytes": "1048576"}) == (
        "cleanup.policy=compact, delete with retention.bytes=1048576")
    assert marker_loss({}) == "cleanup.policy=delete with retention.ms=604800000"  # Kafka's

