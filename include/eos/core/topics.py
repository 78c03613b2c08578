"""A pipeline's input is a set of topic-partitions: ``kafka.topic`` (one topic), ``kafka.topics``
(a list) or ``kafka.pattern`` (every topic whose name matches, resolved from the broker's
metadata at each plan). Offsets, ranges and checkpoints are keyed by (topic, partition).

A checkpoint written when a pipeline read one topic keyed its offsets by partition only
(``{"0": 750}``); ``offsets_from_json`` reads that as (the checkpoint's topic, partition), so
the next epoch continues where it ended: the on-disk form migrates on read, never by a rewrite.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """One partition of one topic: what an offset is of."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


Offsets = dict[TopicPartition, int]
Marks = dict[TopicPartition, tuple[int, int]]  # (log start, high watermark)


def topics_of(keys: Iterable[TopicPartition]) -> list[str]:
    """The distinct topics of some topic-partitions, sorted."""
    return sorted({tp.topic for tp in keys})


def offsets_to_json(offsets: Offsets) -> str:
    """``{"topic": {"partition": offset}}``, sorted: the checkpoint table's ``until``."""
    nested: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(offsets.items()):
        nested.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return json.dumps(nested, sort_keys=True)


def offsets_from_json(text: str, topic: str | None) -> Offsets:
    """The checkpoint's ``until`` as (topic, partition) -> offset. A row written before
    pipelines read several topics holds ``{"partition": offset}`` of one topic: ``topic`` (the
    topic its epoch read) keys it; ``ValueError`` when that topic is not known."""
    data = json.loads(text)
    if data and all(isinstance(v, int) for v in data.values()):
        if topic is None:
            raise ValueError(f"offsets {text} name no topic, and the checkpoint records none")
        return {TopicPartition(topic, int(p)): int(o) for p, o in data.items()}
    return {TopicPartition(t, int(p)): int(o)
            for t, partitions in data.items() for p, o in partitions.items()}


def is_internal(topic: str) -> bool:
    """Kafka's own topics (``__consumer_offsets``, ``__transaction_state``) and any other topic
    whose name starts with ``__``: never matched by a pattern."""
    return topic.startswith("__")


def matching(pattern: re.Pattern[str], names: list[str]) -> list[str]:
    """The topics among ``names`` a ``kafka.pattern`` reads: a match at the name's start (as
    librdkafka's ``^`` subscriptions), internal topics left out, sorted."""
    return sorted(n for n in names if not is_internal(n) and pattern.match(n))
