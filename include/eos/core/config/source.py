"""Where records come from and what they hold: the Kafka topic, how a record value is decoded,
its declared fields and their types, and where its event time is."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, WithJsonSchema, field_validator, model_validator

from eos.core.config.client import ClientSettings
from eos.core.config.positions import StartPosition
from eos.core.config.values import DurationMs, Strict, check_name, not_null_schema
from eos.core.metadata import HEADER_PREFIX, KEY_PREFIX, METADATA, qualified

FIELD_TYPES = ("string", "long", "double", "boolean")  # and decimal(p,s)
# Types a ``select`` column may have besides the declared ones: the Kafka metadata's raw key
# (``binary``), its headers (``headers``), and a date or a time its CAST makes (a declared field
# is parsed from the record, where a date or a time is a string or a number the select converts).
SELECT_ONLY_TYPES = ("date", "timestamp")
OUTPUT_TYPES = ("binary", "headers", *SELECT_ONLY_TYPES)
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
START_PATTERN = (r"^(earliest|latest|timestamp:(\d+|\d{4}-\d{2}-\d{2}T\S+)"
                 r"|offsets:\d+=\d+(,\d+=\d+)*)$")
TIME_FORMATS = ("epoch_ms", "epoch_s", "iso8601", "kafka_timestamp", "none")
# What an editor is told a type looks like (``eos schema``); ``FieldType.parse`` is the rule.
FIELD_TYPE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": r"^\s*(string|long|double|boolean|decimal\(\s*\d+\s*,\s*\d+\s*\))\s*$",
    "description": "string, long, double, boolean or decimal(p,s) (1 <= p <= 38, s <= p).",
}


class KafkaConfig(Strict):
    """The topics an epoch reads and how its consumer reads them (``client``: librdkafka
    settings). Exactly one of ``topic``, ``topics`` and ``pattern`` names them."""

    topic: str | None = Field(
        default=None, min_length=1,
        description="The source topic (one of `topic`, `topics`, `pattern`).")
    topics: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None, min_length=1,
        description="Several source topics, read as one input (one of `topic`, `topics`, "
                    "`pattern`). A topic added to the list later starts at its log start.")
    pattern: str | None = Field(
        default=None, json_schema_extra={"pattern": "^\\^"},
        description="A regular expression starting with `^` (librdkafka style): every topic "
                    "whose name matches, internal topics (`__...`) left out, resolved from the "
                    "broker's metadata when each epoch is planned (one of `topic`, `topics`, "
                    "`pattern`). A topic matched for the first time starts at its log start.")
    start: str = Field(
        default="earliest",
        json_schema_extra={"pattern": START_PATTERN},
        description="Where a new pipeline starts reading: `earliest` (the log start), `latest` "
                    "(the end), `timestamp:<t>` (the first record whose Kafka timestamp is at or "
                    "after t: milliseconds since 1970 or an ISO-8601 time with its zone, e.g. "
                    "`timestamp:2026-11-01T00:00:00Z`) or `offsets:<p>=<o>,...` (one offset for "
                    "every partition). Decided once, when the first epoch is planned. A "
                    "partition that appears later starts at its log start whatever this says.")
    client: ClientSettings = Field(
        default_factory=dict,
        description="Extra librdkafka settings for every client of the source. `${VAR}` in a "
                    "value is read from the environment (where the client runs, Spark "
                    "executors included); secrets belong there, not in this file.")
    read_timeout: DurationMs = Field(
        default=60_000, description="A Spark split that makes no progress this long fails.")
    @field_validator("start")
    @classmethod
    def _known_position(cls, value: str) -> str:
        return StartPosition.parse(value).describe()

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        return None if value is None else topic_pattern(value).pattern

    @field_validator("topics")
    @classmethod
    def _distinct(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError(f"kafka.topics names a topic twice: {value}")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> KafkaConfig:
        given = [k for k in ("topic", "topics", "pattern") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of kafka.topic, kafka.topics and kafka.pattern"
                             + (f" (got {', '.join(given)})" if given else ""))
        return self

    @property
    def named_topics(self) -> list[str] | None:
        """The topics the config names (``topic`` or ``topics``); None with ``pattern``."""
        return [self.topic] if self.topic is not None else self.topics

    @property
    def sole_topic(self) -> str:
        """The one topic a tool that writes to the source produces to (``eos produce``, the
        demo); ``ConfigError`` for a pipeline of several topics or a pattern."""
        if self.topic is not None:
            return self.topic
        if self.topics is not None and len(self.topics) == 1:
            return self.topics[0]
        from eos.core.errors import ConfigError

        raise ConfigError(f"this needs a pipeline of one topic, and it reads {self.describe()}")

    def describe(self) -> str:
        """``topic 'a'``, ``topics 'a', 'b'`` or ``topics matching '^a'``."""
        if self.pattern is not None:
            return f"topics matching '{self.pattern}'"
        names = self.named_topics or []
        return (f"topic '{names[0]}'" if len(names) == 1
                else "topics " + ", ".join(f"'{t}'" for t in names))

    @property
    def start_position(self) -> StartPosition:
        """``start`` as the planner uses it."""
        return StartPosition.parse(self.start)

    split_records: int = Field(
        default=250_000, gt=0,
        description="The most offsets one Spark input split reads: an epoch's ranges are "
                    "packed into max(spark.shuffle_partitions, records / split_records) splits.")


def topic_pattern(text: str) -> re.Pattern[str]:
    """``kafka.pattern`` compiled; a ``ValueError`` naming it when it is not a regular expression
    starting with ``^``."""
    if not text.startswith("^"):
        raise ValueError(f"kafka.pattern '{text}' must start with '^' (a librdkafka-style "
                         "topic regex)")
    try:
        return re.compile(text)
    except re.error as error:
        raise ValueError(f"kafka.pattern '{text}' is not a regular expression: {error}") from None


class FieldType(Strict):
    """A declared type: ``string | long | double | boolean | decimal(p,s)``; a ``select``
    column may also be a ``date`` or a ``timestamp`` (Spark's TIMESTAMP: an instant, shown in
    UTC, the session's time zone)."""

    name: str
    precision: int | None = None
    scale: int | None = None

    @classmethod
    def parse(cls, text: Any, output: bool = False) -> FieldType:
        """A declared type; with ``output``, a select column's (``OUTPUT_TYPES`` too)."""
        if not isinstance(text, str):
            raise ValueError(f"a type is one of {FIELD_TYPES} or decimal(p,s), got {text!r}")
        text = text.strip().lower()
        if output and text in OUTPUT_TYPES:
            return cls(name=text)
        match = _DECIMAL.match(text)
        if match:
            precision, scale = int(match.group(1)), int(match.group(2))
            if not 1 <= precision <= 38 or scale > precision:
                raise ValueError(f"{text}: need 1 <= p <= 38 and s <= p")
            return cls(name="decimal", precision=precision, scale=scale)
        if text not in FIELD_TYPES:
            # ``{value: decimal(38,9)}`` in a flow mapping splits at the comma into
            # ``decimal(38`` and a key ``9)``: the type looks cut, say how to keep it whole.
            cut = (f"; it looks cut at a comma: quote the type, e.g. \"{text},s)\" — in a "
                   "{...} mapping YAML splits an unquoted decimal(p,s) at its comma"
                   if text.startswith("decimal(") and "," not in text else "")
            raise ValueError(f"unknown type '{text}': use one of {FIELD_TYPES} or "
                             f"decimal(p,s){cut}")
        return cls(name=text)

    def __str__(self) -> str:
        return f"decimal({self.precision},{self.scale})" if self.name == "decimal" else self.name

    @property
    def numeric(self) -> bool:
        return self.name in ("long", "double", "decimal")

    @property
    def temporal(self) -> bool:
        """A date or a timestamp: a select column's type only."""
        return self.name in SELECT_ONLY_TYPES

    @property
    def sql(self) -> str:
        """The type's Spark SQL name (what a select's column is cast to)."""
        from eos.core.metadata import HEADERS_SQL

        if self.name == "decimal":
            return f"DECIMAL({self.precision},{self.scale})"
        return {"string": "STRING", "long": "BIGINT", "double": "DOUBLE",
                "boolean": "BOOLEAN", "binary": "BINARY", "headers": HEADERS_SQL,
                "date": "DATE", "timestamp": "TIMESTAMP"}[self.name]


class FieldSpec(Strict):
    """One declared event field: where it is in the JSON object and what type it must have.

    ``optional`` fields may be absent or null (they become SQL NULL); every other field must be
    present, non-null and of its type, or the record is quarantined naming the field."""

    path: tuple[str, ...]
    type: FieldType
    optional: bool = False

    # What an editor is told a field looks like (``eos schema``): the forms ``parse`` takes.
    JSON_SCHEMA: ClassVar[dict[str, Any]] = {
        "anyOf": [
            FIELD_TYPE_SCHEMA,
            {"type": "object", "additionalProperties": False, "required": ["type"],
             "properties": {
                 "path": {"type": "string", "pattern": r"^[^.]+(\.[^.]+)*$",
                          "description": "Dotted keys into the record (`user.id`); default: "
                                         "the field's name."},
                 "type": FIELD_TYPE_SCHEMA,
                 "optional": {"type": "boolean", "default": False,
                              "description": "Absent or null is SQL NULL instead of a "
                                             "quarantined record."}}},
        ],
    }

    @classmethod
    def parse(cls, name: str, value: Any) -> FieldSpec:
        if isinstance(value, str):
            return cls(path=(name,), type=FieldType.parse(value))
        if not isinstance(value, dict):
            raise ValueError(f"field '{name}': write `{name}: TYPE` or "
                             f"`{name}: {{path: a.b, type: TYPE}}`, got {value!r}")
        unknown = set(value) - {"path", "type", "optional"}
        if unknown or "type" not in value:
            raise ValueError(f"field '{name}': keys are path, type (required), optional; "
                             f"got {sorted(value)}")
        path = value.get("path", name)
        if not isinstance(path, str) or not all(path.split(".")):
            raise ValueError(f"field '{name}': path must be dotted keys like user.id, got {path!r}")
        optional = value.get("optional", False)
        if not isinstance(optional, bool):
            raise ValueError(f"field '{name}': optional is true or false")
        return cls(path=tuple(path.split(".")), type=FieldType.parse(value["type"]),
                   optional=optional)


class TimeConfig(Strict):
    """Where event time comes from: a field in one of the formats, the Kafka timestamp, or
    nowhere (``none``: a pipeline without windows, which no event-time rule applies to)."""

    field: str | None = Field(
        default=None,
        description="The field (dotted path) holding the event time; none for kafka_timestamp.")
    format: Literal["epoch_ms", "epoch_s", "iso8601", "kafka_timestamp", "none"] = Field(
        default="epoch_ms",
        description="epoch_ms (an integer), epoch_s (a number; fractions exact to the "
                    "millisecond), iso8601 (with Z or an offset), kafka_timestamp (the "
                    "record's Kafka timestamp, no field), or none (no event time: a pipeline "
                    "without windows, where it is the default).")

    @model_validator(mode="after")
    def _field_iff_needed(self) -> TimeConfig:
        if self.format in ("kafka_timestamp", "none") and self.field is not None:
            raise ValueError(f"format {self.format} takes no field")
        if self.format not in ("kafka_timestamp", "none") and not self.field:
            raise ValueError(f"format {self.format} needs the field the time is in")
        return self

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(self.field.split(".")) if self.field else ()


def _fields(value: Any) -> dict[str, FieldSpec]:
    """``fields: {name: TYPE or {path, type, optional}}``; a pipeline declares at least one.
    The Kafka metadata's names (``eos.core.metadata``) are not a field's to take: a filter or
    a select naming one must mean one thing."""
    if not isinstance(value, dict) or not value:
        raise ValueError("fields: a mapping of name -> type (at least one)")
    taken = sorted(str(name) for name in value if str(name).lower() in METADATA)
    if taken:
        raise ValueError(f"fields: {taken} are reserved for Kafka metadata "
                         f"({', '.join(METADATA)}); give the fields other names (path: keeps "
                         "where they are in the record)")
    return {check_name(str(name), "field"): FieldSpec.parse(str(name), spec)
            for name, spec in value.items()}


MAX_STRING_BYTES = 16_384  # event.max_string_bytes' default


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SchemaRegistryConfig(Strict):
    """Where a Schema Registry format finds its writer schemas (``eos.compute.formats``).

    Credentials are never in this file: ``auth_env`` names an environment variable holding
    ``user:password`` (HTTP basic auth), ``connection`` names an Airflow connection (its login
    and password). Only these names travel to the Spark workers, which read the secret
    themselves; the URL may not carry one."""

    url: str = Field(description="http(s)://host[:port] of the registry, without credentials.")
    auth_env: str | None = Field(
        default=None,
        description="The name of an environment variable holding user:password (HTTP basic "
                    "auth), set wherever records are decoded (the Spark executors too).")
    connection: str | None = Field(
        default=None,
        description="The id of an Airflow connection whose login and password the registry "
                    "takes (event sources only; not with auth_env).")
    # One request; a registry slower than this is down (a transient error).
    timeout: DurationMs = Field(
        default=10_000,
        description="How long one request may take; a slower registry counts as down and the "
                    "epoch is retried.")

    @field_validator("url")
    @classmethod
    def _plain_url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"schema_registry.url must be http(s)://host[:port], got {url!r}")
        if parts.username is not None or parts.password is not None:
            raise ValueError("schema_registry.url may not carry credentials: name them with "
                             "auth_env (a variable holding user:password) or connection")
        return url.rstrip("/")

    @field_validator("auth_env")
    @classmethod
    def _env_name(cls, name: str | None) -> str | None:
        if name is not None and not _ENV_NAME.match(name):
            raise ValueError(f"schema_registry.auth_env is the name of an environment variable "
                             f"(letters, digits, _), got {name!r}")
        return name

    @model_validator(mode="after")
    def _one_source(self) -> SchemaRegistryConfig:
        if self.auth_env and self.connection:
            raise ValueError("schema_registry: give auth_env or connection, not both")
        return self


