"""Epoch N's frames on Spark: the parsed input's stats, the windows each event falls in, the late
split against wm(N-1), this epoch's partial windows merged with N-1's open ones, and the side
rows (late pairs, quarantined records). Nothing is collected here; ``write`` stages them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from eos.compute.precommit.quarantine_paths import with_path_rules
from eos.compute.precommit.read import read_parsed
from eos.compute.precommit.resume import ResumePoint, state_frame
from eos.compute.precommit.watermark import (
    NEG_INF,
    PREVIOUS_WATERMARK,
    epoch_watermark,
    previous_watermark,
)
from eos.compute.windows import END, START, WindowType, columns, window_type
from eos.core.aggregations import Aggregation, Lifts, aggregations_for, lifts_all, output_column
from eos.core.config import PipelineConfig
from eos.core.config.rows import headers_read, metadata_read
from eos.core.errors import ConfigError
from eos.core.metadata import (
    HEADER_PREFIX,
    KAFKA_HEADERS,
    KAFKA_KEY,
    KAFKA_KEY_BYTES,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    KAFKA_TIMESTAMP_TYPE,
    KAFKA_TOPIC,
    KEY_PREFIX,
)
from eos.core.phaselog import timed
from eos.core.plan import Plan
from eos.core.schema import (
    EVENT_MS,
    HEADERS,
    KAFKA_TS,
    KEY_BYTES,
    KEY_TEXT,
    OFFSET,
    PARTITION,
    RAW_KEY,
    RAW_VALUE,
    REASON,
    TOPIC,
    TS_TYPE,
    header_column,
    key_field_column,
)
from eos.core.tables import group_column
from eos.core.window_state import EVERY_ROW


@dataclass(frozen=True)
class Frames:
    """What Spark computes for epoch N, as DataFrames nobody has collected (the watermark rule
    is applied when they are staged)."""

    windows: Any  # the windows N emits and the open-window rows it stages, with final values
    side: Any  # late (record, window) pairs and quarantined records
    max_event_ms: int | None  # over every record that parsed, the filter's drops included
    filtered: int
    quarantined_bytes: int = 0  # raw key + value bytes of the records that did not parse
    watermark_ms: int = NEG_INF  # wm(N) (``epoch_watermark``)
    max_event_all_ms: int | None = None  # the max event time over epochs <= N
    read_rows: int | None = 0  # rows of the state files read (an upper bound); None: unknown
    # One pass (``eos.compute.precommit.rows``): ``windows`` holds every staged row of the
    # epoch and, as rows of kind ``FILTERED``, the records the filter dropped, which the write
    # counts instead of staging (``filtered`` is then known once the write ran); ``side`` is
    # None.
    one_pass: bool = False


@contextmanager
def epoch_frames(spark: Any, config: PipelineConfig, plan: Plan, state: ResumePoint,
                 timings: dict[str, float]) -> Iterator[Frames]:
    """Spark part: read the plan's ranges, parse, filter, assign windows, aggregate, and merge
    with the open windows of epoch N-1. The parsed input is cached while the ``with`` lasts
    (one read of Kafka for the windows and the side rows)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    # wm(N-1) travels with the records, as Flink's watermarks travel in its streams: a column
    # of the input, not a literal of the plan (``PREVIOUS_WATERMARK``).
    marks = previous_watermark(state)
    cached = read_parsed(spark, config, plan, marks).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        parsed = with_derived(F, config, with_metadata(F, config, cached, plan.topic))
        keep, stats = input_stats(F, config, parsed, timings)
        # After the stats: a record quarantined by a sink's path rule parsed, so its event
        # time counts towards the watermark as a filtered one's does.
        parsed = with_path_rules(F, config, parsed, keep, {g: F.col(g) for g in config.group_by})
        watermark, max_event = epoch_watermark(config, plan, state, stats["max_event"])
        windows = window_type(config.windows)
        pairs = window_pairs(F, windows, parsed, keep)
        late = late_split(F, windows, marks)
        partials = partial_windows(F, pairs.where(~late), list(config.group_by),
                                   aggregations_for(config))
        result, read_rows = merge_state(spark, F, config, state, partials, watermark)
        side = side_rows(F, config, parsed, pairs.where(late), plan.topic)
        yield Frames(result, side, stats["max_event"], stats["filtered"],
                     stats["bad_bytes"] or 0, watermark, max_event, read_rows)
    finally:
        cached.unpersist()


