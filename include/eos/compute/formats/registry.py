"""Writer schemas from a Confluent Schema Registry, by id, once per worker.

The client is ``confluent_kafka.schema_registry.SchemaRegistryClient``; this module decides what
its answers mean for a record, which is the part that must be honest:

* the registry has the id: the schema (cached for the worker's life: an id never changes);
* the registry says it does not know the id (404, error code 40403): the record is quarantined
  (``UNKNOWN``). That is an answer about now, not about the id: a producer may register it a
  moment later. So it is kept for one batch only (``new_batch``: every record of the id in a
  batch gets the same answer, for one request) and asked again in the next batch, never kept
  for the worker's life (a Spark worker reuses its parser for every read, epoch after epoch);
* anything else that is the registry being away (refused connection, timeout, 5xx, 429):
  ``SchemaRegistryUnavailable``, a transient error; nothing is quarantined for it;
* credentials refused (401, 403) or a URL that is not a registry: ``ConfigError``.

Which answer an epoch commits: two attempts of one epoch (a retry, a zombie) can disagree
about an id registered between them, one quarantining its records and the other decoding them.
Each is a true account of its moment, and exactly one is committed: the first attempt staged
complete for the plan (unless an abort drops it before the seal). Staging never accepts a
second complete attempt of a plan, nor any write of an epoch a commit has sealed
(``eos.core.staging.commit``), so the rows a commit reads are the ones its sinks, its retries
and the next epoch's state all get (a later attempt steps aside: ``REUSED_STAGE``, or
``SEALED`` once a commit sealed the epoch). A record quarantined for an unknown id is not read
again by a later epoch (replaying it is an operator's rewind); the audit, asking the registry
later, decodes it and reports that record, which is what happened.

The credentials are read here, on the worker, from the environment variable or the Airflow
connection the config names: the config (pickled into the Spark plan) holds only their names,
and no message says more than those names.
"""

from __future__ import annotations

import os
import threading
import warnings
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from eos.compute.formats import Decoded, Rejected
from eos.core.config import SchemaRegistryConfig
from eos.core.errors import ConfigError, SchemaRegistryUnavailable

UNKNOWN = None  # what ``WriterSchemas.get`` returns for an id the registry does not know
_NOT_FOUND = 40403  # the registry's error code for "Schema not found"
MAGIC = 0
HEADER = 5  # magic byte + 4-byte schema id


class Unknown(Rejected):
    """The ``Rejected`` of an id the registry did not know: true for this batch only, so a
    decoder keeps it no longer than ``WriterSchemas`` does (unlike what it builds from a
    schema, which holds for good)."""

    __slots__ = ()


def not_wire(raw: bytes) -> Rejected:
    """Why a value too short for the header, or without the magic byte, is quarantined."""
    if not raw:
        problem = "the value is empty"
    elif raw[0] != 0:
        problem = f"byte 0 is {raw[0]}, not the magic byte 0"
    else:
        problem = f"{len(raw)} bytes, shorter than the 5-byte header"
    return Rejected("not in the Schema Registry wire format (magic byte 0, a 4-byte schema id, "
                    f"the payload): {problem}")


def user_info(config: SchemaRegistryConfig) -> str | None:
    """``user:password`` for basic auth, from ``auth_env`` or the Airflow ``connection``."""
    if config.auth_env:
        value = os.environ.get(config.auth_env)
        if not value or ":" not in value:
            raise ConfigError(
                f"schema_registry.auth_env names {config.auth_env}, which is not set to "
                "user:password in this process's environment (a Spark worker's too)")
        return value
    if config.connection:
        return _connection_user_info(config.connection)
    return None


def _connection_user_info(conn_id: str) -> str:
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as error:  # AirflowNotFoundException: no such connection
        raise ConfigError(
            f"schema_registry.connection: Airflow connection '{conn_id}' is not defined here "
            f"(a Spark worker reads it too, e.g. from AIRFLOW_CONN_{conn_id.upper()}) "
            f"({type(error).__name__})") from None
    if not conn.login:
        raise ConfigError(f"schema_registry.connection: Airflow connection '{conn_id}' has no "
                          "login (the registry's basic-auth user)")
    return f"{conn.login}:{conn.password or ''}"


def _auth_source(config: SchemaRegistryConfig) -> str:
    if config.auth_env:
        return f"the credentials in ${config.auth_env}"
    if config.connection:
        return f"the credentials of Airflow connection '{config.connection}'"
    return "no credentials (set schema_registry.auth_env or connection)"


