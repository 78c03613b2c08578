"""``python -m bench.streaming_peer``: the job a Spark user would write instead of our protocol,
run next to our exactly-once path on the same records, in one run (the figures:
docs/benchmarks.md).

The peer is a Spark Structured Streaming query, started once and kept running:

- source: ``eos_kafka_stream`` (this module), a Python streaming data source over the same
  broker and topic; its offsets are ``{"partition": offset}`` JSON and a micro-batch reads
  ``[start, end)`` per partition with ``eos.compute.reader``'s own splits and consumer loop;
- the same parser (``eos.compute.precommit.read.parse_records`` through ``mapInArrow``), then
  what a Spark
  user writes for the pipeline's windows: ``withWatermark(event time, allowed lateness)``,
  ``groupBy(window(...), keys).agg(...)``, output mode append, Spark's state store and
  ``checkpointLocation`` under the work dir;
- sink: ``foreachBatch`` appending each batch to a Delta table with delta-rs,
  ``txn(app id, batch id)`` in the commit and the batch skipped when the table's ``txn``
  version already covers it (the ``txnAppId``/``txnVersion`` recipe of the Delta docs).

The embedded broker keeps only ~5 MiB per partition (``bench.scenarios.MAX_RETAINED_EVENTS``),
so records are produced one epoch at a time. After each epoch is produced, our exactly-once
epoch runs (``bench.scenarios.eo_epoch``); then the stream is let through to the same offsets
and ``query.processAllAvailable()`` waits until it has processed them (one data batch, then the
no-data batch Spark runs to evict the windows the new watermark closed). Python stream sources
have no admission control in PySpark 4.0.1 (``latestOffset()`` takes no limit;
``PythonMicroBatchStream`` implements neither ``SupportsAdmissionControl`` nor
``SupportsTriggerAvailableNow``), so the bench holds the stream back itself: the source's
``released_offsets`` option names a file of offsets the bench has released, and
``latestOffset`` never goes past them. Each system therefore works alone on each epoch, and
each micro-batch reads exactly the ranges of one of our plans (checked, batch by batch).

At the end, restarts are probed: our last commit is re-run, and the stream is stopped, its last
batch's commit-log entry removed (a crash after the Delta append, before Spark's commit log),
and the query restarted from its checkpoint, which replays that batch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from bench import scenarios as sc
from eos.compute.reader import RAW_DDL, KafkaRangeReader
from eos.compute.splits import NO_SPLIT, splits_of
from eos.core.config import PipelineConfig, WindowConfig

Log = Callable[[str], None]
SOURCE = "eos_kafka_stream"
EO_NAME, PEER_DIR = "peer-eo", "peer"  # our pipeline's name; the peer's directory
EVENT_TIME = "event_time"  # the peer's event-time column (a Spark timestamp)
# 4 epochs of 20 s of event time each after a warm-up; the last one closes a 60 s window.
QUICK = {"events": 8_000, "epoch_records": 2_000, "warmup": 500}

# --------------------------------------------------------------------------- the peer's source


def read_offsets(path: str) -> dict[str, int]:
    """Offsets in a JSON file (``{"partition": offset}``); empty when there is none yet."""
    try:
        with open(path) as f:
            return {str(p): int(o) for p, o in json.load(f).items()}
    except FileNotFoundError:
        return {}


def write_offsets(path: Path, offsets: dict[str, int]) -> None:
    """Replace the file in one rename: the source never reads half of it."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(offsets, sort_keys=True))
    os.replace(tmp, path)


