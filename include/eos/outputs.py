"""The three outputs of an epoch, shaped for sinks: ``windows``, ``late`` and ``quarantine``.

Staging holds every row of an epoch in one wide schema; a sink receives, per output, a table in
that output's schema. Every sink of an output receives the same rows (Delta and Kafka alike).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from eos.config import PipelineConfig
from eos.tables import DEC, TS

MS_TO_US = 1000

LATE_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("event_time", TS),
        ("value", DEC),
        ("window_start", TS),
        ("window_end", TS),
        ("watermark", TS),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("kafka_timestamp", TS),
        ("epoch", pa.int64()),
    ]
)

QUARANTINE_SCHEMA = pa.schema(
    [
        ("reason", pa.string()),
        ("raw_key", pa.binary()),
        ("raw_value", pa.binary()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("kafka_timestamp", TS),
        ("epoch", pa.int64()),
    ]
)

_AGG_TYPES = {"count": pa.int64(), "sum": DEC, "min": DEC, "max": DEC, "avg": pa.float64()}


def windows_schema(config: PipelineConfig) -> pa.Schema:
    aggregates = [(name, _AGG_TYPES[name]) for name in _AGG_TYPES if name in config.aggregations]
    return pa.schema(
        [("key", pa.string()), ("window_start", TS), ("window_end", TS), *aggregates,
         ("epoch", pa.int64())]
    )


def output_schema(config: PipelineConfig, output: str) -> pa.Schema:
    if output == "windows":
        return windows_schema(config)
    return {"late": LATE_SCHEMA, "quarantine": QUARANTINE_SCHEMA}[output]


def _ts(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.multiply(column, MS_TO_US).cast(pa.timestamp("us", tz="UTC"))


def exact_double(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Decimal -> nearest double. Arrow's direct cast scales in floating point and can be off by
    one ulp (291.14 -> 291.14000000000004); going through the decimal text rounds correctly."""
    return column.cast(pa.string()).cast(pa.float64())


def window_rows(config: PipelineConfig, staged: pa.Table, epoch: int) -> pa.Table:
    rows = staged.filter(pc.equal(staged["kind"], "output"))
    start = rows["window_start_ms"]
    cols = {
        "key": rows["key"],
        "window_start": _ts(start),
        "window_end": _ts(pc.add(start, config.window.size)),
        "count": rows["count"],
        "sum": rows["sum"],
        "min": rows["min"],
        "max": rows["max"],
        "avg": pc.divide(exact_double(rows["sum"]), rows["count"].cast(pa.float64())),
        "epoch": pa.array([epoch] * rows.num_rows, pa.int64()),
    }
    schema = windows_schema(config)
    return pa.Table.from_arrays([cols[n] for n in schema.names], schema=schema)


def late_rows(config: PipelineConfig, staged: pa.Table, epoch: int, watermark: int) -> pa.Table:
    rows = staged.filter(pc.equal(staged["kind"], "late"))
    start = rows["window_start_ms"]
    n = rows.num_rows
    cols = {
        "key": rows["key"],
        "event_time": _ts(rows["event_ms"]),
        "value": rows["value"],
        "window_start": _ts(start),
        "window_end": _ts(pc.add(start, config.window.size)),
        "watermark": _ts(pa.chunked_array([pa.array([watermark] * n, pa.int64())])),
        "partition": rows["partition"],
        "offset": rows["offset"],
        "kafka_timestamp": _ts(rows["kafka_timestamp_ms"]),
        "epoch": pa.array([epoch] * n, pa.int64()),
    }
    return pa.Table.from_arrays([cols[n] for n in LATE_SCHEMA.names], schema=LATE_SCHEMA)


def quarantine_rows(staged: pa.Table, epoch: int) -> pa.Table:
    rows = staged.filter(pc.equal(staged["kind"], "quarantine"))
    cols = {
        "reason": rows["reason"],
        "raw_key": rows["raw_key"],
        "raw_value": rows["raw_value"],
        "partition": rows["partition"],
        "offset": rows["offset"],
        "kafka_timestamp": _ts(rows["kafka_timestamp_ms"]),
        "epoch": pa.array([epoch] * rows.num_rows, pa.int64()),
    }
    names = QUARANTINE_SCHEMA.names
    return pa.Table.from_arrays([cols[n] for n in names], schema=QUARANTINE_SCHEMA)


def epoch_outputs(config: PipelineConfig, staged: pa.Table, epoch: int,
                  previous_watermark: int | None) -> dict[str, pa.Table]:
    """Rows per output of a staged epoch. ``previous_watermark`` is wm(N-1), the watermark the
    epoch's late records were judged against (recorded in each late row)."""
    return {
        "windows": window_rows(config, staged, epoch),
        "late": late_rows(config, staged, epoch,
                          previous_watermark if previous_watermark is not None else 0),
        "quarantine": quarantine_rows(staged, epoch),
    }
