"""The Kafka sink's record codec: an output row as a record key and a JSON value, and back.

Key: the group fields as compact JSON with sorted keys (none when the output has no group
fields). Value: a JSON object of the output columns in schema order, typed by the output's
schema: timestamps ISO-8601 UTC with milliseconds, dates ISO-8601 (``2026-11-27``), decimals as
exact JSON numbers, binary as base64, and the doubles JSON has no number for (±Infinity, NaN)
as the strings ``"Infinity"``, ``"-Infinity"`` and ``"NaN"``: what Spark's ``to_json`` writes
and its JSON reader (Jackson's non-numeric numbers) reads back. ``decode_value`` is the inverse
(the audit and the demo read the topic back with it).
"""

from __future__ import annotations

import base64
import json
import math
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def non_finite_text(value: float) -> str:
    """±Infinity and NaN as the JSON strings Spark's ``to_json`` writes for them."""
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


def _fragments(column: pa.ChunkedArray) -> list[str]:
    """Each value of a column as JSON text, built a column at a time (rows are many, columns
    few): timestamps ISO-8601 UTC with milliseconds, decimals with every digit, binary base64."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_timestamp(kind):
        try:  # milliseconds (outputs hold ms times); finer values keep their digits, never cut
            column = column.cast(pa.timestamp("ms", tz="UTC"))
        except pa.ArrowInvalid:
            column = column.cast(pa.timestamp("us", tz="UTC"))
        texts = pc.strftime(column, format="%Y-%m-%dT%H:%M:%SZ").to_pylist()
        return ["null" if t is None else f'"{t}"' for t in texts]
    values = column.to_pylist()
    if pa.types.is_date(kind):
        return ["null" if v is None else f'"{v.isoformat()}"' for v in values]
    if pa.types.is_decimal(kind):
        return ["null" if v is None else format(v, "f") for v in values]
    if pa.types.is_binary(kind):
        return ["null" if v is None else f'"{base64.b64encode(v).decode()}"' for v in values]
    dumps = json.JSONEncoder(allow_nan=False, ensure_ascii=False).encode
    if pa.types.is_floating(kind):
        return ["null" if v is None else dumps(v) if math.isfinite(v)
                else f'"{non_finite_text(v)}"' for v in values]
    return ["null" if v is None else dumps(v) for v in values]


def encode_values(rows: pa.Table) -> list[bytes]:
    """The record value of every output row: a JSON object of every column, in schema order."""
    prefixes = [json.dumps(name) + ":" for name in rows.schema.names]
    columns = [_fragments(rows.column(name)) for name in rows.schema.names]
    return [("{" + ",".join(p + v for p, v in zip(prefixes, values, strict=True)) + "}").encode()
            for values in zip(*columns, strict=True)] if columns else []


def encode_keys(rows: pa.Table, group: list[str]) -> list[bytes | None]:
    """The record key of every row: the group fields as compact JSON with sorted keys."""
    if not group:
        return [None] * rows.num_rows
    return list(encode_values(rows.select(sorted(group))))


def decode_value(raw: bytes, schema: pa.Schema) -> dict[str, Any]:
    """The inverse of ``encode_value``: JSON back to the Python values of the schema's types."""
    import pyarrow as pa

    doc = json.loads(raw, parse_float=Decimal)
    row: dict[str, Any] = {}
    for field in schema:
        value = doc.get(field.name)
        if value is None:
            row[field.name] = None
        elif pa.types.is_timestamp(field.type):
            row[field.name] = datetime.fromisoformat(value.replace("Z", "+00:00"))
        elif pa.types.is_date(field.type):
            row[field.name] = date.fromisoformat(value)
        elif pa.types.is_floating(field.type):
            row[field.name] = float(value)
        elif pa.types.is_decimal(field.type):
            row[field.name] = Decimal(value)
        elif pa.types.is_binary(field.type):
            row[field.name] = base64.b64decode(value)
        else:
            row[field.name] = value
    return row