class KafkaStreamReader(DataSourceStreamReader):
    """Offsets are ``{"partition": next offset}``; a batch reads ``[start, end)`` per partition.

    Reading is ``eos.compute.reader``'s: the same splits (``splits_of``) and the same consumer loop
    (``KafkaRangeReader.read``: stops by offset, raises on data loss), so the peer reads
    records exactly as our epochs do. Offsets live in Spark's checkpoint, never in Kafka."""

    def __init__(self, options: dict[str, str]) -> None:
        self.topic = options["topic"]
        self.split_records = int(options.get("split_records", 250_000))
        self.released_path = options.get("released_offsets")  # the bench's gate; see the module
        self.ranges = KafkaRangeReader({**options, "ranges": "[]"})
        self._consumer: Any = None  # metadata consumer, made where the offsets are asked for
        self._answered: dict[str, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles readers to its Python workers; a live consumer does not travel.
        return {**self.__dict__, "_consumer": None}

    def _watermarks(self) -> dict[int, tuple[int, int]]:
        """(log start, high watermark) per partition; one consumer for the reader's life, as
        the engine asks for offsets at every trigger."""
        from eos.core.kafka import consumer, describe_topic, watermarks

        settings = self.ranges._settings()
        if self._consumer is None:
            self._consumer = consumer(settings, group=f"eos-stream-{self.topic}")
        bootstrap = settings["bootstrap.servers"]
        return {p: watermarks(self._consumer, self.topic, p, bootstrap)
                for p in describe_topic(self._consumer, self.topic, bootstrap)}

    def initialOffset(self) -> dict[str, int]:
        """Earliest, as the pipeline's ``kafka.start`` default: every partition's log start."""
        return {str(p): low for p, (low, _) in self._watermarks().items()}

    def latestOffset(self) -> dict[str, int]:
        """The high watermarks, capped by the released offsets when the bench holds the stream
        back. While nothing new is released, the last answer stands without asking Kafka: the
        engine polls every few milliseconds, and an idle stream should stay idle."""
        if self.released_path is None:
            return {str(p): high for p, (_, high) in self._watermarks().items()}
        released = read_offsets(self.released_path)
        if self._answered is not None and released == self._answered:
            return self._answered
        highs = {str(p): high for p, (_, high) in self._watermarks().items()}
        cap = released or self.initialOffset()
        self._answered = {p: min(high, cap.get(p, high)) for p, high in highs.items()}
        return self._answered

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        ranges = [{"partition": int(p), "start": int(start.get(p, 0)), "until": int(until)}
                  for p, until in end.items()]
        return list(splits_of(ranges, self.split_records, self.ranges.min_splits)
                    or [NO_SPLIT])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.ranges.read(partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the checkpoint's offset and commit logs are the stream's offsets."""

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class KafkaStreamDataSource(DataSource):
    """``spark.readStream.format("eos_kafka_stream")`` with ``eos_kafka``'s options (``topic``,
    ``bootstrap``, ``config``, ``split_records``, ``min_splits``, ``read_timeout_ms``) but no
    ``ranges``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE

    def schema(self) -> str:
        return RAW_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options))


def register_stream_source(spark: Any) -> None:
    """Make ``eos_kafka_stream`` available; this module travels to Spark's Python workers by
    value (``cloudpickle.register_pickle_by_value``), so they need no ``bench`` on their path."""
    from pyspark import cloudpickle

    if __name__ != "__main__":  # run as a script, cloudpickle sends it by value anyway
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(KafkaStreamDataSource)


# --------------------------------------------------------------------------- the peer's query


def window_column(F: Any, window: WindowConfig) -> tuple[Any, str]:
    """Spark's own window function for the pipeline's window, and the column it makes."""
    time_col = F.col(EVENT_TIME)
    if window.type == "session":
        return F.session_window(time_col, f"{window.gap} milliseconds"), "session_window"
    slide = window.slide or window.size
    return F.window(time_col, f"{window.size} milliseconds", f"{slide} milliseconds"), "window"


def user_aggregations(F: Any, config: PipelineConfig) -> list[Any]:
    """The config's aggregations as Spark's built-in functions, named by output: what a Spark
    user writes. ``avg`` is cast to double, our output type, so the two tables compare."""
    from eos.core.aggregations import aggregations_for

    columns = []
    for agg in aggregations_for(config):
        if agg.function == "count":
            column = F.count(F.lit(1) if agg.field is None else F.col(agg.field))
        elif agg.function in ("sum", "min", "max"):
            column = getattr(F, agg.function)(agg.field)
        elif agg.function == "avg":
            column = F.avg(agg.field).cast("double")
        elif agg.function == "approx_count_distinct":
            column = F.approx_count_distinct(agg.field)
        else:  # count_distinct
            raise ValueError(f"aggregation {agg.output!r} ({agg.function}): distinct "
                             "aggregations are not supported on streaming DataFrames")
        columns.append(column.alias(agg.output))
    return columns


