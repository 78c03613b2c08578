"""``eos produce``: records written to Kafka in order with an idempotent producer, and where a
new batch starts on a topic that already holds a stream.

A batch starts after the last record already on the topic (``continue_after``), or where
``--start-at`` says, so a second batch is not all behind the watermark the first one moved.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import confluent_kafka as ck

from eos.core.errors import KafkaUnavailable, ProduceFailed
from eos.tools.generator import BASE_TIME_MS, GeneratedRecord, GeneratorSpec, generate


@dataclass
class ProduceSummary:
    records: int = 0
    kinds: Counter = field(default_factory=Counter)
    seconds: float = 0.0


# -------------------------------------------------------------------- continuing a stream

TAIL_RECORDS = 20  # records read back per partition to find where a topic's stream ends


def last_timestamp_ms(settings: dict[str, Any], topic: str) -> int | None:
    """The latest record timestamp among the last ``TAIL_RECORDS`` committed records of each
    partition of ``topic``; None when it holds none (or does not exist yet). For records of
    this generator the timestamp is the arrival time, never before the record's event time."""
    from eos.core.errors import TopicMissing
    from eos.core.kafka import read_partition, topic_watermarks

    try:
        marks = topic_watermarks(settings, topic)
    except TopicMissing:
        return None
    stamps = [message.timestamp()[1]
              for partition, (low, high) in marks.items() if high > low
              for message in read_partition(settings, topic, partition,
                                            max(low, high - TAIL_RECORDS), high,
                                            group="eos-produce")]
    return max((t for t in stamps if t >= 0), default=None)


def continue_after(settings: dict[str, Any], topic: str, interval_ms: int) -> int:
    """Where a new batch on ``topic`` starts: one ``interval_ms`` after its last record, so the
    batch's event times follow the stream's instead of falling behind the watermark it already
    moved (every record late); ``BASE_TIME_MS`` on an empty topic, as ``generate`` would."""
    last = last_timestamp_ms(settings, topic)
    return BASE_TIME_MS if last is None else last + interval_ms


def parse_start(text: str) -> int | None:
    """``--start-at``: ``continue`` (None: after the topic's last record), ``base`` (the fixed
    ``BASE_TIME_MS``, what tests reproduce), epoch milliseconds, or an ISO-8601 instant with
    ``Z`` or an offset. A ValueError names what is accepted."""
    if text == "continue":
        return None
    if text == "base":
        return BASE_TIME_MS
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        instant = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        instant = None
    if instant is None or instant.tzinfo is None:
        raise ValueError(f"--start-at {text!r}: expected continue, base, epoch milliseconds or "
                         "an ISO-8601 instant with Z or an offset (2026-03-01T12:00:00Z)")
    return int(instant.timestamp() * 1000)


def produce(
    spec: GeneratorSpec,
    topic: str,
    settings: dict[str, Any],
    rate: float = 0.0,
    progress: bool = True,
) -> ProduceSummary:
    """Produce ``spec``'s records to ``topic``; raise on any loss."""
    return send(generate(spec), spec.events, topic, settings, rate, progress)


def send(
    records: Iterable[GeneratedRecord],
    total: int,
    topic: str,
    settings: dict[str, Any],
    rate: float = 0.0,
    progress: bool = True,
) -> ProduceSummary:
    """Produce records in order with an idempotent producer; raise unless all are acknowledged."""
    producer = _idempotent_producer(settings)
    failures: list[str] = []

    def on_delivery(err: ck.KafkaError | None, _msg: ck.Message) -> None:
        if err is not None:
            failures.append(err.str())

    summary = ProduceSummary()
    bar = _progress_bar(total, topic, progress)
    started = time.monotonic()
    for record in records:
        _produce_one(producer, topic, record, on_delivery)
        summary.records += 1
        summary.kinds[record.kind] += 1
        if summary.records % 10_000 == 0:
            producer.poll(0)
            bar.update(10_000)
        if rate:
            _throttle(started, summary.records, rate)
    remaining = producer.flush(60)
    bar.update(summary.records % 10_000)
    bar.close()
    summary.seconds = time.monotonic() - started
    _raise_unless_delivered(remaining, failures, settings)
    return summary


def _idempotent_producer(settings: dict[str, Any]) -> ck.Producer:
    """A producer that writes each record once and in order, batching for throughput."""
    return ck.Producer(
        {
            **settings,
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 500_000,
            "message.timeout.ms": 60_000,
        }
    )


def _produce_one(producer: ck.Producer, topic: str, record: GeneratedRecord,
                 on_delivery: Callable[[ck.KafkaError | None, ck.Message], None]) -> None:
    """Queue one record, waiting for room while the producer's queue is full."""
    while True:
        try:
            producer.produce(
                topic,
                key=record.key,
                value=record.value,
                timestamp=record.timestamp_ms,
                on_delivery=on_delivery,
            )
            return
        except BufferError:
            producer.poll(0.1)


def _raise_unless_delivered(remaining: int, failures: list[str], settings: dict[str, Any]) -> None:
    """Raise if a record was not acknowledged after the flush or its delivery failed."""
    if remaining:
        raise KafkaUnavailable(
            f"{remaining} records were not acknowledged by Kafka at {settings['bootstrap.servers']}"
            " within 60s; is the broker running?"
        )
    if failures:
        raise ProduceFailed(f"{len(failures)} records failed to produce; "
                            f"first error: {failures[0]}")


def _throttle(started: float, sent: int, rate: float) -> None:
    ahead = sent / rate - (time.monotonic() - started)
    if ahead > 0:
        time.sleep(ahead)


def _progress_bar(total: int, topic: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=f"producing to {topic}",
        unit="rec",
        unit_scale=True,
        disable=not enabled or not sys.stderr.isatty(),
        file=sys.stderr,
    )
