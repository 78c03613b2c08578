"""The outputs of an epoch, shaped for sinks: ``windows``, ``late`` and ``quarantine``; or,
for a pipeline without windows, ``rows`` and ``quarantine``.

Staging holds every row of an epoch in one wide schema; a sink receives, per output, a table in
that output's schema. Every sink of an output receives the same rows (Delta and Kafka alike),
except that a sink keeping one row per key (``SupportsReadBack.kept_by``: an upsert) receives
each key's last row (``eos.core.upserts``).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from eos.core.aggregations import aggregations_for, output_column
from eos.core.config import FieldType, PipelineConfig
from eos.core.limits import RAW_PREFIX_BYTES
from eos.core.metadata import KAFKA_HEADERS, KAFKA_OFFSET, KAFKA_PARTITION, KAFKA_TOPIC
from eos.core.schema import arrow_type
from eos.core.tables import ROW_HEADERS, ROW_TOPIC, TS, group_column, row_column
from eos.core.upserts import RECORD_TIMESTAMP, last_per_key

MS_TO_US = 1000
QUARANTINE_SCHEMA = pa.schema(
    [
        ("reason", pa.string()),
        ("raw_key", pa.binary()),  # the first RAW_PREFIX_BYTES of the record's key (limits)
        ("raw_value", pa.binary()),  # ... and of its value
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("kafka_timestamp", TS),
        ("epoch", pa.int64()),
        ("raw_key_bytes", pa.int64()),  # the whole key's length (null: no key)
        ("raw_value_bytes", pa.int64()),  # the whole value's length (null: a null value)
        ("raw_value_sha256", pa.string()),  # of the whole value, hex
        # The record's topic (a pipeline may read several); last, as it came last: a table
        # made before it gains it, its older rows null. Null on a window's overflow row.
        (KAFKA_TOPIC, pa.string()),
    ]
)


def _group_fields(config: PipelineConfig) -> list[tuple[str, pa.DataType]]:
    return [(g, arrow_type(config.field_types[g])) for g in config.group_by]


def windows_schema(config: PipelineConfig) -> pa.Schema:
    """docs/pipelines.md: group fields, ``window_start``, ``window_end``, the aggregations by name,
    ``epoch``. Every sink of the output (Delta and Kafka) gets these columns."""
    aggregates = [(a.output, a.output_type()) for a in aggregations_for(config)]
    return pa.schema([*_group_fields(config), ("window_start", TS), ("window_end", TS),
                      *aggregates, ("epoch", pa.int64())])


def late_schema(config: PipelineConfig) -> pa.Schema:
    """One row per late (record, window) pair: the record's group fields and event time, the
    window it missed, the watermark it was judged against, and where the record is in Kafka
    (``partition``, ``offset``, ``kafka_timestamp``, ``kafka_topic``)."""
    return pa.schema([*_group_fields(config), ("event_time", TS), ("window_start", TS),
                      ("window_end", TS), ("watermark", TS), ("partition", pa.int32()),
                      ("offset", pa.int64()), ("kafka_timestamp", TS), ("epoch", pa.int64()),
                      (KAFKA_TOPIC, pa.string())])  # last: it came last (QUARANTINE_SCHEMA)


def rows_schema(config: PipelineConfig) -> pa.Schema:
    """docs/pipelines.md, "Stateless pipelines": the selected columns, then where the row's
    record is in Kafka (``kafka_topic``, ``kafka_partition``, ``kafka_offset``: what tells a
    duplicate) and ``epoch``; and the record's headers (``kafka_headers``) when a Kafka sink
    carries them."""
    from eos.core.config.rows import carries_headers
    from eos.core.schema import HEADERS_TYPE

    return pa.schema([*[(name, arrow_type(ftype)) for name, ftype in config.row_columns.items()],
                      (KAFKA_TOPIC, pa.string()), (KAFKA_PARTITION, pa.int32()),
                      (KAFKA_OFFSET, pa.int64()), ("epoch", pa.int64()),
                      *([(KAFKA_HEADERS, HEADERS_TYPE)] if carries_headers(config) else [])])


def output_schema(config: PipelineConfig, output: str) -> pa.Schema:
    if output == "windows":
        return windows_schema(config)
    if output == "rows":
        return rows_schema(config)
    if output == "late":
        return late_schema(config)
    return QUARANTINE_SCHEMA


def _ts(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray:
    return pc.multiply(column, MS_TO_US).cast(TS)


def _epoch(epoch: int, n: int) -> pa.Array:
    return pa.array([epoch] * n, pa.int64())


def _kind(staged: pa.Table, kind: str) -> pa.Table:
    return staged.filter(pc.equal(staged["kind"], kind))


def _groups(config: PipelineConfig, rows: pa.Table) -> dict[str, pa.ChunkedArray]:
    return {g: rows[group_column(g)] for g in config.group_by}


def window_rows(config: PipelineConfig, staged: pa.Table, epoch: int) -> pa.Table:
    rows = _kind(staged, "output")
    cols = {
        **_groups(config, rows),
        "window_start": _ts(rows["window_start_ms"]),
        "window_end": _ts(rows["window_end_ms"]),
        **{a.output: rows[output_column(a.output)] for a in aggregations_for(config)},
        "epoch": _epoch(epoch, rows.num_rows),
    }
    schema = windows_schema(config)
    return pa.Table.from_arrays([cols[n] for n in schema.names], schema=schema)


def row_rows(config: PipelineConfig, staged: pa.Table, epoch: int) -> pa.Table:
    """A stateless epoch's rows, in (topic, partition, offset) order: one per accepted record
    (a Kafka sink writes them in this order, so a key's records keep their source order);
    after ``rows_schema``'s columns, the sinks' record columns (``sink_rows`` hands each to
    its sink alone) and each record's Kafka timestamp (``RECORD_TIMESTAMP``, which orders an
    upsert's rows across partitions; ``sink_rows`` hands it to no sink)."""
    rows = _kind(staged, "output").sort_by([(ROW_TOPIC, "ascending"), ("partition", "ascending"),
                                            ("offset", "ascending")])
    cols = {
        **{name: rows[row_column(name)] for name in config.row_columns},
        KAFKA_TOPIC: rows[ROW_TOPIC],
        KAFKA_PARTITION: rows["partition"],
        KAFKA_OFFSET: rows["offset"],
        "epoch": _epoch(epoch, rows.num_rows),
        **({KAFKA_HEADERS: rows[ROW_HEADERS]} if ROW_HEADERS in rows.schema.names else {}),
    }
    schema = rows_schema(config)
    table = pa.Table.from_arrays([cols[n] for n in schema.names], schema=schema)
    for name, column in config.record_columns.items():  # handed to their sink alone
        kind = arrow_type(column.type)
        staged = row_column(name)
        table = table.append_column(pa.field(name, kind), rows[staged]
                                    if staged in rows.column_names
                                    else pa.nulls(rows.num_rows, kind))
    return table.append_column(pa.field(RECORD_TIMESTAMP, TS), _ts(rows["kafka_timestamp_ms"]))


def sink_rows(config: PipelineConfig, sink: str, rows: pa.Table) -> pa.Table:
    """What ``sink`` receives of an output's rows: every column, less the record columns of
    other sinks (``PipelineConfig.record_columns``: a sink of rows gets its own, none else)
    and ``RECORD_TIMESTAMP``; of a sink keeping one row per key (``kept_by``), each key's last
    row (``eos.core.upserts.last_per_key``), so its ``check`` sees what its commit writes."""
    output, keys = _kept_by(config, sink)
    if keys:
        rows = last_per_key(rows, keys, output)
    others = [name for name, column in config.record_columns.items()
              if column.sink != sink and name in rows.column_names]
    others += [RECORD_TIMESTAMP] if RECORD_TIMESTAMP in rows.column_names else []
    return rows.drop_columns(others) if others else rows


def _kept_by(config: PipelineConfig, name: str) -> tuple[str, tuple[str, ...]]:
    """The output of the sink named ``name`` and the columns it keeps one row of (none: it
    keeps every row, or no sink has that name)."""
    from eos.core.sink import SupportsReadBack, sink_class, sink_name

    for output, spec in config.sinks.by_output():
        if sink_name(spec) == name:
            ((kind, options),) = spec.items()
            sink = sink_class(kind)(config, output, options)
            return output, sink.kept_by() if isinstance(sink, SupportsReadBack) else ()
    return "", ()


def late_rows(config: PipelineConfig, staged: pa.Table, epoch: int, watermark: int,
              topic: str = "") -> pa.Table:
    rows = _kind(staged, "late")
    n = rows.num_rows
    cols = {
        **_groups(config, rows),
        "event_time": _ts(rows["event_ms"]),
        "window_start": _ts(rows["window_start_ms"]),
        "window_end": _ts(rows["window_end_ms"]),
        "watermark": _ts(pa.array([watermark] * n, pa.int64())),
        "partition": rows["partition"],
        "offset": rows["offset"],
        "kafka_timestamp": _ts(rows["kafka_timestamp_ms"]),
        "epoch": _epoch(epoch, n),
        KAFKA_TOPIC: _topics(rows, topic),
    }
    schema = late_schema(config)
    return pa.Table.from_arrays([cols[n] for n in schema.names], schema=schema)


def _topics(rows: pa.Table, topic: str) -> pa.ChunkedArray | pa.Array:
    """Each staged row's record topic; a row staged before staging had the column (null) is of
    ``topic``, the plan's one topic ("" for a plan of several, whose rows all have theirs)."""
    if "topic" not in rows.column_names:
        return pa.array([topic or None] * rows.num_rows, pa.string())
    if not topic:
        return rows["topic"]
    return pc.fill_null(rows["topic"], topic)


def quarantine_rows(staged: pa.Table, epoch: int, topic: str = "") -> pa.Table:
    """Quarantined records as sinks receive them: bounded (``RAW_PREFIX_BYTES``), whatever the
    record's size. Staging keeps the whole bytes; an 800 KB undecodable record once made a
    quarantine record over Kafka's limit and halted the pipeline. ``topic``: the plan's one
    topic (``_topics``)."""
    rows = _kind(staged, "quarantine")
    values = rows["raw_value"].to_pylist()
    cols = {
        "reason": rows["reason"],
        "raw_key": pc.binary_slice(rows["raw_key"], 0, RAW_PREFIX_BYTES),
        "raw_value": pc.binary_slice(rows["raw_value"], 0, RAW_PREFIX_BYTES),
        "partition": rows["partition"],
        "offset": rows["offset"],
        "kafka_timestamp": _ts(rows["kafka_timestamp_ms"]),
        "epoch": _epoch(epoch, rows.num_rows),
        "raw_key_bytes": pc.cast(pc.binary_length(rows["raw_key"]), pa.int64()),
        "raw_value_bytes": pc.cast(pc.binary_length(rows["raw_value"]), pa.int64()),
        "raw_value_sha256": pa.array([None if v is None else hashlib.sha256(v).hexdigest()
                                      for v in values], pa.string()),
        KAFKA_TOPIC: _topics(rows, topic),
    }
    names = QUARANTINE_SCHEMA.names
    return pa.Table.from_arrays([cols[n] for n in names], schema=QUARANTINE_SCHEMA)


# -- overflows: exact aggregates that did not fit their type --------------------------------------

OVERFLOW = "overflow"  # how the reason of a flagged window begins


def overflow_type(function: str, ftype: FieldType) -> str:
    """The type an exact ``function`` of a ``ftype`` field did not fit, as the config's grammar
    names it: a long sum's ``long``, else the exact sum's ``decimal(38,s)`` (a decimal sum's
    own, an average's, ``decimal(38,0)`` for an average of longs)."""
    if ftype.name == "long" and function == "sum":
        return "long"
    return f"decimal(38,{ftype.scale or 0})"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def overflow_reason(output: str, function: str, field: str | None, result_type: str,
                    start_ms: int, end_ms: int) -> str:
    """The quarantine reason of a window whose exact aggregate ``output`` did not fit its type:
    the same text here and in the audit's reference (``eos.tools.audit.reference``)."""
    return (f"{OVERFLOW}: {output} = {function}({field or '*'}) does not fit {result_type} in "
            f"window [{_iso(start_ms)}, {_iso(end_ms)}): the window's {output} is null")


def overflow_rows(config: PipelineConfig, staged: pa.Table, epoch: int) -> pa.Table:
    """One quarantine row per (emitted window, aggregation) whose exact result did not fit its
    type (docs/guarantees.md): the window's value is null and this row says so, naming the window
    (reason), its group (``raw_key``: the group fields as compact JSON with sorted keys) and
    the aggregation. It has no Kafka coordinates: no one record caused it."""
    rows = _kind(staged, "output")
    found: list[dict[str, object]] = []
    for aggregation in aggregations_for(config):
        witness = aggregation.witness()
        if witness is None or rows.num_rows == 0 or witness not in rows.column_names:
            continue
        flagged = rows.filter(pc.and_(pc.is_null(rows[output_column(aggregation.output)]),
                                      pc.greater(rows[witness], 0)))
        for row in flagged.to_pylist():
            key = {g: row[group_column(g)] for g in config.group_by}
            found.append({
                "reason": overflow_reason(aggregation.output, aggregation.function,
                                          aggregation.field,
                                          overflow_type(aggregation.function,
                                                        aggregation.field_type),
                                          row["window_start_ms"], row["window_end_ms"]),
                "raw_key": json.dumps(key, sort_keys=True, separators=(",", ":"),
                                      ensure_ascii=False, default=str).encode(),
                "epoch": epoch})
    table = pa.Table.from_pylist(found, schema=QUARANTINE_SCHEMA)
    return table.set_column(
        QUARANTINE_SCHEMA.get_field_index("raw_key_bytes"), "raw_key_bytes",
        pc.cast(pc.binary_length(table["raw_key"]), pa.int64()))


def epoch_outputs(config: PipelineConfig, staged: pa.Table, epoch: int,
                  previous_watermark: int | None, topic: str = "") -> dict[str, pa.Table]:
    """Rows per output of a staged epoch. ``previous_watermark`` is wm(N-1), the watermark the
    epoch's late records were judged against (recorded in each late row); ``topic``: the
    epoch's plan's one topic ("" when it reads several), for rows staged without theirs."""
    if config.stateless:
        return {"rows": row_rows(config, staged, epoch),
                "quarantine": quarantine_rows(staged, epoch, topic)}
    return {
        "windows": window_rows(config, staged, epoch),
        "late": late_rows(config, staged, epoch,
                          previous_watermark if previous_watermark is not None else 0, topic),
        "quarantine": pa.concat_tables([quarantine_rows(staged, epoch, topic),
                                        overflow_rows(config, staged, epoch)]),
    }