def parsed_stream(spark: Any, config: PipelineConfig, released: Path) -> Any:
    """The pipeline's topic as a stream (held back to ``released``), parsed by our parser:
    where every peer's job starts."""
    from eos.compute.precommit.read import parse_records
    from eos.core.kafka import client_settings
    from eos.core.schema import ddl, parsed_schema

    raw = (spark.readStream.format(SOURCE)
           .option("topic", config.kafka.sole_topic)
           .option("bootstrap", client_settings(config.kafka.client)["bootstrap.servers"])
           .option("config", config.source_path or "")
           .option("split_records", str(config.kafka.split_records))
           .option("min_splits", str(config.spark.shuffle_partitions))
           .option("read_timeout_ms", str(config.kafka.read_timeout))
           .option("released_offsets", str(released))
           .load())
    return raw.mapInArrow(parse_records(config.event), ddl(parsed_schema(config.event)))


def peer_stream(spark: Any, config: PipelineConfig, released: Path) -> Any:
    """The streaming DataFrame of closed windows, in our windows output's columns."""
    from pyspark.sql import functions as F

    from eos.core.aggregations import aggregations_for
    from eos.core.schema import EVENT_MS, REASON

    parsed = parsed_stream(spark, config, released)
    # Not part of the user's job: counts what it drops as malformed, for the table.
    parsed = parsed.observe("parse", F.count(F.lit(1)).alias("records"),
                            F.count(F.when(F.col(REASON).isNotNull(), 1)).alias("malformed"))
    events = (parsed.where(F.col(REASON).isNull())
              .withColumn(EVENT_TIME, F.timestamp_millis(F.col(EVENT_MS)))
              .withWatermark(EVENT_TIME, f"{config.window.allowed_lateness} milliseconds"))
    if config.event.filter is not None:  # after the watermark: filtered events move it, as ours
        events = events.where(F.expr(config.event.filter))
    window, name = window_column(F, config.window)
    group = list(config.group_by)
    windows = events.groupBy(window, *group).agg(*user_aggregations(F, config))
    return windows.select(*group, F.col(f"{name}.start").alias("window_start"),
                          F.col(f"{name}.end").alias("window_end"),
                          *[a.output for a in aggregations_for(config)])


def peer_schema(config: PipelineConfig) -> pa.Schema:
    """Our windows output's columns, with the batch id where we keep the epoch."""
    from eos.core.outputs import windows_schema

    schema = windows_schema(config)
    return schema.remove(schema.get_field_index("epoch")).append(pa.field("batch_id", pa.int64()))


@dataclass
class DeltaBatchWriter:
    """``foreachBatch``: append a batch to Delta once, however often Spark replays it.

    The batch is computed first even when it will be skipped: in a stateful query, running the
    batch is what writes its state, and a replayed batch must leave the state as it was. The
    ``txn`` check and the append use the same snapshot, as ``eos.sinks.delta.sink.fenced_append``
    does. Each call is logged to a JSON-lines file, which works wherever the function runs."""

    path: str
    app_id: str
    schema: pa.Schema
    log_path: str

    def __call__(self, batch: Any, batch_id: int) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

        rows = batch.toArrow()
        table = DeltaTable(self.path)
        held = table.transaction_version(self.app_id)
        skipped = held is not None and batch_id <= held
        if rows.num_rows and not skipped:
            data = rows.append_column("batch_id", pa.array([batch_id] * rows.num_rows, pa.int64()))
            write_deltalake(table, data.select(self.schema.names).cast(self.schema),
                            mode="append", commit_properties=CommitProperties(
                                app_transactions=[Transaction(self.app_id, batch_id)]))
        with open(self.log_path, "a") as f:
            f.write(json.dumps({"batch_id": batch_id, "rows": rows.num_rows,
                                "skipped": skipped, "at": time.time()}) + "\n")


@dataclass(frozen=True)
class Peer:
    """Where the peer keeps things, and how to (re)start its query."""

    config: PipelineConfig
    root: Path

    @property
    def table(self) -> str:
        return str(self.root / "windows")

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def released(self) -> Path:
        return self.root / "released.json"

    @property
    def batch_log(self) -> Path:
        return self.root / "batches.jsonl"

    @property
    def app_id(self) -> str:
        return f"spark-peer:{self.config.name}"

    def prepare(self) -> None:
        from eos.core.delta import create_table

        self.root.mkdir(parents=True, exist_ok=True)
        create_table(self.table, peer_schema(self.config))

    def start(self, spark: Any) -> Any:
        writer = DeltaBatchWriter(self.table, self.app_id, peer_schema(self.config),
                                  str(self.batch_log))
        return (peer_stream(spark, self.config, self.released).writeStream
                .queryName(f"peer-{self.config.name}").outputMode("append")
                .option("checkpointLocation", str(self.checkpoint))
                .foreachBatch(writer).start())

    def logged(self) -> list[dict[str, Any]]:
        if not self.batch_log.exists():
            return []
        return [json.loads(line) for line in self.batch_log.read_text().splitlines()]