class KeyConfig(Strict):
    """How a record key is parsed: its format and its declared fields, read in expressions as
    ``key.<field>``. A key that does not parse (no key, not JSON, a field missing or of another
    type) quarantines its record with the reason, prefixed ``key:``."""

    format: Literal["json"] = Field(
        default="json", description="json: the key is one JSON object.")
    fields: Annotated[dict[str, FieldSpec], BeforeValidator(_fields),
                      WithJsonSchema({"type": "object", "minProperties": 1,
                                      "propertyNames": {"pattern": "^[A-Za-z][A-Za-z0-9_]*$"},
                                      "additionalProperties": FieldSpec.JSON_SCHEMA})] = Field(
        description="The key's fields, declared as event.fields are; an expression reads one "
                    "as key.<field>.")


def unknown_columns(event: EventConfig, columns: list[str]) -> list[str]:
    """The columns of an expression that are neither declared fields, Kafka metadata, a
    declared key field (``key.<field>``) nor a header (``header.<name>``)."""
    key_fields = set(event.key.fields) if event.key is not None else set()
    unknown = []
    for column in columns:
        parts = qualified(column)
        if parts is None:
            known = column in event.fields or column in METADATA
        else:
            known = parts[0] == HEADER_PREFIX or (parts[0] == KEY_PREFIX
                                                  and parts[1] in key_fields)
        if not known:
            unknown.append(column)
    return unknown


