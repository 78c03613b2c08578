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
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from eos.core.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parents[3]  # include/eos/core/config.py
PIPELINES_DIR = PROJECT_ROOT / "include" / "pipelines"
PIPELINES_DIR_ENV = "EOS_PIPELINES_DIR"  # another directory of pipeline YAMLs (tests, benches)

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

FIELD_TYPES = ("string", "long", "double", "boolean")  # and decimal(p,s)
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")  # a field or output column: a plain SQL identifier
TIME_FORMATS = ("epoch_ms", "epoch_s", "iso8601", "kafka_timestamp")
# Columns every window row has; a field or aggregation may not take these names.
RESERVED = ("window_start", "window_end", "epoch")


def _check_name(value: str, what: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"{what} '{value}' must be a plain identifier (letters, digits, _; "
                         "starting with a letter)")
    if value.lower() in RESERVED:
        raise ValueError(f"{what} '{value}' is reserved for the window columns {RESERVED}")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaConfig(_Strict):
    topic: str = Field(min_length=1)
    start: Literal["earliest", "latest"] = "earliest"
    client: dict[str, str | int | float | bool] = Field(default_factory=dict)
    read_timeout: DurationMs = 60_000
    split_records: int = Field(default=250_000, gt=0)


class FieldType(_Strict):
    """A declared type: ``string | long | double | boolean | decimal(p,s)``."""

    name: str
    precision: int | None = None
    scale: int | None = None

    @classmethod
    def parse(cls, text: Any) -> FieldType:
        if not isinstance(text, str):
            raise ValueError(f"a type is one of {FIELD_TYPES} or decimal(p,s), got {text!r}")
        text = text.strip().lower()
        match = _DECIMAL.match(text)
        if match:
            precision, scale = int(match.group(1)), int(match.group(2))
            if not 1 <= precision <= 38 or scale > precision:
                raise ValueError(f"{text}: need 1 <= p <= 38 and s <= p")
            return cls(name="decimal", precision=precision, scale=scale)
        if text not in FIELD_TYPES:
            raise ValueError(f"unknown type '{text}': use one of {FIELD_TYPES} or decimal(p,s)")
        return cls(name=text)

    def __str__(self) -> str:
        return f"decimal({self.precision},{self.scale})" if self.name == "decimal" else self.name

    @property
    def numeric(self) -> bool:
        return self.name in ("long", "double", "decimal")


class FieldSpec(_Strict):
    """One declared event field: where it is in the JSON object and what type it must have.

    ``optional`` fields may be absent or null (they become SQL NULL); every other field must be
    present, non-null and of its type, or the record is quarantined naming the field."""

    path: tuple[str, ...]
    type: FieldType
    optional: bool = False

    @classmethod
    def parse(cls, name: str, value: Any) -> FieldSpec:
        if isinstance(value, str):
            return cls(path=(name,), type=FieldType.parse(value))
        if not isinstance(value, dict):
            raise ValueError(f"field '{name}': write `{name}: TYPE` or "
                             f"`{name}: {{path: a.b, type: TYPE}}`, got {value!r}")
        unknown = set(value) - {"path", "type", "optional"}
        if unknown or "type" not in value:
            raise ValueError(f"field '{name}': keys are path, type (required), optional; "
                             f"got {sorted(value)}")
        path = value.get("path", name)
        if not isinstance(path, str) or not all(path.split(".")):
            raise ValueError(f"field '{name}': path must be dotted keys like user.id, got {path!r}")
        optional = value.get("optional", False)
        if not isinstance(optional, bool):
            raise ValueError(f"field '{name}': optional is true or false")
        return cls(path=tuple(path.split(".")), type=FieldType.parse(value["type"]),
                   optional=optional)


class TimeConfig(_Strict):
    """Where event time comes from: a field in one of the formats, or the Kafka timestamp."""

    field: str | None = None
    format: Literal["epoch_ms", "epoch_s", "iso8601", "kafka_timestamp"] = "epoch_ms"

    @model_validator(mode="after")
    def _field_iff_needed(self) -> TimeConfig:
        if self.format == "kafka_timestamp" and self.field is not None:
            raise ValueError("format kafka_timestamp takes no field")
        if self.format != "kafka_timestamp" and not self.field:
            raise ValueError(f"format {self.format} needs the field the time is in")
        return self

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(self.field.split(".")) if self.field else ()


