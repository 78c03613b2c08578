"""The test harness shared by every test module (fixtures live in conftest.py): a pipeline
factory, running epochs, table versions, sinks by name, and the ``eos`` command in a process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

from eos.compute.stage import SparkStager
from eos.core.config import PipelineConfig, load_config
from eos.core.kafka import client_settings
from eos.core.plan import Plan
from eos.tools.produce import GeneratorSpec, produce

KILLED = -9  # the return code of a process a fault point SIGKILLed (eos.core.faults)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# The generator's "clicks" shape: {"key": str, "ts": epoch ms, "value": number}.
CLICKS_EVENT = {"time": {"field": "ts", "format": "epoch_ms"},
                "fields": {"key": "string", "value": "decimal(38,9)"}}
CLICKS_AGGREGATIONS = {"count": "count(*)", "sum": "sum(value)", "min": "min(value)",
                       "max": "max(value)", "avg": "avg(value)"}


def write_pipeline(directory: Path, **overrides: object) -> PipelineConfig:
    """A pipeline config file with a unique name; ``overrides`` replace top-level sections."""
    name = overrides.pop("name", None) or f"p{uuid.uuid4().hex[:8]}"
    data: dict[str, object] = {
        "name": name,
        "kafka": {"topic": unique_topic(), "read_timeout": "30s", "split_records": 4000},
        "event": CLICKS_EVENT,
        "group_by": ["key"],
        "window": {"type": "tumbling", "size": "10s", "allowed_lateness": "2s"},
        "aggregations": CLICKS_AGGREGATIONS,
        "epoch": {"max_records": 1_000_000, "staging_retention": 2},
        "tables": {"root": str(directory / name)},
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
    }
    data.update(overrides)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))  # declared order is column order
    return load_config(path)


def dag_pipeline(directory: Path, data_dir: Path, prefix: str, spec: GeneratorSpec,
                 **overrides: object) -> PipelineConfig:
    """A pipeline for the Airflow tests: a topic of its own holding ``spec``'s records, epochs
    of 1,000 records, tables under ``data_dir``; its YAML in ``directory``, where dags/ finds
    it (``EOS_PIPELINES_DIR``)."""
    name = f"{prefix}_{unique_topic('')[1:]}"
    config = write_pipeline(
        directory,
        name=name,
        kafka={"topic": unique_topic(prefix), "read_timeout": "30s"},
        window={"size": "10s", "allowed_lateness": "2s"},
        epoch={"max_records": 1000, "staging_retention": 3},
        tables={"root": str(data_dir / name)},
        **overrides,
    )
    produce(spec, config.kafka.topic, client_settings(config.kafka.client), progress=False)
    return config


def kafka_sink_pipeline(directory: Path, **overrides: object) -> PipelineConfig:
    """A pipeline whose windows go to a Kafka topic and a Delta table (the seeds' job)."""
    out = unique_topic("out")
    sinks = {"windows": [{"kafka": out}, {"delta": "target"}], "late": [{"delta": "late"}],
             "quarantine": [{"delta": "quarantine"}]}
    return write_pipeline(directory, sinks=sinks, **overrides)


def run_epoch(config: PipelineConfig, spark: Any, run_id: str) -> Plan:
    """begin -> precommit -> commit in this process, as one DAG run does it."""
    from eos.core.protocol import begin, commit, precommit

    plan = begin(config, run_id=run_id)
    precommit(config, plan.epoch, SparkStager(spark))
    commit(config, plan.epoch)
    return plan


def run_until_caught_up(config: PipelineConfig, spark: Any, tag: str,
                        limit: int = 30) -> list[Plan]:
    """Epochs until one is empty (the pipeline has read everything in the topic)."""
    plans: list[Plan] = []
    while len(plans) < limit:
        plans.append(run_epoch(config, spark, f"{tag}-{len(plans)}"))
        if plans[-1].records == 0:
            return plans
    raise AssertionError(f"not caught up after {limit} epochs")


def finish_and_audit(config: PipelineConfig, spark: Any, tag: str, records: int) -> None:
    """Recovery by rerunning: run the remaining epochs, then audit everything from scratch:
    every sink equals the ground truth of all ``records`` produced."""
    from eos.tools.audit import audit

    run_until_caught_up(config, spark, tag)
    report = audit(config)
    assert report.ok, report.render()
    assert report.records == records


def sink(config: PipelineConfig, name: str) -> Any:
    """The configured sink named ``name`` (``delta:target``, ``kafka:<topic>``)."""
    from eos.core.sink import sinks_for

    return next(s for s in sinks_for(config) if s.name == name)


def delta_path(config: PipelineConfig, table: str) -> str:
    return sink(config, f"delta:{table}").path


def table_versions(config: PipelineConfig) -> dict[str, int]:
    """The Delta version of the pipeline's own tables and of every Delta sink."""
    from deltalake import DeltaTable

    from eos.core.layout import tables_for
    from eos.core.sink import sinks_for

    t = tables_for(config)
    paths = {"epochs": t.epochs, "staging": t.staging, "checkpoints": t.checkpoints}
    paths.update({s.name: s.path for s in sinks_for(config) if s.kind == "delta"})
    return {name: DeltaTable(path).version() for name, path in paths.items()}


def eos_cli(config: PipelineConfig, *args: str, faults: str | None = None,
            faults_dir: Path | None = None, env: dict[str, str] | None = None,
            wait: bool = True) -> Any:
    """``eos <command> --config <pipeline> ...`` in its own process, optionally with faults.

    ``wait=False`` returns the running ``Popen`` (for races: start several, then wait)."""
    full_env = {**os.environ, **(env or {})}
    if faults:
        full_env["EOS_FAULTS"] = faults
        full_env["EOS_FAULTS_DIR"] = str(faults_dir)
    cmd = [sys.executable, "-m", "eos.tools.cli", args[0], "--config", str(config.source_path),
           *args[1:]]
    if not wait:
        return subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, check=False)


def commit_summary(stdout: str) -> dict[str, Any]:
    """What ``eos commit`` printed: the commit's summary as JSON on its last line."""
    return json.loads(stdout.strip().splitlines()[-1])
