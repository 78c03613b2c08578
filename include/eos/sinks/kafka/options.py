"""A Kafka sink's options, and what of them is refused when the config loads (topic names Kafka
refuses, an Avro sink without a registry it can use)."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from eos.core.config import SchemaRegistryConfig
from eos.core.config.client import ClientSettings
from eos.sinks.kafka.markers import MARKER_SUFFIX
from eos.sinks.kafka.topics import MAX_TOPIC_NAME, check_topic_name

if TYPE_CHECKING:
    from eos.core.config import PipelineConfig

DEFAULT_MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's and Kafka's default record limit
DEFAULT_TRANSACTIONAL_ID_PREFIX = "eos"  # the ids of every sink before the prefix was settable
MAX_PREFIX = 64
_PREFIX = re.compile(r"[A-Za-z0-9._-]+")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def transactional_id(prefix: str, pipeline: str, sink: str) -> str:
    """``<prefix>:<pipeline>:<sink name>``: the broker fences older producers by this id."""
    return f"{prefix}:{pipeline}:{sink}"


def expanded_prefix(value: str, key: str) -> str:
    """``value`` with each ``${VAR}`` read from the environment, checked: letters, digits,
    ``.``, ``_``, ``-`` (``:`` separates the id's parts), 1 to ``MAX_PREFIX`` characters. A
    ``ValueError`` naming ``key`` otherwise (the config does not load)."""

    def lookup(match: re.Match[str]) -> str:
        if match.group(1) not in os.environ:
            raise ValueError(f"{key} refers to ${{{match.group(1)}}}, which is not set")
        return os.environ[match.group(1)]

    expanded = _ENV_REF.sub(lookup, value)
    if not _PREFIX.fullmatch(expanded) or len(expanded) > MAX_PREFIX:
        raise ValueError(f"{key} '{expanded[:80]}' must be 1 to {MAX_PREFIX} letters, digits, "
                         "'.', '_' or '-'")
    return expanded


# Header names eos writes on every record (``KafkaSink._headers``); a sink may not set them.
EOS_HEADER_PREFIX = "eos-"


class HeadersOptions(BaseModel):
    """``headers: carry``, or ``{carry: true, set: {NAME: COLUMN}}``: the record headers a
    sink of rows adds to eos's own (``eos-pipeline``, ``eos-epoch``, ...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    carry: bool = Field(
        default=False,
        description="Copy every header of the row's source record, in its order (a name may "
                    "repeat); the rows then hold them as kafka_headers, in every sink.")
    set: dict[str, str] = Field(
        default_factory=dict,
        description="Header name -> a string or binary column of the rows, or a Spark SQL "
                    "expression over what a select reads: its value, UTF-8 for a string "
                    "(null: a header with a null value).")

    @field_validator("set")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, column in value.items():
            if not name or name.lower().startswith(EOS_HEADER_PREFIX):
                raise ValueError(f"headers.set: header name {name!r} must be non-empty and not "
                                 f"start with '{EOS_HEADER_PREFIX}' (eos's own headers)")
            if not isinstance(column, str) or not column:
                raise ValueError(f"headers.set.{name}: name a column of the rows or write an "
                                 "expression")
        return value


def _headers_option(value: object) -> object:
    return {"carry": True} if value == "carry" else value


