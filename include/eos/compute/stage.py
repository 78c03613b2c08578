"""Compute for ``precommit``: epoch N's rows with Spark, in the shape staged in one Delta commit.

Staged rows are a pure function of the plan and epoch N-1's committed state, so a rerun, a retry
or a zombie attempt writes the same rows: recovery never produces a different result. The
decisions (is N committed, already staged, may it be written) live in ``eos.core.protocol``.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, cast

import pyarrow as pa

from eos.compute import writers as staging_files
from eos.compute.parse import NEG_INF
from eos.compute.windows import END, START, columns, window_type
from eos.core.aggregations import (
    Aggregation,
    Lifts,
    aggregations_for,
    lifts_all,
    output_column,
)
from eos.core.checkpoints import Checkpoint
from eos.core.config import EventConfig, PipelineConfig
from eos.core.delta import scan
from eos.core.errors import ConfigError, ProtocolViolation
from eos.core.kafka import client_settings
from eos.core.layout import Tables
from eos.core.phaselog import timed
from eos.core.plan import Plan
from eos.core.schema import (
    EVENT_MS,
    KAFKA_TS,
    OFFSET,
    PARTITION,
    RAW_KEY,
    RAW_VALUE,
    REASON,
    parsed_schema,
)
from eos.core.staging import (
    BASE,
    CHANGE,
    STATE,
    WATERMARK,
    StagedFile,
    StagedFiles,
    base_of,
    rows_staged,
)
from eos.core.tables import group_column, handle, staging_schema
from eos.core.window_state import (
    EMPTY,
    EVERY_ROW,
    Chain,
    WindowRead,
    chain_of,
    read_state_file,
    snapshot_due,
)


@dataclass(frozen=True)
class EpochState:
    """What epoch N resumes from: where epoch N-1's open windows are (its chain: a snapshot
    and the changes since, ``eos.core.window_state``), its watermark, and whether N stages a
    snapshot or changes.

    The windows themselves are not read here: ``state_frame`` reads only the files the epoch
    needs (this process when they are few rows, else Spark's executors)."""

    chain: Chain  # EMPTY before epoch 0
    watermark_ms: int
    max_event_ms: int | None
    # Rows N-1 staged, every kind (add actions; a snapshot's open windows left out when N
    # stages changes): what predicts N's size. None: unknown.
    staged_rows: int | None = 0
    snapshot: bool = True  # N stages every open window (kind state), else its changes


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


def advance_watermark(previous_ms: int, max_event_ms: int | None, lateness_ms: int) -> int:
    """wm(N) = max(wm(N-1), max event time in epochs <= N - allowed lateness)."""
    if max_event_ms is None:
        return previous_ms
    return max(previous_ms, max_event_ms - lateness_ms)


def idle_watermark(previous_ms: int, clock_ms: int | None, idle_timeout_ms: int | None) -> int:
    """With an idle timeout, an epoch with no events lets the watermark follow the planned clock."""
    if clock_ms is None or idle_timeout_ms is None:
        return previous_ms
    return max(previous_ms, clock_ms - idle_timeout_ms)


def parse_records(event: EventConfig):
    """mapInArrow function: raw Kafka records -> parsed events or quarantine reasons. The parser
    is compiled on the worker (from the picklable config), once per task."""

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from eos.compute.formats import parser_for

        parser = parser_for(event)
        for batch in batches:
            yield parser.parse_batch(batch)

    return parse


def state_columns(config: PipelineConfig) -> list[str]:
    """The columns of an open window in staging: group, bounds, every aggregation's state."""
    states = [name for a in aggregations_for(config) for name, _ in a.state()]
    return [*(group_column(g) for g in config.group_by), START, END, *states]


def resume_state(config: PipelineConfig, tables: Tables,
                 previous: Checkpoint | None) -> EpochState:
    """Where epoch N-1's open windows are, and its watermark: the committed state N starts from.

    ``previous`` is N-1's checkpoint (None for epoch 0): its plan hash names N-1's staged rows,
    so no other table is asked which attempt of N-1 was committed. Only N-1's watermark row is
    read here (it names the chain's base); the open windows stay in their files for Spark."""
    if previous is None:
        return EpochState(EMPTY, NEG_INF, None)
    staging = handle(tables, tables.staging)
    mark = scan(staging, filters=[("epoch", "=", previous.epoch), ("kind", "=", WATERMARK),
                                  ("plan_hash", "=", previous.plan_hash)]).to_pylist()
    if not mark:
        raise ProtocolViolation(
            f"the state of committed epoch {previous.epoch} is missing from staging; epoch "
            f"{previous.epoch + 1} cannot resume without it"
        )
    chain = chain_of(tables, previous, base_of(mark[0]))
    snapshot = snapshot_due(previous.epoch + 1, chain, config.epoch.state_snapshot_every)
    staged = rows_staged(staging, previous.epoch)
    if staged is not None and not snapshot and chain.base == previous.epoch:
        # N-1 staged a snapshot; N stages changes: the snapshot's rows predict nothing of N's.
        staged = max(0, staged - chain.snapshot_rows)
    return EpochState(chain, mark[0]["watermark_ms"], mark[0]["max_event_ms"], staged, snapshot)


def state_frame(spark: Any, config: PipelineConfig, state: EpochState,
                read: WindowRead) -> tuple[Any, int | None]:
    """The open-window rows of N-1's chain that ``read`` selects (alive ones only), and how many
    rows the files read hold (an upper bound; None: unknown).

    Files holding at most ``spark.collect_rows`` rows (what this process would collect anyway)
    are read here with pyarrow and handed to Spark as a local relation: on Spark Connect the
    epoch's windows job took 0.60 s against 1.04 s with a ``mapInArrow`` job reading them
    (its Python workers and a task per file; docs/benchmarks-history.md, 2026-11-26). Larger
    ones are read by the executors (``staging_files.read_state``), one task per file up to the
    session's parallelism. Both read with pyarrow, never Spark's Hadoop connector, so staging
    may be on an object store."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = staging_schema(config)
    columns = state_columns(config)
    arrow = pa.schema([schema.field(c) for c in columns])
    files = state.chain.select(read)
    counts = [f.rows for f in files]
    rows = None if None in counts else sum(c or 0 for c in counts)
    filters = read.row_filters(state.watermark_ms)
    if rows is not None and rows <= config.spark.collect_rows:
        local = [read_state_file(f.uri, f.plan_hash, columns, filters).cast(arrow) for f in files]
        return local_frame(spark, pa.concat_tables([arrow.empty_table(), *local])), rows
    tasks = max(1, min(len(files), config.spark.shuffle_partitions))
    frame = (spark.range(0, len(files), 1, numPartitions=tasks)
             .mapInArrow(staging_files.read_state([(f.uri, f.plan_hash) for f in files], columns,
                                                  filters, arrow),
                         from_arrow_schema(arrow)))
    return frame, rows


def local_frame(spark: Any, table: pa.Table) -> Any:
    """``table`` as a DataFrame of ``spark`` (a local relation), every row of it.

    The chunks are combined first: classic PySpark 4.0.1's ``createDataFrame`` of an Arrow table
    whose chunks include an empty one *between* others silently drops every row after it (5 of
    12 rows from chunks of 5, 0 and 7; Spark Connect keeps all 12). A chain file that holds no
    row the epoch reads is such a chunk: that lost a closing window's rows in a chaos run in
    submit mode (docs/benchmarks-history.md, 2026-11-25 and 2026-11-26). The schema is given:
    Spark Connect cannot infer one from an empty table."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame(table.combine_chunks(), schema=from_arrow_schema(table.schema))


def _conform(schema: pa.Schema, columns: dict[str, Any], n: int) -> pa.Table:
    """A staging-schema table from the given columns; every other column null."""
    arrays = []
    for f in schema:
        value = columns.get(f.name)
        if value is None:
            arrays.append(pa.nulls(n, f.type))
        elif isinstance(value, pa.ChunkedArray | pa.Array):
            arrays.append(value.cast(f.type))
        else:
            arrays.append(pa.array(value, f.type) if isinstance(value, list) else
                          pa.array([value] * n, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


# Who plans a read's splits: this process (``planned_read``), or the ``eos_kafka`` data source.
Planner = Literal["driver", "source"]


def read_ranges(spark: Any, config: PipelineConfig, plan: Plan, parse: bool = False,
                constants: dict[str, int] | None = None,
                planner: Planner = "driver") -> Any:
    """The plan's Kafka records as a DataFrame: raw (topic, partition, offset, key, value...),
    or with ``parse`` parsed by the reader itself (``eos.compute.reader``: one Python stage, not
    two); with ``constants``, a long column each, the same value in every row.

    ``planner="driver"`` plans the splits here (``eos.compute.reader.planned_read``);
    ``"source"`` reads through the ``eos_kafka`` data source, which plans them in Python
    processes of Spark's (the benchmark's comparison, bench.read_path)."""
    from eos.compute.reader import planned_read

    options = range_options(config, plan, parse, constants)
    if planner == "source":
        return spark.read.format("eos_kafka").options(**options).load()
    return planned_read(spark, options)


def range_options(config: PipelineConfig, plan: Plan, parse: bool = False,
                  constants: dict[str, int] | None = None) -> dict[str, str]:
    """``eos_kafka``'s options for the plan's ranges."""
    import json

    from eos.compute.reader import (
        CONSTANTS_OPTION,
        PARSE_OPTION,
        event_option,
        shareable_client,
    )
    from eos.core import faults

    ranges = [{"partition": r.partition, "start": r.start, "until": r.until} for r in plan.ranges]
    # The bootstrap is resolved once, on the driver; secrets are resolved on the executors.
    bootstrap = client_settings(config.kafka.client)["bootstrap.servers"]
    shared = shareable_client(config.kafka.client)
    options = {
        "topic": plan.topic,
        "ranges": json.dumps(ranges),
        "split_records": str(config.kafka.split_records),
        "min_splits": str(config.spark.shuffle_partitions),
        "read_timeout_ms": str(config.kafka.read_timeout),
        "config": config.source_path or "",
        "client": json.dumps(shared),
        "client_in_file": json.dumps(sorted(set(config.kafka.client) - set(shared))),
        "bootstrap": bootstrap,
        "faults": json.dumps(faults.settings()),  # tests only; empty in production
    }
    if parse:
        options[PARSE_OPTION] = event_option(config.event)
    if constants:
        options[CONSTANTS_OPTION] = json.dumps(constants)
    return options


def _filter(F: Any, config: PipelineConfig) -> Any:
    """The config's filter as a Spark column; a row it keeps is one where it is true."""
    if config.event.filter is None:
        return F.lit(True)
    return F.coalesce(F.expr(config.event.filter), F.lit(False))


# wm(N-1), a column of every input row from the second epoch on (``epoch_frames``). Spark
# compiles a long literal into the generated code of the stage that filters on it, so a new
# watermark each epoch, written in the plan, compiled the windows' and the side rows' stages
# again: ~0.1 s an epoch on a warm server; a one-row broadcast join instead cost ~0.09 s
# (docs/benchmarks-history.md, 2026-11-26, second session).
PREVIOUS_WATERMARK = "__previous_watermark_ms"


@contextmanager
def epoch_frames(spark: Any, config: PipelineConfig, plan: Plan, state: EpochState,
                 timings: dict[str, float]) -> Iterator[Frames]:
    """Spark part: read the plan's ranges, parse, filter, assign windows, aggregate, and merge
    with the open windows of epoch N-1. The parsed input is cached while the ``with`` lasts
    (one read of Kafka for the windows and the side rows)."""
    from pyspark import StorageLevel
    from pyspark.errors import AnalysisException, ParseException
    from pyspark.sql import functions as F

    from eos.compute.reader import with_constants

    group = list(config.group_by)
    aggs = aggregations_for(config)
    windows = window_type(config.window)
    # wm(N-1) travels with the records, as Flink's watermarks travel in its streams: a column
    # of the input, not a literal of the plan (``PREVIOUS_WATERMARK``). Before any watermark
    # nothing is late, and the input is as an at-least-once job reads it.
    marks = {} if state.watermark_ms == NEG_INF else {PREVIOUS_WATERMARK: state.watermark_ms}
    if plan.records:
        parsed = read_ranges(spark, config, plan, parse=True, constants=marks)
    else:  # nothing to read: the same (empty) input without starting Python workers
        parsed = local_frame(spark, with_constants(parsed_schema(config.event).empty_table(),
                                                   marks))
    parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        good = parsed.where(F.col(REASON).isNull())
        try:
            keep = _filter(F, config)
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
        watermark, max_event = epoch_watermark(config, plan, state, stats["max_event"])
        # One row per (event, window); a pair is late iff its window was already emitted.
        pairs = windows.assign(F, good.where(keep), EVENT_MS)
        late = (windows.is_late(F, F.col(PREVIOUS_WATERMARK)) if marks else F.lit(False))
        partials = partial_windows(F, pairs.where(~late), group, aggs)
        # A snapshot merges every open window; changes need only the rows closing now.
        previous, read_rows = state_frame(spark, config, state,
                                          EVERY_ROW if state.snapshot else
                                          windows.reads(watermark))
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
        late_rows = pairs.where(late).select(
            F.lit("late").alias("kind"), *[F.col(g).alias(group_column(g)) for g in group],
            F.col(EVENT_MS).alias("event_ms"), START, END,
            F.col(PARTITION).alias("partition"), F.col(OFFSET).alias("offset"),
            F.col(KAFKA_TS).alias("kafka_timestamp_ms"))
        quarantined = parsed.where(F.col(REASON).isNotNull()).select(
            F.lit("quarantine").alias("kind"),
            F.col(PARTITION).alias("partition"), F.col(OFFSET).alias("offset"),
            F.col(KAFKA_TS).alias("kafka_timestamp_ms"), F.col(RAW_KEY).alias("raw_key"),
            F.col(RAW_VALUE).alias("raw_value"), F.col(REASON).alias("reason"))
        side = late_rows.unionByName(quarantined, allowMissingColumns=True)
        yield Frames(result, side, stats["max_event"], stats["filtered"],
                     stats["bad_bytes"] or 0, watermark, max_event, read_rows)
    finally:
        parsed.unpersist()


def partial_windows(F: Any, pairs: Any, group: list[str], aggs: list[Aggregation]) -> Any:
    """This epoch's partial windows (``group``, START, END, state columns) from its (event,
    window) pairs that are not late, for the window type to merge with the open rows.

    When every aggregation lifts (``Lifts``), each pair is lifted to its own state: a partial
    window of one event, merged with the others and the open rows in the window type's one
    aggregation. Aggregating the pairs first costs a shuffle more whenever open rows are merged
    (a union with them is not partitioned like the aggregate's output): the windows of a
    200k-record epoch took 0.45-0.50 s warm that way, 0.37-0.46 s lifted
    (docs/benchmarks-history.md, 2026-11-26, second session). Merging is associative, so a
    window type never needs one row a window."""
    if lifts_all(aggs):
        return pairs.select(*group, START, END,
                            *[e for a in aggs for e in cast(Lifts, a).lift(F)])
    return (pairs.groupBy(*columns(F, *group, START, END))
            .agg(*[e for a in aggs for e in a.partial(F)]))


def epoch_watermark(config: PipelineConfig, plan: Plan, state: EpochState,
                    max_event_ms: int | None) -> tuple[int, int | None]:
    """wm(N) and the max event time over epochs <= N: the watermark rule lives here, once."""
    candidates = [m for m in (state.max_event_ms, max_event_ms) if m is not None]
    max_event = max(candidates) if candidates else None
    watermark = advance_watermark(state.watermark_ms, max_event, config.window.allowed_lateness)
    if plan.records == 0:
        watermark = idle_watermark(watermark, plan.clock_ms, config.window.idle_timeout)
    return watermark, max_event


def _final_and_state_columns(config: PipelineConfig) -> tuple[list[str], list[str]]:
    """The columns an emitted window keeps (the aggregations' final values) and those an open
    one keeps (their states): both staging paths apply the emit rule with these."""
    keys = [group_column(g) for g in config.group_by]
    aggs = aggregations_for(config)
    outputs = [output_column(a.output) for a in aggs]
    # A witness (an exact sum's count) stays on an emitted window too: with a null output it
    # says the result did not fit its type, and the commit flags the window.
    witnesses = [w for a in aggs if (w := a.witness()) is not None]
    states = [c for c in state_columns(config) if c not in (*keys, START, END, *witnesses)]
    return outputs, states


def staging_frame(F: Any, config: PipelineConfig, plan: Plan, frames: Frames,
                  watermark: int, open_kind: str = STATE) -> Any:
    """Every window and side row of epoch N in the staging schema (``epoch`` aside: it is the
    partition). A window whose end is at or before wm(N) is an ``output`` row (final values),
    any other an ``open_kind`` row (an open window of a snapshot, or a change)."""
    schema = _without_epoch(staging_schema(config))
    outputs, states = _final_and_state_columns(config)
    emit = F.col(END) <= F.lit(watermark)
    columns = {"kind": F.when(emit, F.lit("output")).otherwise(F.lit(open_kind))}
    columns.update({c: F.when(emit, F.col(c)) for c in outputs})
    columns.update({c: F.when(~emit, F.col(c)) for c in states})
    windows = frames.windows.select(*[_column(F, f, columns, frames.windows.columns)
                                      for f in schema])
    side = frames.side.select(*[_column(F, f, {}, frames.side.columns) for f in schema])
    return windows.unionByName(side).withColumn("plan_hash", F.lit(plan.hash))


def collected_windows(config: PipelineConfig, plan: Plan, windows: pa.Table, watermark: int,
                      open_kind: str = STATE) -> pa.Table:
    """``staging_frame``'s window rows from the collected windows: the emit rule and the cast
    applied here, on the driver, with the same outcome row for row.

    The windows and the side rows are collected apart: two collects cost less than one of the
    union with its casts (medians over four epochs of 200k records with warm JVMs: 2.00 s
    against 2.08 s, and 2.21 against 2.61 s on a colder one; docs/benchmarks-history.md,
    2026-11-26)."""
    import pyarrow.compute as pc

    outputs, states = _final_and_state_columns(config)
    emit = pc.less_equal(windows[END], pa.scalar(watermark, pa.int64()))
    columns: dict[str, Any] = {name: windows[name] for name in windows.column_names}
    columns["plan_hash"] = plan.hash
    columns["kind"] = pc.if_else(emit, pa.scalar("output"), pa.scalar(open_kind))
    for name in outputs:  # final values for an emitted window only, state for an open one
        columns[name] = pc.if_else(emit, windows[name], pa.scalar(None, windows[name].type))
    for name in states:
        columns[name] = pc.if_else(emit, pa.scalar(None, windows[name].type), windows[name])
    return _conform(_without_epoch(staging_schema(config)), columns, windows.num_rows)


def collected_side(config: PipelineConfig, plan: Plan, side: pa.Table) -> pa.Table:
    """``staging_frame``'s side rows (late, quarantined) from the collected ones."""
    others = {name: side[name] for name in side.column_names} | {"plan_hash": plan.hash}
    return _conform(_without_epoch(staging_schema(config)), others, side.num_rows)


def _column(F: Any, field: pa.Field, given: dict[str, Any], present: list[str]) -> Any:
    from pyspark.sql.pandas.types import from_arrow_type

    value = given.get(field.name)
    if value is None:
        value = F.col(field.name) if field.name in present else F.lit(None)
    return value.cast(from_arrow_type(field.type)).alias(field.name)


def protocol_rows(config: PipelineConfig, plan: Plan, watermark: int, max_event: int | None,
                  filtered: int, state_base: int | None = None) -> pa.Table:
    """The rows of epoch N the driver writes itself: the plan's offsets, and the watermark row
    (wm(N), the max event time, the events the filter dropped, the base of N's state).
    ``staged_epoch`` takes the watermark row's presence as "the epoch is complete": it is in
    the same commit as the rest."""
    schema = _without_epoch(staging_schema(config))
    common = {"plan_hash": plan.hash}
    offsets = _conform(schema, {
        **common, "kind": "offsets",
        "partition": [r.partition for r in plan.ranges],
        "offset": [r.start for r in plan.ranges],
        "until": [r.until for r in plan.ranges],
    }, len(plan.ranges))
    mark = _conform(schema, {**common, "kind": WATERMARK, "watermark_ms": watermark,
                             "max_event_ms": max_event, "filtered": filtered,
                             BASE: plan.epoch if state_base is None else state_base}, 1)
    return pa.concat_tables([offsets, mark])


# What the driver may ever collect, whatever the prediction: an epoch whose rows are not bounded
# by this many (N-1's rows + records x windows per event) is written by the executors. 390k
# collected rows cost the driver 0.3 GiB more than the executors' write, so 1M ~0.8 GiB
# (docs/benchmarks-history.md, 2026-11-22: "small epochs staged by the driver").
COLLECT_MAX_ROWS = 1_000_000
# Quarantined records carry their raw bytes into staging: an epoch with more than this many is
# written by the executors (a row count says nothing about width).
COLLECT_RAW_BYTES = 64 * 1024 * 1024


def collects(config: PipelineConfig, plan: Plan, state: EpochState, frames: Frames) -> bool:
    """Whether epoch N is collected to the driver: N-1 staged at most ``spark.collect_rows``
    rows (the prediction: an epoch's rows are mostly windows, which change slowly from one
    epoch to the next), and N's rows are bounded by ``COLLECT_MAX_ROWS`` (the guarantee: at
    most N-1's open windows plus, per record, one row per window it falls in, a window or a
    late row, or one quarantine row) and its quarantined records are not wide. Both are known
    before Spark computes anything; a limit on the collect would cost a shuffle to one
    partition (~0.5 s measured), what collecting saves."""
    predicted = state.staged_rows
    if config.spark.collect_rows == 0 or predicted is None or frames.read_rows is None:
        return False
    if state.snapshot:  # a snapshot stages every open window again
        predicted = max(predicted, frames.read_rows)
    bound = frames.read_rows + plan.records * window_type(config.window).windows_per_event()
    return (predicted <= config.spark.collect_rows and bound <= COLLECT_MAX_ROWS
            and frames.quarantined_bytes <= COLLECT_RAW_BYTES)


def write_epoch(config: PipelineConfig, tables: Tables, plan: Plan, state: EpochState,
                frames: Frames, timings: dict[str, float]) -> StagedFiles:
    """Write epoch N's rows as files under staging: windows, state and side rows by the
    executors, or by the driver when the epoch is small (``collects``); offsets and the
    watermark row by the driver. Nothing is visible until ``staging_files.commit``.

    The driver writes its files in a thread while Spark computes: the protocol rows while
    the windows are computed, the collected windows while the side rows are: of a
    200k-record epoch's ~55-80 ms of driver writes, only the side rows' file (~10 ms) is
    still waited for (docs/benchmarks-history.md, 2026-11-26, third session). The files are
    invisible until the staging commit, so the order they are written in does not matter."""
    from pyspark.sql import functions as F

    watermark, max_event = frames.watermark_ms, frames.max_event_all_ms
    directory = staging_files.attempt_dir(plan.epoch)
    schema = _without_epoch(staging_schema(config))
    open_kind = STATE if state.snapshot else CHANGE
    on_driver = collects(config, plan, state, frames)

    def write_collected(rows: pa.Table) -> list[StagedFile]:
        return staging_files.write_collected(rows, tables.staging, directory, schema)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="eos-stage") as driver:
        protocol = driver.submit(staging_files.write_table, protocol_rows(
            config, plan, watermark, max_event, frames.filtered,
            plan.epoch if state.snapshot else state.chain.base),
            tables.staging, directory, "protocol", schema)
        with timed() as took:
            if on_driver:
                windows = driver.submit(write_collected, collected_windows(
                    config, plan, frames.windows.toArrow(), watermark, open_kind))
                side = collected_side(config, plan, frames.side.toArrow())  # meanwhile
                files = windows.result() + driver.submit(write_collected, side).result()
            else:
                files = staging_files.write_frame(
                    staging_frame(F, config, plan, frames, watermark, open_kind),
                    tables.staging, directory, schema, config.spark.shuffle_partitions)
        timings["aggregate"] = took["ms"]
        files.append(protocol.result())
    counts = {k: 0 for k in ("output", STATE, "late", "quarantine")}
    counts.update(staging_files.counts_by_kind(files))
    counts.update({"offsets": len(plan.ranges), "filtered": frames.filtered or 0})
    return StagedFiles(files, counts, watermark, "driver" if on_driver else "executors")


def _without_epoch(schema: pa.Schema) -> pa.Schema:
    """The staging schema of the files: ``epoch`` is the partition, in the paths."""
    return pa.schema([f for f in schema if f.name != "epoch"])


@dataclass(frozen=True)
class SparkStager:
    """The Spark implementation of ``eos.core.staging.Stager``: epoch N computed on ``spark``
    (a Spark Connect session, or a local one created on first use when None)."""

    spark: Any = None

    def stage(self, config: PipelineConfig, tables: Tables, plan: Plan,
              previous: Checkpoint | None, timings: dict[str, float]) -> StagedFiles:
        """Epoch N written as staging files: a pure function of the plan and epoch N-1's state
        (no clock, no randomness), so every attempt writes the same rows."""
        state = resume_state(config, tables, previous)
        with timed() as took:
            session = self.spark if self.spark is not None else _local_session(config)
        timings["spark_start"] = took["ms"]
        with epoch_frames(session, config, plan, state, timings) as frames:
            return write_epoch(config, tables, plan, state, frames, timings)


def _local_session(config: PipelineConfig) -> Any:
    """An in-process Spark session (a JVM): imported only when a stager has none, so importing
    this module starts nothing and loads no Spark."""
    from eos.compute.session import local_session

    return local_session(config)