def sink_tables(workdir: Path) -> tuple[str, str]:
    """Our windows sink and the peer's table in a run's work dir (``--workdir``)."""
    return (str(workdir / "tables" / EO_NAME / "target"),
            str(workdir / PEER_DIR / "windows"))


# --------------------------------------------------------------------------- driving it


@dataclass(frozen=True)
class Batch:
    """One micro-batch the query ran, from its progress."""

    batch_id: int
    input_rows: int
    trigger_s: float
    dropped_by_watermark: int
    malformed: int
    start: dict[str, int] | None
    end: dict[str, int] | None


def _offsets(value: Any) -> dict[str, int] | None:
    """A source offset from a progress report: a JSON string, a dict, or none (PySpark reports
    a batch without a start offset as the string ``"None"``)."""
    if isinstance(value, str):
        value = None if value.strip() in ("", "None", "null") else json.loads(value)
    return {str(p): int(o) for p, o in value.items()} if isinstance(value, dict) else None


def batch_of(progress: dict[str, Any]) -> Batch:
    metrics = progress.get("observedMetrics") or {}
    parse = metrics.get("parse")
    source = (progress.get("sources") or [{}])[0]
    return Batch(
        batch_id=int(progress["batchId"]),
        input_rows=int(progress.get("numInputRows") or 0),
        trigger_s=progress["durationMs"].get("triggerExecution", 0) / 1000,
        dropped_by_watermark=sum(int(op.get("numRowsDroppedByWatermark") or 0)
                                 for op in progress.get("stateOperators") or []),
        malformed=int(parse["malformed"]) if parse is not None else 0,
        start=_offsets(source.get("startOffset")), end=_offsets(source.get("endOffset")),
    )


def new_batches(query: Any, seen: set[int]) -> list[Batch]:
    """Batches that ran since the last call. Idle triggers also report progress; only a report
    with ``addBatch`` is a batch that ran."""
    out = []
    for progress in query.recentProgress:
        if "addBatch" in progress["durationMs"] and progress["batchId"] not in seen:
            seen.add(progress["batchId"])
            out.append(batch_of(progress))
    return sorted(out, key=lambda b: b.batch_id)


def drain(query: Any, released: dict[str, int], tries: int = 5) -> None:
    """Return once the query has processed everything up to ``released``.

    ``processAllAvailable`` returns when a trigger finds nothing new; a trigger that read the
    offsets just before they were released can report that, so the committed end offset is
    checked and the wait repeated."""
    for _ in range(tries):
        query.processAllAvailable()
        progress = query.lastProgress
        sources = progress["sources"] if progress else []
        if sources and _offsets(sources[0].get("endOffset")) == released:
            return
    raise AssertionError(f"the stream did not reach the released offsets {released}")


@dataclass
class Replay:
    """A restart probe: what was replayed, whether it was skipped, the rows around it."""

    what: str
    skipped: bool
    rows_before: int
    rows_after: int
    txn: int
    seconds: float = 0.0


@dataclass
class Comparison:
    """Closed windows in both sinks, and how many agree on every aggregate."""

    both: int = 0
    equal: int = 0
    only_eo: int = 0
    only_peer: int = 0


@dataclass
class Result:
    events: int = 0
    eo: list[sc.EpochTiming] = field(default_factory=list)
    stream: list[float] = field(default_factory=list)  # seconds per epoch
    batches: list[Batch] = field(default_factory=list)
    start_s: float = 0.0
    eo_rows: int = 0
    peer_rows: int = 0
    peer_appends: int = 0
    eo_replay: Replay | None = None
    peer_replay: Replay | None = None
    comparison: Comparison = field(default_factory=Comparison)

    @property
    def epochs(self) -> int:
        return len(self.eo)


