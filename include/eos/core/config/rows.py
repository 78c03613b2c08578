"""What a pipeline without windows emits: one row per accepted event, its columns named by
``select`` (a Spark SQL expression each, over the declared fields and the Kafka metadata) or,
without one, every declared field; and always the record's coordinates and the epoch."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from eos.core.config.values import check_name
from eos.core.metadata import (
    COORDINATES,
    HEADER_PREFIX,
    KAFKA_HEADERS,
    KEY_PREFIX,
    METADATA,
    SQL_TYPES,
    qualified,
)

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


def sql_types(config: PipelineConfig, columns: Iterable[str] = ()) -> dict[str, str]:
    """What a ``select`` or ``filter`` may read, with its Spark SQL type: the declared fields,
    the Kafka metadata, the key's declared fields (``key.<field>``) and the headers of
    ``columns`` (``header.<name>``: text)."""
    key = config.event.key
    return {**{name: spec.type.sql for name, spec in config.event.fields.items()},
            **SQL_TYPES,
            **({f"{KEY_PREFIX}.{name}": spec.type.sql for name, spec in key.fields.items()}
               if key is not None else {}),
            **{c: "STRING" for c in columns if (qualified(c) or ("",))[0] == HEADER_PREFIX}}


def row_types(config: PipelineConfig) -> dict[str, FieldType]:
    """The columns a stateless pipeline selects, in order, with their types: each ``select``
    column typed from its expression (refused at load when it cannot be), or every declared
    field. Raises ``ValueError`` naming the column at fault."""
    if carries_headers(config) and KAFKA_HEADERS in config.select:
        raise ValueError(f"select column '{KAFKA_HEADERS}': a Kafka sink carries the records' "
                         f"headers, and every row then holds them as {KAFKA_HEADERS}; name the "
                         "column otherwise")
    if not config.select:
        return {name: spec.type for name, spec in config.event.fields.items()}
    return select_types(config)


def select_types(config: PipelineConfig) -> dict[str, FieldType]:
    """Each ``select`` column's type, from its expression (``eos.core.filters``); raises
    ``ValueError`` naming the column at fault."""
    from eos.core.config.source import (
        FieldType,
        check_prefixes,
        readable_names,
        unknown_columns,
    )
    from eos.core.filters import expression_type, filter_columns

    types: dict[str, FieldType] = {}
    for name, text in config.select.items():
        what = f"select column '{name}':"
        columns = filter_columns(text, what)
        unknown = unknown_columns(config.event, columns)
        if unknown:
            raise ValueError(f"{what} {text!r} uses {unknown}, which are not "
                             f"{readable_names(config.event)}")
        check_prefixes(config.event, columns, what)
        types[name] = FieldType.parse(
            expression_type(text, what, sql_types(config, columns)), output=True)
        if types[name].temporal and not config.stateless:
            raise ValueError(f"{what} {text!r} is a {types[name]}: a date or timestamp column "
                             "is for a pipeline without windows (group or aggregate its "
                             "string, e.g. CAST(... AS string))")
        if types[name].name in ("binary", "headers") and not config.stateless:
            raise ValueError(f"{what} {text!r} is of type {types[name]}, which only a "
                             "pipeline without windows outputs")
    return types


def columns_read(config: PipelineConfig) -> frozenset[str]:
    """Every column a pipeline's ``filter`` and ``select`` read (qualified ones as
    ``key.user``, ``header.trace-id``)."""
    texts = [*([config.event.filter] if config.event.filter else []), *config.select.values()]
    if not texts:  # nothing to parse: no import of sqlglot (a quarter of a second) for it
        return frozenset()
    from eos.core.filters import filter_columns

    return frozenset(c for text in texts for c in filter_columns(text))


def metadata_read(config: PipelineConfig) -> frozenset[str]:
    """The Kafka metadata a pipeline's ``filter`` and ``select`` read (what precommit exposes
    as columns, and what the reader carries beside each record when it is the key, the
    headers or the timestamp type); ``kafka_headers`` too when a Kafka sink carries them."""
    carried = {KAFKA_HEADERS} if carries_headers(config) else set()
    return (columns_read(config) & frozenset(METADATA)) | carried


def headers_read(config: PipelineConfig) -> tuple[str, ...]:
    """The header names a pipeline reads as ``header.<name>``, sorted (the reader's text
    columns of them, in this order)."""
    return tuple(sorted(parts[1] for parts in map(qualified, columns_read(config))
                        if parts is not None and parts[0] == HEADER_PREFIX))


def carries_headers(config: PipelineConfig) -> bool:
    """Whether a sink of the rows copies each record's headers (a Kafka sink's ``headers:
    {carry: true}``): the rows then hold them as ``kafka_headers`` (``rows_schema``)."""
    if not config.stateless:
        return False
    return any(getattr(options, "carries_headers", False)
               for spec in config.sinks.rows or [] for options in spec.values())