def _fields(value: Any) -> dict[str, FieldSpec]:
    if not isinstance(value, dict) or not value:
        raise ValueError("fields: a mapping of name -> type (at least one)")
    return {_check_name(str(name), "field"): FieldSpec.parse(str(name), spec)
            for name, spec in value.items()}


MAX_STRING_BYTES = 16_384  # event.max_string_bytes' default


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SchemaRegistryConfig(_Strict):
    """Where a Schema Registry format finds its writer schemas (``eos.compute.formats``).

    Credentials are never in this file: ``auth_env`` names an environment variable holding
    ``user:password`` (HTTP basic auth), ``connection`` names an Airflow connection (its login
    and password). Only these names travel to the Spark workers, which read the secret
    themselves; the URL may not carry one."""

    url: str
    auth_env: str | None = None
    connection: str | None = None
    timeout: DurationMs = 10_000  # one request; a registry slower than this is down (transient)

    @field_validator("url")
    @classmethod
    def _plain_url(cls, url: str) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"schema_registry.url must be http(s)://host[:port], got {url!r}")
        if parts.username is not None or parts.password is not None:
            raise ValueError("schema_registry.url may not carry credentials: name them with "
                             "auth_env (a variable holding user:password) or connection")
        return url.rstrip("/")

    @field_validator("auth_env")
    @classmethod
    def _env_name(cls, name: str | None) -> str | None:
        if name is not None and not _ENV_NAME.match(name):
            raise ValueError(f"schema_registry.auth_env is the name of an environment variable "
                             f"(letters, digits, _), got {name!r}")
        return name

    @model_validator(mode="after")
    def _one_source(self) -> SchemaRegistryConfig:
        if self.auth_env and self.connection:
            raise ValueError("schema_registry: give auth_env or connection, not both")
        return self


class EventConfig(_Strict):
    # How a record value is decoded (``eos.compute.formats``): json, or a Schema Registry format.
    format: Literal["json", "avro", "protobuf", "json_schema"] = "json"
    schema_registry: SchemaRegistryConfig | None = None
    time: TimeConfig
    fields: Annotated[dict[str, FieldSpec], BeforeValidator(_fields)]
    filter: str | None = None
    max_future: DurationMs = 86_400_000
    # A longer string field quarantines its record (``eos.compute.parse``): every output record
    # must fit every sink's record limit (checked against the Kafka sinks when the config loads).
    max_string_bytes: int = Field(default=MAX_STRING_BYTES, ge=64)

    @model_validator(mode="after")
    def _registry_iff_needed(self) -> EventConfig:
        if self.format == "json" and self.schema_registry is not None:
            raise ValueError("event.schema_registry is only for a Schema Registry format "
                             "(format: avro, protobuf or json_schema)")
        if self.format != "json" and self.schema_registry is None:
            raise ValueError(f"event.format {self.format} needs event.schema_registry "
                             "(url, and auth_env or connection if it asks for credentials)")
        return self

    @model_validator(mode="after")
    def _filter_parses(self) -> EventConfig:
        if self.filter is not None:
            from eos.core.filters import filter_columns

            unknown = sorted(set(filter_columns(self.filter)) - set(self.fields))
            if unknown:
                raise ValueError(f"filter uses {unknown}, which are not declared fields "
                                 f"(declared: {sorted(self.fields)})")
        return self


_CALL = re.compile(r"^\s*([a-z_]+)\s*\(\s*(\*|[A-Za-z][A-Za-z0-9_]*)\s*\)\s*$")


class AggregationSpec(_Strict):
    """``output: function(field)``; the functions live in ``eos.core.aggregations``."""

    function: str
    field: str | None  # None for count(*)

    @classmethod
    def parse(cls, output: str, text: Any) -> AggregationSpec:
        from eos.core.aggregations import FUNCTIONS

        match = _CALL.match(text) if isinstance(text, str) else None
        if not match:
            raise ValueError(f"aggregation '{output}': write function(field), e.g. sum(amount) "
                             f"or count(*), got {text!r}")
        function, argument = match.groups()
        if function not in FUNCTIONS:
            raise ValueError(f"aggregation '{output}': unknown function '{function}' "
                             f"(known: {', '.join(FUNCTIONS)})")
        if argument == "*" and function != "count":
            raise ValueError(f"aggregation '{output}': only count takes *, "
                             f"{function} needs a field")
        return cls(function=function, field=None if argument == "*" else argument)

    def __str__(self) -> str:
        return f"{self.function}({self.field or '*'})"