@dataclass
class Interleaved:
    """Drives both systems over one topic: produce an epoch, run our epoch, release it to the
    stream and wait for the stream. The query is started with the first epoch."""

    env: Any
    config: PipelineConfig
    peer: Peer
    records: Iterator[Any]
    query: Any = None
    start_s: float = 0.0
    seen: set[int] = field(default_factory=set)
    epochs: int = 0
    last_plan: Any = None  # the plan of the epoch last run: its ranges are what both read

    def epoch(self, count: int) -> tuple[sc.EpochTiming, float, list[Batch]]:
        """Our timing, the stream's seconds and its batches for the next ``count`` records."""
        sc.send_chunk(self.env, self.config.kafka.sole_topic, self.records, count)
        plan, timing = sc.eo_epoch(self.config, self.env.spark, f"peer-{self.epochs}")
        self.epochs += 1
        self.last_plan = plan
        if plan.records != count:
            raise AssertionError(f"epoch {plan.epoch} planned {plan.records} records, "
                                 f"{count} were produced")
        if self.query is None:
            self._start()
        released = {str(r.partition): r.until for r in plan.ranges}
        started = time.perf_counter()
        write_offsets(self.peer.released, released)
        drain(self.query, released)
        seconds = time.perf_counter() - started
        batches = new_batches(self.query, self.seen)
        _check_ranges(plan, batches)
        return timing, seconds, batches

    def _start(self) -> None:
        """Start the query and wait until it has initialised; nothing is released yet, and the
        empty first batch Spark runs is start-up, not an epoch's work."""
        started = time.perf_counter()
        self.query = self.peer.start(self.env.spark)
        self.query.processAllAvailable()
        self.start_s = time.perf_counter() - started
        new_batches(self.query, self.seen)

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None


def run(env: Any, events: int, chunk: int, log: Log, topic: str = "bench-peer",
        warmup: int = 0) -> Result:
    """``events`` records, ``chunk`` at a time, each epoch through EO and then the stream,
    after ``warmup`` records through both that are not measured (first Python workers, first
    tables, first state store)."""
    sc.check_retained(max(chunk, warmup))
    config = env.config(EO_NAME, topic, max_records=max(chunk, warmup))
    peer = Peer(config, env.workdir / PEER_DIR)
    peer.prepare()
    register_stream_source(env.spark)
    both = Interleaved(env, config, peer, sc.generator(warmup + events))
    result = Result()
    try:
        if warmup:
            timing, seconds, _ = both.epoch(warmup)
            log(f"warm-up: {warmup:,} records; EO {timing.total:.1f}s, stream query start "
                f"{both.start_s:.1f}s + {seconds:.1f}s (not measured)")
        while result.events < events:
            count = min(chunk, events - result.events)
            timing, seconds, batches = both.epoch(count)
            result.eo.append(timing)
            result.stream.append(seconds)
            result.batches += batches
            result.events += count
            log(f"epoch {timing.epoch}: {count:,} records; EO {timing.total:.1f}s "
                f"({_split(timing)}), stream {seconds:.1f}s in batches "
                f"{[b.batch_id for b in batches]}")
        result.start_s = both.start_s
        both.query, result.peer_replay = _replay_last_batch(env.spark, peer, both.query,
                                                            result, log)
        result.eo_replay = _replay_last_commit(config, both.epochs - 1)
    finally:
        both.stop()
    _totals(result, config, peer)
    return result


def _split(timing: sc.EpochTiming) -> str:
    """Where an EO epoch's seconds went, phase by phase (precommit's Spark parts apart)."""
    return (f"begin {timing.begin:.2f}, read+parse {timing.read_parse:.2f}, aggregate "
            f"{timing.aggregate:.2f}, precommit other {timing.precommit_other:.2f}, commit "
            f"{timing.commit:.2f}")


def _check_ranges(plan: Any, batches: list[Batch]) -> None:
    """The epoch's data batch read exactly the plan's ranges."""
    with_data = [b for b in batches if b.input_rows]
    want_start = {str(r.partition): r.start for r in plan.ranges}
    want_end = {str(r.partition): r.until for r in plan.ranges}
    if len(with_data) != 1 or (with_data[0].start, with_data[0].end) != (want_start, want_end):
        raise AssertionError(f"epoch {plan.epoch}: the stream's batches {with_data} did not "
                             f"read exactly the plan's ranges {plan.describe_ranges()}")


