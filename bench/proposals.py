"""Prototypes of the library changes this benchmark proposes, measured, never applied.

Each prototype is the library function with one precise change, so the lead can apply it by
hand. Spark pickles them by value (``cloudpickle.register_pickle_by_value``), so executors do not
need ``bench`` on their path. ``patched_library()`` swaps them in for one in-process run of the
exactly-once path (``eos_kafka`` re-registered, ``eos.stage.parse_records`` replaced) and restores
the originals afterwards; outputs are checked to be identical to the unpatched run.

1. ``eos/reader.py::read_split``: ask ``consume`` for at most the records still missing from the
   split (``num_messages=min(BATCH_RECORDS, split.until - next_offset)``). Today it always asks for
   10,000, so the last call of every split that ends within 10,000 records of the partition's
   end (every split of a caught-up pipeline) waits out the full 1 s ``consume`` timeout.
   Also builds the columns with one comprehension per column per consumed batch instead of six
   ``list.append`` per record.
2. ``eos/events.py::parse_event``: ``json.loads(text, parse_float=..., parse_constant=...)``
   builds a new ``JSONDecoder`` (and its scanner) for every record; decode with one module-level
   decoder instead. Same decoder settings, so the same documents, errors and messages.
3. ``eos/stage.py::parse_records``: build the output columns with comprehensions over the parsed
   list (partition, offset, timestamp passed through as Arrow arrays), instead of nine
   ``list.append`` per record.
4. ``eos/reader.py`` + ``eos/stage.py::compute_epoch``: parse inside the data source (it already
   loads the pipeline config) and drop the ``mapInArrow`` stage: Spark then runs one Python
   worker per split instead of two and the raw bytes no longer cross into the JVM and back.
   Measured on the Spark stage alone (``hotpath.spark_fusion``), not in the full EO path.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pyarrow as pa

from eos.reader import BATCH_RECORDS, RAW_SCHEMA, KafkaRangeDataSource, KafkaRangeReader, KafkaSplit

# ----------------------------------------------------------------------------- 2. one decoder


class _OneDecoderJson:
    """Stands in for the ``json`` module inside ``eos.events``: ``loads`` reuses one decoder."""

    def __init__(self) -> None:
        from eos.events import _reject_constant

        self._decoder = json.JSONDecoder(parse_float=Decimal, parse_constant=_reject_constant)

    def loads(self, text: str, **_settings: Any) -> Any:
        # parse_event always passes parse_float=Decimal, parse_constant=_reject_constant: the
        # settings this decoder was built with.
        return self._decoder.decode(text)


def use_one_decoder() -> None:
    """Proposal 2 in this process: ``eos.events`` decodes with one reused JSONDecoder."""
    import eos.events

    if not isinstance(eos.events.json, _OneDecoderJson):
        eos.events.json = _OneDecoderJson()


def use_stdlib_json() -> None:
    import eos.events

    eos.events.json = json


# ----------------------------------------------------------------------------- 1. reader


def read_split_proposed(
    topic: str, split: KafkaSplit, settings: dict[str, Any], timeout_s: float
) -> Iterator[pa.RecordBatch]:
    """``eos.reader.read_split`` with proposal 1 (marked ``# CHANGED``); otherwise identical."""
    import confluent_kafka as ck

    from eos import faults
    from eos.errors import DataLoss, KafkaUnavailable
    from eos.kafka import consumer, watermarks

    bootstrap = settings["bootstrap.servers"]
    c = consumer(settings, group=f"eos-reader-{topic}", **{"enable.partition.eof": True})
    try:
        low, high = watermarks(c, topic, split.partition, bootstrap)
        if split.start < low:
            raise DataLoss(
                f"topic '{topic}' partition {split.partition}: offsets [{split.start},{low}) "
                f"of the planned range [{split.start},{split.until}) are gone from Kafka "
                "(retention); the epoch cannot be computed without losing data"
            )
        if split.until > high:
            raise DataLoss(
                f"topic '{topic}' partition {split.partition}: planned until {split.until} is "
                f"beyond the high watermark {high}; the partition was truncated"
            )
        c.assign([ck.TopicPartition(topic, split.partition, split.start)])
        offsets: list[int] = []
        stamps: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        next_offset = split.start
        last_progress = time.monotonic()
        done = False
        while not done:
            wanted = max(1, min(BATCH_RECORDS, split.until - next_offset))  # CHANGED
            messages = c.consume(num_messages=wanted, timeout=1.0)
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > timeout_s:
                raise KafkaUnavailable(
                    f"no progress reading '{topic}' partition {split.partition} "
                    f"[{split.start},{split.until}) from {bootstrap} for {timeout_s:.0f}s"
                )
            good = []
            for m in messages:
                error = m.error()
                if error is not None:
                    if error.code() == ck.KafkaError._PARTITION_EOF:
                        done = m.offset() >= split.until
                        continue
                    raise KafkaUnavailable(
                        f"error reading '{topic}' partition {split.partition}: {error.str()}"
                    )
                if m.offset() >= split.until:
                    done = True
                    break
                good.append(m)
            if good:  # CHANGED: one comprehension per column, not six appends per record
                offsets.extend([m.offset() for m in good])
                stamps.extend([m.timestamp()[1] for m in good])
                keys.extend([m.key() for m in good])
                values.extend([m.value() for m in good])
                next_offset = offsets[-1] + 1
                done = done or next_offset >= split.until
            if len(offsets) >= BATCH_RECORDS or (done and offsets):
                n = len(offsets)
                yield pa.RecordBatch.from_arrays(
                    [pa.array([topic] * n, pa.string()),
                     pa.array([split.partition] * n, pa.int32()),
                     pa.array(offsets, pa.int64()), pa.array(stamps, pa.int64()),
                     pa.array(keys, pa.binary()), pa.array(values, pa.binary())],
                    schema=RAW_SCHEMA,
                )
                faults.hit("precommit.mid_read")
                offsets, stamps, keys, values = [], [], [], []
    finally:
        c.close()


class ProposedKafkaRangeReader(KafkaRangeReader):
    def read(self, partition):  # type: ignore[override]
        split: KafkaSplit = partition
        if split.until <= split.start:
            return
        yield from read_split_proposed(self.topic, split, self._settings(), self.timeout_s)


class ProposedKafkaRangeDataSource(KafkaRangeDataSource):
    def reader(self, schema):  # type: ignore[override]
        return ProposedKafkaRangeReader(dict(self.options))


# ----------------------------------------------------------------------------- 3. parse columns


def parse_records_proposed(config: Any):
    """``eos.stage.parse_records`` with proposals 2 and 3 (same output, row for row)."""
    from eos.stage import PARSED_SCHEMA

    event = config.event

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        use_one_decoder()  # proposal 2, in the Python worker that runs this task only
        try:
            yield from _parse(batches)
        finally:
            use_stdlib_json()  # workers are reused: leave the next task unpatched

    def _parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from eos.events import Event, parse_event

        for batch in batches:
            values = batch.column("value").to_pylist()
            stamps = batch.column("timestamp_ms").to_pylist()
            parsed = [
                parse_event(v, t, event.key, event.time, event.value, event.max_future)
                for v, t in zip(values, stamps, strict=True)
            ]
            if all(type(p) is Event for p in parsed):
                n = len(parsed)
                keys = [p.key for p in parsed]
                times = [p.ts_ms for p in parsed]
                amounts = [p.value for p in parsed]
                raw_keys = raw_values = reasons = [None] * n
            else:
                ok = [type(p) is Event for p in parsed]
                keys = [p.key if g else None for p, g in zip(parsed, ok, strict=True)]
                times = [p.ts_ms if g else None for p, g in zip(parsed, ok, strict=True)]
                amounts = [p.value if g else None for p, g in zip(parsed, ok, strict=True)]
                raw = batch.column("key").to_pylist()
                raw_keys = [None if g else k for k, g in zip(raw, ok, strict=True)]
                raw_values = [None if g else v for v, g in zip(values, ok, strict=True)]
                reasons = [None if g else p.reason for p, g in zip(parsed, ok, strict=True)]
            yield pa.RecordBatch.from_arrays(
                [batch.column("partition"), batch.column("offset"), batch.column("timestamp_ms"),
                 pa.array(keys, pa.string()), pa.array(times, pa.int64()),
                 pa.array(amounts, PARSED_SCHEMA.field("value").type),
                 pa.array(raw_keys, pa.binary()), pa.array(raw_values, pa.binary()),
                 pa.array(reasons, pa.string())],
                schema=PARSED_SCHEMA,
            )

    return parse


# ----------------------------------------------------------------------------- 4. fused


class FusedKafkaRangeReader(ProposedKafkaRangeReader):
    """Proposal 4: the reader parses what it reads, so Spark runs one Python stage, not two."""

    def read(self, partition):  # type: ignore[override]
        from eos.config import load_config

        split: KafkaSplit = partition
        if split.until <= split.start:
            return
        parse = parse_records_proposed(load_config(self.config_path))
        yield from parse(read_split_proposed(self.topic, split, self._settings(), self.timeout_s))


class FusedKafkaRangeDataSource(ProposedKafkaRangeDataSource):
    @classmethod
    def name(cls) -> str:
        return "eos_kafka_parsed"

    def schema(self):  # type: ignore[override]
        from eos.stage import PARSED_DDL

        return PARSED_DDL

    def reader(self, schema):  # type: ignore[override]
        return FusedKafkaRangeReader(dict(self.options))


# ----------------------------------------------------------------------------- switch


@contextlib.contextmanager
def patched_library(spark: Any, reader: bool = True, parse: bool = True) -> Iterator[None]:
    """Run the library's exactly-once path in this process with the proposed changes."""
    import sys

    from pyspark import cloudpickle

    import eos.stage

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    original_parse = eos.stage.parse_records
    try:
        if reader:
            spark.dataSource.register(ProposedKafkaRangeDataSource)  # replaces "eos_kafka"
        if parse:
            eos.stage.parse_records = parse_records_proposed
        yield
    finally:
        eos.stage.parse_records = original_parse
        spark.dataSource.register(KafkaRangeDataSource)
        use_stdlib_json()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
