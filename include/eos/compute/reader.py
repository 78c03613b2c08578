"""Kafka range reader: reads exactly a plan's ranges, in Spark's Python workers.

Precommit reads with ``planned_read`` (splits planned on the driver, read by ``mapInArrow``);
the same reader is registered as the ``eos_kafka`` Python data source. The plan's ranges are
packed into as few input splits as keep every core busy (``splits_of``): at least
``min_splits`` (the pipeline's ``spark.shuffle_partitions``), more when the epoch is larger than
``split_records`` per split. One split reads its pieces of several partitions with one
consumer. A Spark task costs ~90 ms of a core whatever it reads (``python -m
bench.read_path``), so a split per partition made a 32-partition epoch pay it 32 times. A piece
stops by offset, not by count: offsets may have gaps (compaction, transaction markers), and
nothing at or beyond a piece's ``until`` is ever returned.

By default a row is the raw Kafka record (``RAW_SCHEMA``). With the ``parse_event`` option (an
``EventConfig``, see ``event_option``) the reader also parses what it read, in the same Python
worker, and a row is a parsed event or a quarantined record (``eos.core.schema.parsed_schema``):
precommit reads this way. Parsing in a second Python stage (a second ``mapInArrow``) sent every raw
record from the reader's worker to the JVM and on to another worker, which cost more than the
parse itself (``python -m bench.read_path``).
"""

from __future__ import annotations

import base64
import json
import pickle
import re
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from eos.compute.splits import NO_SPLIT, KafkaSplit, Piece, splits_of
from eos.core.metadata import TIMESTAMP_TYPES
from eos.core.schema import HEADERS_TYPE, TOPIC, Carried, with_metadata

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
# With ``timestamp_types``, ``read_split`` adds each record's timestamp type after RAW_SCHEMA's
# columns: CreateTime, LogAppendTime, or null when it has none.
TIMESTAMP_TYPE = pa.field("timestamp_type", pa.string())
BATCH_RECORDS = 10_000
# librdkafka stops fetching a partition for fetch.queue.backoff.ms (1 s by default) once its
# prefetch queue is over queued.max.messages.kbytes (64 MiB for all the consumer's partitions).
# A split reading many partitions reaches that at once and then idles a second at a time: 1M
# records of 32 partitions took 6.6 s in one consumer, 2.2 s with 10 ms (the queue's bound is
# unchanged, so memory is too). A pipeline's ``kafka.client`` may still set its own.
QUEUE_BACKOFF = {"fetch.queue.backoff.ms": 10}
PARSE_OPTION = "parse_event"
# With ``parse_event``: also carry every record's key as text and timestamp type
# (``eos.core.schema.with_metadata``), for a pipeline that reads them.
METADATA_OPTION = "metadata"
# "true": each parsed record carries its topic (``eos.core.schema.TOPIC``): a read of several.
TOPICS_OPTION = "record_topics"
# Values that change every epoch (precommit's wm(N-1)), given as ``{"column": long}``: the reader
# appends each to every row as a column. Spark compiles a literal into the generated code of the
# stage that uses it, so a value that is new each epoch, written in the plan, would cost a
# compile of that stage every epoch; as data it costs nothing.
CONSTANTS_OPTION = "constants"

# Per Python worker, which Spark reuses from task to task (``spark.python.worker.reuse``): the
# parser of each event declaration, compiled by the first split that needed it.
_parsers: dict[str, Any] = {}


def event_option(event: Any) -> str:
    """The ``parse_event`` option's value: the pipeline's ``EventConfig``, pickled (the parser
    is built from it on the worker; it holds field declarations, never secrets)."""
    return base64.b64encode(pickle.dumps(event)).decode("ascii")


