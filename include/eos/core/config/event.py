"""How a record is read (the ``event`` section): how its value is decoded, its declared fields,
its key, where its event time is, and which records an epoch keeps."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from eos.core.config.fields import DeclaredFields
from eos.core.config.schema_registry import SchemaRegistryConfig
from eos.core.config.values import DurationMs, Strict, not_null_schema
from eos.core.metadata import HEADER_PREFIX, KEY_PREFIX, METADATA, qualified

TIME_FORMATS = ("epoch_ms", "epoch_s", "iso8601", "kafka_timestamp", "none")
MAX_STRING_BYTES = 16_384  # event.max_string_bytes' default


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


class KeyConfig(Strict):
    """How a record key is parsed: its format and its declared fields, read in expressions as
    ``key.<field>``. A key that does not parse (no key, not JSON, a field missing or of another
    type) quarantines its record with the reason, prefixed ``key:``."""

    format: Literal["json"] = Field(
        default="json", description="json: the key is one JSON object.")
    fields: DeclaredFields = Field(
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
    fields: DeclaredFields = Field(
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