def with_metadata(F: Any, config: PipelineConfig, parsed: Any, topic: str) -> Any:
    """``parsed`` with the Kafka metadata the pipeline's filter, select and sinks read, as
    columns of their reserved names (``eos.core.metadata``); the parsed key as the struct
    ``key`` and the headers read as text as the struct ``header`` (``key.user``,
    ``header.trace_id``)."""
    sources = {KAFKA_TOPIC: topic_column(F, topic), KAFKA_PARTITION: F.col(PARTITION),
               KAFKA_OFFSET: F.col(OFFSET), KAFKA_TIMESTAMP: F.col(KAFKA_TS),
               KAFKA_TIMESTAMP_TYPE: F.col(TS_TYPE), KAFKA_KEY: F.col(KEY_TEXT),
               KAFKA_KEY_BYTES: F.col(KEY_BYTES), KAFKA_HEADERS: F.col(HEADERS)}
    for name in sorted(metadata_read(config)):
        parsed = parsed.withColumn(name, sources[name])
    if config.event.key is not None:
        parsed = parsed.withColumn(KEY_PREFIX, F.struct(
            *[F.col(key_field_column(n)).alias(n) for n in config.event.key.fields]))
    names = headers_read(config)
    if names:
        parsed = parsed.withColumn(HEADER_PREFIX, F.struct(
            *[F.col(header_column(i)).alias(n) for i, n in enumerate(names)]))
    return parsed


def topic_column(F: Any, topic: str) -> Any:
    """Each record's topic: the plan's one topic, or ("": a plan of several) the column the
    reader adds (``eos.core.schema.TOPIC``)."""
    return F.lit(topic) if topic else F.col(TOPIC)


def with_derived(F: Any, config: PipelineConfig, parsed: Any) -> Any:
    """``parsed`` with an aggregating pipeline's derived fields (its ``select``), each cast to
    the type the config gave it, on the records that parsed (null on quarantined ones)."""
    for name, ftype in config.derived.items():
        value = F.expr(config.select[name]).cast(ftype.sql.lower())
        parsed = parsed.withColumn(name, F.when(F.col(REASON).isNull(), value))
    return parsed


def keep_condition(F: Any, config: PipelineConfig) -> Any:
    """The config's filter as a Spark column; a row it keeps is one where it is true."""
    if config.event.filter is None:
        return F.lit(True)
    return F.coalesce(F.expr(config.event.filter), F.lit(False))


def input_stats(F: Any, config: PipelineConfig, parsed: Any,
                timings: dict[str, float]) -> tuple[Any, Any]:
    """The filter as a column (a row it keeps is one where it is true), and the parsed input's
    stats: its max event time, the events the filter drops, the quarantined records' bytes.
    Computing them reads and parses the input (``timings["read_parse"]``)."""
    from pyspark.errors import AnalysisException, ParseException

    try:
        keep = keep_condition(F, config)
        with timed() as took:
            bad = F.col(REASON).isNotNull()
            stats = parsed.agg(
                F.max(EVENT_MS).alias("max_event"),
                F.count(F.when(F.col(REASON).isNull() & ~keep, 1)).alias("filtered"),
                F.sum(F.when(bad, F.coalesce(F.length(RAW_KEY), F.lit(0))
                             + F.coalesce(F.length(RAW_VALUE), F.lit(0)))).alias("bad_bytes"),
            ).first()
    except (AnalysisException, ParseException) as error:
        raise ConfigError(f"event.filter {config.event.filter!r} does not run on Spark: "
                          f"{str(error).splitlines()[0]}") from None
    timings["read_parse"] = took["ms"]
    return keep, stats


