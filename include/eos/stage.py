"""Compute for ``precommit``: epoch N's rows with Spark, in the shape staged in one Delta commit.

Staged rows are a pure function of the plan and epoch N-1's committed state, so a rerun, a retry
or a zombie attempt writes the same rows: recovery never produces a different result. The
decisions (is N committed, already staged, may it be written) live in ``eos.protocol``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eos.config import PipelineConfig
from eos.errors import ProtocolViolation
from eos.events import (
    NEG_INF,
    Event,
    Rejected,
    advance_watermark,
    idle_watermark,
    parse_event,
)
from eos.kafka import client_settings
from eos.phaselog import timed
from eos.plan import Plan, plan_of
from eos.tables import DEC, STAGING_SCHEMA, Tables, read_epoch

PARSED_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("kafka_timestamp_ms", pa.int64()),
        ("key", pa.string()),
        ("event_ms", pa.int64()),
        ("value", DEC),
        ("raw_key", pa.binary()),
        ("raw_value", pa.binary()),
        ("reason", pa.string()),
    ]
)
PARSED_DDL = (
    "partition int, offset long, kafka_timestamp_ms long, key string, event_ms long, "
    "value decimal(38,9), raw_key binary, raw_value binary, reason string"
)
STATE_COLUMNS = ["key", "window_start_ms", "count", "sum", "min", "max"]


@dataclass(frozen=True)
class EpochState:
    """What epoch N resumes from: epoch N-1's open windows and its watermark."""

    windows: pa.Table
    watermark_ms: int
    max_event_ms: int | None


def spark_session(config: PipelineConfig):
    """The session for precommit; under spark-submit, submit's own settings take precedence."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(f"eos-precommit-{config.name}")
        .master(os.environ.get("EOS_SPARK_MASTER", config.spark.master))
        .config("spark.sql.shuffle.partitions", str(config.spark.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    for key, value in config.spark.conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    from eos.reader import KafkaRangeDataSource

    spark.dataSource.register(KafkaRangeDataSource)
    return spark


def parse_records(config: PipelineConfig):
    """mapInArrow function: raw Kafka records -> parsed events or quarantine reasons."""
    event = config.event

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            values = batch.column("value").to_pylist()
            stamps = batch.column("timestamp_ms").to_pylist()
            parsed = [
                parse_event(v, t, event.key, event.time, event.value, event.max_future)
                for v, t in zip(values, stamps, strict=True)
            ]
            yield _parsed_batch(batch, parsed, values)

    return parse


def _parsed_batch(batch: pa.RecordBatch, parsed: list[Event | Rejected],
                  values: list[bytes | None]) -> pa.RecordBatch:
    """Columns built one comprehension at a time: per-record appends cost as much as parsing."""
    ok = [type(p) is Event for p in parsed]
    if all(ok):
        keys = [p.key for p in parsed]
        times = [p.ts_ms for p in parsed]
        amounts = [p.value for p in parsed]
        raw_keys = raw_values = reasons = [None] * len(parsed)
    else:
        keys = [p.key if g else None for p, g in zip(parsed, ok, strict=True)]
        times = [p.ts_ms if g else None for p, g in zip(parsed, ok, strict=True)]
        amounts = [p.value if g else None for p, g in zip(parsed, ok, strict=True)]
        raw = batch.column("key").to_pylist()
        raw_keys = [None if g else k for k, g in zip(raw, ok, strict=True)]
        raw_values = [None if g else v for v, g in zip(values, ok, strict=True)]
        reasons = [None if g else p.reason for p, g in zip(parsed, ok, strict=True)]
    return pa.RecordBatch.from_arrays(
        [batch.column("partition"), batch.column("offset"), batch.column("timestamp_ms"),
         pa.array(keys, pa.string()), pa.array(times, pa.int64()),
         pa.array(amounts, PARSED_SCHEMA.field("value").type),
         pa.array(raw_keys, pa.binary()), pa.array(raw_values, pa.binary()),
         pa.array(reasons, pa.string())],
        schema=PARSED_SCHEMA,
    )


def staged_epoch(tables: Tables, epoch: int, plan_hash: str) -> pa.Table | None:
    """Epoch N's staged rows if a complete attempt for this plan is there, else None.

    One Delta commit holds the whole epoch, so the watermark row being present means every row is.
    """
    rows = read_epoch(tables.staging, epoch)
    complete = pc.and_(
        pc.and_(pc.equal(rows["kind"], "state"), pc.is_null(rows["key"])),
        pc.equal(rows["plan_hash"], plan_hash),
    )
    if not pc.any(complete).as_py():
        return None
    return rows.filter(pc.equal(rows["plan_hash"], plan_hash))


def resume_state(tables: Tables, epoch: int) -> EpochState:
    """Epoch N-1's open windows and watermark: the committed state epoch N starts from."""
    previous = epoch - 1
    if previous < 0:
        schema = pa.schema([STAGING_SCHEMA.field(c) for c in STATE_COLUMNS])
        empty = pa.Table.from_pylist([], schema=schema)
        return EpochState(empty, NEG_INF, None)
    staged = staged_epoch(tables, previous, plan_of(tables, previous).hash)
    if staged is None:
        raise ProtocolViolation(
            f"the state of committed epoch {previous} is missing from staging; epoch {epoch} "
            "cannot resume without it"
        )
    state = staged.filter(pc.equal(staged["kind"], "state"))
    mark = state.filter(pc.is_null(state["key"])).to_pylist()[0]
    windows = state.filter(pc.is_valid(state["key"])).select(STATE_COLUMNS)
    return EpochState(windows, mark["watermark_ms"], mark["max_event_ms"])


