"""The package's optional parts (its extras) and the clear error when one is missing.

The base install runs JSON pipelines end to end (``eos broker/spark/produce/run/verify``); a
Schema Registry format, the embedded S3 store and Airflow each need an extra. Asking before the
first import turns a ``ModuleNotFoundError`` deep in a task into one line that names the extra
to install."""

from __future__ import annotations

from importlib.util import find_spec

from eos.core.errors import MissingExtra

DISTRIBUTION = "eos-pipeline"
# The modules each extra brings (the top-level modules of its distributions).
EXTRAS: dict[str, tuple[str, ...]] = {
    "avro": ("fastavro", "authlib", "cachetools", "httpx", "attrs"),
    "protobuf": ("google.protobuf", "google.type", "authlib", "cachetools", "httpx", "attrs"),
    "json-schema": ("jsonschema", "referencing", "authlib", "cachetools", "httpx", "attrs"),
    "s3": ("cryptography",),
    # the audit's second engine and readers (eos verify, eos chaos, the demo's audit)
    "audit": ("duckdb", "duckdb_extension_delta", "duckdb_extension_httpfs", "aiokafka"),
    "airflow": ("airflow", "airflow.providers.apache.spark", "airflow.providers.standard"),
    "postgres": ("psycopg", "psycopg2"),  # a postgres sink writes with one, reads with the other
    # an iceberg sink writes with pyiceberg; the audit reads with DuckDB's iceberg extension,
    # which reads the manifests with DuckDB's avro extension
    "iceberg": ("pyiceberg", "duckdb_extension_iceberg", "duckdb_extension_avro"),
}
# event.format -> the extra it needs (JSON needs none).
FORMAT_EXTRAS = {"avro": "avro", "protobuf": "protobuf", "json_schema": "json-schema"}


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` this environment cannot import."""
    return [name for name in EXTRAS[extra] if not _importable(name)]


def require(extra: str, what: str) -> None:
    """Raise ``MissingExtra`` naming the install command when ``extra`` is not installed;
    ``what`` says who asked (``event.format avro``, ``eos store``)."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtra(
            f"{what} needs the '{extra}' extra (missing: {', '.join(missing)}): "
            f"pip install '{DISTRIBUTION}[{extra}]'")


def require_format(event_format: str, what: str = "event.format") -> None:
    """``require`` for a record format (event or Kafka sink values); JSON needs nothing."""
    extra = FORMAT_EXTRAS.get(event_format)
    if extra is not None:
        require(extra, f"{what} {event_format}")


def _importable(name: str) -> bool:
    try:
        return find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that is itself missing
        return False
