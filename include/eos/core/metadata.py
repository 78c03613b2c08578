"""Kafka metadata as columns: the reserved names a ``filter`` or ``select`` may read besides the
declared fields, their types, and the coordinates every row of a stateless pipeline carries.

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

# Each reserved name and its type as the config's grammar writes it (``kafka_partition`` is a
# Kafka int: the grammar's ``long`` holds it; ``SQL_TYPES`` gives its exact SQL type).
METADATA: dict[str, str] = {
    KAFKA_TOPIC: "string",
    KAFKA_PARTITION: "long",
    KAFKA_OFFSET: "long",
    KAFKA_TIMESTAMP: "long",  # milliseconds since 1970, as the broker holds it
    KAFKA_TIMESTAMP_TYPE: "string",  # CreateTime or LogAppendTime; null when the record has none
    KAFKA_KEY: "string",  # the key's bytes as UTF-8 (U+FFFD for a bad sequence); null: no key
}
# The Spark SQL type of each, for typing an expression at load (``eos.core.filters``).
SQL_TYPES: dict[str, str] = {KAFKA_TOPIC: "STRING", KAFKA_PARTITION: "INT",
                             KAFKA_OFFSET: "BIGINT", KAFKA_TIMESTAMP: "BIGINT",
                             KAFKA_TIMESTAMP_TYPE: "STRING", KAFKA_KEY: "STRING"}
# What every row of a stateless pipeline carries besides its selected columns, so anyone can
# tell a duplicate: where its record is in Kafka.
COORDINATES = (KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET)
# Read only when a pipeline names them: the reader carries them beside the parsed event.
READ_ON_DEMAND = frozenset({KAFKA_KEY, KAFKA_TIMESTAMP_TYPE})

# confluent-kafka's ``Message.timestamp()`` type codes, as Kafka names the types.
TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}


def key_text(key: bytes | None) -> str | None:
    """A record key as the ``kafka_key`` column holds it: its bytes decoded as UTF-8, a bad
    sequence replaced by U+FFFD (so every key has one text, the same on every reader)."""
    return None if key is None else key.decode("utf-8", errors="replace")
