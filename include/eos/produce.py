"""Deterministic event generator: the demo's input and the tests' ground truth.

Same arguments and seed, same records in the same order: tests recompute the expected windows
from the generated events, so nothing here may depend on the clock or on the broker.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka as ck

from eos.errors import EosError, KafkaUnavailable

BASE_TIME_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: event time is synthetic, not wall clock
BAD_KINDS = ("malformed_json", "missing_field", "wrong_type", "not_utf8", "not_object")


@dataclass(frozen=True)
class GeneratorSpec:
    events: int
    keys: int = 100
    interval_ms: int = 10
    disorder_ms: int = 0
    late_fraction: float = 0.0
    late_delay_ms: int = 300_000
    bad_fraction: float = 0.0
    seed: int = 0
    key_field: str = "key"
    time_field: str = "ts"
    value_field: str = "value"


@dataclass(frozen=True)
class GeneratedRecord:
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    kind: str  # "good", "late" (deliberately delayed) or one of BAD_KINDS


@dataclass
class ProduceSummary:
    records: int = 0
    kinds: Counter = field(default_factory=Counter)
    seconds: float = 0.0


def _bad_record(
    rng: random.Random, spec: GeneratorSpec, event: dict[str, Any]
) -> tuple[str, bytes]:
    kind = BAD_KINDS[rng.randrange(len(BAD_KINDS))]
    if kind == "malformed_json":
        return kind, json.dumps(event).encode()[: rng.randrange(1, 20)]
    if kind == "missing_field":
        missing = rng.choice([spec.key_field, spec.time_field, spec.value_field])
        return kind, json.dumps({k: v for k, v in event.items() if k != missing}).encode()
    if kind == "wrong_type":
        broken = dict(event)
        target = rng.choice([spec.time_field, spec.value_field, spec.key_field])
        broken[target] = {spec.time_field: "yesterday", spec.value_field: "lots"}.get(target, [1])
        return kind, json.dumps(broken).encode()
    if kind == "not_utf8":
        return kind, b'{"' + spec.key_field.encode() + b'": "\xff\xfe", "oops": 1}'
    return kind, json.dumps([event]).encode()


def generate(spec: GeneratorSpec) -> Iterator[GeneratedRecord]:
    """The records of ``spec``, in produce order. Pure: a function of the spec alone."""
    rng = random.Random(spec.seed)
    for i in range(spec.events):
        arrival = BASE_TIME_MS + i * spec.interval_ms
        key = f"k{rng.randrange(spec.keys):05d}"
        ts = arrival - (rng.randrange(spec.disorder_ms + 1) if spec.disorder_ms else 0)
        kind = "good"
        if spec.late_fraction and rng.random() < spec.late_fraction:
            ts = arrival - spec.late_delay_ms - rng.randrange(spec.late_delay_ms + 1)
            kind = "late"
        value = round(rng.uniform(0, 1000), 2)
        event = {
            "event_id": f"{spec.seed}-{i}",
            spec.key_field: key,
            spec.time_field: ts,
            spec.value_field: value,
        }
        if spec.bad_fraction and rng.random() < spec.bad_fraction:
            kind, payload = _bad_record(rng, spec, event)
        else:
            payload = json.dumps(event, separators=(",", ":")).encode()
        yield GeneratedRecord(key.encode(), payload, arrival, kind)


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
    producer = ck.Producer(
        {
            **settings,
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 500_000,
            "message.timeout.ms": 60_000,
        }
    )
    failures: list[str] = []

    def on_delivery(err: ck.KafkaError | None, _msg: ck.Message) -> None:
        if err is not None:
            failures.append(err.str())

    summary = ProduceSummary()
    bar = _progress_bar(total, topic, progress)
    started = time.monotonic()
    for record in records:
        while True:
            try:
                producer.produce(
                    topic,
                    key=record.key,
                    value=record.value,
                    timestamp=record.timestamp_ms,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.1)
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
    if remaining:
        raise KafkaUnavailable(
            f"{remaining} records were not acknowledged by Kafka at {settings['bootstrap.servers']}"
            " within 60s; is the broker running?"
        )
    if failures:
        raise EosError(f"{len(failures)} records failed to produce; first error: {failures[0]}")
    return summary


def _throttle(started: float, sent: int, rate: float) -> None:
    ahead = sent / rate - (time.monotonic() - started)
    if ahead > 0:
        time.sleep(ahead)


def _progress_bar(total: int, topic: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=f"producing to {topic}",
        unit="rec",
        unit_scale=True,
        disable=not enabled or not sys.stderr.isatty(),
        file=sys.stderr,
    )
