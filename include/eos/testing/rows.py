"""A pipeline config around one sink, and deterministic rows of its output for any epoch: what a
sink's tests hand it in place of a running pipeline (no broker, no Spark)."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from eos.core.config import PipelineConfig, parse_config
from eos.core.outputs import output_schema

__all__ = ["OUTPUTS", "contract_pipeline", "epoch_rows", "rows_identity", "schema_of",
           "with_column_type"]

OUTPUTS = ("windows", "late", "quarantine")

# A pipeline counting records per key in 10-second windows: its ``windows`` output has a string
# key, the window's bounds, a count and the epoch.
PIPELINE: dict[str, Any] = {
    "kafka": {"topic": "eos-testing"},  # never contacted: the kit calls the sink directly
    "event": {"time": {"field": "ts", "format": "epoch_ms"}, "fields": {"key": "string"}},
    "group_by": ["key"],
    "window": {"type": "tumbling", "size": "10s"},
    "aggregations": {"n": "count(*)"},
    "epoch": {"max_records": 1000, "staging_retention": 2},
}


def contract_pipeline(directory: Path, sink: dict[str, Any], output: str = "windows",
                      name: str | None = None, **sections: Any) -> PipelineConfig:
    """A pipeline whose ``output`` goes to ``sink`` (``{"delta": "target"}``) alone, its
    tables under ``directory``; ``sections`` replace whole top-level sections of it."""
    if output not in OUTPUTS:
        raise ValueError(f"output {output!r}: one of {', '.join(OUTPUTS)}")
    name = name or f"kit{uuid.uuid4().hex[:8]}"
    sinks: dict[str, list[dict[str, Any]]] = {o: [] for o in OUTPUTS}
    sinks[output] = [sink]
    data = {"name": name, **PIPELINE, "tables": {"root": str(directory / name)},
            "sinks": sinks, **sections}
    return parse_config(data, str(directory / f"{name}.yaml"))


def schema_of(config: PipelineConfig, output: str = "windows") -> pa.Schema:
    """The schema of ``output``'s rows as the protocol hands them to a sink."""
    return output_schema(config, output)


def _value(field: pa.Field, epoch: int, i: int) -> Any:
    kind = field.type
    if field.name == "epoch":
        return epoch
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return f"e{epoch}-r{i}"
    if pa.types.is_integer(kind):
        return epoch * 1000 + i
    if pa.types.is_floating(kind):
        return epoch * 1000 + i + 0.5
    if pa.types.is_boolean(kind):
        return i % 2 == 0
    if pa.types.is_timestamp(kind):
        return datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=10 * epoch + i)
    if pa.types.is_date(kind):
        return date(2024, 1, 1) + timedelta(days=epoch)
    if pa.types.is_decimal(kind):
        return Decimal(epoch * 1000 + i)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return f"e{epoch}-r{i}".encode()
    return None


def epoch_rows(config: PipelineConfig, epoch: int, n: int = 3,
               output: str = "windows") -> pa.Table:
    """``n`` rows of ``output`` for ``epoch``, each distinct from every row of every other
    epoch (a string column holds ``e<epoch>-r<i>``, an integer one ``epoch * 1000 + i``): a
    row written twice, or one of the wrong epoch, shows in ``rows_identity``."""
    schema = schema_of(config, output)
    return pa.Table.from_pylist(
        [{f.name: _value(f, epoch, i) for f in schema} for i in range(n)], schema=schema)


def _identity_columns(schema: pa.Schema) -> list[str]:
    return [f.name for f in schema
            if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            or pa.types.is_integer(f.type)]


def rows_identity(schema: pa.Schema, rows: pa.Table | list[dict[str, Any]]) -> Counter[tuple]:
    """The rows as a multiset of their string and integer columns (which every sink reads back
    exactly): equal for the same rows in any order, and counting a row written twice."""
    columns = _identity_columns(schema)
    listed = rows.to_pylist() if isinstance(rows, pa.Table) else rows
    return Counter(tuple(None if r.get(c) is None else
                         (int(r[c]) if pa.types.is_integer(schema.field(c).type) else str(r[c]))
                         for c in columns) for r in listed)


def with_column_type(rows: pa.Table, column: str, kind: pa.DataType) -> pa.Table:
    """``rows`` with ``column``'s values cast to ``kind`` (``pa.string()``: as text): rows whose
    schema conflicts with the table the sink made, for ``SinkContract.refused_rows``."""
    index = rows.schema.get_field_index(column)
    return rows.set_column(index, pa.field(column, kind, rows.schema.field(column).nullable),
                           rows[column].cast(kind))
