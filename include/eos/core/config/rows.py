"""What a pipeline without windows emits: one row per accepted event, its columns named by
``select`` (a Spark SQL expression each, over the declared fields and the Kafka metadata) or,
without one, every declared field; and always the record's coordinates and the epoch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from eos.core.config.values import check_name
from eos.core.metadata import COORDINATES, METADATA, SQL_TYPES

if TYPE_CHECKING:
    from eos.core.config.pipeline import PipelineConfig
    from eos.core.config.source import FieldType

# Columns every row carries whatever ``select`` says: a select column may not take them.
CARRIED = (*COORDINATES, "epoch")


def _select(value: Any) -> dict[str, str]:
    """``select: {output column: expression}``; absent or null: every declared field."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not value:
        raise ValueError("select: a mapping of output column -> Spark SQL expression, e.g. "
                         "{page: lower(page), key: kafka_key}")
    out: dict[str, str] = {}
    for name, text in value.items():
        name = check_name(str(name), "select column")
        if name.lower() in CARRIED:
            raise ValueError(f"select column '{name}': every row carries {list(CARRIED)} "
                             "already; name the column otherwise")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"select column '{name}': write a Spark SQL expression, got "
                             f"{text!r}")
        out[name] = text
    return out


_SELECT_SCHEMA = {
    "type": "object", "minProperties": 1,
    "propertyNames": {"pattern": "^[A-Za-z][A-Za-z0-9_]*$"},
    "additionalProperties": {
        "type": "string",
        "description": "A Spark SQL expression over the declared fields and the Kafka "
                       "metadata; deterministic functions only (the filter's allow-list)."},
}
Select = Annotated[dict[str, str], BeforeValidator(_select), WithJsonSchema(_SELECT_SCHEMA)]


def sql_types(config: PipelineConfig) -> dict[str, str]:
    """What a ``select`` or ``filter`` may read, with its Spark SQL type: the declared fields
    and the Kafka metadata."""
    return {**{name: spec.type.sql for name, spec in config.event.fields.items()},
            **SQL_TYPES}


def row_types(config: PipelineConfig) -> dict[str, FieldType]:
    """The columns a stateless pipeline selects, in order, with their types: each ``select``
    column typed from its expression (refused at load when it cannot be), or every declared
    field. Raises ``ValueError`` naming the column at fault."""
    if not config.select:
        return {name: spec.type for name, spec in config.event.fields.items()}
    return select_types(config)


def select_types(config: PipelineConfig) -> dict[str, FieldType]:
    """Each ``select`` column's type, from its expression (``eos.core.filters``); raises
    ``ValueError`` naming the column at fault."""
    from eos.core.config.source import FieldType
    from eos.core.filters import expression_type, filter_columns

    readable = sql_types(config)
    types: dict[str, FieldType] = {}
    for name, text in config.select.items():
        what = f"select column '{name}':"
        unknown = sorted(set(filter_columns(text, what)) - set(readable))
        if unknown:
            raise ValueError(f"{what} {text!r} uses {unknown}, which are not declared fields "
                             f"(declared: {sorted(config.event.fields)}) or Kafka metadata "
                             f"({', '.join(METADATA)})")
        types[name] = FieldType.parse(expression_type(text, what, readable), temporal=True)
        if types[name].temporal and not config.stateless:
            raise ValueError(f"{what} {text!r} is a {types[name]}: a date or timestamp column "
                             "is for a pipeline without windows (group or aggregate its "
                             "string, e.g. CAST(... AS string))")
    return types


def metadata_read(config: PipelineConfig) -> frozenset[str]:
    """The Kafka metadata a pipeline's ``filter`` and ``select`` read (what precommit exposes
    as columns, and what the reader carries beside each record when it is the key or the
    timestamp type)."""
    from eos.core.filters import filter_columns

    texts = [*([config.event.filter] if config.event.filter else []), *config.select.values()]
    return frozenset(c for text in texts for c in filter_columns(text)) & frozenset(METADATA)
