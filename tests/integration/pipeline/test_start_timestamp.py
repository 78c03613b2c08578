"""``kafka.start: timestamp:<t>``: a new pipeline's first plan starts every partition at its
first record timestamped at or after ``t`` (Kafka's ListOffsets by timestamp), and the epochs
after it read on from there, each record once. The embedded broker, librdkafka's mock cluster,
answers the end of the log for any timestamp: there the answer is checked against the records
and refused, never followed into a silent skip."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from eos.compute.epochs import run_until_caught_up
from eos.core import epochlog
from eos.core.config import PipelineConfig
from eos.core.errors import TimeLookupWrong
from eos.core.kafka import client_settings
from eos.core.plan import plan_of
from eos.core.protocol import begin
from eos.core.tables import ensure_tables
from eos.tools.audit.verify import audit
from eos.tools.generator import GeneratorSpec, generate
from eos.tools.pipelines import unique_topic, write_pipeline
from eos.tools.produce import send

from support.apache_kafka import PIPELINE_CLIENT, ApacheKafka

pytestmark = [pytest.mark.integration]

SPEC = GeneratorSpec(events=600, keys=10, interval_ms=20, seed=11)


def record_times(settings: dict[str, Any], topic: str, total: int) -> list[tuple[int, int, int]]:
    """(partition, offset, timestamp) of every record of ``topic``, read back."""
    consumer = ck.Consumer({**settings, "group.id": "times", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: list[tuple[int, int, int]] = []
    try:
        while len(seen) < total:
            message = consumer.poll(5)
            assert message is not None, f"read {len(seen)} of {total} records"
            assert message.error() is None, message.error()
            seen.append((message.partition(), message.offset(), message.timestamp()[1]))
    finally:
        consumer.close()
    return seen


def produced(tmp_path: Path, **kafka: Any
             ) -> tuple[PipelineConfig, list[tuple[int, int, int]], int]:
    """A new pipeline starting at the median record time of a topic holding ``SPEC``; ``kafka``:
    more of its ``kafka`` section (its client's settings)."""
    kafka_section = {"topic": unique_topic("start-at"), "read_timeout": "30s", **kafka}
    settings = client_settings({})
    send(generate(SPEC), SPEC.events, kafka_section["topic"], settings, progress=False)
    times = record_times(settings, kafka_section["topic"], SPEC.events)
    cut = sorted(t for _, _, t in times)[SPEC.events // 2]
    config = write_pipeline(tmp_path, kafka={**kafka_section, "start": f"timestamp:{cut}"},
                            epoch={"max_records": 200})
    return config, times, cut


def test_a_broker_that_answers_a_time_wrongly_is_refused_before_a_plan(
        tmp_path: Path, kafka: str) -> None:
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        pytest.skip("a real broker looks offsets up by timestamp correctly: the wrong answer "
                    "this refuses comes from the embedded broker, librdkafka's mock cluster")
    config, _, cut = produced(tmp_path)
    with pytest.raises(TimeLookupWrong, match=rf"for timestamp {cut}.*does not look offsets up"):
        begin(config, "start-at")
    with ensure_tables(config) as tables:
        assert epochlog.plan_rows(tables, 0, None) == []


def test_a_new_pipeline_starts_at_the_first_record_at_or_after_its_time(
        tmp_path: Path, apache_kafka: ApacheKafka, spark: Any) -> None:
    """On Apache Kafka: the embedded broker, librdkafka's mock cluster, does not look offsets
    up by timestamp (it answers the end of the log; the test above)."""
    config, times, cut = produced(tmp_path, client=PIPELINE_CLIENT)
    expected = {p: min((o for q, o, t in times if q == p and t >= cut),
                       default=1 + max(o for q, o, _ in times if q == p))
                for p in {p for p, _, _ in times}}
    results = run_until_caught_up(config, "from-a-time", spark=spark)
    with ensure_tables(config) as tables:
        first = plan_of(tables, results[0].epoch)
    assert {r.partition: r.start for r in first.ranges} == expected
    assert len(results) >= 2  # the epochs after the first continue from its checkpoint
    report = audit(config)
    assert report.ok, report.render()
    ends = {p: 1 + max(o for q, o, _ in times if q == p) for p in expected}
    assert report.records == sum(ends[p] - expected[p] for p in expected) > 0
    assert report.records < SPEC.events  # the records before the time were not read