class WriterSchemas:
    """Schemas by id from one registry; thread-safe. A schema is fetched at most once per id;
    an id the registry did not know is asked again after ``new_batch``."""

    def __init__(self, config: SchemaRegistryConfig, fmt: str | None = None) -> None:
        self.config = config
        # The registry's ``format`` for the answer: Protobuf asks for ``serialized`` (a base64
        # FileDescriptorProto, as Confluent's own deserializer does) instead of .proto text.
        self.fmt = fmt
        self._client: Any = None
        self._cache: dict[int, Any] = {}  # id -> Schema, for good: an id names one schema
        self._unknown: set[int] = set()  # ids the registry did not know, this batch only
        self._lock = threading.Lock()

    def _connect(self) -> Any:
        with warnings.catch_warnings():  # authlib (imported by the client) warns on import
            import authlib.deprecate  # noqa: F401  its import adds an "always" filter: then ours
            warnings.simplefilter("ignore")
            from confluent_kafka.schema_registry import SchemaRegistryClient

        settings: dict[str, Any] = {
            "url": self.config.url,
            "timeout": self.config.timeout / 1000,
            # The epoch retries a transient failure; the client's own retries only add delay.
            "max.retries": 1, "retries.wait.ms": 200, "retries.max.wait.ms": 1000,
        }
        secret = user_info(self.config)
        if secret is not None:
            settings["basic.auth.user.info"] = secret
        return SchemaRegistryClient(settings)

    def get(self, schema_id: int) -> Any:
        """The registry's ``Schema`` for ``schema_id``, or ``UNKNOWN`` (until ``new_batch``)."""
        schema = self._cache.get(schema_id)
        if schema is not None:
            return schema
        with self._lock:
            if schema_id in self._cache:
                return self._cache[schema_id]
            if schema_id in self._unknown:
                return UNKNOWN
            schema = self._fetch(schema_id)
            if schema is UNKNOWN:
                self._unknown.add(schema_id)
            else:
                self._cache[schema_id] = schema
            return schema

    def new_batch(self) -> None:
        """Forget which ids the registry did not know: the next record of one asks again."""
        with self._lock:
            self._unknown.clear()

    def readable(self, schema_id: int, kind: str, what: str) -> Any:
        """The registry's ``Schema`` for the id if it is a ``kind`` schema (``AVRO``, ``JSON``,
        ``PROTOBUF``) without references, or the ``Rejected`` every record of it gets (``what``
        names the format in the reason). One rule for every format: the audit's decoders
        refuse the same schemas with the same words (``eos.tools.audit.avro``)."""
        schema = self.get(schema_id)
        if schema is UNKNOWN:
            return Unknown(f"schema id {schema_id} is not known to the Schema Registry")
        found = schema.schema_type or "AVRO"
        if found != kind:
            return Rejected(f"schema id {schema_id} is a {found} schema, not {what}")
        if schema.references:
            return Rejected(f"schema id {schema_id} refers to other schemas (references), "
                            "which this reader does not resolve")
        return schema

    def _fetch(self, schema_id: int) -> Any:
        import httpx  # the client's HTTP library
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        if self._client is None:
            self._client = self._connect()
        where = f"Schema Registry {self.config.url}"
        try:
            return self._client.get_schema(schema_id, fmt=self.fmt)
        except SchemaRegistryError as error:
            status, code = error.http_status_code, error.error_code
            if status == 404 and code == _NOT_FOUND:
                return UNKNOWN
            if status in (401, 403):
                raise ConfigError(f"{where} refused {_auth_source(self.config)} (HTTP {status}) "
                                  f"fetching schema id {schema_id}") from None
            if status == 404:
                raise ConfigError(f"{where} answered 404 without a registry error code for "
                                  f"schema id {schema_id}: is the URL a Schema Registry?") from None
            raise SchemaRegistryUnavailable(
                f"{where} answered HTTP {status} (code {code}) fetching schema id {schema_id}; "
                "nothing was quarantined for it: retry once it answers") from None
        except httpx.TransportError as error:  # refused, timed out, reset mid-answer
            raise SchemaRegistryUnavailable(
                f"{where} did not answer fetching schema id {schema_id} "
                f"({type(error).__name__}); nothing was quarantined for it: retry once it "
                "answers") from None


class RegistryDecoder(ABC):
    """``RecordDecoder`` skeleton of a Schema Registry format: the header (magic byte, schema
    id) checked and read, the writer schema fetched (``WriterSchemas``), refused when it is not
    of the format or uses references (``WriterSchemas.readable``), and built once per id into
    what decodes its records (an id the registry did not know is asked again next batch).

    A format states what differs: ``kind`` and ``what`` (the registry's ``schemaType`` and its
    name in a reason), ``fmt`` (the form the registry answers in), ``build`` (the schema's
    text -> what reads its records, or the ``Rejected`` every record of it gets: an invalid or
    unsafe schema) and ``read`` (one value, its header checked, -> the decoded record)."""

    kind: ClassVar[str]
    what: ClassVar[str]
    fmt: ClassVar[str | None] = None

    def __init__(self, registry: SchemaRegistryConfig | WriterSchemas) -> None:
        self.schemas = (WriterSchemas(registry, fmt=self.fmt)
                        if isinstance(registry, SchemaRegistryConfig) else registry)
        self._writers: dict[int, Any] = {}  # id -> what ``build`` made, or a Rejected

    def new_batch(self) -> None:
        """A new batch: ids the registry did not know are asked again (``WriterSchemas``)."""
        self.schemas.new_batch()

    def decode(self, raw: bytes) -> Decoded | Rejected:
        if len(raw) < HEADER or raw[0] != MAGIC:
            return not_wire(raw)
        return self.read(int.from_bytes(raw[1:HEADER], "big"), raw)

    def writer(self, schema_id: int) -> Any:
        """What ``build`` made of the id's writer schema, or why no record of it is read."""
        writer = self._writers.get(schema_id)
        if writer is None:
            schema = self.schemas.readable(schema_id, self.kind, self.what)
            writer = (schema if isinstance(schema, Rejected)
                      else self.build(schema_id, schema.schema_str))
            if not isinstance(writer, Unknown):  # an unknown id is asked again next batch
                self._writers[schema_id] = writer
        return writer

    @abstractmethod
    def build(self, schema_id: int, text: str) -> Any:
        """The writer schema ``text`` of ``schema_id`` -> what reads its records, or the
        ``Rejected`` every record of it gets."""

    @abstractmethod
    def read(self, schema_id: int, raw: bytes) -> Decoded | Rejected:
        """One record value of ``schema_id`` (``raw`` whole, its header checked) -> the
        decoded record, or why it cannot be."""