def _aggregations(value: Any) -> dict[str, AggregationSpec]:
    if not isinstance(value, dict) or not value:
        raise ValueError("aggregations: a mapping of output column -> function(field), "
                         "e.g. {views: count(*)}")
    return {_check_name(str(out), "aggregation"): AggregationSpec.parse(str(out), text)
            for out, text in value.items()}


class WindowConfig(_Strict):
    """DESIGN §3: tumbling (size), hopping (size, slide) or session (gap) event-time windows."""

    type: Literal["tumbling", "hopping", "session"] = "tumbling"
    size: DurationMs | None = None
    slide: DurationMs | None = None
    gap: DurationMs | None = None
    allowed_lateness: DurationMs = 0
    idle_timeout: DurationMs | None = None

    @model_validator(mode="after")
    def _shape(self) -> WindowConfig:
        needs = {"tumbling": {"size"}, "hopping": {"size", "slide"}, "session": {"gap"}}[self.type]
        given = {k for k in ("size", "slide", "gap") if getattr(self, k) is not None}
        if given != needs:
            raise ValueError(f"a {self.type} window takes {sorted(needs)}, got {sorted(given)}")
        for name in needs:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        size, slide = self.size or 0, self.slide or 0
        if self.type == "hopping" and (slide > size or size % slide):
            raise ValueError(f"hopping: slide ({self.slide} ms) must divide size ({self.size} ms)")
        return self


class EpochConfig(_Strict):
    max_records: int = Field(default=500_000, gt=0)
    staging_retention: int = Field(default=3, ge=1)
    maintenance_every: int = Field(default=100, ge=0)
    # An epoch stages only the open windows it changed; every this many epochs (or once the
    # changes outnumber the last snapshot's rows) it stages them all (``eos.core.state``).
    # 1: every epoch a snapshot (no incremental state).
    state_snapshot_every: int = Field(default=20, ge=1)
    # How long the epoch log's, staging's and the checkpoint table's Delta log history is kept
    # (their ``delta.logRetentionDuration``; maintenance checkpoints them and cleans up older
    # commit files). Every Delta read and write lists the table's ``_delta_log``, so this is what
    # bounds the per-epoch cost; it is also how far back a rewind can find those tables' commits.
    # At least an hour: a writer whose snapshot predates a cleanup could otherwise commit at a
    # version number the cleanup freed, below the Delta checkpoint, where no reader looks (Delta's
    # rule: the log retention must outlast any transaction).
    log_retention: DurationMs = Field(default=86_400_000, ge=3_600_000)


class TablesConfig(_Strict):
    """Where the pipeline's own tables live (``eos.core.storage``): a local path (relative
    ones under the data directory) or an object-store URI (``s3://bucket/prefix``)."""

    root: str | None = None

    @field_validator("root")
    @classmethod
    def _supported_root(cls, root: str | None) -> str | None:
        from eos.core.storage import refuse_unsafe_settings, resolve

        if root is not None:
            try:
                refuse_unsafe_settings(resolve(root, tables_base()))
            except ConfigError as error:  # pydantic reports ValueErrors with the field's path
                raise ValueError(str(error)) from None
        return root


class SparkConfig(_Strict):
    """Spark settings. ``submit`` mode: the per-epoch application's (master, driver memory, any
    ``conf``). ``connect`` mode: the server owns master and memory (``eos spark start``); the
    session gets ``shuffle_partitions`` and the runtime SQL settings in ``conf``."""

    master: str = "local[2]"
    shuffle_partitions: int = Field(default=2, gt=0)
    driver_memory: str = Field(default="2g", pattern=r"^\d+[kmgt]?$")
    conf: dict[str, str] = Field(default_factory=dict)
    # An epoch whose previous epoch staged at most this many rows (and whose own rows are bounded
    # by ``eos.compute.stage.COLLECT_MAX_ROWS`` before it runs) is collected to the driver as Arrow
    # and
    # written there, one Parquet file per kind: a Spark file write costs ~0.5 s per epoch however
    # small. Other epochs are written by the executors and never held by the driver. 0: always
    # the executors. Either way the files enter staging in one Delta commit. The open windows an
    # epoch reads are read by the driver too when their files hold at most this many rows.
    collect_rows: int = Field(default=50_000, ge=0)


