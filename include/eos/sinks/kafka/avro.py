"""The Kafka sink's Avro values (``{kafka: {topic: T, format: avro}}``): the Schema Registry
wire format, so a downstream consumer with a Schema Registry deserializer reads our windows.

The value schema is derived from the output's columns (``value_schema``): decimals as the
``decimal`` logical type at the column's precision and scale, timestamps as
``timestamp-millis`` (a finer value is refused before the seal), dates as ``date``, a nullable
column as a union with null (default null); the window bounds, a row's coordinates and the
epoch are never null. It is a function of the output's schema alone, so every commit registers
the same schema and gets the same id: a rerun writes identical bytes.

It is registered under the topic's value subject ``<topic>-value`` (the registry's
``TopicNameStrategy``, which Confluent's deserializers assume) **before** the transaction opens:
a registry that is away fails the commit as ``SinkUnavailable`` (transient) with nothing
written; a registry that refuses the schema (incompatible with the subject's earlier versions,
credentials refused) is ``SinkRejected``. Values are then encoded with fastavro: byte 0, the id
(4 bytes, big-endian), the Avro binary datum.

Credentials: ``schema_registry.auth_env`` only (an environment variable holding
``user:password``); sinks run without Airflow, so an Airflow ``connection`` is refused when the
config loads. Keys stay as the JSON sink writes them.
"""

from __future__ import annotations

import json
import os
import re
import struct
import threading
import warnings
from io import BytesIO
from typing import TYPE_CHECKING, Any

from eos.core.errors import ConfigError, SinkRejected, SinkUnavailable

if TYPE_CHECKING:
    import pyarrow as pa

    from eos.core.config import SchemaRegistryConfig

# Filled by every output builder that has them (``eos.core.outputs``).
NEVER_NULL = frozenset({"window_start", "window_end", "epoch", "kafka_topic", "kafka_partition",
                        "kafka_offset"})
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")


def avro_name(text: str) -> str:
    """``text`` as an Avro name: other characters become ``_``, a leading digit gets one."""
    name = _NOT_NAME.sub("_", text)
    return name if name[:1].isalpha() or name[:1] == "_" else f"_{name}"


def _column_type(kind: pa.DataType, column: str) -> Any:
    import pyarrow as pa

    if pa.types.is_list(kind):  # Kafka headers, in record order: a name may repeat
        return {"type": "array", "items": {
            "type": "record", "name": f"{avro_name(column)}_header",
            "fields": [{"name": "key", "type": "string"},
                       {"name": "value", "type": ["null", "bytes"], "default": None}]}}
    if pa.types.is_timestamp(kind):
        return {"type": "long", "logicalType": "timestamp-millis"}
    if pa.types.is_date(kind):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_decimal(kind):
        return {"type": "bytes", "logicalType": "decimal", "precision": kind.precision,
                "scale": kind.scale}
    simple = {pa.string(): "string", pa.int64(): "long", pa.int32(): "int",
              pa.float64(): "double", pa.float32(): "float", pa.bool_(): "boolean",
              pa.binary(): "bytes"}
    if kind not in simple:
        raise ValueError(f"column {column} of type {kind} has no Avro mapping here")
    return simple[kind]


def value_schema(schema: pa.Schema, topic: str, pipeline: str) -> dict[str, Any]:
    """The Avro record schema of an output's rows (see the module docstring)."""
    fields = []
    for field in schema:
        kind = _column_type(field.type, field.name)
        if field.nullable and field.name not in NEVER_NULL:
            fields.append({"name": field.name, "type": ["null", kind], "default": None})
        else:
            fields.append({"name": field.name, "type": kind})
    namespace = ".".join(avro_name(part) for part in f"eos.{pipeline}".split("."))
    return {"type": "record", "name": avro_name(topic), "namespace": namespace,
            "fields": fields}


def _user_info(registry: SchemaRegistryConfig) -> str | None:
    if registry.auth_env is None:
        return None
    value = os.environ.get(registry.auth_env)
    if not value or ":" not in value:
        raise ConfigError(f"schema_registry.auth_env names {registry.auth_env}, which is not set "
                          "to user:password in this process's environment")
    return value


