"""The Airflow connections a pipeline's processes read before they talk to Kafka or the object
store: Kafka through the Kafka provider's ``kafka`` connection (``KAFKA_CONN_ID``), the store
through ``aws`` (``eos.airflow.storage``).

A ``kafka`` connection is what the provider's ``KafkaBaseHook`` reads: its extra is the
librdkafka configuration (``bootstrap.servers``, ``security.protocol``, ``sasl.*``, ``ssl.*``),
read here through Airflow's connection API, so it may come from any secrets backend. Each task
(plan, precommit, commit, checkpoint, the rewind DAG's), the triggerer (the data-driven epochs'
trigger, the stall alert's callback) and the epochs view hand it to ``eos.core`` for their own
process (``eos.core.bootstrap.supply_settings``): every Kafka client they make starts from it.
Every value but ``bootstrap.servers`` is treated as a secret: shown as the connection's name in
what eos shows (``eos.core.kafka.redact``), and given to Airflow's log masker. Without such a
connection, the process's environment decides, as on the command line.
"""

from __future__ import annotations

import os
import re
from typing import Any

from eos.core.bootstrap import supply_settings
from eos.core.errors import ConfigError

DEFAULT_KAFKA_CONN_ID = "kafka_default"
KAFKA_CONN_TYPE = "kafka"
# eos names its own consumer groups (offsets live in its checkpoints, never in Kafka); the
# provider's example extra sets one, which a producer would log as ignored.
IGNORED_KEYS = frozenset({"group.id"})
# Values a log may show: the broker list, and settings whose values are names of mechanisms.
PUBLIC_KEYS = frozenset({"bootstrap.servers", "security.protocol", "sasl.mechanism",
                         "sasl.mechanisms", "ssl.endpoint.identification.algorithm"})
_PLAIN_VALUE = re.compile(r"-?[0-9.]+|true|false", re.IGNORECASE)


def kafka_conn_id() -> str:
    """``EOS_KAFKA_CONN_ID`` if set, else ``kafka_default``: read when used, so a worker's
    environment set after import still counts."""
    return os.environ.get("EOS_KAFKA_CONN_ID", "").strip() or DEFAULT_KAFKA_CONN_ID


def kafka_settings(conn: Any) -> dict[str, str]:
    """The librdkafka settings a ``kafka`` connection stands for (its extra), as text; a
    ``ConfigError`` naming the key (never its value) for what librdkafka cannot take from a
    connection: another connection type, nested values, a callback."""
    if conn.conn_type and conn.conn_type != KAFKA_CONN_TYPE:
        raise ConfigError(f"Airflow connection '{conn.conn_id}' has type '{conn.conn_type}'; "
                          f"eos reads Kafka settings from a '{KAFKA_CONN_TYPE}' connection "
                          "(the Kafka provider's: librdkafka settings in its extra)")
    settings: dict[str, str] = {}
    for key, value in (conn.extra_dejson or {}).items():
        if key in IGNORED_KEYS:
            continue
        if isinstance(value, dict | list) or value is None or key.endswith("_cb"):
            raise ConfigError(f"Airflow connection '{conn.conn_id}': extra key '{key}' is not a "
                              "librdkafka setting eos can pass on (text, number or boolean)")
        settings[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    return settings


def _mask(settings: dict[str, str]) -> None:
    """Every value that may be a secret goes to Airflow's log masker, whatever its key: a log
    line of this process that holds one shows ``***`` instead."""
    from airflow.sdk.log import mask_secret

    for key, value in settings.items():
        if key not in PUBLIC_KEYS and not _PLAIN_VALUE.fullmatch(value):
            mask_secret(value)


def export_kafka_connection(conn_id: str | None = None) -> bool:
    """Give this process the ``kafka`` connection's settings (``supply_settings``); False when
    no such connection exists (the environment then decides, as today)."""
    from airflow.sdk import BaseHook

    conn_id = conn_id or kafka_conn_id()
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:  # AirflowNotFoundException: no connection, the environment decides
        supply_settings(None)
        return False
    settings = kafka_settings(conn)
    _mask(settings)
    supply_settings(settings, f"Airflow connection '{conn_id}'")
    return True


async def aexport_kafka_connection(conn_id: str | None = None) -> bool:
    """``export_kafka_connection`` for the triggerer's readers (the data-driven epochs'
    trigger, the stall alert's callback), through ``sync_to_async`` for the reason
    ``eos.airflow.storage.aexport_credentials`` gives."""
    from asgiref.sync import sync_to_async

    return bool(await sync_to_async(export_kafka_connection)(conn_id))


# -- PostgreSQL sinks ---------------------------------------------------------------------------

POSTGRES_CONN_TYPES = frozenset({"postgres", "postgresql"})
# Extra keys passed on to libpq as they are (TLS and timeouts); others are the provider's own.
LIBPQ_EXTRA = frozenset({"sslmode", "sslcert", "sslkey", "sslrootcert", "sslcrl",
                         "target_session_attrs", "application_name", "keepalives",
                         "keepalives_idle", "connect_timeout", "options"})


def postgres_dsn(conn: Any) -> str:
    """The libpq DSN of an Airflow ``postgres`` connection: host, port, login, password, the
    database (the connection's ``schema`` field, as the Postgres provider reads it) and the
    libpq keys of its extra; a ``ConfigError`` naming the field for another type or no host."""
    from psycopg.conninfo import make_conninfo

    if conn.conn_type and conn.conn_type not in POSTGRES_CONN_TYPES:
        raise ConfigError(f"Airflow connection '{conn.conn_id}' has type '{conn.conn_type}'; "
                          "a postgres sink writes through a 'postgres' connection")
    if not conn.host:
        raise ConfigError(f"Airflow connection '{conn.conn_id}' has no host")
    fields = {"host": conn.host, "port": conn.port, "user": conn.login,
              "password": conn.password, "dbname": conn.schema}
    extra = {k: str(v) for k, v in (conn.extra_dejson or {}).items() if k in LIBPQ_EXTRA}
    return make_conninfo("", **{k: v for k, v in {**fields, **extra}.items() if v})


def export_postgres_connections(config: Any) -> list[str]:
    """Give this process the DSN of every ``postgres`` sink's Airflow connection
    (``eos.sinks.postgres.connection.supply_dsn``), its password given to the log masker;
    the ids of those found. A sink whose connection does not exist falls back to its
    ``dsn_env`` (and fails naming both when neither is there)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.log import mask_secret

    from eos.sinks.postgres.connection import supply_dsn

    found = []
    for _, spec in config.sinks.by_output():
        ((kind, options),) = spec.items()
        if kind != "postgres" or options.connection in found:
            continue
        try:
            conn = BaseHook.get_connection(options.connection)
        except Exception:  # AirflowNotFoundException: the environment decides
            continue
        dsn = postgres_dsn(conn)
        if conn.password:
            mask_secret(conn.password)
        mask_secret(dsn)
        supply_dsn(options.connection, dsn)
        found.append(options.connection)
    return found
