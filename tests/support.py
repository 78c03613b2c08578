"""Test helpers shared by several test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import yaml

from eos.config import PipelineConfig, load_config


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def write_pipeline(directory: Path, **overrides: object) -> PipelineConfig:
    """A pipeline config file with a unique name; ``overrides`` replace top-level sections."""
    name = overrides.pop("name", None) or f"p{uuid.uuid4().hex[:8]}"
    data: dict[str, object] = {
        "name": name,
        "kafka": {"topic": unique_topic(), "read_timeout": "30s", "split_records": 4000},
        "event": {"key": "key", "time": "ts", "value": "value"},
        "window": {"size": "10s", "allowed_lateness": "2s"},
        "epoch": {"max_records": 1_000_000, "staging_retention": 2},
        "tables": {"root": str(directory / name)},
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
    }
    data.update(overrides)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)