def _replay_last_batch(spark: Any, peer: Peer, query: Any, result: Result,
                       log: Log) -> tuple[Any, Replay]:
    """Crash the stream between its last Delta append and its commit log, restart it from the
    checkpoint, and see what the replayed batch does to the table."""
    from eos.core.delta import read_table, txn_version

    last = result.batches[-1].batch_id
    query.stop()
    for name in (str(last), f".{last}.crc"):
        (peer.checkpoint / "commits" / name).unlink(missing_ok=True)
    before = read_table(peer.table).num_rows
    logged = len(peer.logged())
    started = time.perf_counter()
    query = peer.start(spark)
    drain(query, read_offsets(str(peer.released)))
    seconds = time.perf_counter() - started
    replays = [e for e in peer.logged()[logged:] if e["batch_id"] == last]
    if not replays:
        raise AssertionError(f"the restarted query did not replay batch {last}")
    log(f"stream restarted from its checkpoint in {seconds:.1f}s; batch {last} replayed "
        f"({replays[0]['rows']:,} rows, skipped: {replays[0]['skipped']})")
    first = next(e for e in peer.logged() if e["batch_id"] == last)
    replay = Replay(f"batch {last} ({first['rows']:,} rows)", replays[0]["skipped"], before,
                    read_table(peer.table).num_rows, txn_version(peer.table, peer.app_id),
                    seconds)
    return query, replay


def _replay_last_commit(config: PipelineConfig, epoch: int) -> Replay:
    """Run our last epoch's commit again, as a retried Airflow task would."""
    from eos.core.delta import read_table, txn_version
    from eos.core.outcomes import Outcome
    from eos.core.protocol import commit

    target = str(Path(config.root) / "target")
    before = read_table(target).num_rows
    started = time.perf_counter()
    outcome = commit(config, epoch).outcome
    seconds = time.perf_counter() - started
    return Replay(f"commit of epoch {epoch}", outcome is Outcome.ALREADY_COMMITTED, before,
                  read_table(target).num_rows, txn_version(target, config.app_id), seconds)


def _totals(result: Result, config: PipelineConfig, peer: Peer) -> None:
    """Rows the measured epochs and batches wrote (not the warm-up's), and the comparison of
    the two tables, whole."""
    measured = {b.batch_id for b in result.batches}
    written = [e for e in peer.logged()
               if e["batch_id"] in measured and e["rows"] and not e["skipped"]]
    result.eo_rows = sum(e.counts.get("output", 0) for e in result.eo)
    result.peer_rows = sum(e["rows"] for e in written)
    result.peer_appends = len(written)
    result.comparison = compare(config, str(Path(config.root) / "target"), peer.table)


def agreeing(mine: Any, theirs: Any, close: Any = None) -> Any:
    """Per row: the two values are equal (or ``close``, when given), or both are null."""
    same = pc.equal(mine, theirs) if close is None else close
    return pc.fill_null(same, pc.and_(pc.is_null(mine), pc.is_null(theirs)))


def compare(config: PipelineConfig, eo_path: str, peer_path: str) -> Comparison:
    """Windows closed in both tables, matched on group, start and end, and how many agree on
    every aggregate (avg, a double, to 1e-9 relative; approx_count_distinct is not compared:
    the two sketches differ by design)."""
    from eos.core.aggregations import aggregations_for
    from eos.core.delta import read_table

    keys = [*config.group_by, "window_start", "window_end"]
    outputs = {a.output: a.function for a in aggregations_for(config)}
    eo = read_table(eo_path).select([*keys, *outputs])
    peer = read_table(peer_path).select([*keys, *outputs])
    joined = eo.join(peer, keys, join_type="inner", right_suffix="__peer")
    agree = pa.array([True] * joined.num_rows, pa.bool_())
    for name, function in outputs.items():
        mine, theirs = joined[name], joined[f"{name}__peer"]
        if function == "approx_count_distinct":
            continue
        close = None
        if function == "avg":
            close = pc.less_equal(pc.abs(pc.subtract(mine, theirs)),
                                  pc.multiply(pc.abs(mine), 1e-9))
        agree = pc.and_(agree, agreeing(mine, theirs, close))
    return Comparison(both=joined.num_rows, equal=pc.sum(agree).as_py() or 0,
                      only_eo=eo.join(peer, keys, join_type="left anti").num_rows,
                      only_peer=peer.join(eo, keys, join_type="left anti").num_rows)


