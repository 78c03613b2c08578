"""Per-epoch metrics through Airflow's own metrics client, from the tasks of an epoch's DAG run.

The task SDK's ``stats`` (``airflow.sdk.observability``) sends them wherever the deployment
configured ``[metrics]``: StatsD (``statsd_on``), OpenTelemetry (``otel_on``), or nowhere (then
nothing here costs a Kafka query). Airflow prefixes every name (``statsd_prefix``, ``airflow``
by default); ours follow as ``eos.<pipeline>.<what>`` (docs/operating.md, "Metrics", has the
list and a Prometheus mapping):

- begin: ``lag`` (records left in the topic after this epoch's plan) and ``lag.p<N>`` per
  partition, ``planned_records``, ``phase.begin`` (ms);
- precommit (Spark Connect; a spark-submit precommit reports through its own log line):
  ``staged.<kind>`` rows, ``watermark_delay_ms`` (now minus the epoch's watermark),
  ``precommit.<step>`` (ms: read_parse, aggregate, staging_write...), ``phase.precommit``;
- commit: ``rows.<output>`` (windows, late, quarantine), ``commit.<outcome>`` counters
  (``committed``, ``already_committed``), ``commit.raced`` when a sink lost a race it then
  found committed, ``phase.commit``.

Metrics are never an input to an epoch and never fail one: a metrics backend that is down loses
its packets (StatsD is UDP), nothing else.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from typing import Any

from eos.core.checkpoints import NO_WATERMARK
from eos.core.config import PipelineConfig

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]")


def enabled() -> bool:
    """Whether the deployment sends metrics anywhere (read per call: tests switch it)."""
    from airflow.configuration import conf

    return (conf.getboolean("metrics", "statsd_on", fallback=False)
            or conf.getboolean("metrics", "otel_on", fallback=False))


def name(config: PipelineConfig, *parts: str) -> str:
    """``eos.<pipeline>.<part>...``, each part reduced to the characters every backend takes."""
    return ".".join(["eos", *(_UNSAFE.sub("_", p) for p in (config.name, *parts))])


def _stats() -> Any:
    """The task SDK's metrics (``gauge``, ``timing``, ``incr``), set up from ``[metrics]`` by
    the task runner in every task process."""
    from airflow.sdk.observability import stats

    return stats


def begin_metrics(config: PipelineConfig, plan: Any, duration_ms: float) -> None:
    """The plan's size and the lag it leaves, per partition and in total."""
    if not enabled():
        return
    from eos.core.pipeline_status import partition_lags
    from eos.core.plan import KafkaSource

    stats = _stats()
    stats.gauge(name(config, "planned_records"), plan.records)
    stats.timing(name(config, "phase", "begin"), duration_ms)
    lags = partition_lags(config, plan.until, KafkaSource().watermarks(config))
    known = [p for p in lags if p.lag is not None]
    for p in known:  # ``lag.p<n>`` for one topic, ``lag.<topic>.p<n>`` for several
        where = (f"p{p.partition}",) if config.kafka.topic else (p.topic, f"p{p.partition}")
        stats.gauge(name(config, "lag", *where), p.lag)
    stats.gauge(name(config, "lag"), sum(p.lag or 0 for p in known))


def precommit_metrics(config: PipelineConfig, result: Any) -> None:
    """What precommit staged, how far its watermark trails the clock, and where its time went."""
    if not enabled():
        return
    stats = _stats()
    _gauges(stats, config, "staged", result.counts.items())
    if result.watermark_ms is not None and result.watermark_ms > NO_WATERMARK:  # none yet, or ever
        stats.gauge(name(config, "watermark_delay_ms"),
                    max(0, int(time.time() * 1000) - int(result.watermark_ms)))
    for step, ms in result.timings_ms.items():
        if step != "total":
            stats.timing(name(config, "precommit", step), ms)
    stats.timing(name(config, "phase", "precommit"), result.timings_ms.get("total", 0.0))


def commit_metrics(config: PipelineConfig, result: Any) -> None:
    """Rows committed per output and how the commit ended."""
    if not enabled():
        return
    stats = _stats()
    _gauges(stats, config, "rows", result.rows.items())
    stats.incr(name(config, "commit", str(result.outcome).replace(" ", "_")))
    if any(s.raced for s in result.sinks):
        stats.incr(name(config, "commit", "raced"))
    stats.timing(name(config, "phase", "commit"), result.duration_ms)


def _gauges(stats: Any, config: PipelineConfig, what: str,
            counts: Iterable[tuple[str, int]]) -> None:
    for key, value in counts:
        stats.gauge(name(config, what, key), value)


def safely(emit: Any, *args: Any) -> None:
    """Emit, never failing the task: metrics are not part of the epoch (a broker that does not
    answer the lag query costs the lag gauges only)."""
    try:
        emit(*args)
    except Exception as error:
        log.warning("eos metrics: %s not sent (%s: %s)", emit.__name__, type(error).__name__,
                    error)
