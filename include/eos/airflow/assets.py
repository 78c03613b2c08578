"""Airflow Assets of a pipeline: its sinks as outlets of the task that commits an epoch, its source
topic as an inlet of the task that reads it, and what each asset event says about the epoch.
Named as OpenLineage and Airflow's providers name the dataset (``eos.core.lineage``)."""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import Asset

from eos.core.config import PipelineConfig
from eos.core.sink import SupportsAssets, sinks_for

log = logging.getLogger(__name__)


def sink_assets(config: PipelineConfig) -> dict[str, Asset]:
    """One Airflow Asset per sink, published when an epoch commits, keyed by sink name and named
    as OpenLineage and Airflow's providers name the dataset (``eos.core.lineage``):
    ``file:///abs/path`` (or ``s3://bucket/path``) for a Delta table,
    ``kafka://<first bootstrap host:port>/<topic>`` for a Kafka topic. The URI is the asset's
    name too, as the providers' ``create_asset`` makes it: another DAG that reads the topic or
    the table declares the same asset, and lineage joins. A Kafka sink where no broker is
    configured (the DAG parsed without ``KAFKA_BOOTSTRAP_SERVERS`` or a running embedded broker)
    has no name and publishes nothing."""
    assets = {}
    for sink in sinks_for(config):
        if not isinstance(sink, SupportsAssets):
            continue  # a sink type without asset naming publishes none
        uri = sink.asset_uri()
        if uri is None:
            log.warning("eos: no asset for sink %s of %s: %s", sink.name, config.name,
                        sink.asset_unnamed())
            continue
        assets[sink.name] = Asset(uri=uri)
    return assets


def source_assets(config: PipelineConfig) -> list[Asset]:
    """The source topics as inlets of the task that reads their records (precommit):
    ``kafka://<first bootstrap host:port>/<topic>`` each; none where no broker is configured,
    nor for a ``kafka.pattern`` (its topics are the broker's to say, epoch by epoch)."""
    from eos.core.lineage import topic_uri

    uris = [topic_uri(config.kafka.client, topic) for topic in config.kafka.named_topics or []]
    if any(uri is None for uri in uris):
        log.warning("eos: no asset for the source topic of %s: no Kafka broker configured to "
                    "name it", config.name)
        return []
    return [Asset(uri=uri) for uri in uris if uri is not None]


def asset_extra(planned: dict[str, Any], result: Any, sink: str) -> dict[str, Any]:
    """What one sink's asset event says about the epoch: which one, what it read (the offset
    ranges and their record count, from begin's plan) and what it wrote (rows by output; the
    sink's Delta version or offset when this attempt wrote)."""
    return {
        "epoch": result.epoch,
        "plan_hash": result.plan_hash,
        "outcome": str(result.outcome),
        # the offset ranges read, [start, until) per partition (a plan from before ``offsets``
        # existed gives its printed ranges)
        "ranges": planned.get("offsets", planned["ranges"]),
        "records": planned["records"],
        "rows": result.rows,
        "sink_version": result.versions.get(sink),
    }
