"""The one factory of throwaway pipelines (the tests', the benchmarks'): a YAML file with a
unique name, loaded and validated by ``eos.core.config.load_config`` like any pipeline.

The defaults are the generator's clicks shape (``eos.tools.generator``) grouped by key in
tumbling 10 s windows, the clicks pipeline's five aggregations, the three Delta sinks under
``directory/<name>``, Spark ``local[2]``; every top-level section can be replaced.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import yaml

from eos.core.config import TABLES_BASE_ENV, PipelineConfig, load_config

# The generator's "clicks" shape: {"key": str, "ts": epoch ms, "value": number}.
CLICKS_EVENT = {"time": {"field": "ts", "format": "epoch_ms"},
                "fields": {"key": "string", "value": "decimal(38,9)"}}
CLICKS_AGGREGATIONS = {"count": "count(*)", "sum": "sum(value)", "min": "min(value)",
                       "max": "max(value)", "avg": "avg(value)"}


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def write_pipeline(directory: Path, **overrides: object) -> PipelineConfig:
    """Write ``directory/<name>.yaml`` and load it. ``overrides`` replace whole top-level
    sections (``kafka``, ``window``, ``sinks``, ...); ``name`` defaults to a unique one, the
    topic to a unique one, the tables' root to ``directory/<name>``, or, when
    ``EOS_TABLES_BASE`` names a store (``s3://bucket/run``), to ``<base>/<directory's
    name>/<name>`` there: the same tests and benchmarks run with every table on the store."""
    name = overrides.pop("name", None) or f"p{uuid.uuid4().hex[:8]}"
    base = os.environ.get(TABLES_BASE_ENV)
    root = f"{base.rstrip('/')}/{directory.name}/{name}" if base else str(directory / name)
    data: dict[str, object] = {
        "name": name,
        "kafka": {"topic": unique_topic(), "read_timeout": "30s", "split_records": 4000},
        "event": CLICKS_EVENT,
        "group_by": ["key"],
        "window": {"type": "tumbling", "size": "10s", "allowed_lateness": "2s"},
        "aggregations": CLICKS_AGGREGATIONS,
        "epoch": {"max_records": 1_000_000, "staging_retention": 2},
        "tables": {"root": root},
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
    }
    data.update(overrides)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))  # declared order is column order
    return load_config(path)