def _conform(columns: dict[str, Any], n: int) -> pa.Table:
    """A staging-schema table from the given columns; every other column null."""
    arrays = []
    for f in STAGING_SCHEMA:
        value = columns.get(f.name)
        if value is None:
            arrays.append(pa.nulls(n, f.type))
        elif isinstance(value, pa.ChunkedArray | pa.Array):
            arrays.append(value.cast(f.type))
        else:
            arrays.append(pa.array(value, f.type) if isinstance(value, list) else
                          pa.array([value] * n, f.type))
    return pa.Table.from_arrays(arrays, schema=STAGING_SCHEMA)


def read_ranges(spark: Any, config: PipelineConfig, plan: Plan, source: str = "eos_kafka") -> Any:
    """The plan's Kafka records as a DataFrame (raw: topic, partition, offset, key, value...).

    ``source`` names another registered data source taking the same options (the benchmark's
    variants)."""
    import json

    ranges = [{"partition": r.partition, "start": r.start, "until": r.until} for r in plan.ranges]
    # The bootstrap is resolved once, on the driver; secrets are resolved on the executors.
    bootstrap = client_settings(config.kafka.client)["bootstrap.servers"]
    return (
        spark.read.format(source)
        .option("topic", plan.topic)
        .option("ranges", json.dumps(ranges))
        .option("split_records", str(config.kafka.split_records))
        .option("read_timeout_ms", str(config.kafka.read_timeout))
        .option("config", config.source_path or "")
        .option("bootstrap", bootstrap)
        .load()
    )


