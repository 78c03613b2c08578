"""The pageview pipelines of the windows tests (and of the core and incremental-state tests,
which run the same messy data): every declared type, every aggregation, each window type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eos.core.config import PipelineConfig
from eos.core.kafka import client_settings
from eos.tools.generator import GeneratorSpec, generate
from eos.tools.pipelines import unique_topic
from eos.tools.produce import send

from support.pipelines import make_pipeline

# Every declared type: the same JSON number read as an exact decimal and as a double.
PAGEVIEW_EVENT = {
    "time": {"field": "ts", "format": "iso8601"},
    "fields": {
        "page": "string",
        "country": {"path": "user.country", "type": "string"},
        "user": {"path": "user.id", "type": "string"},
        "revenue": "decimal(12,2)",
        "revenue_f": {"path": "revenue", "type": "double"},
        "duration": {"path": "duration_ms", "type": "long"},
        "referrer": {"path": "referrer", "type": "string", "optional": True},
    },
    "filter": "revenue >= 0",
}
# Every function, on every type it takes.
EVERY_AGGREGATION = {
    "views": "count(*)",
    "referred": "count(referrer)",
    "revenue": "sum(revenue)",
    "revenue_f": "sum(revenue_f)",
    "duration": "sum(duration)",
    "min_revenue": "min(revenue)",
    "max_duration": "max(duration)",
    "first_page": "min(user)",
    "avg_revenue": "avg(revenue)",
    "avg_revenue_f": "avg(revenue_f)",
    "avg_duration": "avg(duration)",
    "users": "count_distinct(user)",
    "approx_users": "approx_count_distinct(user)",
}
# Only functions that lift (``eos.core.aggregations.Lifts``): the events merge with the open
# windows in one aggregation, without aggregating them first (``eos.compute.stage``).
LIFTING = {name: spec for name, spec in EVERY_AGGREGATION.items()
           if not spec.startswith(("count_distinct", "approx_count_distinct"))}
AGGREGATIONS = {"every": EVERY_AGGREGATION, "lifting": LIFTING}
WINDOWS = {
    "tumbling": {"type": "tumbling", "size": "10s", "allowed_lateness": "2s"},
    "hopping": {"type": "hopping", "size": "30s", "slide": "10s", "allowed_lateness": "2s"},
    "session": {"type": "session", "gap": "3s", "allowed_lateness": "2s"},
}
# Disorder within the lateness bound makes no late records; late_delay makes many.
MESSY = GeneratorSpec(events=3000, keys=6, users=40, interval_ms=25, disorder_ms=1500,
                      late_fraction=0.03, late_delay_ms=40_000, bad_fraction=0.03, seed=11,
                      shape="pageviews")
ORDERLY = GeneratorSpec(events=2400, keys=5, users=30, interval_ms=25, disorder_ms=1500,
                        seed=12, shape="pageviews")


def pageview_pipeline(directory: Path, window_type: str, topic: str, **overrides: Any
                      ) -> PipelineConfig:
    """A pipeline reading pageviews from ``topic``: every declared type, every aggregation, the
    window type named; ``overrides`` replace whole sections."""
    base = {"kafka": {"topic": topic, "split_records": 4000}, "event": PAGEVIEW_EVENT,
            "group_by": ["page", "country"], "window": WINDOWS[window_type],
            "aggregations": EVERY_AGGREGATION}
    return make_pipeline(directory, base=base, **overrides)


def produce(spec: GeneratorSpec) -> str:
    """``spec``'s records on a new topic, whose name is returned."""
    topic = unique_topic("pv")
    send(generate(spec), spec.events, topic, client_settings(), progress=False)
    return topic
