"""Kafka metadata as columns: the reserved names a ``filter`` or ``select`` may read besides the
declared fields, their types, and the coordinates every row of a stateless pipeline carries.

Besides the plain names (``METADATA``), two qualified forms read one part of a record:

- ``key.<field>``: a field of the record's key, parsed as ``event.key`` declares it (a key that
  does not parse quarantines its record, like a value that does not);
- ``header.<name>``: the value of the record header ``name`` as text (UTF-8, a bad sequence as
  U+FFFD), the last one when the record repeats the name (Kafka's ``lastHeader``), null when
  it has none. A name that is not an identifier is quoted: ``header.`trace-id```.

``kafka_headers`` holds every header faithfully: Kafka lets a record repeat a header name and
keeps their order, so it is a list of ``{key, value}`` in record order, not a map.

No import beyond the standard library: the config checks these names when it loads (the DAG
file loads every config).
"""

from __future__ import annotations

KAFKA_TOPIC = "kafka_topic"
KAFKA_PARTITION = "kafka_partition"
KAFKA_OFFSET = "kafka_offset"
KAFKA_TIMESTAMP = "kafka_timestamp"
KAFKA_TIMESTAMP_TYPE = "kafka_timestamp_type"
KAFKA_KEY = "kafka_key"
KAFKA_KEY_BYTES = "kafka_key_bytes"
KAFKA_HEADERS = "kafka_headers"

# The qualifiers of the two qualified forms (``key.user``, ``header.trace_id``).
KEY_PREFIX = "key"
HEADER_PREFIX = "header"

# Each reserved name and its type as the config's grammar writes it (``kafka_partition`` is a
# Kafka int: the grammar's ``long`` holds it; ``SQL_TYPES`` gives its exact SQL type).
METADATA: dict[str, str] = {
    KAFKA_TOPIC: "string",
    KAFKA_PARTITION: "long",
    KAFKA_OFFSET: "long",
    KAFKA_TIMESTAMP: "long",  # milliseconds since 1970, as the broker holds it
    KAFKA_TIMESTAMP_TYPE: "string",  # CreateTime or LogAppendTime; null when the record has none
    KAFKA_KEY: "string",  # the key's bytes as UTF-8 (U+FFFD for a bad sequence); null: no key
    KAFKA_KEY_BYTES: "binary",  # the key's bytes as they are; null: no key
    KAFKA_HEADERS: "headers",  # every header in record order: list<struct<key, value binary>>
}
HEADERS_SQL = "ARRAY<STRUCT<key: STRING, value: BINARY>>"
# The Spark SQL type of each, for typing an expression at load (``eos.core.filters``).
SQL_TYPES: dict[str, str] = {KAFKA_TOPIC: "STRING", KAFKA_PARTITION: "INT",
                             KAFKA_OFFSET: "BIGINT", KAFKA_TIMESTAMP: "BIGINT",
                             KAFKA_TIMESTAMP_TYPE: "STRING", KAFKA_KEY: "STRING",
                             KAFKA_KEY_BYTES: "BINARY", KAFKA_HEADERS: HEADERS_SQL}
# What every row of a stateless pipeline carries besides its selected columns, so anyone can
# tell a duplicate: where its record is in Kafka.
COORDINATES = (KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET)
# Read only when a pipeline names them: the reader carries them beside the parsed event.
READ_ON_DEMAND = frozenset({KAFKA_KEY, KAFKA_TIMESTAMP_TYPE, KAFKA_KEY_BYTES, KAFKA_HEADERS})

# confluent-kafka's ``Message.timestamp()`` type codes, as Kafka names the types.
TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}


def key_text(key: bytes | None) -> str | None:
    """A record key as the ``kafka_key`` column holds it: its bytes decoded as UTF-8, a bad
    sequence replaced by U+FFFD (so every key has one text, the same on every reader)."""
    return None if key is None else key.decode("utf-8", errors="replace")


def header_text(headers: list[tuple[str, bytes | None]] | None, name: str) -> str | None:
    """``header.<name>``: the last header ``name`` of a record as text (``key_text``'s rule);
    null when the record has no such header, or its value is null."""
    found = None
    for key, value in headers or ():
        if key == name:
            found = value
    return key_text(found)


def qualified(column: str) -> tuple[str, str] | None:
    """``("key", "user")`` for ``key.user``, ``("header", "trace-id")`` for
    ``header.trace-id``; None for a plain name."""
    prefix, dot, rest = column.partition(".")
    if dot and prefix.lower() in (KEY_PREFIX, HEADER_PREFIX) and rest:
        return prefix.lower(), rest
    return None
