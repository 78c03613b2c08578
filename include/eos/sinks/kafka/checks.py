"""What a Kafka sink refuses before anything is sealed: a record over the producer's limit
(``message.max.bytes``), at load time by its largest possible size and before the seal by the
epoch's records as they go on the wire, and a principal that lacks the rights the commit uses.
Each would otherwise fail every attempt after the seal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eos.core.errors import SinkCannotTake
from eos.sinks.kafka.options import DEFAULT_MESSAGE_MAX_BYTES, KafkaSinkOptions
from eos.sinks.kafka.topics import missing_operations
from eos.sinks.records import (
    FRAMING_BYTES,
    RECORD_OVERHEAD_BYTES,
    Headers,
    headers_size,
    prefixed_bytes,
    record_bytes,
)

if TYPE_CHECKING:
    from eos.core.config import PipelineConfig


def producer_limit(options: KafkaSinkOptions, config: PipelineConfig) -> int:
    """The producer's ``message.max.bytes`` of this sink (its client over the pipeline's)."""
    client = {**config.kafka.client, **options.client}
    return int(client.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))


def check_largest_record(options: KafkaSinkOptions, config: PipelineConfig,
                         output: str) -> None:
    """Refuse, at load time, a pipeline whose largest ``output`` record could outgrow the
    sink's producer limit: the producer would refuse that record on every retry
    (``MSG_SIZE_TOO_LARGE``) and the pipeline could never commit again."""
    from eos.core.limits import largest_record_bytes

    limit = producer_limit(options, config)
    # The bound holds the key, the value and eos's headers; on the wire a record has its
    # framing too (``kafka_records.FRAMING_BYTES``: the record batch's header included).
    largest = largest_record_bytes(config, output) + FRAMING_BYTES
    if largest > limit:
        raise ValueError(
            f"kafka sink {options.topic}: a record of output '{output}' may reach {largest} "
            f"bytes (string columns hold up to event.max_string_bytes = "
            f"{config.event.max_string_bytes} bytes each, JSON-escaped up to 6x), over the "
            f"producer's message.max.bytes ({limit}): lower event.max_string_bytes, or raise "
            "message.max.bytes in the sink's client settings (and the topic's "
            "max.message.bytes on the broker)")


def check_record_sizes(sink: str, epoch: int, limit: int, eos: list[tuple[str, bytes]],
                       keys: list[bytes | None], values: list[bytes],
                       own: list[Headers]) -> None:
    """Each record within the producer's ``message.max.bytes`` (``limit``), as it goes on the
    wire (``kafka_records.record_bytes``: the record batch's header and the record's framing,
    key, value and headers with their varint lengths), with eos's headers at their largest
    (``eos``: a plan hash, and the lineage header the records of a line a rewind started
    carry, counted whatever the line), then each record's own headers."""
    eos_size = headers_size(eos)
    # The largest parts first (C-speed over 100k records): the exact sizes only when
    # their sum could pass the limit (a longer field never has a shorter prefix).
    bound = (RECORD_OVERHEAD_BYTES + prefixed_bytes(max(map(len, values), default=0))
             + prefixed_bytes(max(map(len, filter(None, keys)), default=-1))  # -1: null
             + eos_size + max(map(headers_size, own), default=0))
    if bound <= limit:
        return
    sizes = [record_bytes(k, v, mine) + eos_size
             for k, v, mine in zip(keys, values, own, strict=True)]
    largest = max(sizes, default=0)
    if largest > limit:
        raise SinkCannotTake(
            f"Kafka sink {sink} cannot take epoch {epoch}: "
            f"{sum(size > limit for size in sizes)} records exceed the producer's "
            f"message.max.bytes ({limit}; the largest is {largest} bytes); nothing was "
            "sealed or written: raise message.max.bytes in the sink's client settings "
            "(and the topic's max.message.bytes), then run again")


def check_topic_rights(settings: dict[str, Any], sink: str, epoch: int, topic: str,
                       marker_topic: str) -> None:
    """The broker lets the sink's principal write ``topic`` and read and write
    ``marker_topic`` (what DescribeTopics says of its authorized operations)."""
    wanted = {topic: ("DESCRIBE", "WRITE"), marker_topic: ("DESCRIBE", "READ", "WRITE")}
    missing = missing_operations(settings, wanted)
    if missing:
        lacking = "; ".join(f"{', '.join(ops)} on topic '{name}'"
                            for name, ops in missing.items())
        raise SinkCannotTake(
            f"Kafka sink {sink} cannot take epoch {epoch}: its principal lacks "
            f"{lacking}; nothing was sealed or written: grant them (kafka-acls), then run "
            "again")
