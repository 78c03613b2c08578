"""Pipeline configuration: one YAML file per pipeline in the pipelines directory (``paths``).

Validation happens once, here, so that every phase sees the same typed view and a bad file
fails before anything is planned or written, with a message that names the bad field.

The package's API is below; each name lives in the module of its concern: ``paths`` (where
pipelines, tables and data are), ``loading`` (YAML to a config, its error messages),
``pipeline`` (the whole config), its sections (``kafka_source``, ``event`` with its
``fields`` and ``schema_registry``, ``windows``, ``runtime``, ``sinks``, ``schedule``,
``alerts``), ``values`` (the value rules they share) and ``checks`` (the rules across
sections).
"""

from eos.core.config.event import EventConfig
from eos.core.config.fields import FieldSpec, FieldType
from eos.core.config.loading import load_config, load_pipeline, parse_config
from eos.core.config.paths import (
    DATA_DIR_ENV,
    PIPELINES_DIR_ENV,
    TABLES_BASE_ENV,
    data_dir,
    list_pipelines,
    pipeline_path,
    pipelines_dir,
)
from eos.core.config.pipeline import PipelineConfig
from eos.core.config.runtime import ComputeConfig
from eos.core.config.schedule import ScheduleConfig
from eos.core.config.schema_registry import SchemaRegistryConfig
from eos.core.config.sinks import OUTPUTS
from eos.core.config.values import DurationMs, parse_duration_ms
from eos.core.config.windows import WindowConfig

__all__ = [
    "DATA_DIR_ENV",
    "OUTPUTS",
    "PIPELINES_DIR_ENV",
    "TABLES_BASE_ENV",
    "ComputeConfig",
    "DurationMs",
    "EventConfig",
    "FieldSpec",
    "FieldType",
    "PipelineConfig",
    "ScheduleConfig",
    "SchemaRegistryConfig",
    "WindowConfig",
    "data_dir",
    "list_pipelines",
    "load_config",
    "load_pipeline",
    "parse_config",
    "parse_duration_ms",
    "pipeline_path",
    "pipelines_dir",
]