def readable_names(event: EventConfig) -> str:
    """What an expression may read, for a message."""
    key = (f", key.<field> ({', '.join(event.key.fields)})" if event.key is not None
           else ", key.<field> (with event.key)")
    return (f"declared fields ({', '.join(sorted(event.fields))}), Kafka metadata "
            f"({', '.join(METADATA)}){key}, header.<name>")


class EventConfig(Strict):
    """How a record is read: its format, its declared fields, its event time, and which records
    an epoch keeps (``filter``, ``max_future``, ``max_string_bytes``)."""

    # How a record value is decoded (``eos.compute.formats``): json, or a Schema Registry format.
    format: Literal["json", "avro", "protobuf", "json_schema"] = Field(
        default="json",
        description="json: the value is one JSON object. avro, protobuf, json_schema: "
                    "Confluent's Schema Registry wire format (magic byte, schema id, payload), "
                    "writer schemas fetched from schema_registry.")
    schema_registry: SchemaRegistryConfig | None = Field(
        default=None,
        description="Where writer schemas are fetched by id; required for avro, protobuf and "
                    "json_schema, refused for json.")
    time: TimeConfig = Field(
        default_factory=lambda: TimeConfig(format="none"),
        description="Where the event time is. Required with windows; a pipeline without "
                    "windows needs none (format: none, its default).")
    fields: Annotated[dict[str, FieldSpec], BeforeValidator(_fields),
                      WithJsonSchema({"type": "object", "minProperties": 1,
                                      "propertyNames": {"pattern": "^[A-Za-z][A-Za-z0-9_]*$"},
                                      "additionalProperties": FieldSpec.JSON_SCHEMA})] = Field(
        description="The declared fields: `name: TYPE` or `name: {path: a.b, type: TYPE, "
                    "optional: true}`. A required field missing or null, a value of another "
                    "type or a decimal that does not fit quarantines its record, naming the "
                    "field.")
    key: KeyConfig | None = Field(
        default=None, json_schema_extra=not_null_schema,
        description="How the record key is parsed ({format: json, fields: {...}}), its fields "
                    "read as key.<field>; a key that does not parse quarantines its record. "
                    "Unset: the key is read only as kafka_key / kafka_key_bytes.")
    filter: str | None = Field(
        default=None,
        description="A Spark SQL predicate over the fields and the Kafka metadata (kafka_topic, "
                    "kafka_partition, kafka_offset, kafka_timestamp, kafka_timestamp_type, "
                    "kafka_key, kafka_key_bytes, kafka_headers, key.<field>, header.<name>); "
                    "events where it is not true are dropped and counted (they "
                    "still advance the watermark). Only deterministic "
                    "functions are accepted; rand(), current_timestamp(), uuid() and the like "
                    "are refused at load.")
    max_future: DurationMs = Field(
        default=86_400_000,
        description="Events further ahead of their Kafka timestamp are quarantined.")
    # A longer string field quarantines its record (``eos.compute.formats.values``): every
    # output record must fit every sink's record limit (checked against the Kafka sinks when the
    # config loads).
    max_string_bytes: int = Field(
        default=MAX_STRING_BYTES, ge=64,
        description="A string field longer than this many UTF-8 bytes quarantines its record, "
                    "so every output record fits every sink (checked at load against each "
                    "Kafka sink's message.max.bytes).")

    @model_validator(mode="after")
    def _registry_iff_needed(self) -> EventConfig:
        if self.format == "json" and self.schema_registry is not None:
            raise ValueError("event.schema_registry is only for a Schema Registry format "
                             "(format: avro, protobuf or json_schema)")
        if self.format != "json" and self.schema_registry is None:
            raise ValueError(f"event.format {self.format} needs event.schema_registry "
                             "(url, and auth_env or connection if it asks for credentials)")
        return self

    @model_validator(mode="after")
    def _filter_parses(self) -> EventConfig:
        if self.filter is not None:
            # Imported here: sqlglot takes a quarter of a second to import, and the DAG file
            # loads every config while only a pipeline with a filter needs it.
            from eos.core.filters import filter_columns

            columns = filter_columns(self.filter)
            unknown = unknown_columns(self, columns)
            if unknown:
                raise ValueError(f"filter uses {unknown}, which are not "
                                 f"{readable_names(self)}")
            check_prefixes(self, columns, "filter")
        return self

    @model_validator(mode="after")
    def _key_prefix_free(self) -> EventConfig:
        if self.key is not None and KEY_PREFIX in self.fields:
            raise ValueError(f"event.key is declared, so '{KEY_PREFIX}' names the parsed key "
                             f"(key.<field>): rename the field '{KEY_PREFIX}' (path: keeps "
                             "where it is in the record)")
        return self


def check_prefixes(event: EventConfig, columns: list[str], what: str) -> None:
    """Refuse ``header.<name>`` in an expression of a pipeline with a field named ``header``:
    one name, two meanings."""
    if HEADER_PREFIX in event.fields and any(
            (qualified(c) or ("",))[0] == HEADER_PREFIX for c in columns):
        raise ValueError(f"{what} reads header.<name>, but a declared field is named "
                         f"'{HEADER_PREFIX}': rename the field (path: keeps where it is)")
