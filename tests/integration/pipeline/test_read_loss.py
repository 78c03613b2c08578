"""Reading offsets Kafka no longer (or never) held is data loss, not a broker to wait for: the
audit (``eos verify``, "Verify now") and every other reader of ``eos.core.kafka.read_partition``
fail with ``DataLoss`` naming the offsets, as ``begin`` and the epoch's reader do, instead of a
retried ``KafkaUnavailable … Offset out of range``.

Runs against the embedded broker; the retention case needs a broker that deletes records
(``KAFKA_BOOTSTRAP_SERVERS``): librdkafka's mock cluster has no DeleteRecords."""

from __future__ import annotations

import confluent_kafka as ck
import confluent_kafka.admin
import pytest

from eos.compute.reader import read_split
from eos.compute.splits import KafkaSplit, Piece
from eos.core.errors import EXIT_PERMANENT, DataLoss, exit_code
from eos.core.kafka import client_settings, read_partition, topic_watermarks
from eos.tools.audit.verify import read_range
from eos.tools.generator import GeneratorSpec
from eos.tools.pipelines import unique_topic
from eos.tools.produce import produce

from support.apache_kafka import ApacheKafka


def _topic_with_records() -> tuple[str, int, int, int]:
    """A fresh topic holding records: (topic, a partition with records, its low, its high)."""
    topic = unique_topic()
    produce(GeneratorSpec(events=60, seed=2), topic, client_settings(), progress=False)
    marks = topic_watermarks(client_settings(), topic)
    partition, (low, high) = max(marks.items(), key=lambda item: item[1][1])
    assert high - low >= 3, marks
    return topic, partition, low, high


def test_a_read_past_the_end_of_the_log_is_data_loss_naming_the_offsets(kafka: str) -> None:
    topic, partition, _, high = _topic_with_records()
    settings = client_settings()
    with pytest.raises(DataLoss) as lost:
        read_range(settings, topic, partition, high + 5, high + 9)
    assert str(lost.value) == (f"topic '{topic}' partition {partition}: a read from offset "
                               f"{high + 5} is beyond the high watermark {high}; the partition "
                               "was truncated or recreated")
    assert exit_code(lost.value) == EXIT_PERMANENT  # eos verify: not retried
    with pytest.raises(DataLoss, match=rf"offset {high + 1} is beyond"):
        list(read_partition(settings, topic, partition, high + 1))
    # the log's own range still reads
    assert len(read_range(settings, topic, partition, 0, high)) == high


def test_the_epoch_reader_calls_a_planned_range_past_the_log_data_loss(kafka: str) -> None:
    """The reader checks every piece of its split before reading any (one check with the
    audit's, ``eos.core.kafka.check_in_log``): a plan whose range the log no longer reaches
    (truncated, recreated) fails the epoch as data loss naming the offsets, not a wait."""
    topic, partition, low, high = _topic_with_records()
    split = KafkaSplit(pieces=(Piece(partition, low, high + 3),))
    with pytest.raises(DataLoss) as lost:
        list(read_split(topic, split, client_settings(), timeout_s=30.0))
    assert str(lost.value) == (f"topic '{topic}' partition {partition}: the planned range until "
                               f"offset {high + 3} is beyond the high watermark {high}; the "
                               "partition was truncated or recreated")
    whole = KafkaSplit(pieces=(Piece(partition, low, high),))
    assert sum(b.num_rows for b in read_split(topic, whole, client_settings(), 30.0)) == high - low


def test_a_read_of_records_retention_removed_is_data_loss_naming_the_offsets(
        apache_kafka: ApacheKafka) -> None:
    """On Apache Kafka: the embedded broker has no DeleteRecords (what retention does)."""
    topic, partition, low, high = _topic_with_records()
    settings = client_settings()
    cut = low + 2
    admin = ck.admin.AdminClient(settings)  # kept until the result: its handle serves it
    deleted = admin.delete_records([ck.TopicPartition(topic, partition, cut)])
    next(iter(deleted.values())).result(timeout=30)
    with pytest.raises(DataLoss) as lost:
        read_range(settings, topic, partition, low, high)
    assert str(lost.value).startswith(
        f"topic '{topic}' partition {partition}: offsets [{low},{cut}) of the range "
        f"[{low},{high}) are gone from Kafka (retention)"), lost.value
