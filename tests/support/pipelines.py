"""The tests' one pipeline factory: every test pipeline is a YAML written by the library's
``eos.tools.pipelines.write_pipeline`` and loaded with ``load_config`` (so sink options are
validated through the registered sink types), its shape chosen by parameters."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eos.core.config import PipelineConfig
from eos.core.kafka import client_settings
from eos.tools.generator import GeneratorSpec
from eos.tools.pipelines import unique_topic, write_pipeline
from eos.tools.produce import produce

from support.memory import IN_MEMORY

__all__ = ["IN_MEMORY", "SHIPPED_PIPELINES", "kafka_sinks", "make_pipeline", "same_pipeline"]

# The pipelines this repository ships (include/pipelines), which some tests load by name.
SHIPPED_PIPELINES = Path(__file__).resolve().parents[2] / "include" / "pipelines"


def kafka_sinks() -> dict[str, Any]:
    """Sections of a pipeline whose windows go to a Kafka topic of its own and a Delta table
    (the seeds' job)."""
    return {"sinks": {"windows": [{"kafka": unique_topic("out")}, {"delta": "target"}],
                      "late": [{"delta": "late"}], "quarantine": [{"delta": "quarantine"}]}}


def make_pipeline(directory: Path, *, name: str | None = None,
                  base: Mapping[str, Any] | None = None,
                  dag: tuple[Path, str] | None = None,
                  max_records: int | None = None, staging_retention: int | None = None,
                  records: GeneratorSpec | None = None, **sections: Any) -> PipelineConfig:
    """A pipeline written to ``directory/<name>.yaml`` and loaded; the same ``name`` is the same
    pipeline.

    - ``base``: the sections of a family of tests (``IN_MEMORY``: the unit tier's stand-ins;
      ``kafka_sinks()``); ``sections`` replace whole top-level sections of it.
    - ``dag=(data_dir, prefix)``: the Airflow tests' shape: named ``<prefix>_<unique>`` (so
      dags/ builds ``eos_<name>`` for it from ``directory``, ``EOS_PIPELINES_DIR``), a topic of
      its own, epochs of 1,000 records, windows of 10 s, tables under ``data_dir``.
    - ``max_records``, ``staging_retention``: the ``epoch`` section's two settings.
    - ``records``: produced to the pipeline's topic once it is written.
    """
    merged: dict[str, Any] = dict(base or {})
    if dag is not None:
        data_dir, prefix = dag
        name = f"{prefix}_{unique_topic('')[1:]}"
        merged.update(kafka={"topic": unique_topic(prefix), "read_timeout": "30s"},
                      window={"size": "10s", "allowed_lateness": "2s"},
                      epoch={"max_records": 1000, "staging_retention": 3},
                      tables={"root": str(data_dir / name)})
    if max_records is not None or staging_retention is not None:
        merged["epoch"] = {**({"max_records": max_records} if max_records is not None else {}),
                           **({"staging_retention": staging_retention}
                              if staging_retention is not None else {})}
    merged.update(sections)
    config = write_pipeline(directory, **({"name": name} if name else {}), **merged)
    if records is not None:
        produce(records, config.kafka.topic, client_settings(config.kafka.client),
                progress=False)
    return config


def same_pipeline(config: PipelineConfig, **sections: Any) -> PipelineConfig:
    """``config``'s in-memory pipeline (same name, directory, tables and sinks) with sections
    replaced."""
    directory = Path(str(config.source_path)).parent
    sinks = sections.pop("sinks", None) or config.sinks.model_dump()
    return make_pipeline(directory, base=IN_MEMORY, name=config.name, sinks=sinks, **sections)