# --------------------------------------------------------------------------- the table


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def rows(result: Result) -> list[tuple[str, str, str]]:
    """(figure, exactly-once, Spark peer): every figure of the run."""
    n, epochs = result.events, result.epochs
    eo_total = sum(e.total for e in result.eo)
    stream_total = sum(result.stream)
    data = [b for b in result.batches if b.input_rows]
    eo_lat = [e.total for e in result.eo]
    triggers = [b.trigger_s for b in result.batches]
    late = sum(e.counts.get("late", 0) for e in result.eo)
    quarantined = sum(e.counts.get("quarantine", 0) for e in result.eo)
    dropped = sum(b.dropped_by_watermark for b in result.batches)
    malformed = sum(b.malformed for b in result.batches)
    c, eo_r, peer_r = result.comparison, result.eo_replay, result.peer_replay
    return [
        ("events / units of work", f"{n:,} in {epochs} epochs",
         f"{n:,} in {len(result.batches)} micro-batches ({len(data)} read data, "
         f"{len(result.batches) - len(data)} only evicted windows)"),
        ("records read", f"{sum(e.records for e in result.eo):,} (the plans' ranges)",
         f"{sum(b.input_rows for b in data):,} (the same ranges, checked batch by batch)"),
        ("start-up (s)", "- (shared Spark session)", f"{result.start_s:.2f} (query start)"),
        ("total (s)", f"{eo_total:.2f}", f"{stream_total:.2f}"),
        ("events/s", f"{n / eo_total:,.0f}", f"{n / stream_total:,.0f}"),
        ("latency per epoch, median (s)", f"{_median(eo_lat):.2f}",
         f"{_median(result.stream):.2f}"),
        ("latency per epoch, max (s)", f"{max(eo_lat):.2f}", f"{max(result.stream):.2f}"),
        ("Spark batch (triggerExecution), median / max (s)", "-",
         f"{_median(triggers):.2f} / {max(triggers):.2f}"),
        ("window rows written to Delta", f"{result.eo_rows:,} ({epochs} commits)",
         f"{result.peer_rows:,} ({result.peer_appends} appends)"),
        ("windows closed in both tables: same values", f"{c.equal:,} of {c.both:,}",
         f"closed only by EO: {c.only_eo:,}, only by the peer: {c.only_peer:,}"),
        ("late data", f"{late:,} (record, window) pairs -> late table",
         f"{dropped:,} late (key, window) rows dropped by the watermark, not stored"),
        ("malformed records", f"{quarantined:,} -> quarantine table",
         f"{malformed:,} dropped by the job's filter, not stored"),
        ("sink txn version at the end", f"{eo_r.txn} (epoch)", f"{peer_r.txn} (batch id)"),
        ("replay after a crash", _replayed(eo_r), _replayed(peer_r)),
        ("restart (s)", f"{eo_r.seconds:.2f} (commit re-run)",
         f"{peer_r.seconds:.2f} (query restart from checkpoint)"),
    ]


def _replayed(replay: Replay) -> str:
    unchanged = replay.rows_after == replay.rows_before
    if replay.skipped:
        did = "skipped"
    else:
        did = "re-run, nothing to write" if unchanged else "WRITTEN AGAIN"
    kept = "rows unchanged" if unchanged else (
        f"rows {replay.rows_before:,} -> {replay.rows_after:,}")
    return f"{replay.what}: {did}, {kept}"


GUARANTEES = (
    ("late data", "a (record, window) pair whose window ended at or before the last epoch's "
     "watermark goes to the late table, with its event time, the window and the watermark that "
     "closed it, and where it is in Kafka", "the same rule (Spark drops input to a window the "
     "watermark has passed) but the records are gone: Spark only counts the rows its state "
     "operator dropped (numRowsDroppedByWatermark), which in an aggregation come after the "
     "partial aggregates: one per late (key, window) of a batch, not one per record"),
    ("malformed input", "the parser's reason, the raw key and value and the Kafka coordinates "
     "go to the quarantine table", "the same parser marks them; a job has nowhere to put them "
     "but a second write in foreachBatch, so this one filters them out (counted here with "
     "observe())"),
    ("exactly-once sink", "every sink commit carries txn(app id, epoch), checked and written "
     "through one snapshot; the checkpoint row makes the epoch committed",
     "txn(app id, batch id) checked in foreachBatch: a replayed batch is skipped, but the batch "
     "id is only as durable as the checkpoint directory (lose it, and ids restart at 0: every "
     "new batch up to the old txn version is silently skipped unless the app id is changed, "
     "as the Delta docs advise)"),
    ("restart", "any phase re-runs anywhere: plans, open windows, watermarks and offsets are "
     "Delta tables, and an epoch's rows are a pure function of its plan and the previous state",
     "the checkpointLocation (offset log, commit log, state store files) on the same file "
     "system; only the last batch is replayed, and the checkpoint is tied to the query's plan"),
)


