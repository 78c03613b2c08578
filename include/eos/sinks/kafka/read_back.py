"""Reading back what a Kafka sink wrote, as a ``read_committed`` consumer sees it: a topic's
partitions (its markers, its records), and the committed rows of this pipeline on the sink's
current line (what the audit compares with the expected windows)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from eos.core.outcomes import NO_EPOCH
from eos.sinks.kafka.topics import TIMEOUT_S

if TYPE_CHECKING:
    import confluent_kafka as ck


def watermarks(settings: dict[str, Any], topic: str) -> dict[int, tuple[int, int]]:
    """(log start, high watermark) per partition; empty when the topic does not exist."""
    from eos.core.errors import TopicMissing
    from eos.core.kafka import topic_watermarks

    try:
        return topic_watermarks(settings, topic)
    except TopicMissing:
        return {}


def partition_records(settings: dict[str, Any], topic: str, partition: int, start: int,
                      pipeline: str) -> Iterator[ck.Message]:
    """Every ``read_committed`` record from ``start`` to the end of the partition."""
    from eos.core.kafka import read_partition

    yield from read_partition(settings, topic, partition, start,
                              group=f"eos-readback-{pipeline}", timeout_s=TIMEOUT_S)


def topic_records(settings: dict[str, Any], topic: str, pipeline: str) -> Iterator[ck.Message]:
    """Every ``read_committed`` record of every partition of ``topic``, partition by partition."""
    for partition, (low, _high) in sorted(watermarks(settings, topic).items()):
        yield from partition_records(settings, topic, partition, low, pipeline)


def rows_on_line(records: Iterable[ck.Message], pipeline: str,
                 on_line: Callable[[int, str | None], bool],
                 decode: Callable[[bytes], dict[str, Any]]) -> list[dict[str, Any]]:
    """The decoded values of ``pipeline``'s records (its ``eos-pipeline`` header) whose epoch
    and lineage headers are ``on_line``: the rows a rewind did not supersede."""
    rows = []
    for record in records:
        if header(record, "eos-pipeline") != pipeline:
            continue
        epoch = int(header(record, "eos-epoch") or NO_EPOCH)
        if on_line(epoch, header(record, "eos-lineage")):
            rows.append(decode(record.value()))
    return rows


def header(message: ck.Message, name: str) -> str | None:
    """The value of the record header ``name`` as text (None when absent)."""
    for key, value in message.headers() or []:
        if key == name:
            return value.decode() if value is not None else None
    return None
