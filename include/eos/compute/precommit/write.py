"""Staging write: epoch N's windows, side rows, offsets and watermark row as files under the
staging table, by the executors or (a small epoch) by the driver. Nothing is visible until
``eos.compute.writers.commit``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from eos.compute import writers as staging_files
from eos.compute.precommit.frames import Frames
from eos.compute.precommit.resume import ResumePoint, state_columns
from eos.compute.windows import END, START, window_type
from eos.core.aggregations import aggregations_for, output_column
from eos.core.config import PipelineConfig
from eos.core.layout import Tables
from eos.core.phaselog import timed
from eos.core.plan import Plan
from eos.core.staging import (
    BASE,
    CHANGE,
    FILTERED,
    STATE,
    WATERMARK,
    StagedFile,
    StagedFiles,
    attempt_dir,
)
from eos.core.tables import group_column, staging_schema


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
    columns: dict[str, Any] = {}
    if not config.stateless:  # a stateless epoch's rows are all output rows already
        outputs, states = _final_and_state_columns(config)
        emit = F.col(END) <= F.lit(watermark)
        columns = {"kind": F.when(emit, F.lit("output")).otherwise(F.lit(open_kind))}
        columns.update({c: F.when(emit, F.col(c)) for c in outputs})
        columns.update({c: F.when(~emit, F.col(c)) for c in states})
    windows = _conformed(F, frames.windows, schema, columns)
    if frames.side is None:  # one pass: every row is in ``windows`` already
        return windows.withColumn("plan_hash", F.lit(plan.hash))
    side = _conformed(F, frames.side, schema, {})
    return windows.unionByName(side).withColumn("plan_hash", F.lit(plan.hash))


def collected_windows(config: PipelineConfig, plan: Plan, windows: pa.Table, watermark: int,
                      open_kind: str = STATE) -> pa.Table:
    """``staging_frame``'s window rows from the collected windows: the emit rule and the cast
    applied here, on the driver, with the same outcome row for row.

    The windows and the side rows are collected apart: two collects cost less than one of the
    union with its casts."""
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


def _collected_output(config: PipelineConfig, plan: Plan, frames: Frames, watermark: int,
                      open_kind: str) -> pa.Table:
    """The windows (or a stateless epoch's rows: all output rows) collected and staged."""
    if config.stateless:
        return collected_side(config, plan, frames.windows.toArrow())
    return collected_windows(config, plan, frames.windows.toArrow(), watermark, open_kind)


def collected_side(config: PipelineConfig, plan: Plan, side: pa.Table) -> pa.Table:
    """``staging_frame``'s side rows (late, quarantined) from the collected ones."""
    others = {name: side[name] for name in side.column_names} | {"plan_hash": plan.hash}
    return _conform(_without_epoch(staging_schema(config)), others, side.num_rows)


def _conformed(F: Any, frame: Any, schema: pa.Schema, given: dict[str, Any]) -> Any:
    """``frame`` with exactly ``schema``'s columns, in order, each cast to its type: a column
    of ``given``, else the frame's column of that name, else null. Without ``given`` columns,
    as one ``selectExpr`` of SQL casts: a Column built in Python costs several JVM round
    trips (``F.col``, ``cast``, ``alias``), and the staging schema has dozens of columns."""
    present = set(frame.columns)  # asks the JVM: once per frame
    if not given:
        return frame.selectExpr(*[_cast_sql(f, f.name in present) for f in schema])
    return frame.select(*[_column(F, f, given, present) for f in schema])


def _cast_sql(field: pa.Field, present: bool) -> str:
    """``CAST(<column or NULL> AS <type>) AS <column>`` for one staging column."""
    from pyspark.sql.pandas.types import from_arrow_type

    name = "`" + field.name.replace("`", "``") + "`"
    return (f"CAST({name if present else 'NULL'} AS "
            f"{from_arrow_type(field.type).simpleString()}) AS {name}")


def _column(F: Any, field: pa.Field, given: dict[str, Any], present: set[str]) -> Any:
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
        **common, "kind": "offsets", "topic": [r.topic for r in plan.ranges],
        "partition": [r.partition for r in plan.ranges],
        "offset": [r.start for r in plan.ranges],
        "until": [r.until for r in plan.ranges],
    }, len(plan.ranges))
    mark = _conform(schema, {**common, "kind": WATERMARK, "watermark_ms": watermark,
                             "max_event_ms": max_event, "filtered": filtered,
                             BASE: plan.epoch if state_base is None else state_base}, 1)
    return pa.concat_tables([offsets, mark])