class AvroValues:
    """Register the value schema and encode rows (commit); decode values (read back)."""

    def __init__(self, registry: SchemaRegistryConfig, topic: str, pipeline: str) -> None:
        self.registry = registry
        self.topic = topic
        self.pipeline = pipeline
        self._client: Any = None
        self._writers: dict[int, Any] = {}  # id -> fastavro's parsed schema
        self._lock = threading.Lock()

    @property
    def subject(self) -> str:
        return f"{self.topic}-value"

    def _connect(self) -> Any:
        if self._client is None:
            with warnings.catch_warnings():  # authlib (imported by the client) warns on import
                import authlib.deprecate  # noqa: F401  its import adds an "always" filter
                warnings.simplefilter("ignore")
                from confluent_kafka.schema_registry import SchemaRegistryClient
            settings: dict[str, Any] = {"url": self.registry.url,
                                        "timeout": self.registry.timeout / 1000,
                                        "max.retries": 1, "retries.wait.ms": 200,
                                        "retries.max.wait.ms": 1000}
            secret = _user_info(self.registry)
            if secret is not None:
                settings["basic.auth.user.info"] = secret
            self._client = SchemaRegistryClient(settings)
        return self._client

    def _call(self, what: str, call: Any) -> Any:
        """``call()`` on the registry, its failures as the sink's errors (module docstring)."""
        import httpx
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        where = f"Schema Registry {self.registry.url}"
        try:
            return call()
        except SchemaRegistryError as error:
            status = error.http_status_code
            if status is not None and (status >= 500 or status == 429):
                raise SinkUnavailable(f"{where} answered HTTP {status} {what}; nothing was "
                                      "written, retrying is safe") from None
            raise SinkRejected(f"{where} refused {what}: HTTP {status} (code "
                               f"{error.error_code}) {error.error_message}") from None
        except httpx.TransportError as error:
            raise SinkUnavailable(f"{where} did not answer {what} ({type(error).__name__}); "
                                  "nothing was written, retrying is safe") from None

    def register(self, schema: pa.Schema) -> int:
        """The id of the rows' value schema under ``<topic>-value`` (registered if new)."""
        from confluent_kafka.schema_registry import Schema

        text = json.dumps(value_schema(schema, self.topic, self.pipeline))
        client = self._connect()
        return int(self._call(f"registering the value schema under {self.subject}",
                              lambda: client.register_schema(self.subject, Schema(text, "AVRO"))))

    def encode(self, rows: pa.Table) -> list[bytes]:
        """Every row as a record value in the wire format (registers first)."""
        import pyarrow as pa
        from fastavro import parse_schema, schemaless_writer

        schema_id = self.register(rows.schema)
        for name in rows.schema.names:  # a time finer than a millisecond is never cut
            if pa.types.is_timestamp(rows.schema.field(name).type):
                try:
                    rows[name].cast(pa.timestamp("ms", tz="UTC"))
                except pa.ArrowInvalid:
                    raise SinkRejected(f"column {name} holds a time finer than a millisecond; "
                                       "Avro timestamp-millis would cut it") from None
        parsed = parse_schema(value_schema(rows.schema, self.topic, self.pipeline))
        header = struct.pack(">bI", 0, schema_id)
        values = []
        for row in rows.to_pylist():
            out = BytesIO()
            out.write(header)
            try:
                schemaless_writer(out, parsed, row)
            except (ValueError, TypeError, OverflowError) as error:
                raise SinkRejected(f"a row does not encode with the value schema: {error}"
                                   ) from None
            values.append(out.getvalue())
        return values

    def decode(self, raw: bytes, schema: pa.Schema) -> dict[str, Any]:
        """A record value back to the output's columns (the sink's own reading)."""
        from fastavro import schemaless_reader

        if len(raw) < 5 or raw[0] != 0:
            raise SinkRejected(f"a record of topic {self.topic} is not in the Schema Registry "
                               "wire format")
        (schema_id,) = struct.unpack(">I", raw[1:5])
        record = schemaless_reader(BytesIO(raw[5:]), self._writer(schema_id), None)
        assert isinstance(record, dict)
        return {name: record.get(name) for name in schema.names}

    def _writer(self, schema_id: int) -> Any:
        from fastavro import parse_schema

        with self._lock:
            if schema_id not in self._writers:
                client = self._connect()
                found = self._call(f"fetching schema id {schema_id}",
                                   lambda: client.get_schema(schema_id))
                self._writers[schema_id] = parse_schema(json.loads(found.schema_str))
            return self._writers[schema_id]
