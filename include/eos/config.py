"""Pipeline configuration: one YAML file per pipeline in ``include/pipelines/``.

Validation happens once, here, so that every phase sees the same typed view and a bad file
fails before anything is planned or written, with a message that names the bad field.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from eos.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PIPELINES_DIR = PROJECT_ROOT / "include" / "pipelines"

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(value: Any) -> int:
    """Durations are written like ``60s``; a bare integer means milliseconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 60s, 5m, 500ms")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return value
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return int(match.group(1)) * _UNIT_MS[match.group(2)]
    raise ValueError(f"expected a duration like 60s, 5m, 500ms, got {value!r}")


DurationMs = Annotated[int, BeforeValidator(parse_duration_ms)]
OUTPUTS = ("windows", "late", "quarantine")  # what an epoch produces; each goes to its sinks
Aggregation = Literal["count", "sum", "min", "max", "avg"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaConfig(_Strict):
    topic: str = Field(min_length=1)
    start: Literal["earliest", "latest"] = "earliest"
    client: dict[str, str | int | float | bool] = Field(default_factory=dict)
    read_timeout: DurationMs = 60_000
    split_records: int = Field(default=250_000, gt=0)


class EventConfig(_Strict):
    key: str = "key"
    time: str = "ts"
    value: str = "value"
    max_future: DurationMs = 86_400_000


class WindowConfig(_Strict):
    size: DurationMs
    allowed_lateness: DurationMs = 0
    idle_timeout: DurationMs | None = None

    @field_validator("size")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("window size must be positive")
        return v


class EpochConfig(_Strict):
    max_records: int = Field(default=500_000, gt=0)
    staging_retention: int = Field(default=3, ge=1)
    maintenance_every: int = Field(default=100, ge=0)


class TablesConfig(_Strict):
    root: str | None = None


class SparkConfig(_Strict):
    master: str = "local[2]"
    shuffle_partitions: int = Field(default=2, gt=0)
    driver_memory: str = Field(default="2g", pattern=r"^\d+[kmgt]?$")
    conf: dict[str, str] = Field(default_factory=dict)


def _one_sink(value: Any) -> dict[str, Any]:
    """``{type: options}``: exactly one known sink type, its options checked by that sink's module
    (``eos.sinks``: the one place sink types are listed)."""
    from eos.sinks import sink_class

    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"a sink is one mapping like {{delta: target}} or {{kafka: topic}}, "
                         f"got {value!r}")
    ((kind, options),) = value.items()
    return {kind: sink_class(kind).parse_options(options)}


SinkSpec = Annotated[dict[str, Any], BeforeValidator(_one_sink)]


class SinksConfig(_Strict):
    """Where each output of an epoch goes. Every sink receives each epoch exactly once."""

    windows: list[SinkSpec] = Field(default_factory=lambda: [{"delta": "target"}], min_length=1)
    late: list[SinkSpec] = Field(default_factory=lambda: [{"delta": "late"}])
    quarantine: list[SinkSpec] = Field(default_factory=lambda: [{"delta": "quarantine"}])

    def by_output(self) -> list[tuple[str, dict[str, Any]]]:
        """(output, spec) in commit order: outputs as declared here, sinks as listed."""
        return [(output, spec) for output in OUTPUTS for spec in getattr(self, output)]


class PipelineConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    kafka: KafkaConfig
    event: EventConfig = Field(default_factory=EventConfig)
    window: WindowConfig
    aggregations: list[Aggregation] = Field(
        default_factory=lambda: ["count", "sum", "min", "max", "avg"], min_length=1
    )
    epoch: EpochConfig = Field(default_factory=EpochConfig)
    tables: TablesConfig = Field(default_factory=TablesConfig)
    sinks: SinksConfig = Field(default_factory=SinksConfig)
    schedule: str | None = None
    spark: SparkConfig = Field(default_factory=SparkConfig)
    source_path: str | None = None

    @field_validator("sinks")
    @classmethod
    def _unique_sinks(cls, sinks: SinksConfig) -> SinksConfig:
        from eos.sinks import sink_name

        names = [sink_name(spec) for _, spec in sinks.by_output()]
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise ValueError(f"each sink may appear once per pipeline; repeated: {doubled}")
        return sinks

    @property
    def app_id(self) -> str:
        """The Delta ``txn`` application id: one per pipeline, shared by every sink."""
        return f"eos:{self.name}"

    @property
    def root(self) -> Path:
        """Where this pipeline's tables live; relative roots sit under the data directory."""
        root = Path(self.tables.root or self.name)
        return root if root.is_absolute() else data_dir() / root


def data_dir() -> Path:
    """Base directory for tables and broker state: ``EOS_DATA_DIR`` or ``<project>/data``."""
    return Path(os.environ.get("EOS_DATA_DIR") or PROJECT_ROOT / "data").resolve()


def _describe(error: ValidationError, source: str) -> str:
    problems = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "(top level)"
        problems.append(f"field '{field}': {item['msg']}")
    return f"invalid pipeline config {source}: " + "; ".join(problems)


def parse_config(data: Any, source: str = "<memory>") -> PipelineConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"invalid pipeline config {source}: expected a mapping at top level")
    try:
        return PipelineConfig.model_validate({**data, "source_path": source})
    except ValidationError as error:
        raise ConfigError(_describe(error, source)) from None


def load_config(path: str | Path) -> PipelineConfig:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read pipeline config {path}: {error.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"pipeline config {path} is not valid YAML: {error}") from None
    return parse_config(data, str(path.resolve()))


def pipeline_path(name: str) -> Path:
    return PIPELINES_DIR / f"{name}.yaml"


def load_pipeline(name: str | None = None, path: str | Path | None = None) -> PipelineConfig:
    """Resolve ``--pipeline NAME`` or ``--config PATH`` (exactly one) to a validated config."""
    if (name is None) == (path is None):
        raise ConfigError("name a pipeline with --pipeline NAME or a file with --config PATH")
    if path is not None:
        return load_config(path)
    candidate = pipeline_path(name)
    if not candidate.exists():
        known = ", ".join(sorted(p.stem for p in PIPELINES_DIR.glob("*.yaml"))) or "none"
        raise ConfigError(f"no pipeline named '{name}' in {PIPELINES_DIR} (known: {known})")
    return load_config(candidate)


def list_pipelines() -> list[Path]:
    return sorted(PIPELINES_DIR.glob("*.yaml"))