class KafkaSinkOptions(BaseModel):
    """``{kafka: TOPIC}`` or ``{kafka: {topic: T, marker_topic: M, partitions: P, client: {},
    format: json|avro, schema_registry: {...}, transactional_id_prefix: P}}``. ``marker_topic``:
    where this sink's markers live, exclusive to this sink (default
    ``<topic>.eos-markers.<pipeline>``, see ``eos.sinks.kafka.markers``). ``format: avro``:
    values in the Schema Registry wire format (``eos.sinks.kafka.avro``), registered with
    ``schema_registry``, else the event's. ``transactional_id_prefix``: the first part of the
    sink's transactional id ``<prefix>:<pipeline>:<sink>`` (``${VAR}`` read from the
    environment when the config loads); ``previous_transactional_id_prefix``: the prefix the
    sink committed under before, whose open transaction the next commit aborts (see
    ``eos.sinks.kafka.transactional_ids``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    topic: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$",
                       description="The topic the output's records are published to.")
    marker_topic: str | None = Field(
        default=None, min_length=1, pattern=r"^[A-Za-z0-9._-]+$",
        description="Where this sink's epoch markers live (partition 0, compacted), this "
                    "sink's alone; default <topic>.eos-markers.<pipeline>.")
    partitions: int | None = Field(default=None, gt=0,  # when the sink creates the topic
                                   description="Partitions of the topic if the sink creates it.")
    client: ClientSettings = Field(
        default_factory=dict,
        description="Extra librdkafka settings of the producer (message.max.bytes included); "
                    "`${VAR}` values are read from the environment.")
    format: Literal["json", "avro"] = Field(
        default="json",
        description="json: each value a JSON object of the output's columns. avro: the Schema "
                    "Registry wire format, the value schema registered under <topic>-value.")
    schema_registry: SchemaRegistryConfig | None = Field(
        default=None,
        description="format avro: the registry to register with ({url, auth_env, timeout}, "
                    "as event.schema_registry, auth_env only); default: the event's.")
    transactional_id_prefix: str = Field(
        default=DEFAULT_TRANSACTIONAL_ID_PREFIX,
        description="The first part of the sink's transactional id <prefix>:<pipeline>:<sink>; "
                    "`${VAR}` is read from the environment, so one file serves several "
                    "deployments.")
    key: str | None = Field(
        default=None, min_length=1,
        description="Rows only: a column of the rows (string or binary), or a Spark SQL "
                    "expression over what a select reads, whose value is each record's key "
                    "(UTF-8 for a string; null: no key). Records of one key go to one "
                    "partition in their source offsets' order. Unset: no key.")
    headers: HeadersOptions | None = Field(
        default=None,
        description="Rows only: `carry` (copy the source record's headers) and/or `set: {NAME: "
                    "COLUMN}` (a header per string or binary column), besides eos's own "
                    "eos-* headers.")
    previous_transactional_id_prefix: str | None = Field(
        default=None,
        description="The prefix the sink committed under before a change: its open transaction "
                    "is aborted and its producers fenced at every fenced step while set.")

    @field_validator("headers", mode="before")
    @classmethod
    def _carry_shorthand(cls, value: object) -> object:
        return _headers_option(value)

    def record_sources(self) -> dict[str, str]:
        """What a record takes beside the row, by role: ``key`` and ``header:<name>``, each a
        column of the rows or else an expression (``eos.core.config.rows.record_types``)."""
        return {**({"key": self.key} if self.key else {}),
                **{f"header:{name}": text
                   for name, text in (self.headers.set if self.headers else {}).items()}}

    @property
    def carries_headers(self) -> bool:
        """Whether the sink copies each row's source record headers (``headers: carry``)."""
        return self.headers is not None and self.headers.carry

    @field_validator("transactional_id_prefix", "previous_transactional_id_prefix")
    @classmethod
    def _prefix(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else expanded_prefix(value, str(info.field_name))

    @model_validator(mode="after")
    def _a_previous_prefix_differs(self) -> KafkaSinkOptions:
        if self.previous_transactional_id_prefix == self.transactional_id_prefix:
            raise ValueError("previous_transactional_id_prefix is the transactional_id_prefix "
                             f"'{self.transactional_id_prefix}': remove it")
        return self

    @model_validator(mode="after")
    def _registry_for_avro(self) -> KafkaSinkOptions:
        if self.format == "json" and self.schema_registry is not None:
            raise ValueError("a kafka sink's schema_registry is for format: avro")
        return self

    @model_validator(mode="after")
    def _topic_names(self) -> KafkaSinkOptions:
        """Names Kafka accepts, checked as far as they are known without the pipeline's name
        (the default marker topic's full name is checked by ``KafkaSink.resources``)."""
        check_topic_name(self.topic, "topic")
        if self.marker_topic is not None:
            check_topic_name(self.marker_topic, "marker_topic")
        elif len(self.topic) + len(MARKER_SUFFIX) + 2 > MAX_TOPIC_NAME:
            raise ValueError(f"topic '{self.topic[:40]}...' leaves no room for its marker topic "
                             f"'<topic>{MARKER_SUFFIX}.<pipeline>' within Kafka's "
                             f"{MAX_TOPIC_NAME} characters; name a shorter marker_topic")
        return self

    @property
    def legacy_markers(self) -> str:
        """Where version 2 kept this sink's markers (key = the pipeline name): read only, to
        migrate (see ``eos.sinks.kafka.markers``)."""
        return self.marker_topic or self.topic + MARKER_SUFFIX


def marker_topic_of(options: KafkaSinkOptions, pipeline: str) -> str:
    """The topic whose partition 0 holds this sink's markers and nothing else; a ValueError when
    the default name is longer than Kafka allows."""
    if options.marker_topic is not None:
        return options.marker_topic
    return check_topic_name(f"{options.topic}{MARKER_SUFFIX}.{pipeline}",
                            f"the marker topic of sink kafka:{options.topic}")


def registry_of(options: KafkaSinkOptions,
                config: PipelineConfig) -> SchemaRegistryConfig | None:
    """The registry an Avro sink registers with: its own, else the event's."""
    return options.schema_registry or config.event.schema_registry


def check_record_columns(options: KafkaSinkOptions, config: PipelineConfig,
                         output: str) -> None:
    """Load-time refusals of ``key`` and ``headers``: rows only; a column of the rows they
    name is a string or binary (the bytes a key or header is). One that names no column is an
    expression, checked and typed where the rows are (``eos.core.config.rows.record_types``)."""
    wanted = {**({"key": options.key} if options.key else {}),
              **{f"headers.set.{name}": column
                 for name, column in (options.headers.set if options.headers else {}).items()}}
    if not wanted and not options.carries_headers:
        return
    if output != "rows":
        raise ValueError(f"kafka sink {options.topic}: key and headers are options of a sink "
                         f"of rows (a pipeline without windows), not of '{output}'")
    types = {name: str(ftype) for name, ftype in config.row_columns.items()}
    types.update(kafka_topic="string", kafka_partition="long", kafka_offset="long",
                 epoch="long")
    for option, column in wanted.items():
        if column not in types:
            continue  # an expression: typed with the rows (``record_types``)
        if types[column] not in ("string", "binary"):
            raise ValueError(f"kafka sink {options.topic}: {option} names '{column}', of type "
                             f"{types[column]}; a key or header is a string or binary column "
                             f"(select CAST({column} AS STRING) as a column of its own)")


def check_avro(options: KafkaSinkOptions, config: PipelineConfig) -> None:
    """Load-time refusals of a ``format: avro`` sink: no registry, credentials it cannot read.
    Every output column the grammar allows has an Avro mapping (``kafka_avro.value_schema``;
    ``tests/integration/sinks/test_kafka_avro_sink.py`` maps every aggregation of every field
    type), so the
    columns are not checked here: that needs pyarrow, which the DAG file's parse must not
    import (``tests/integration/airflow/test_dags.py``)."""
    registry = registry_of(options, config)
    if registry is None:
        raise ValueError(f"kafka sink {options.topic}: format avro needs a Schema Registry: "
                         "give the sink a schema_registry {url, auth_env}, or read an Avro "
                         "event (its event.schema_registry is used)")
    if registry.connection is not None:
        raise ValueError(f"kafka sink {options.topic}: a sink reads the registry's "
                         "credentials from auth_env only (sinks run without Airflow, so not "
                         f"from connection '{registry.connection}'); give the sink a "
                         "schema_registry with auth_env")
