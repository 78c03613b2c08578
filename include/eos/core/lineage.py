"""Dataset names for lineage: what Airflow assets (and OpenLineage, which reads them) call the
topics and tables a pipeline reads and writes.

Names follow the OpenLineage dataset naming spec, as Airflow's own providers spell them as asset
URIs, so that our assets join the graph other DAGs and tools draw:

- a Kafka topic is ``kafka://{bootstrap server host}:{port}/{topic}`` (OpenLineage: namespace
  ``kafka://host:port``, name the topic; ``apache-airflow-providers-apache-kafka``'s
  ``create_asset(server=, topic=)``). A cluster has many bootstrap servers but one name: the
  *first* server of the configured list names it, as OpenLineage's Spark integration does;
  list the same server first everywhere a cluster is configured, or its topics get two names.
- a Delta table is its location: ``file:///abs/path`` for a local table (the common-io
  provider's ``file://`` assets), ``s3://bucket/path`` (``gs://``, ``abfss://``) on a store.

A name never carries a credential: a ``user:password@`` or a security-protocol prefix
(``SASL_SSL://``) in a configured address, and a query string in a table URI, are dropped. No
I/O beyond the environment and the embedded broker's state file: the DAG file names its assets
at parse time, where no client library may be imported.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from eos.core.bootstrap import configured_bootstrap
from eos.core.storage import scheme

KAFKA_DEFAULT_PORT = 9092  # a bootstrap address without a port means Kafka's default
_ENV_REF = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def kafka_server(bootstrap: str) -> str:
    """``host:port`` of the first server of a bootstrap list, without a protocol prefix or
    credentials (``SASL_SSL://u:p@b1:9093,b2:9093`` -> ``b1:9093``)."""
    first = bootstrap.split(",")[0].strip()
    first = first.split("://", 1)[-1].rsplit("@", 1)[-1].strip("/")
    if not first:
        raise ValueError(f"no bootstrap server in {bootstrap!r}")
    if first.startswith("["):  # an IPv6 literal: [::1]:9092
        return first if "]:" in first else f"{first}:{KAFKA_DEFAULT_PORT}"
    return first if ":" in first else f"{first}:{KAFKA_DEFAULT_PORT}"


def kafka_uri(bootstrap: str, topic: str) -> str:
    """The asset URI of ``topic`` on the cluster that ``bootstrap`` lists."""
    return f"kafka://{kafka_server(bootstrap)}/{topic}"


def client_bootstrap(client: dict[str, Any]) -> str | None:
    """The bootstrap list a client with these config settings uses: its own
    ``bootstrap.servers`` (a config's setting wins, as in ``eos.core.kafka.client_settings``),
    else the deployment's (``eos.core.bootstrap``), else None. A setting that refers to an
    environment variable (``${VAR}``) names no server here: the deployment's is used."""
    own = client.get("bootstrap.servers")
    if isinstance(own, str) and own.strip() and not _ENV_REF.search(own):
        return own
    return configured_bootstrap()


def topic_uri(client: dict[str, Any], topic: str) -> str | None:
    """The asset URI of ``topic`` as a client with these settings reaches it, or None when no
    broker is configured where the name is asked (the asset is then not declared)."""
    bootstrap = client_bootstrap(client)
    return None if bootstrap is None else kafka_uri(bootstrap, topic)


def table_uri(location: str) -> str:
    """The asset URI of a table at ``location`` (a local path, ``file://`` or a store URI)."""
    if scheme(location) is None:
        return f"file://{Path(location.removeprefix('file://')).resolve()}"
    parts = urlsplit(location)
    host = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme.lower()}://{host}{parts.path}".rstrip("/")