def window_pairs(F: Any, windows: WindowType, parsed: Any, keep: Any) -> Any:
    """One row per (event, window) of the events that parsed and pass the filter."""
    return windows.assign(F, parsed.where(F.col(REASON).isNull()).where(keep), EVENT_MS)


def late_split(F: Any, windows: WindowType, marks: dict[str, int]) -> Any:
    """The condition that a pair is late: its window was already emitted (end <= wm(N-1)).
    Before any watermark nothing is late."""
    return windows.is_late(F, F.col(PREVIOUS_WATERMARK)) if marks else F.lit(False)


def partial_windows(F: Any, pairs: Any, group: list[str], aggs: list[Aggregation]) -> Any:
    """This epoch's partial windows (``group``, START, END, state columns) from its (event,
    window) pairs that are not late, for the window type to merge with the open rows.

    When every aggregation lifts (``Lifts``), each pair is lifted to its own state: a partial
    window of one event, merged with the others and the open rows in the window type's one
    aggregation. Aggregating the pairs first costs a shuffle more whenever open rows are merged
    (a union with them is not partitioned like the aggregate's output). Merging is associative,
    so a window type never needs one row a window."""
    if lifts_all(aggs):
        return pairs.select(*group, START, END,
                            *[e for a in aggs for e in cast(Lifts, a).lift(F)])
    return (pairs.groupBy(*columns(F, *group, START, END))
            .agg(*[e for a in aggs for e in a.partial(F)]))


def merge_state(spark: Any, F: Any, config: PipelineConfig, state: ResumePoint, partials: Any,
                watermark: int) -> tuple[Any, int | None]:
    """This epoch's partial windows merged with N-1's open windows, with final values (the
    windows N emits and the open rows it stages), and how many state rows were read. A snapshot
    merges every open window; changes need only the rows closing now."""
    group = list(config.group_by)
    aggs = aggregations_for(config)
    windows = window_type(config.windows)
    previous, read_rows = state_frame(spark, config, state,
                                      EVERY_ROW if state.snapshot else windows.reads(watermark))
    for name in group:
        previous = previous.withColumnRenamed(group_column(name), name)
    merges = [e for a in aggs for e in a.merge(F)]
    if state.snapshot:
        merged = windows.combine(F, partials.unionByName(previous), group, merges)
    else:
        merged = windows.advance(F, previous, partials, group, merges, watermark)
    result = merged.select(
        *[F.col(g).alias(group_column(g)) for g in group], START, END,
        *[F.col(name) for a in aggs for name, _ in a.state()],
        *[a.final(F).alias(output_column(a.output)) for a in aggs],
    )
    return result, read_rows


def side_rows(F: Any, config: PipelineConfig, parsed: Any, late_pairs: Any | None,
              topic: str) -> Any:
    """The rows staged beside the windows: each late (record, window) pair (none without
    windows), and each quarantined record with its raw bytes and reason; each with its
    record's coordinates (``topic``: the plan's one topic, or "" for a plan of several)."""
    group = list(config.group_by)
    quarantined = parsed.where(F.col(REASON).isNotNull()).select(
        F.lit("quarantine").alias("kind"), topic_column(F, topic).alias("topic"),
        F.col(PARTITION).alias("partition"), F.col(OFFSET).alias("offset"),
        F.col(KAFKA_TS).alias("kafka_timestamp_ms"), F.col(RAW_KEY).alias("raw_key"),
        F.col(RAW_VALUE).alias("raw_value"), F.col(REASON).alias("reason"))
    if late_pairs is None:
        return quarantined
    late_rows = late_pairs.select(
        F.lit("late").alias("kind"), *[F.col(g).alias(group_column(g)) for g in group],
        F.col(EVENT_MS).alias("event_ms"), START, END, topic_column(F, topic).alias("topic"),
        F.col(PARTITION).alias("partition"), F.col(OFFSET).alias("offset"),
        F.col(KAFKA_TS).alias("kafka_timestamp_ms"))
    return late_rows.unionByName(quarantined, allowMissingColumns=True)