def _event(value: str | None) -> Any:
    return None if not value else pickle.loads(base64.b64decode(value))


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
        self.min_splits = int(options.get("min_splits", 1))
        self.timeout_s = int(options.get("read_timeout_ms", 60_000)) / 1000
        self.config_path = options.get("config")
        self.client = json.loads(options.get("client") or "{}")
        self.client_in_file = json.loads(options.get("client_in_file") or "[]")
        self.bootstrap = options.get("bootstrap")
        self.connection_keys = json.loads(options.get("connection_keys") or "[]")
        self.faults = json.loads(options.get("faults") or "{}")
        self.event_option = options.get(PARSE_OPTION) or ""
        self.event = _event(self.event_option)
        self.carried = Carried.from_option(options.get(METADATA_OPTION))
        self.metadata = self.carried.pair
        self.record_topics = options.get(TOPICS_OPTION) == "true"
        self.constants = _constants(options.get(CONSTANTS_OPTION))

    def partitions(self) -> list[InputPartition]:
        return list(self.splits())

    def splits(self) -> list[KafkaSplit]:
        """This read's splits (``splits_of``), or one empty split: Spark needs one."""
        return splits_of(self.ranges, self.split_records, self.min_splits) or [NO_SPLIT]

    def _settings(self) -> dict[str, Any]:
        # Secrets are resolved here, on the executor, from the environment (``${VAR}``): they
        # never travel in data source options, which Spark may print in plans. A secret written
        # literally in the config is read from its file, which an executor on another machine
        # may not have: that is an error naming the settings, never a client without them.
        # The driver's connection settings reach an executor its process started (a local
        # master) in the file it handed on (``eos.core.bootstrap.handed_to_children``); an
        # executor elsewhere needs their security settings in its own environment.
        from eos.core.config import load_config
        from eos.core.errors import ConfigError
        from eos.core.kafka import client_settings

        client = dict(self.client)
        if self.client_in_file:
            if not (self.config_path and Path(self.config_path).is_file()):
                raise ConfigError(
                    f"kafka.client sets {self.client_in_file} literally in {self.config_path}, "
                    "which this executor cannot read: write them as ${VAR} and give the "
                    "executors the variables (the guide's Deploying page: what each executor "
                    "needs)")
            stored = load_config(self.config_path).kafka.client
            client.update({k: stored[k] for k in self.client_in_file if k in stored})
        settings = client_settings(client, bootstrap=self.bootstrap)
        missing = sorted(set(self.connection_keys) - set(settings))
        if missing:
            raise ConfigError(
                f"the Kafka connection sets {missing}, which this executor does not have: a "
                "connection's settings reach only executors on the driver's machine; give "
                "the others these settings as KAFKA_SECURITY_*/KAFKA_SASL_*/KAFKA_SSL_* "
                "variables in their environment")
        return settings

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
        if not split.pieces:
            return
        from eos.core import faults

        faults.adopt(self.faults)
        records = read_split(self.topic, split, self._settings(), self.timeout_s,
                             timestamp_types=self.metadata,
                             headers=self.carried.raw_headers)
        if self.event is not None:
            records = self._parsed(records)
        for batch in records:
            yield with_constants(batch, self.constants)

    def _parsed(self, records: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from eos.compute.formats import parser_for

        parser = _parsers.get(self.event_option)
        if parser is None:  # compiled once per worker and declaration (and event.format)
            parser = _parsers[self.event_option] = parser_for(self.event)
        keys = None
        if self.event.key is not None:
            from eos.compute.formats.keys import KeyParser

            keys = KeyParser(self.event)
        for batch in records:
            parsed = parser.parse_batch(batch)
            if keys is not None:
                parsed = keys.merge(parsed, batch)
            parsed = with_metadata(parsed, batch, self.carried) if self.carried.any else parsed
            yield parsed.append_column(TOPIC, batch.column("topic")) if self.record_topics \
                else parsed


def _constants(value: str | None) -> dict[str, int]:
    return {name: int(v) for name, v in json.loads(value or "{}").items()}


def constants_ddl(constants: dict[str, int]) -> str:
    """The columns ``CONSTANTS_OPTION`` appends, as DDL after the reader's own."""
    return "".join(f", {name} long" for name in constants)


Rows = TypeVar("Rows", pa.RecordBatch, pa.Table)


def with_constants(rows: Rows, constants: dict[str, int]) -> Rows:
    """``rows`` (a batch, or a table) with one int64 column per constant, the same value in
    every row."""
    for name, value in constants.items():
        rows = rows.append_column(name, pa.repeat(pa.scalar(value, pa.int64()), len(rows)))
    return rows


def read_split(
    topic: str, split: KafkaSplit, settings: dict[str, Any], timeout_s: float,
    timestamp_types: bool = False, headers: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches of exactly the records of the split's pieces, one consumer for all
    (a piece without a topic is of ``topic``)."""
    import confluent_kafka as ck

    from eos.core import faults
    from eos.core.errors import KafkaUnavailable
    from eos.core.kafka import about_the_group, check_in_log, consumer

    bootstrap = settings["bootstrap.servers"]
    c = consumer({**QUEUE_BACKOFF, **settings}, group=f"eos-reader-{topic}",
                 **{"enable.partition.eof": True})
    pieces = [replace(p, topic=p.topic or topic) for p in split.pieces]
    try:
        for piece in pieces:  # offsets gone or truncated are data loss, said now
            check_in_log(c, piece.topic, piece.partition, piece.start, piece.until, bootstrap,
                         until_in_log=True, what="planned range",
                         consequence="the epoch cannot be computed without losing data")
        c.assign([ck.TopicPartition(p.topic, p.partition, p.start) for p in pieces])
        reading = _Progress(pieces)
        records: list[Any] = []
        last_progress = time.monotonic()
        while not reading.done:
            # Ask for no more than the pieces still lack: consume() otherwise waits out its whole
            # timeout on the last call of every split that ends near its partitions' ends.
            messages = c.consume(num_messages=reading.wanted(BATCH_RECORDS), timeout=1.0)
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > timeout_s:
                raise KafkaUnavailable(
                    f"no progress reading '{topic}' {reading.pending()} from {bootstrap} for "
                    f"{timeout_s:.0f}s")
            for m in messages:
                error = m.error()
                if error is not None and about_the_group(error):
                    continue
                if error is not None and error.code() != ck.KafkaError._PARTITION_EOF:
                    raise KafkaUnavailable(
                        f"error reading '{m.topic()}' partition {m.partition()}: "
                        f"{error.str()}")
                if reading.take(m, eof=error is not None):
                    records.append(m)
            finished = reading.finished()
            if finished:  # nothing more of those partitions is wanted: stop fetching them
                c.pause([ck.TopicPartition(t, p) for t, p in finished])
            if len(records) >= BATCH_RECORDS or (reading.done and records):
                yield _raw_batch(records, timestamp_types, headers)
                faults.hit("precommit.mid_read")
                records = []
    finally:
        c.close()


class _Progress:
    """Where each piece of a split stands: the next offset wanted, and whether it is done."""

    def __init__(self, pieces: list[Piece]) -> None:
        self.until = {(p.topic, p.partition): p.until for p in pieces}
        self.next = {(p.topic, p.partition): p.start for p in pieces}
        self.open = set(self.until)
        self._paused: set[tuple[str, int]] = set()

    @property
    def done(self) -> bool:
        return not self.open

    def wanted(self, most: int) -> int:
        return max(1, min(most, sum(self.until[p] - self.next[p] for p in self.open)))

    def take(self, m: Any, eof: bool) -> bool:
        """Account for one message (or end-of-partition event); True if its record is wanted."""
        partition, offset = (m.topic(), m.partition()), m.offset()
        if partition not in self.open:
            return False  # fetched before the partition was paused
        if eof:
            # The log (or, read_committed, its stable part) ends at `offset`. At or past
            # `until`, what is left of the piece were gaps or markers; below it, an open
            # transaction is still pending: keep waiting for it.
            if offset >= self.until[partition]:
                self.open.discard(partition)
            return False
        if offset >= self.until[partition]:
            self.open.discard(partition)
            return False
        self.next[partition] = offset + 1
        if self.next[partition] >= self.until[partition]:
            self.open.discard(partition)
        return True

    def finished(self) -> list[tuple[str, int]]:
        """Partitions done since the last call."""
        newly = sorted(set(self.until) - self.open - self._paused)
        self._paused.update(newly)
        return newly

    def pending(self) -> str:
        return ", ".join(f"{t}[{p}] [{self.next[(t, p)]},{self.until[(t, p)]})"
                         for t, p in sorted(self.open))


def _raw_batch(records: list[Any], timestamp_types: bool,
               headers: bool = False) -> pa.RecordBatch:
    batch = pa.RecordBatch.from_arrays(
        [pa.array([m.topic() for m in records], pa.string()),
         pa.array([m.partition() for m in records], pa.int32()),
         pa.array([m.offset() for m in records], pa.int64()),
         pa.array([m.timestamp()[1] for m in records], pa.int64()),
         pa.array([m.key() for m in records], pa.binary()),
         pa.array([m.value() for m in records], pa.binary())],
        schema=RAW_SCHEMA,
    )
    if timestamp_types:
        types = [TIMESTAMP_TYPES.get(m.timestamp()[0]) for m in records]
        batch = batch.append_column(TIMESTAMP_TYPE, pa.array(types, pa.string()))
    if headers:  # every header, in record order (a name may repeat): ``kafka_headers``
        lists = [[{"key": k, "value": v} for k, v in m.headers() or ()] for m in records]
        batch = batch.append_column("headers", pa.array(lists, HEADERS_TYPE))
    return batch


class SplitsRead:
    """``mapInArrow``'s function for ``planned_read``: each input row is the number of one of
    ``reader``'s splits, which it reads. Pickled into the plan with the reader, so it holds
    only what data source options may hold (no secrets: ``KafkaRangeReader._settings``)."""

    def __init__(self, reader: KafkaRangeReader) -> None:
        self.reader = reader
        self.splits = reader.splits()  # planned once, here; the workers index into them

    def __call__(self, numbers: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in numbers:
            for number in batch.column(0).to_pylist():
                yield from self.reader.read(self.splits[number])


def planned_read(spark: Any, options: dict[str, str]) -> Any:
    """The ranges of ``options`` (``eos_kafka``'s), as ``eos_kafka`` reads them, with the splits
    planned here on the driver: ``spark.range`` gives one row to each of as many partitions as
    there are splits, and ``mapInArrow`` reads split ``id`` in each.

    Why not ``spark.read.format("eos_kafka")``: Spark instantiates a Python data source in a
    Python process of its own to learn its schema, and again to plan its partitions, every read.
    That cost 0.15-0.35 s per read whatever the read holds (``python -m
    bench.read_path``); the splits are already known here (``splits_of``), and the schema too. The
    records read, the splits and the errors are the same either way."""
    read = SplitsRead(KafkaRangeReader(options))
    count = len(read.splits)
    return spark.range(0, count, 1, count).mapInArrow(read, schema_ddl(options))


def schema_ddl(options: dict[str, str]) -> str:
    """The rows' schema for ``options``: raw records, or parsed events, then the constants."""
    event = _event(options.get(PARSE_OPTION))
    constants = constants_ddl(_constants(options.get(CONSTANTS_OPTION)))
    if event is None:
        return RAW_DDL + constants
    from eos.core.schema import ddl, read_schema

    return ddl(read_schema(event, Carried.from_option(options.get(METADATA_OPTION)),
                           options.get(TOPICS_OPTION) == "true")) + constants


class KafkaRangeDataSource(DataSource):
    """``spark.read.format("eos_kafka").option("ranges", json).option("topic", t).load()``."""

    @classmethod
    def name(cls) -> str:
        return "eos_kafka"

    def schema(self) -> StructType | str:
        return schema_ddl(dict(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaRangeReader(dict(self.options))