NOTES = (
    "latency: from when a system may start on an epoch's records (eos: begin, right after "
    "they are produced; the stream: when the bench releases the same offsets, after our epoch) "
    "to the epoch's closed windows committed in Delta (eos: commit returned; the stream: "
    "processAllAvailable returned, after the data batch, the eviction batch and Spark's commit "
    "log); total = the sum over epochs, without the warm-up epoch and the query start",
    "the two never run at once: the stream idles while our epoch runs (its trigger loop and "
    "source runner polling the released offsets: about a tenth of a core, measured), and our "
    "pipeline does nothing while the stream runs",
)


def render(result: Result, markdown: bool = False) -> str:
    """One table with both systems' figures, how they were measured, then what each one
    guarantees."""
    head = (f"Exactly-once (eos) vs a Spark Structured Streaming peer: {result.events:,} events, "
            f"{result.epochs} epochs, one run")
    table = [("figure", "exactly-once (eos)", "Spark Structured Streaming peer"), *rows(result)]
    if markdown:
        lines = [f"### {head}", "", "| " + " | ".join(table[0]) + " |", "| --- | --- | --- |"]
        lines += ["| " + " | ".join(row) + " |" for row in table[1:]]
    else:
        widths = [max(len(row[i]) for row in table) for i in range(3)]
        lines = [head, ""] + ["  ".join(cell.ljust(w) for cell, w in zip(row, widths,
                                                                            strict=True)).rstrip()
                              for row in table]
    lines += ["", "How measured:", *[f"- {note}." for note in NOTES]]
    lines += ["", "What each guarantees:"]
    for name, ours, theirs in GUARANTEES:
        lines += [f"- {name}: eos: {ours}.", f"  {' ' * len(name)}  peer: {theirs}."]
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line


def quiet_streaming_logs(spark: Any) -> None:
    """Keep stderr for progress: the streaming engine warns about things that are expected
    here (adaptive execution is off in streaming, an idle trigger), at WARN."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: the server's logs are its own
        return
    level = jvm.org.apache.logging.log4j.Level.ERROR
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    for logger in ("org.apache.spark.sql.execution.streaming",
                   "org.apache.spark.sql.catalyst.analysis.ResolveWriteToStream",
                   "org.apache.spark.scheduler.DAGScheduler",  # "cannot cancel" at stop
                   "org.apache.spark.sql.catalyst.util.SparkStringUtils"):  # long plans
        configurator.setLevel(logger, level)


def main(argv: list[str] | None = None) -> int:
    from bench.env import environment

    p = argparse.ArgumentParser(prog="python -m bench.streaming_peer",
                                description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, help="records to measure (default 1,000,000)")
    p.add_argument("--epoch-records", type=int,
                   help=f"records per epoch (default {sc.MAX_RETAINED_EVENTS:,}, what the "
                   "embedded broker retains)")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke test: {QUICK['events']:,} events, {QUICK['epoch_records']:,} "
                   "per epoch, unless given")
    p.add_argument("--warmup-events", type=int,
                   help="records through both before measuring (default: a tenth of an epoch)")
    p.add_argument("--topic", default="bench-peer")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--workdir", type=Path, help="keep tables and checkpoint here")
    p.add_argument("--apache-kafka", action="store_true",
                   help="on Apache Kafka itself (eos broker start --apache-kafka) instead of "
                        "the embedded mock cluster")
    args = p.parse_args(argv)
    defaults = QUICK if args.quick else {"events": 1_000_000,
                                         "epoch_records": sc.MAX_RETAINED_EVENTS}
    events = args.events or defaults["events"]
    chunk = args.epoch_records or defaults["epoch_records"]
    warmup = args.warmup_events
    if warmup is None:
        warmup = QUICK["warmup"] if args.quick else chunk // 10
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    with environment(args.workdir,
                     broker_kind="apache-kafka" if args.apache_kafka else "mock") as env:
        quiet_streaming_logs(env.spark)
        for note in env.notes:
            log(note)
        log(f"broker {env.bootstrap}; {events:,} events, {chunk:,} per epoch")
        result = run(env, events, chunk, log, topic=args.topic, warmup=warmup)
    print(render(result, markdown=args.markdown), flush=True)
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
