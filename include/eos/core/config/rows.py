"""What a pipeline without windows emits: one row per accepted event, its columns named by
``select`` (a Spark SQL expression each, over the declared fields and the Kafka metadata) or,
without one, every declared field; and always the record's coordinates and the epoch."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
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
    from eos.core.config.fields import FieldType
    from eos.core.config.pipeline import PipelineConfig

# Columns every row carries whatever ``select`` says: a select column may not take them.
CARRIED = (*COORDINATES, "epoch")
# How a record column's name begins: no select column can (each begins with a letter).
RECORD_PREFIX = "__"


@dataclass(frozen=True)
class RecordColumn:
    """A value a sink of rows writes beside a row but not in it (a Kafka record's key or a
    header given as an expression): computed by Spark with the row, staged with it under a
    name of its own, handed to that sink alone. ``role``: ``key`` or ``header:<name>``."""

    sink: str
    role: str
    expression: str
    type: FieldType


def record_column_name(sink: str, role: str, ftype: FieldType) -> str:
    """The staged name of a sink's record column: stable while its sink, role and type stay
    (an expression may change; a new type is a new column, never a staged column retyped)."""
    digest = hashlib.sha256(f"{sink}\n{role}\n{ftype}".encode()).hexdigest()[:12]
    return f"{RECORD_PREFIX}{role.split(':', 1)[0]}_{digest}"


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
    types: dict[str, FieldType] = {}
    for name, text in config.select.items():
        what = f"select column '{name}':"
        types[name] = _expression_type(config, text, what, "which are not")
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
    texts = [*([config.event.filter] if config.event.filter else []), *config.select.values(),
             *(c.expression for c in config.record_columns.values())]
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


def record_types(config: PipelineConfig) -> dict[str, RecordColumn]:
    """Every record column of the pipeline's sinks of rows, by staged name: each key or
    header a sink gives as an expression rather than a column of the rows (a sink's options
    say which of theirs are, ``record_sources``), typed like a ``select`` column; a key or a
    header is a string or binary. Raises ``ValueError`` naming the sink and option at fault."""
    from eos.core.sink import sink_name

    if not config.stateless:
        return {}
    columns = {*config.row_columns, *CARRIED}
    found: dict[str, RecordColumn] = {}
    for spec in config.sinks.rows or []:
        ((_, options),) = spec.items()
        sources = getattr(options, "record_sources", None)
        if sources is None:
            continue
        sink = sink_name(spec)
        for role, text in sources().items():
            if text in columns:
                continue  # a column of the rows: the sink reads it from the rows themselves
            what = f"sink {sink}: {role.replace(':', ' ')}"
            ftype = _expression_type(config, text, what,
                                     "which are neither columns of the rows nor")
            if ftype.name not in ("string", "binary"):
                raise ValueError(f"{what} {text!r} is of type {ftype}; a key or a header is a "
                                 "string or binary (write CAST(... AS STRING))")
            found[record_column_name(sink, role, ftype)] = RecordColumn(sink, role, text, ftype)
    return found


def _expression_type(config: PipelineConfig, text: str, what: str,
                     unknown_are: str) -> FieldType:
    """The type of an expression over what a ``select`` reads (the declared fields, the
    Kafka metadata, ``key.<field>``, ``header.<name>``): a select column's, or a sink's key or
    header's. ``unknown_are`` says, in the refusal of a name it cannot read, what the name is
    not (``which are not``)."""
    from eos.core.config.event import check_prefixes, readable_names, unknown_columns
    from eos.core.config.fields import FieldType
    from eos.core.filters import expression_type, filter_columns

    columns = filter_columns(text, what)
    unknown = unknown_columns(config.event, columns)
    if unknown:
        raise ValueError(f"{what} {text!r} uses {unknown}, {unknown_are} "
                         f"{readable_names(config.event)}")
    check_prefixes(config.event, columns, what)
    return FieldType.parse(expression_type(text, what, sql_types(config, columns)), output=True)
