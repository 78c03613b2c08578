"""Kafka range reader: a PySpark Python Data Source that reads exactly a plan's ranges.

Registered as ``eos_kafka``. One input split per partition range, large ranges cut into several
so both cores work. A split stops by offset, not by count: offsets may have gaps (compaction,
transaction markers), and nothing at or beyond ``until`` is ever returned.

By default a row is the raw Kafka record (``RAW_SCHEMA``). With the ``parse_event`` option (an
``EventConfig``, see ``event_option``) the reader also parses what it read, in the same Python
worker, and a row is a parsed event or a quarantined record (``eos.core.schema.parsed_schema``):
precommit reads this way. Parsing in a second Python stage (``mapInArrow``) sent every raw
record from the reader's worker to the JVM and on to another worker, which cost more than the
parse itself (docs/benchmarks.md, "Spark read+parse").
"""

from __future__ import annotations

import base64
import json
import pickle
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

RAW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp_ms", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
    ]
)
RAW_DDL = (
    "topic string, partition int, offset long, timestamp_ms long, key binary, value binary"
)
BATCH_RECORDS = 10_000
PARSE_OPTION = "parse_event"

# Per Python worker, which Spark reuses from task to task (``spark.python.worker.reuse``): the
# parser of each event declaration, compiled by the first split that needed it. (Keeping the
# consumers too was measured and is not done: unassigned and reassigned, a kept consumer read
# 1M records in 32 splits in 8.8 s against 4.3 s with a fresh one per split;
# docs/benchmarks-history.md, 2026-11-25.)
_parsers: dict[str, Any] = {}


def event_option(event: Any) -> str:
    """The ``parse_event`` option's value: the pipeline's ``EventConfig``, pickled (the parser
    is built from it on the worker; it holds field declarations, never secrets)."""
    return base64.b64encode(pickle.dumps(event)).decode("ascii")


def _event(value: str | None) -> Any:
    return None if not value else pickle.loads(base64.b64decode(value))


@dataclass(frozen=True)
class KafkaSplit(InputPartition):
    partition: int
    start: int
    until: int


def splits_of(ranges: list[dict[str, int]], split_records: int) -> list[KafkaSplit]:
    """Cut each non-empty ``[start, until)`` into pieces of at most ``split_records`` offsets."""
    splits = []
    for r in sorted(ranges, key=lambda r: r["partition"]):
        for lo in range(r["start"], r["until"], split_records):
            splits.append(KafkaSplit(r["partition"], lo, min(lo + split_records, r["until"])))
    return splits