_CRON_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly",
                 "@annually", "@midnight")
MIN_POLL_MS = 1_000  # each poll reads the broker's watermarks and the checkpoint table's log


class ScheduleConfig(_Strict):
    """When an epoch starts (the DAG's schedule, ``eos.airflow.triggers``): on a cron, when the
    data asks for one, or both, whichever comes first.

    - ``cron``: a cron expression or preset (``*/5 * * * *``, ``@hourly``);
    - ``lag_records``: an epoch starts once the records after the last checkpoint reach this many;
    - ``max_delay``: an epoch starts once the oldest record after the last checkpoint is this old
      (by its Kafka timestamp);
    - ``poll``: how often the trigger looks (the broker's watermarks, the checkpoint table).

    The plain string form (``schedule: "*/5 * * * *"``) is ``{cron: ...}``, passed to Airflow as
    written (``@once`` and ``@continuous`` included)."""

    cron: str | None = None
    lag_records: int | None = Field(default=None, gt=0)
    max_delay: DurationMs | None = None
    poll: DurationMs = 5_000

    @field_validator("max_delay")
    @classmethod
    def _positive_delay(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError("max_delay must be positive, e.g. 2m")
        return value

    @field_validator("poll")
    @classmethod
    def _sane_poll(cls, value: int) -> int:
        if value < MIN_POLL_MS:
            raise ValueError(f"poll must be at least {MIN_POLL_MS // 1000}s")
        return value

    @field_validator("cron")
    @classmethod
    def _cron_shape(cls, value: str | None) -> str | None:
        """Five fields or a preset; Airflow checks each field when it builds the timetable."""
        if value is None:
            return None
        text = value.strip()
        if text not in _CRON_PRESETS and len(text.split()) != 5:
            raise ValueError(f"cron {value!r}: expected five fields like '*/5 * * * *' or one of "
                             f"{', '.join(_CRON_PRESETS)}")
        return text

    @model_validator(mode="after")
    def _something_starts_epochs(self) -> ScheduleConfig:
        if self.cron is None and not self.data_driven:
            raise ValueError("schedule needs cron, lag_records or max_delay (at least one); "
                             "omit schedule for manual runs only")
        return self

    @property
    def data_driven(self) -> bool:
        """Whether the data starts epochs (a trigger watches the lag), not only the clock."""
        return self.lag_records is not None or self.max_delay is not None


def _schedule(value: Any) -> Any:
    """``schedule: "<cron>"`` (any string Airflow takes) or ``schedule: {cron, lag_records,
    max_delay, poll}``."""
    if value is None or isinstance(value, ScheduleConfig):
        return value
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("schedule: an empty string; omit schedule for manual runs only")
        return ScheduleConfig.model_construct(cron=value.strip())  # Airflow's to judge
    if isinstance(value, dict):
        return value
    raise ValueError(f"schedule is a cron string or a mapping like {{lag_records: 50000, "
                     f"max_delay: 2m}}, got {value!r}")


COMPUTE_MODE_ENV = "EOS_COMPUTE_MODE"  # deployment-wide default for pipelines that do not say


def _default_compute_mode() -> Any:  # checked by ComputeConfig._known_mode
    return os.environ.get(COMPUTE_MODE_ENV) or "connect"


class ComputeConfig(_Strict):
    """Where precommit's Spark work runs (DESIGN §2). ``connect`` (the default): a long-lived
    Spark Connect server reached through the Airflow connection ``connection`` (outside Airflow:
    ``EOS_SPARK_REMOTE`` or the server ``eos spark start`` runs). ``submit``: one Spark application
    per epoch (``spark-submit``), for clusters that want that. Both run the same precommit."""

    mode: Literal["connect", "submit"] = Field(default_factory=_default_compute_mode)
    connection: str = "spark_connect_default"
    # ``pipeline``: every precommit of this pipeline joins one server session (a fixed id), so
    # the server's Python workers stay warm (a new session starts its own: ~3 s measured);
    # idle, it expires with the server's session timeout. ``task``: a fresh session per
    # precommit, released when it ends.
    session: Literal["pipeline", "task"] = "pipeline"
    # The shape of an epoch's DAG run: ``phases``, one task per phase (begin -> precommit ->
    # commit, each cleared and retried on its own, each with its own log); ``one``, the three
    # phases in one task, which saves two task start-ups and two scheduler handovers per epoch
    # (docs/benchmarks.md, "as deployed"). The protocol, its fences and its epoch log are the
    # same; a retry of the one task re-runs begin and precommit as no-ops. Connect mode only.
    tasks: Literal["phases", "one"] = "phases"

    @model_validator(mode="after")
    def _one_task_on_connect(self) -> ComputeConfig:
        if self.tasks == "one" and self.mode != "connect":
            raise ValueError("compute.tasks: one runs precommit on Spark Connect inside the "
                             "epoch's task; compute.mode: submit runs it as a spark-submit "
                             "task of its own (use tasks: phases)")
        return self

    @field_validator("mode", mode="before")
    @classmethod
    def _known_mode(cls, value: Any) -> Any:
        if value not in ("connect", "submit"):
            raise ValueError(f"compute.mode must be 'connect' or 'submit', got {value!r} (from the "
                             f"config or {COMPUTE_MODE_ENV})")
        return value


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


class AlertsConfig(_Strict):
    """When a stalled pipeline raises an alert (``eos.core.status.check_stall``, the DAG's
    deadline in ``eos.airflow.alerts``). ``stall_after``: how long the checkpoint may stay put
    while records wait (unset: no alert). ``notifier``: the dotted path of what is told besides
    the log: an Airflow notifier class (``BaseNotifier``, built with ``notifier_kwargs``) or a
    function called with the alert's context and ``notifier_kwargs``."""

    stall_after: DurationMs | None = Field(default=None, ge=1000)
    notifier: str | None = None
    notifier_kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("notifier")
    @classmethod
    def _dotted(cls, value: str | None) -> str | None:
        if value is not None and not _DOTTED.match(value):
            raise ValueError(f"a notifier is a dotted path like package.module.Name, got "
                             f"{value!r}")
        return value

    @model_validator(mode="after")
    def _notifier_needs_a_stall(self) -> AlertsConfig:
        if self.stall_after is None and (self.notifier or self.notifier_kwargs):
            raise ValueError("a notifier is told about stalls: set alerts.stall_after too")
        return self


def _one_sink(value: Any) -> dict[str, Any]:
    """``{type: options}``: exactly one known sink type, its options checked by that sink's module
    (``eos.sinks``: the one place sink types are listed)."""
    from eos.core.sink import sink_class

    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"a sink is one mapping like {{delta: target}} or {{kafka: topic}}, "
                         f"got {value!r}")
    ((kind, options),) = value.items()
    return {kind: sink_class(kind).parse_options(options)}


