"""eos as an Airflow provider: what ``airflow providers list`` (and Admin -> Providers) shows.

Airflow finds it through the package's ``apache_airflow_provider`` entry point and validates it
against its runtime provider schema; the version comes from the installed distribution. eos
defines no connection type of its own: it reads the connections of the providers it depends
on, listed under ``integrations`` with the type each one uses. Its plugin (the epochs view) is
not listed here: the ``airflow.plugins`` entry point registers it, and a provider's ``plugins``
would register it a second time (Airflow then warns in every process). Importing this module
imports nothing from Airflow (every component reads it at start-up)."""

from __future__ import annotations

from typing import Any

from eos import __version__

PACKAGE = "eos-pipeline"
# (integration, the connection type eos reads for it, its default connection id); the
# deployment guide's "Connections" says what each holds.
CONNECTIONS = (
    ("Apache Kafka", "kafka", "kafka_default"),
    ("Apache Spark (Connect)", "spark_connect", "spark_connect_default"),
    ("Apache Spark (spark-submit)", "spark", "spark_default"),
    ("Object storage (S3)", "aws", "eos_object_store"),
    ("PostgreSQL", "postgres", "postgres_default"),
)


def get_provider_info() -> dict[str, Any]:
    """The provider's description, in Airflow's provider-info shape."""
    return {
        "package-name": PACKAGE,
        "name": "eos",
        "description": "Exactly-once micro-batches from Kafka: one DAG run per checkpoint "
                       "epoch, Spark computing, every sink (Delta Lake, Iceberg, Kafka, "
                       "PostgreSQL, files) committed in a two-phase commit.",
        "versions": [__version__],
        "integrations": [
            {"integration-name": name,
             "tags": ["eos", f"connection-type:{conn_type}", f"default-conn-id:{conn_id}"]}
            for name, conn_type, conn_id in CONNECTIONS],
    }