# What the driver may ever collect, whatever the prediction: an epoch whose rows are not bounded
# by this many (N-1's rows + records x windows per event) is written by the executors: collected
# rows cost the driver memory (about 0.8 GiB more than the executors' write for 1M).
COLLECT_MAX_ROWS = 1_000_000
# Quarantined records carry their raw bytes into staging: an epoch with more than this many is
# written by the executors (a row count says nothing about width).
COLLECT_RAW_BYTES = 64 * 1024 * 1024


def collects(config: PipelineConfig, plan: Plan, state: ResumePoint, frames: Frames) -> bool:
    """Whether epoch N is collected to the driver: N-1 staged at most ``spark.collect_rows``
    rows (the prediction: an epoch's rows are mostly windows, which change slowly from one
    epoch to the next), and N's rows are bounded by ``COLLECT_MAX_ROWS`` (the guarantee: at
    most N-1's open windows plus, per record, one row per window it falls in, a window or a
    late row, or one quarantine row) and its quarantined records are not wide. Both are known
    before Spark computes anything; a limit on the collect would cost a shuffle to one
    partition, what collecting saves."""
    if frames.one_pass:  # the executors write it as they read it
        return False
    if config.stateless:  # one row per record at most, known before Spark computes
        return (config.spark.collect_rows > 0
                and plan.records <= min(config.spark.collect_rows, COLLECT_MAX_ROWS)
                and frames.quarantined_bytes <= COLLECT_RAW_BYTES)
    predicted = state.staged_rows
    if config.spark.collect_rows == 0 or predicted is None or frames.read_rows is None:
        return False
    if state.snapshot:  # a snapshot stages every open window again
        predicted = max(predicted, frames.read_rows)
    bound = frames.read_rows + plan.records * window_type(config.windows).windows_per_event()
    return (predicted <= config.spark.collect_rows and bound <= COLLECT_MAX_ROWS
            and frames.quarantined_bytes <= COLLECT_RAW_BYTES)


def write_epoch(config: PipelineConfig, tables: Tables, plan: Plan, state: ResumePoint,
                frames: Frames, timings: dict[str, float]) -> StagedFiles:
    """Write epoch N's rows as files under staging: windows, state and side rows by the
    executors, or by the driver when the epoch is small (``collects``); offsets and the
    watermark row by the driver. Nothing is visible until ``staging_files.commit``.

    The driver writes its files in a thread while Spark computes: the protocol rows while
    the windows are computed, the collected windows while the side rows are, so only the side
    rows' file is still waited for. The files are invisible until the staging commit, so the
    order they are written in does not matter."""
    from pyspark.sql import functions as F

    watermark, max_event = frames.watermark_ms, frames.max_event_all_ms
    directory = attempt_dir(plan.epoch)
    schema = _without_epoch(staging_schema(config))
    open_kind = STATE if state.snapshot else CHANGE
    on_driver = collects(config, plan, state, frames)

    def write_collected(rows: pa.Table) -> list[StagedFile]:
        return staging_files.write_collected(rows, tables.staging, directory, schema)

    def write_protocol(filtered: int) -> StagedFile:
        return staging_files.write_table(protocol_rows(
            config, plan, watermark, max_event, filtered,
            plan.epoch if state.snapshot else state.chain.base),
            tables.staging, directory, "protocol", schema)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="eos-stage") as driver:
        # One pass counts the filter's drops as it writes: its protocol rows come after.
        protocol = None if frames.one_pass else driver.submit(write_protocol, frames.filtered)
        skipped: dict[str, int] = {}
        with timed() as took:
            if on_driver:
                windows = driver.submit(write_collected, _collected_output(
                    config, plan, frames, watermark, open_kind))
                side = collected_side(config, plan, frames.side.toArrow())  # meanwhile
                files = windows.result() + driver.submit(write_collected, side).result()
            else:
                files, skipped = staging_files.write_frame(
                    staging_frame(F, config, plan, frames, watermark, open_kind),
                    tables.staging, directory, schema, config.spark.shuffle_partitions,
                    counted=frozenset({FILTERED}) if frames.one_pass else frozenset())
        timings["aggregate"] = took["ms"]
        filtered = skipped.get(FILTERED, 0) if frames.one_pass else frames.filtered
        files.append(protocol.result() if protocol is not None else write_protocol(filtered))
    counts = {k: 0 for k in ("output", STATE, "late", "quarantine")}
    counts.update(staging_files.counts_by_kind(files))
    counts.update({"offsets": len(plan.ranges), "filtered": filtered})
    return StagedFiles(files, counts, watermark, "driver" if on_driver else "executors")


def _without_epoch(schema: pa.Schema) -> pa.Schema:
    """The staging schema of the files: ``epoch`` is the partition, in the paths."""
    return pa.schema([f for f in schema if f.name != "epoch"])
