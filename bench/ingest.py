"""``python -m bench.ingest``: Kafka -> Delta ingestion of every valid page view, three ways side
by side in one run, on the same records (the figures: docs/benchmarks.md).

- **eos**: a stateless pipeline (no windows: one row per accepted record, its fields, a few
  derived columns and its Kafka coordinates) through the whole exactly-once epoch: plan, read,
  parse, filter, select, staging, seal, Delta commit, checkpoint; malformed records to the
  quarantine table.
- **Structured Streaming**: what a Spark user writes for the same job: a streaming query over
  the same source (``bench.streaming_peer``'s ``eos_kafka_stream``, held back to our plans'
  offsets), the same parser, the same filter and select, and ``foreachBatch`` appending each
  batch to Delta with ``txn(app id, batch id)`` (the ``txnAppId`` recipe); malformed records
  are dropped (it has nowhere to put them but a second write).
- **a bare consumer**: one confluent-kafka consumer reading the same ranges and only counting
  records: the ceiling of one process reading Kafka.
- **Spark, nothing written**: eos's own read, parse, filter and select of the same ranges
  (one projection, as its staging write runs it), evaluated into Spark's ``noop`` sink: the
  ceiling of any Spark job on this parse, eos and the peer alike.

Records are produced one epoch at a time (the embedded broker keeps ~5 MiB per partition);
each epoch then runs through eos, is released to the stream, and is read by the bare consumer.
The two tables are compared row by row at the end (every record once, the same values).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench import scenarios as sc
from bench.streaming_peer import (
    DeltaBatchWriter,
    Interleaved,
    Peer,
    agreeing,
    parsed_stream,
    quiet_streaming_logs,
    register_stream_source,
)
from eos.core.config import PipelineConfig
from eos.tools.pipelines import write_pipeline

Log = Callable[[str], None]
PARTITIONS = 8  # pageview records are ~155 bytes: ~30,000 per partition fit the mock's 5 MiB
EVENT = {
    "time": {"field": "ts", "format": "iso8601"},
    "fields": {
        "page": "string",
        "country": {"path": "user.country", "type": "string"},
        "user": {"path": "user.id", "type": "string"},
        "revenue": "decimal(12,2)",
        "duration": {"path": "duration_ms", "type": "long"},
        "referrer": {"path": "referrer", "type": "string", "optional": True},
        "ts": "string",
    },
    "filter": "revenue >= 0",
}
SELECT = {
    "page": "page",
    "country": "country",
    "user": "user",
    "revenue": "revenue",
    "slow": "duration > 10000",
    "referred": "referrer IS NOT NULL",
    "referrer": "referrer",
    "event_time": "ts",
    "kafka_timestamp": "kafka_timestamp",
}
COORDINATES = ("kafka_topic", "kafka_partition", "kafka_offset")
QUICK = {"events": 20_000, "epoch_records": 5_000, "warmup": 2_000}


def ingest_config(env: Any, topic: str, max_records: int) -> PipelineConfig:
    """The stateless pipeline both systems run (pageviews_ingest's shape)."""
    return write_pipeline(
        env.workdir / "configs", name="ingest-eo",
        kafka={"topic": topic, "read_timeout": "60s", "split_records": 250_000},
        event=EVENT, select=SELECT, group_by=None, window=None, aggregations=None,
        sinks={"rows": [{"delta": "target"}], "quarantine": [{"delta": "quarantine"}]},
        epoch={"max_records": max_records, "staging_retention": 3},
        tables={"root": str(env.workdir / "tables" / "ingest-eo")})


# --------------------------------------------------------------------------- the peer


def peer_rows(spark: Any, config: PipelineConfig, released: Path) -> Any:
    """The streaming DataFrame a Spark user writes: parse, drop malformed, filter, select, with
    the record's coordinates."""
    from pyspark.sql import functions as F

    from eos.core.schema import KAFKA_TS, OFFSET, PARTITION, REASON

    parsed = parsed_stream(spark, config, released)
    accepted = (parsed.where(F.col(REASON).isNull())
                .where(F.coalesce(F.expr(config.event.filter or "true"), F.lit(False)))
                .withColumn("kafka_timestamp", F.col(KAFKA_TS)))
    return accepted.select(
        F.lit(config.kafka.topic).alias("kafka_topic"),
        F.col(PARTITION).alias("kafka_partition"), F.col(OFFSET).alias("kafka_offset"),
        *[F.expr(SELECT[name]).cast(ftype.sql.lower()).alias(name)
          for name, ftype in config.row_columns.items()])


def peer_schema(config: PipelineConfig) -> pa.Schema:
    """Our rows table's columns without the epoch, with the batch id instead."""
    from eos.core.delta import read_table

    schema = read_table(str(Path(config.root) / "target")).schema
    return schema.remove(schema.get_field_index("epoch")).append(pa.field("batch_id", pa.int64()))


@dataclass(frozen=True)
class IngestPeer(Peer):
    """``bench.streaming_peer.Peer`` with the ingestion query: the same released-offsets gate,
    checkpoint and batch log; its table takes our rows table's columns."""

    def prepare(self) -> None:
        """Nothing yet: the table is made when our first epoch has shown the columns."""
        self.root.mkdir(parents=True, exist_ok=True)

    def start(self, spark: Any) -> Any:
        from eos.core.delta import create_table

        schema = peer_schema(self.config)
        create_table(self.table, schema)
        writer = DeltaBatchWriter(self.table, self.app_id, schema, str(self.batch_log))
        return (peer_rows(spark, self.config, self.released).writeStream
                .queryName(f"ingest-{self.config.name}").outputMode("append")
                .option("checkpointLocation", str(self.checkpoint))
                .foreachBatch(writer).start())


# --------------------------------------------------------------------------- driving it


@dataclass
class Result:
    events: int = 0
    eo: list[float] = field(default_factory=list)  # seconds per epoch, each way
    stream: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    spark_only: list[float] = field(default_factory=list)
    eo_rows: int = 0
    peer_rows: int = 0
    quarantined: int = 0
    filtered: int = 0
    same: int = 0
    only_eo: int = 0
    only_peer: int = 0


def run(env: Any, events: int, chunk: int, warmup: int, log: Log,
        topic: str = "bench-ingest") -> Result:
    """``events`` records, ``chunk`` per epoch, each epoch through eos, the stream and the bare
    consumer, after ``warmup`` records through all three that are not measured, in epochs of
    at most ``chunk`` (the first epochs pay for the query's start, JIT and the first files)."""
    sc.check_retained(chunk * 2, PARTITIONS)  # records twice the clicks' size
    config = ingest_config(env, topic, chunk)
    peer = IngestPeer(config, env.workdir / "ingest-peer")
    peer.prepare()
    register_stream_source(env.spark)
    records = sc.generator(warmup + events, keys=2000, shape="pageviews")
    both = Interleaved(env, config, peer, records)
    result = Result()
    try:
        for start in range(0, warmup, chunk):
            count = min(chunk, warmup - start)
            timing, seconds, _ = both.epoch(count)
            log(f"warm-up: {count:,} records; eos {timing.total:.2f}s, stream {seconds:.2f}s "
                f"(query start {both.start_s:.1f}s; not measured)")
        while result.events < events:
            count = min(chunk, events - result.events)
            timing, seconds, _ = both.epoch(count)
            bare = sc.bare_read(env, [both.last_plan])
            spark_only = parse_only(env.spark, config, both.last_plan)
            result.eo.append(timing.total)
            result.stream.append(seconds)
            result.bare.append(bare)
            result.spark_only.append(spark_only)
            result.events += count
            result.quarantined += timing.counts.get("quarantine", 0)
            result.filtered += timing.counts.get("filtered", 0)
            log(f"epoch {timing.epoch}: {count:,} records; eos {timing.total:.2f}s "
                f"({phases(timing)}), stream {seconds:.2f}s, bare consumer {bare:.2f}s, Spark "
                f"without a write {spark_only:.2f}s")
    finally:
        both.stop()
    _compare(result, config, peer)
    return result


def parse_only(spark: Any, config: PipelineConfig, plan: Any) -> float:
    """Seconds for Spark to read, parse, filter and select the plan's ranges as eos's staging
    write does (``eos.compute.precommit.rows``), into the ``noop`` sink: no file, no commit."""
    from eos.compute.precommit.rows import row_frames

    started = time.perf_counter()
    with row_frames(spark, config, plan, {}) as frames:
        frames.windows.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def phases(timing: sc.EpochTiming) -> str:
    """Where an eos epoch's seconds went, phase by phase (precommit's data work apart)."""
    return (f"begin {timing.begin:.2f}, read+parse {timing.read_parse:.2f}, staging write "
            f"{timing.aggregate:.2f} by {timing.written_by}, staging commit "
            f"{timing.staging_write:.2f}, other {timing.precommit_other:.2f}, commit "
            f"{timing.commit:.2f}")


def _compare(result: Result, config: PipelineConfig, peer: IngestPeer) -> None:
    """Rows of both tables matched on their coordinates; the same when every column agrees
    (null with null)."""
    import pyarrow.compute as pc

    from eos.core.delta import read_table

    keys, values = list(COORDINATES), list(config.row_columns)
    eo = read_table(str(Path(config.root) / "target")).select([*keys, *values])
    theirs = read_table(peer.table).select([*keys, *values])
    result.eo_rows, result.peer_rows = eo.num_rows, theirs.num_rows
    result.only_eo = eo.join(theirs, keys, join_type="left anti").num_rows
    result.only_peer = theirs.join(eo, keys, join_type="left anti").num_rows
    joined = eo.join(theirs, keys, join_type="inner", right_suffix="__peer")
    agree = pa.array([True] * joined.num_rows, pa.bool_())
    for name in values:
        agree = pc.and_(agree, agreeing(joined[name], joined[f"{name}__peer"]))
    result.same = pc.sum(agree).as_py() or 0


# --------------------------------------------------------------------------- the table


def _rate(events: int, seconds: list[float]) -> float:
    return events / sum(seconds) if seconds else 0.0


def render(result: Result, epoch_records: int, markdown: bool = False) -> str:
    n = result.events
    ways = (result.eo, result.stream, result.bare, result.spark_only)
    eo, stream, bare, spark_only = (_rate(n, s) for s in ways)
    med = statistics.median
    table = [
        ("figure", "eos (exactly-once)", "Structured Streaming peer", "bare consumer",
         "Spark, nothing written"),
        ("records/s", *(f"{rate:,.0f}" for rate in (eo, stream, bare, spark_only))),
        ("eos over it", "1.00x", *(f"{eo / rate:.2f}x" if rate else "-"
                                   for rate in (stream, bare, spark_only))),
        ("over the bare consumer", *(f"{rate / bare:.2f}x" if bare else "-"
                                     for rate in (eo, stream, bare, spark_only))),
        ("seconds per epoch, median (min-max)",
         *(f"{med(s):.2f} ({min(s):.2f}-{max(s):.2f})" if s else "-" for s in ways)),
        ("rows in Delta (warm-up included)", f"{result.eo_rows:,}", f"{result.peer_rows:,}",
         "- (counts only)", "- (noop sink)"),
        ("malformed records", f"{result.quarantined:,} -> quarantine table",
         "dropped (nowhere to put them)", "-", "-"),
    ]
    head = (f"Ingestion, Kafka -> Delta: {n:,} page views in {len(result.eo)} epochs of "
            f"{epoch_records:,}, one run")
    agree = (f"rows in both tables with every column equal: {result.same:,}; only in eos: "
             f"{result.only_eo:,}; only in the peer: {result.only_peer:,}; filtered out: "
             f"{result.filtered:,}")
    if markdown:
        lines = [f"### {head}", "", "| " + " | ".join(table[0]) + " |",
                 "| " + " | ".join("---" for _ in table[0]) + " |",
                 *["| " + " | ".join(r) + " |" for r in table[1:]]]
    else:
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        lines = [head, "", *["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
                             .rstrip() for r in table]]
    return "\n".join([*lines, "", agree])


def main(argv: list[str] | None = None) -> int:
    from bench.env import environment

    p = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, help="records to measure (default 1,200,000)")
    p.add_argument("--epoch-records", type=int, help="records per epoch (default 100,000)")
    p.add_argument("--warmup-events", type=int, help="records before measuring (default 2 "
                   "epochs' worth: the first eos epochs and the query start are not counted)")
    p.add_argument("--quick", action="store_true", help="smoke test: 20,000 records")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--workdir", type=Path, help="keep tables and checkpoint here")
    p.add_argument("--apache-kafka", action="store_true",
                   help="on Apache Kafka itself (eos broker start --apache-kafka) instead of "
                        "the embedded mock cluster")
    args = p.parse_args(argv)
    defaults = QUICK if args.quick else {"events": 1_200_000, "epoch_records": 100_000}
    events = args.events or defaults["events"]
    chunk = args.epoch_records or defaults["epoch_records"]
    warmup = args.warmup_events if args.warmup_events is not None else (
        QUICK["warmup"] if args.quick else 2 * chunk)
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    with environment(args.workdir, topics=[f"bench-ingest:{PARTITIONS}"],
                     broker_kind="apache-kafka" if args.apache_kafka else "mock") as env:
        quiet_streaming_logs(env.spark)
        for note in env.notes:
            log(note)
        log(f"broker {env.bootstrap}; {events:,} records, {chunk:,} per epoch")
        result = run(env, events, chunk, warmup, log)
    print(render(result, chunk, markdown=args.markdown), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
