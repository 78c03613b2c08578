"""How an output's Arrow columns land in PostgreSQL, and what PostgreSQL cannot take.

``column_type`` is the type ``prepare`` creates a column with. An existing table is accepted
when each output column has exactly that type, except ``numeric``: a declared ``numeric(P,S)``
(or an unconstrained ``numeric``) takes a decimal of scale ``S`` whose values fit, checked value
by value, because PostgreSQL would otherwise round a value silently or refuse it at commit.
Everything here runs in ``check``, before the seal: after it the commit must succeed.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eos.core.errors import SinkCannotTake

__all__ = ["Column", "column_type", "refuse_conflicts", "refuse_values"]


@dataclass(frozen=True)
class Column:
    """A column of an existing table, as ``information_schema.columns`` describes it."""

    name: str
    type: str  # format_type(): "numeric(12,2)", "timestamp with time zone", "text"
    nullable: bool
    has_default: bool


_SIMPLE: list[tuple[Any, str]] = [
    (pa.types.is_boolean, "boolean"),
    (pa.types.is_int8, "smallint"), (pa.types.is_int16, "smallint"),
    (pa.types.is_uint8, "smallint"), (pa.types.is_int32, "integer"),
    (pa.types.is_uint16, "integer"), (pa.types.is_int64, "bigint"),
    (pa.types.is_uint32, "bigint"), (pa.types.is_float16, "real"),
    (pa.types.is_float32, "real"), (pa.types.is_float64, "double precision"),
    (pa.types.is_string, "text"), (pa.types.is_large_string, "text"),
    (pa.types.is_binary, "bytea"), (pa.types.is_large_binary, "bytea"),
    (pa.types.is_date, "date"), (pa.types.is_timestamp, "timestamp with time zone"),
]


def column_type(field: pa.Field) -> str:
    """The PostgreSQL type of an Arrow field (as ``format_type`` spells it); ``SinkCannotTake``
    for a type with no faithful PostgreSQL counterpart (lists, structs, maps)."""
    kind = field.type
    if pa.types.is_uint64(kind):
        return "numeric(20,0)"
    if pa.types.is_decimal(kind):
        return f"numeric({kind.precision},{kind.scale})"
    for test, name in _SIMPLE:
        if test(kind):
            return name
    raise SinkCannotTake(f"column '{field.name}' has type {kind}: no PostgreSQL column type "
                         "holds it as it is")


def _numeric_args(declared: str) -> tuple[int, int] | None:
    """(P, S) of ``numeric(P,S)``; None for an unconstrained ``numeric``."""
    inside = declared[len("numeric("):-1]
    precision, _, scale = inside.partition(",")
    return int(precision), int(scale or 0)


def _accepts(field: pa.Field, declared: str) -> bool:
    wanted = column_type(field)
    if wanted == declared:
        return True
    if not (pa.types.is_decimal(field.type) and declared.startswith("numeric")):
        return False
    if declared == "numeric":
        return True
    args = _numeric_args(declared)
    return args is not None and args[1] == field.type.scale


def refuse_conflicts(table: str, schema: pa.Schema, columns: dict[str, Column],
                     upsert_keys: tuple[str, ...], unique_keys: list[tuple[str, ...]]) -> None:
    """``SinkCannotTake`` when the existing table cannot take rows of ``schema``: a missing or
    differently typed column, a column the rows leave empty that may not be, upsert keys
    without a unique constraint on exactly them."""
    for field in schema:
        column = columns.get(field.name)
        if column is None:
            raise SinkCannotTake(f"table {table} has no column '{field.name}' (the output has "
                                 f"it, type {column_type(field)}): add it (ALTER TABLE {table} "
                                 f"ADD COLUMN \"{field.name}\" {column_type(field)}), then run "
                                 "again")
        if not _accepts(field, column.type):
            raise SinkCannotTake(f"table {table}: column '{field.name}' is {column.type}, the "
                                 f"output's is {column_type(field)}")
    for column in columns.values():
        if column.name not in schema.names and not column.nullable and not column.has_default:
            raise SinkCannotTake(f"table {table}: column '{column.name}' is NOT NULL without a "
                                 "default and the output does not write it")
    if upsert_keys and tuple(sorted(upsert_keys)) not in {tuple(sorted(k)) for k in unique_keys}:
        raise SinkCannotTake(f"table {table} has no primary key or unique constraint on exactly "
                             f"the upsert keys {list(upsert_keys)}")


def refuse_values(table: str, rows: pa.Table, columns: dict[str, Column],
                  upsert_keys: tuple[str, ...]) -> None:
    """``SinkCannotTake`` for a value PostgreSQL cannot hold in its column: a NUL in text, a
    decimal beyond the column's declared precision, a timestamp finer than microseconds, an
    empty value in a NOT NULL column or a key. An epoch naming one upsert key twice is not
    refused: the sink is handed each key's last row (``eos.core.upserts``)."""
    for name in rows.column_names:
        values, column = rows.column(name), columns[name]
        if values.null_count and not column.nullable:
            raise SinkCannotTake(f"table {table}: column '{name}' is NOT NULL and the epoch "
                                 "has empty values for it")
        _refuse_column(table, name, values, column)
    if upsert_keys:
        _refuse_keys(table, rows, upsert_keys)


def _refuse_column(table: str, name: str, values: pa.ChunkedArray, column: Column) -> None:
    kind = values.type
    if (pa.types.is_string(kind) or pa.types.is_large_string(kind)) and pc.any(
            pc.match_substring(values, "\x00")).as_py():
        raise SinkCannotTake(f"table {table}: column '{name}' has text holding a NUL "
                             "character, which PostgreSQL text cannot hold")
    if pa.types.is_timestamp(kind) and kind.unit == "ns":
        try:
            values.cast(pa.timestamp("us", kind.tz), safe=True)
        except pa.ArrowInvalid:
            raise SinkCannotTake(f"table {table}: column '{name}' has timestamps finer than "
                                 "microseconds, PostgreSQL's precision") from None
    if pa.types.is_decimal(kind) and column.type.startswith("numeric("):
        precision, scale = _numeric_args(column.type) or (0, 0)
        limit = Decimal(10) ** (precision - scale)
        # copy_abs, not abs(): abs() rounds to the context's 28 digits, so a decimal(38,9)
        # value of 29 integer digits would round up to the limit and be refused
        too_big = next((v for v in values.to_pylist()
                        if v is not None and v.copy_abs() >= limit), None)
        if too_big is not None:
            raise SinkCannotTake(f"table {table}: column '{name}' is {column.type}, which "
                                 f"cannot hold {too_big}")


def _refuse_keys(table: str, rows: pa.Table, keys: tuple[str, ...]) -> None:
    """An empty key: a primary key cannot hold one, and ``ON CONFLICT`` never matches it on a
    plain unique constraint (each epoch would add another row for it)."""
    for key in keys:
        if empty := rows.column(key).null_count:
            raise SinkCannotTake(f"table {table}: upsert key '{key}' is empty in {empty} "
                                 "row(s), and an upserted table holds no row without its key; "
                                 "leave such records out (event.filter) or give them a key "
                                 "(coalesce in select)")