def compute_epoch(spark: Any, config: PipelineConfig, plan: Plan, state: EpochState,
                  timings: dict[str, float]) -> tuple[pa.Table, pa.Table]:
    """Spark part: read the plan's ranges, parse, window, combine with state.

    Returns (windows with their max event time, late and quarantined records).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    size = config.window.size
    wm_prev = state.watermark_ms
    raw = read_ranges(spark, config, plan)
    parsed = raw.mapInArrow(parse_records(config), PARSED_DDL).withColumn(
        "window_start_ms", F.col("event_ms") - F.pmod(F.col("event_ms"), F.lit(size))
    )
    parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with timed() as took:
            parsed.count()
        timings["read_parse"] = took["ms"]
        # Late iff the event's window was already emitted: its end <= the previous watermark.
        is_late = F.col("window_start_ms") + F.lit(size) <= F.lit(wm_prev)
        good = parsed.where(F.col("reason").isNull())
        partials = (
            good.where(~is_late)
            .groupBy("key", "window_start_ms")
            .agg(
                F.count(F.lit(1)).alias("count"),
                F.sum("value").alias("sum"),
                F.min("value").alias("min"),
                F.max("value").alias("max"),
                F.max("event_ms").alias("max_event_ms"),
            )
        )
        previous = spark.createDataFrame(state.windows).withColumn(
            "max_event_ms", F.lit(None).cast("long")
        )
        with timed() as took:
            windows = (
                partials.unionByName(previous)
                .groupBy("key", "window_start_ms")
                .agg(
                    F.sum("count").alias("count"),
                    F.sum("sum").cast("decimal(38,9)").alias("sum"),
                    F.min("min").alias("min"),
                    F.max("max").alias("max"),
                    F.max("max_event_ms").alias("max_event_ms"),
                )
                .toArrow()
            )
        timings["aggregate"] = took["ms"]
        with timed() as took:
            side = (
                parsed.where(F.col("reason").isNotNull() | is_late)
                .withColumn(
                    "kind", F.when(F.col("reason").isNotNull(), "quarantine").otherwise("late")
                )
                .toArrow()
            )
        timings["side_rows"] = took["ms"]
    finally:
        parsed.unpersist()
    return windows, side


def build_staging_rows(config: PipelineConfig, plan: Plan, state: EpochState,
                       windows: pa.Table, side: pa.Table) -> tuple[pa.Table, int]:
    """All staged rows of epoch N and its watermark: the watermark rule lives here, once."""
    size = config.window.size
    window_max = pc.max(windows["max_event_ms"]).as_py() if windows.num_rows else None
    candidates = [m for m in (state.max_event_ms, window_max) if m is not None]
    max_event = max(candidates) if candidates else None
    watermark = advance_watermark(state.watermark_ms, max_event, config.window.allowed_lateness)
    if plan.records == 0:
        watermark = idle_watermark(watermark, plan.clock_ms, config.window.idle_timeout)
    ends = pc.add(windows["window_start_ms"], size)
    emit = pc.less_equal(ends, watermark)
    common = {"epoch": plan.epoch, "plan_hash": plan.hash}
    parts = []
    for kind, mask in (("output", emit), ("state", pc.invert(emit))):
        chosen = windows.filter(mask)
        cols = {c: chosen[c] for c in STATE_COLUMNS}
        parts.append(_conform({**common, **cols, "kind": kind}, chosen.num_rows))
    parts.append(_conform({**common, "kind": "state", "watermark_ms": watermark,
                           "max_event_ms": max_event}, 1))
    parts.append(_conform({
        **common, "kind": "offsets",
        "partition": [r.partition for r in plan.ranges],
        "offset": [r.start for r in plan.ranges],
        "until": [r.until for r in plan.ranges],
    }, len(plan.ranges)))
    side_cols = ["kind", "partition", "offset", "kafka_timestamp_ms", "key", "event_ms", "value",
                 "window_start_ms", "raw_key", "raw_value", "reason"]
    parts.append(_conform({**common, **{c: side[c] for c in side_cols}}, side.num_rows))
    rows = pa.concat_tables(parts)
    order = [("kind", "ascending"), ("key", "ascending"), ("window_start_ms", "ascending"),
             ("partition", "ascending"), ("offset", "ascending")]
    return rows.sort_by(order), watermark


def count_kinds(rows: pa.Table) -> dict[str, int]:
    counts = {k: 0 for k in ("output", "state", "late", "quarantine", "offsets")}
    for item in pc.value_counts(rows["kind"]).to_pylist():
        counts[item["values"]] = item["counts"]
    counts["state"] -= 1  # the watermark row is not a window
    return counts


def compute_staging_rows(config: PipelineConfig, tables: Tables, plan: Plan, spark: Any,
                         timings: dict[str, float]) -> tuple[pa.Table, int]:
    """Every staged row of epoch N and its watermark: a pure function of the plan and epoch
    N-1's state (no clock, no randomness), so every attempt computes the same rows."""
    state = resume_state(tables, plan.epoch)
    with timed() as took:
        session = spark or spark_session(config)
    timings["spark_start"] = took["ms"]
    windows, side = compute_epoch(session, config, plan, state, timings)
    return build_staging_rows(config, plan, state, windows, side)