def shareable_client(client: dict[str, Any]) -> dict[str, Any]:
    """The config's ``kafka.client`` settings that may travel in data source options: those
    that are not secret-looking, and secret ones written as a ``${VAR}`` reference (resolved
    on the executor). A literal secret stays in the config file (``client_in_file``)."""
    from eos.core.kafka import redact

    hidden = {k for k, v in redact(client).items() if v == "***"}
    return {k: v for k, v in client.items()
            if k not in hidden or re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", str(v))}


class KafkaRangeReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.topic = options["topic"]
        self.ranges = json.loads(options["ranges"])
        self.split_records = int(options.get("split_records", 250_000))
        self.timeout_s = int(options.get("read_timeout_ms", 60_000)) / 1000
        self.config_path = options.get("config")
        self.client = json.loads(options.get("client") or "{}")
        self.client_in_file = json.loads(options.get("client_in_file") or "[]")
        self.bootstrap = options.get("bootstrap")
        self.faults = json.loads(options.get("faults") or "{}")
        self.event_option = options.get(PARSE_OPTION) or ""
        self.event = _event(self.event_option)

    def partitions(self) -> list[InputPartition]:
        splits = splits_of(self.ranges, self.split_records)
        return splits or [KafkaSplit(-1, 0, 0)]

    def _settings(self) -> dict[str, Any]:
        # Secrets are resolved here, on the executor, from the environment (``${VAR}``): they
        # never travel in data source options, which Spark may print in plans. A secret written
        # literally in the config is read from its file, which an executor on another machine
        # may not have: that is an error naming the settings, never a client without them.
        from eos.core.config import load_config
        from eos.core.errors import ConfigError
        from eos.core.kafka import client_settings

        client = dict(self.client)
        if self.client_in_file:
            if not (self.config_path and Path(self.config_path).is_file()):
                raise ConfigError(
                    f"kafka.client sets {self.client_in_file} literally in {self.config_path}, "
                    "which this executor cannot read: write them as ${VAR} and give the "
                    "executors the variables (docs/cluster.md)")
            stored = load_config(self.config_path).kafka.client
            client.update({k: stored[k] for k in self.client_in_file if k in stored})
        return client_settings(client, bootstrap=self.bootstrap)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The split's records (parsed when the event option is set). A library error leaves
        the worker as an ``envelope`` line: Spark hands the driver only the exception's text,
        and the driver raises the same class again from it (``eos.core.errors.carried``)."""
        from eos.core.errors import EosError, envelope

        try:
            yield from self._read(partition)
        except EosError as error:
            raise RuntimeError(envelope(error)) from None

    def _read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        split: KafkaSplit = partition  # type: ignore[assignment]
        if split.until <= split.start:
            return
        from eos.core import faults

        faults.adopt(self.faults)
        records = read_split(self.topic, split, self._settings(), self.timeout_s)
        if self.event is None:
            yield from records
            return
        from eos.compute.parse import Parser

        parser = _parsers.get(self.event_option)
        if parser is None:  # compiled once per worker and declaration
            parser = _parsers[self.event_option] = Parser(self.event)
        for batch in records:
            yield parser.parse_batch(batch)


def read_split(
    topic: str, split: KafkaSplit, settings: dict[str, Any], timeout_s: float
) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches of exactly the records in ``[split.start, split.until)``."""
    import confluent_kafka as ck

    from eos.core import faults
    from eos.core.errors import DataLoss, KafkaUnavailable
    from eos.core.kafka import consumer, watermarks

    bootstrap = settings["bootstrap.servers"]
    c = consumer(settings, group=f"eos-reader-{topic}", **{"enable.partition.eof": True})
    try:
        low, high = watermarks(c, topic, split.partition, bootstrap)
        if split.start < low:
            raise DataLoss.gone(topic, split.partition, split.start, low, split.until,
                                "planned range",
                                "the epoch cannot be computed without losing data")
        if split.until > high:
            raise DataLoss(
                f"topic '{topic}' partition {split.partition}: planned until {split.until} is "
                f"beyond the high watermark {high}; the partition was truncated"
            )
        c.assign([ck.TopicPartition(topic, split.partition, split.start)])
        records: list[Any] = []
        next_offset = split.start
        last_progress = time.monotonic()
        done = False
        while not done:
            # Ask for no more than the range still lacks: consume() otherwise waits out its whole
            # timeout on the last call of every split that ends near the partition's end.
            wanted = max(1, min(BATCH_RECORDS, split.until - next_offset))
            messages = c.consume(num_messages=wanted, timeout=1.0)
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > timeout_s:
                raise KafkaUnavailable(
                    f"no progress reading '{topic}' partition {split.partition} "
                    f"[{split.start},{split.until}) from {bootstrap} for {timeout_s:.0f}s"
                )
            for m in messages:
                error = m.error()
                if error is not None:
                    if error.code() == ck.KafkaError._PARTITION_EOF:
                        # The log (or, read_committed, its stable part) ends at m.offset(). At or
                        # past `until`, what is left of the range were gaps or markers; below
                        # it, an open transaction is still pending: keep waiting for it.
                        done = m.offset() >= split.until
                        continue
                    raise KafkaUnavailable(
                        f"error reading '{topic}' partition {split.partition}: {error.str()}"
                    )
                if m.offset() >= split.until:
                    done = True
                    break
                records.append(m)
                next_offset = m.offset() + 1
            done = done or next_offset >= split.until
            if len(records) >= BATCH_RECORDS or (done and records):
                yield _raw_batch(topic, split.partition, records)
                faults.hit("precommit.mid_read")
                records = []
    finally:
        c.close()


def _raw_batch(topic: str, partition: int, records: list[Any]) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_arrays(
        [pa.array([topic] * n, pa.string()), pa.array([partition] * n, pa.int32()),
         pa.array([m.offset() for m in records], pa.int64()),
         pa.array([m.timestamp()[1] for m in records], pa.int64()),
         pa.array([m.key() for m in records], pa.binary()),
         pa.array([m.value() for m in records], pa.binary())],
        schema=RAW_SCHEMA,
    )


class KafkaRangeDataSource(DataSource):
    """``spark.read.format("eos_kafka").option("ranges", json).option("topic", t).load()``."""

    @classmethod
    def name(cls) -> str:
        return "eos_kafka"

    def schema(self) -> StructType | str:
        event = _event(self.options.get(PARSE_OPTION))
        if event is None:
            return RAW_DDL
        from eos.core.schema import ddl, parsed_schema

        return ddl(parsed_schema(event))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaRangeReader(dict(self.options))
