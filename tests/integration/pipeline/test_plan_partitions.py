"""Partitions that appear after a pipeline's first epoch: under
``kafka.start: latest`` only a brand-new pipeline starts at the high watermarks; a partition
added later starts at its log start (as Spark's Kafka source does), so nothing produced to it
before it was first planned is skipped.

The embedded broker cannot add partitions to a topic (librdkafka's mock cluster implements no
CreatePartitions, and its mock API only creates whole topics), so on it the topic's real
watermarks are shown to the planner in two steps: first without the partitions that do not
exist yet, then all of them (``Grown``). Every offset the planner sees is the broker's. The
real AddPartitions case runs against ``KAFKA_BOOTSTRAP_SERVERS``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from eos.core.config import PipelineConfig
from eos.core.errors import KafkaUnavailable
from eos.core.kafka import client_settings, topic_watermarks
from eos.core.plan import KafkaSource, new_plan
from eos.core.topics import Marks, Offsets
from eos.tools.pipelines import unique_topic, write_pipeline

from support.apache_kafka import ApacheKafka

pytestmark = [pytest.mark.integration]


@dataclass
class Grown:
    """The pipeline's topic on the broker as it was before partitions ``hidden`` existed: its
    real watermarks, less those partitions (``grow`` makes them appear)."""

    hidden: set[int]

    def watermarks(self, config: PipelineConfig) -> Marks:
        marks = KafkaSource().watermarks(config)
        return {tp: m for tp, m in marks.items() if tp.partition not in self.hidden}

    def describe(self, config: PipelineConfig) -> dict[str, Any]:
        return {"kafka": config.kafka.topic, "hidden": sorted(self.hidden)}

    def cluster(self, config: PipelineConfig) -> str | None:
        return KafkaSource().cluster(config)

    def offsets_at(self, config: PipelineConfig, ms: int, topics: list[str]) -> Offsets:
        return KafkaSource().offsets_at(config, ms, topics)

    def grow(self) -> None:
        self.hidden = set()


def produce(topic: str, counts: dict[int, int]) -> None:
    producer = ck.Producer({**client_settings(), "allow.auto.create.topics": True})
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def latest_pipeline(tmp_path: Path) -> PipelineConfig:
    return write_pipeline(tmp_path, kafka={"topic": unique_topic(), "read_timeout": "30s",
                                           "start": "latest"})


def starts(plan: Any) -> dict[int, int]:
    return {r.partition: r.start for r in plan.ranges}


def test_a_partition_added_after_the_first_epoch_is_read_from_its_log_start(
        tmp_path: Path, kafka: str) -> None:
    config = latest_pipeline(tmp_path)
    topic = config.kafka.sole_topic
    produce(topic, {0: 5})  # the topic exists (the embedded broker makes it 4 partitions)
    partitions = sorted(topic_watermarks(client_settings(), topic))
    assert len(partitions) >= 2
    source = Grown(hidden=set(partitions[1:]))
    first = new_plan(config, 0, {}, source)
    assert starts(first) == {0: 5}  # brand new: partition 0 starts at its high watermark
    produce(topic, {0: 3, 1: 4})
    source.grow()  # partitions 1.. appear, holding records produced before this plan
    second = new_plan(config, 1, first.until, source)
    assert starts(second) == {0: 5, **{p: 0 for p in partitions[1:]}}
    assert {r.partition: r.records for r in second.ranges}[1] == 4


def test_a_brand_new_pipeline_under_latest_starts_every_partition_at_its_end(
        tmp_path: Path, kafka: str) -> None:
    config = latest_pipeline(tmp_path)
    produce(config.kafka.sole_topic, {0: 2, 1: 3})
    plan = new_plan(config, 0, {}, KafkaSource())
    assert plan.records == 0
    assert starts(plan)[0] == 2 and starts(plan)[1] == 3


# -- on Apache Kafka -----------------------------------------------------------------------------

def _watermarks_while_electing(topic: str) -> dict:
    """The topic's watermarks, or none while Apache Kafka still elects the new partition's
    leader (``Not leader for partition``, a moment after ``create_partitions`` returns)."""
    try:
        return topic_watermarks(client_settings(), topic)
    except KafkaUnavailable:
        return {}


def test_partitions_added_on_a_real_broker_are_read_from_their_log_start(
        tmp_path: Path, apache_kafka: ApacheKafka) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    config = latest_pipeline(tmp_path)
    topic = config.kafka.sole_topic
    admin = AdminClient(client_settings())
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    produce(topic, {0: 5})
    first = new_plan(config, 0, {}, KafkaSource())
    assert starts(first) == {0: 5}
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    deadline = time.monotonic() + 30
    while len(_watermarks_while_electing(topic)) < 2:
        assert time.monotonic() < deadline, "the new partition did not appear"
        time.sleep(0.5)
    produce(topic, {1: 4})
    second = new_plan(config, 1, first.until, KafkaSource())
    assert starts(second) == {0: 5, 1: 0}
    assert second.records == 4