SinkSpec = Annotated[dict[str, Any], BeforeValidator(_one_sink)]


class SinksConfig(_Strict):
    """Where each output of an epoch goes. Every sink receives each epoch exactly once."""

    # Defaults are validated too: each sink's options are its module's typed value.
    windows: list[SinkSpec] = Field(default_factory=lambda: [{"delta": "target"}], min_length=1,
                                    validate_default=True)
    late: list[SinkSpec] = Field(default_factory=lambda: [{"delta": "late"}],
                                 validate_default=True)
    quarantine: list[SinkSpec] = Field(default_factory=lambda: [{"delta": "quarantine"}],
                                       validate_default=True)

    def by_output(self) -> list[tuple[str, dict[str, Any]]]:
        """(output, spec) in commit order: outputs as declared here, sinks as listed."""
        return [(output, spec) for output in OUTPUTS for spec in getattr(self, output)]


class PipelineConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    kafka: KafkaConfig
    event: EventConfig
    group_by: list[str] = Field(default_factory=list)
    window: WindowConfig
    aggregations: Annotated[dict[str, AggregationSpec], BeforeValidator(_aggregations)]
    epoch: EpochConfig = Field(default_factory=EpochConfig)
    tables: TablesConfig = Field(default_factory=TablesConfig)
    sinks: SinksConfig = Field(default_factory=SinksConfig)
    schedule: Annotated[ScheduleConfig | None, BeforeValidator(_schedule)] = None
    spark: SparkConfig = Field(default_factory=SparkConfig)
    compute: ComputeConfig = Field(default_factory=ComputeConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    source_path: str | None = None

    @field_validator("sinks")
    @classmethod
    def _unique_sinks(cls, sinks: SinksConfig) -> SinksConfig:
        from eos.core.sink import sink_name

        names = [sink_name(spec) for _, spec in sinks.by_output()]
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise ValueError(f"each sink may appear once per pipeline; repeated: {doubled}")
        return sinks

    @model_validator(mode="after")
    def _root_keeps_the_fence(self) -> PipelineConfig:
        """The tables' root, wherever it resolves (``EOS_TABLES_BASE`` included), is refused
        under a storage setting that breaks the commit fence (``eos.core.storage``)."""
        from eos.core.storage import refuse_unsafe_settings

        try:
            refuse_unsafe_settings(self.root)
        except ConfigError as error:
            raise ValueError(str(error)) from None
        return self

    @model_validator(mode="after")
    def _sinks_apart(self) -> PipelineConfig:
        """No two sinks claim one resource (``Sink.resources``: a table, a marker partition),
        and no sink claims one of the pipeline's protocol tables: each would make a sink read
        another writer's data as its own. The message names both claimants and the place."""
        from eos.core.layout import Tables, resources_collide, table_resource
        from eos.core.sink import PIPELINE_ROOT, sink_class, sink_name

        claimed = [(f"the pipeline's {name} table (a protocol table)", table_resource(path))
                   for name, path in Tables(self.root).protocol_tables().items()]
        for output, spec in self.sinks.by_output():
            ((kind, options),) = spec.items()
            who = f"sink {sink_name(spec)} ({output})"
            for resource in sorted(sink_class(kind).resources(options, self.name)):
                resource = resource.replace(PIPELINE_ROOT, str(self.root))
                for other, theirs in claimed:
                    if resources_collide(resource, theirs):
                        raise ValueError(_collision(who, resource, other, theirs))
                claimed.append((who, resource))
        return self

    @model_validator(mode="after")
    def _fields_declared(self) -> PipelineConfig:
        """Every field used is declared and fits its use: one message naming it."""
        from eos.core.aggregations import FUNCTIONS

        declared = self.event.fields
        for name in self.group_by:
            if name not in declared:
                raise ValueError(f"group_by: field '{name}' is not declared in event.fields "
                                 f"(declared: {sorted(declared)})")
        if len(set(self.group_by)) != len(self.group_by):
            raise ValueError(f"group_by lists a field twice: {self.group_by}")
        for output, spec in self.aggregations.items():
            if output in self.group_by:
                raise ValueError(f"aggregation '{output}' has the name of a group_by field")
            if spec.field is None:
                continue
            if spec.field not in declared:
                raise ValueError(f"aggregation '{output}': field '{spec.field}' is not declared "
                                 f"in event.fields (declared: {sorted(declared)})")
            problem = FUNCTIONS[spec.function].refuses(declared[spec.field].type)
            if problem:
                raise ValueError(f"aggregation '{output}': {spec}: {problem}")
        return self

    @model_validator(mode="after")
    def _sinks_can_serve(self) -> PipelineConfig:
        """Each sink accepts this pipeline's outputs (``Sink.check_pipeline``: e.g. a Kafka
        sink's record limit against the largest record an output can make). After the
        field checks: it builds the outputs' schemas from the declared fields."""
        from eos.core.sink import sink_class

        for output, spec in self.sinks.by_output():
            ((kind, options),) = spec.items()
            sink_class(kind).check_pipeline(options, self, output)
        return self

    def schema_view(self) -> dict[str, Any]:
        """The config that decides what committed rows mean: event parsing, grouping, windows,
        aggregations. Committed epochs record it; a pipeline whose view changed is refused."""
        event = self.event.model_dump(mode="json")
        # Added to the view later: shown only when set, so epochs committed before it existed
        # keep the view they were committed with.
        if event["max_string_bytes"] == MAX_STRING_BYTES:
            del event["max_string_bytes"]
        # Where writer schemas are fetched from does not change what a row means (the format
        # does, and stays in the view); a moved registry is not a schema change. Its URL is not
        # its identity either: one registry answers at several URLs, and a migration keeps ids
        # (Confluent's import mode). A registry with other ids is another source, as another
        # Kafka cluster is: in the view, a new URL would refuse the first and not see the second.
        del event["schema_registry"]
        return {
            "event": event,
            "group_by": list(self.group_by),
            "window": self.window.model_dump(mode="json"),
            "aggregations": {k: str(v) for k, v in self.aggregations.items()},
        }

    @property
    def dag_id(self) -> str:
        """The Airflow DAG that runs this pipeline's epochs (``eos.airflow.dag_factory``)."""
        return f"eos_{self.name}"

    @property
    def app_id(self) -> str:
        """The Delta ``txn`` application id: one per pipeline, shared by every sink."""
        return f"eos:{self.name}"

    @property
    def root(self) -> str:
        """Where this pipeline's tables live: an object-store URI, or an absolute local path.
        Relative roots sit under ``tables_base()``: the data directory, or a deployment's
        ``EOS_TABLES_BASE`` (``s3://bucket/tables``: every pipeline's tables on a store)."""
        from eos.core.storage import resolve

        return resolve(self.tables.root or self.name, tables_base())


def _collision(who: str, resource: str, other: str, theirs: str) -> str:
    """The message for two claims of one place (``PipelineConfig._sinks_apart``)."""
    place = resource if resource == theirs else f"{resource}, which overlaps {theirs}"
    if "protocol table" in other:
        return (f"sinks: {who} writes {place}, {other}: a sink may never write the pipeline's "
                "own tables; name another table")
    return (f"sinks: {who} and {other} both claim {place}: two sinks of one pipeline may not "
            "write one place; give each its own")


TABLES_BASE_ENV = "EOS_TABLES_BASE"


def tables_base() -> str:
    """Where relative table roots live: ``$EOS_TABLES_BASE`` (a local path or a store URI),
    else the data directory."""
    return os.environ.get(TABLES_BASE_ENV, "").strip() or str(data_dir())


def data_dir() -> Path:
    """Base directory for tables and broker state: ``EOS_DATA_DIR`` or ``<project>/data``."""
    return Path(os.environ.get("EOS_DATA_DIR") or PROJECT_ROOT / "data").resolve()


def _describe(error: ValidationError, source: str) -> str:
    problems = []
    for item in error.errors():
        message = item["msg"].removeprefix("Value error, ")
        field = ".".join(str(p) for p in item["loc"])
        # A check across sections (a field used but not declared) names the field itself.
        problems.append(f"field '{field}': {message}" if field else message)
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
        raise ConfigError(f"pipeline config {path} is not valid YAML: "
                          f"{_yaml_problem(error)}") from None
    return parse_config(data, str(path.resolve()))


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def _unquoted(text: str) -> str:
    """A YAML problem with every quoted piece of the document left out: PyYAML quotes tags,
    aliases and anchors as written, which may be a secret. Its own token names (``'<block
    end>'``) and single characters (``':'``, ``'\\t'``) stay: they say what is wrong."""
    def keep(match: re.Match[str]) -> str:
        inner = match.group(0)[1:-1]
        return match.group(0) if len(inner) <= 2 or inner.startswith("<") else "'…'"

    return _QUOTED.sub(keep, text)


def _yaml_problem(error: yaml.YAMLError) -> str:
    """Where a YAML error is and what it is, never the text around it: PyYAML's message quotes
    the offending line, and an inline secret on that line would reach the logs and the UI."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or getattr(error, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
    what = _unquoted(str(problem)) if problem else type(error).__name__
    return f"{where}: {what}"


def pipelines_dir() -> Path:
    """Where the pipelines live: ``$EOS_PIPELINES_DIR``, else ``include/pipelines``. The DAG
    file, ``--pipeline NAME`` and the epochs view all read this one directory."""
    override = os.environ.get(PIPELINES_DIR_ENV)
    return Path(override) if override else PIPELINES_DIR


def pipeline_path(name: str) -> Path:
    return pipelines_dir() / f"{name}.yaml"


def load_pipeline(name: str | None = None, path: str | Path | None = None) -> PipelineConfig:
    """Resolve ``--pipeline NAME`` or ``--config PATH`` (exactly one) to a validated config."""
    if path is not None and name is None:
        return load_config(path)
    if name is None or path is not None:
        raise ConfigError("name a pipeline with --pipeline NAME or a file with --config PATH")
    candidate = pipeline_path(name)
    if not candidate.exists():
        known = ", ".join(sorted(p.stem for p in list_pipelines())) or "none"
        raise ConfigError(f"no pipeline named '{name}' in {pipelines_dir()} (known: {known})")
    return load_config(candidate)


def list_pipelines() -> list[Path]:
    return sorted(pipelines_dir().glob("*.yaml"))
