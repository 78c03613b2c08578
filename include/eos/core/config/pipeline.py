"""A pipeline's config as one typed value: its sections, the checks across them, and what the
protocol derives from it (the DAG id, the Delta application id, the tables' root, the schema
view committed epochs record)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, PrivateAttr, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from eos.core.config.alerts import AlertsConfig
from eos.core.config.checks import (
    check_fields_declared,
    check_root_keeps_the_fence,
    check_shape,
    check_sinks_apart,
    check_sinks_can_serve,
    check_source_not_written,
    check_unique_sinks,
)
from eos.core.config.dag import DagConfig
from eos.core.config.event import MAX_STRING_BYTES, EventConfig
from eos.core.config.fields import FieldType
from eos.core.config.kafka_source import KafkaConfig
from eos.core.config.paths import tables_base
from eos.core.config.rows import RecordColumn, Select, record_types, row_types, select_types
from eos.core.config.runtime import ComputeConfig, EpochConfig, SparkConfig
from eos.core.config.schedule import ScheduleSpec, cron_string_schema
from eos.core.config.sinks import OUTPUTS, ROW_OUTPUTS, SinksConfig, TablesConfig
from eos.core.config.values import Strict, not_null_schema
from eos.core.config.windows import Aggregations, WindowConfig
from eos.core.storage import resolve


class PipelineConfig(Strict):
    """One pipeline, validated as a whole: each section checks itself, then the checks across
    sections (``eos.core.config.checks``) run, so a config that loads is one every phase can run."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
        description="The pipeline's name: its DAG is eos_<name>, its Delta application id "
                    "eos:<name>, its tables' default root <name>. Keep it equal to the file's "
                    "name (--pipeline NAME reads NAME.yaml).")
    kafka: KafkaConfig = Field(description="The source topics and how they are read.")
    event: EventConfig = Field(description="How a record value becomes an event.")
    group_by: list[str] = Field(
        default_factory=list,
        description="Declared fields every window is grouped by; none: one aggregate per "
                    "window.")
    window: WindowConfig | None = Field(
        default=None, json_schema_extra=not_null_schema,
        description="The event-time windows. With aggregations: an aggregating pipeline; "
                    "without both: a stateless one, one row per accepted event.")
    aggregations: Aggregations = Field(
        default_factory=dict,
        description="Output column: function(field), e.g. {views: count(*), revenue: "
                    "sum(revenue)}. Given with window, or not at all.")
    select: Select = Field(
        default_factory=dict,
        description="Columns computed from each event: a Spark SQL expression each, over the "
                    "declared fields and the Kafka metadata (kafka_topic, kafka_partition, "
                    "kafka_offset, kafka_timestamp, kafka_timestamp_type, kafka_key, "
                    "kafka_key_bytes, kafka_headers, key.<field>, header.<name>), "
                    "deterministic functions only. Without windows: the output columns "
                    "(default: every declared field; every row also carries kafka_topic, "
                    "kafka_partition, kafka_offset and epoch). With windows: derived fields, "
                    "which group_by and aggregations may name like declared ones.")
    epoch: EpochConfig = Field(default_factory=EpochConfig,
                               description="How big an epoch is and how long history is kept.")
    tables: TablesConfig = Field(default_factory=TablesConfig,
                                 description="Where the pipeline's tables live.")
    sinks: SinksConfig = Field(default_factory=SinksConfig,
                               description="Where each output of an epoch goes.")
    schedule: ScheduleSpec = Field(
        default=None, json_schema_extra=cron_string_schema,
        description="When epochs start. A string is the DAG's cron, passed to Airflow as written "
                    "(\"*/5 * * * *\", @hourly, @once); a mapping may add data-driven starts "
                    "(lag_records, max_delay). Unset: manual runs only.")
    spark: SparkConfig = Field(default_factory=SparkConfig, description="Spark settings.")
    compute: ComputeConfig = Field(default_factory=ComputeConfig,
                                   description="Where precommit's Spark work runs.")
    alerts: AlertsConfig = Field(default_factory=AlertsConfig,
                                 description="Stall alerts.")
    airflow: DagConfig = Field(default_factory=DagConfig,
                               description="The pipeline's Airflow DAG: owner, tags, pool, "
                                           "queue, retries, failure callback, access control.")
    # Where the config was read from, set by the loader; not a key of the file.
    source_path: SkipJsonSchema[str | None] = None
    # The select's columns and their types, decided once at load: a stateless pipeline's row
    # columns (``row_types``), an aggregating one's derived fields (``select_types``).
    _rows: dict[str, FieldType] = PrivateAttr(default_factory=dict)
    _records: dict[str, RecordColumn] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _rows_sink_default(cls, data: Any) -> Any:
        """A stateless pipeline's rows go to ``{delta: target}`` unless its sinks say where:
        the default the windows have in an aggregating one. A null shape key is an absent
        one."""
        if isinstance(data, dict):
            data = {k: v for k, v in data.items()
                    if not (v is None and k in ("group_by", "window", "aggregations", "select"))}
        if isinstance(data, dict) and data.get("window") is None \
                and data.get("aggregations") is None:
            sinks = data.get("sinks")
            if sinks is None:
                sinks = {}
            if isinstance(sinks, dict) and "rows" not in sinks and "windows" not in sinks:
                data = {**data, "sinks": {**sinks, "rows": [{"delta": "target"}]}}
        return data

    @field_validator("sinks")
    @classmethod
    def _unique_sinks(cls, sinks: SinksConfig) -> SinksConfig:
        check_unique_sinks(sinks)
        return sinks

    # Pydantic runs these in the order written: check_sinks_can_serve builds the outputs'
    # schemas from fields check_fields_declared has passed, and the rows' types.
    @model_validator(mode="after")
    def _shape(self) -> PipelineConfig:
        check_shape(self)
        try:
            self._rows = row_types(self) if self.stateless else select_types(self)
            self._records = record_types(self)
        except ValueError as error:  # named at the top level: a check across sections
            raise ValueError(str(error)) from None
        return self

    @model_validator(mode="after")
    def _root_keeps_the_fence(self) -> PipelineConfig:
        check_root_keeps_the_fence(self)
        return self

    @model_validator(mode="after")
    def _sinks_apart(self) -> PipelineConfig:
        check_sinks_apart(self)
        return self

    @model_validator(mode="after")
    def _source_not_written(self) -> PipelineConfig:
        check_source_not_written(self)
        return self

    @model_validator(mode="after")
    def _fields_declared(self) -> PipelineConfig:
        check_fields_declared(self)
        return self

    @model_validator(mode="after")
    def _sinks_can_serve(self) -> PipelineConfig:
        check_sinks_can_serve(self)
        return self

    @property
    def stateless(self) -> bool:
        """No windows: one row per accepted event (``select``), no watermark, no state."""
        return self.window is None

    @property
    def windows(self) -> WindowConfig:
        """The windows of an aggregating pipeline (a stateless one has none: a bug to ask)."""
        if self.window is None:
            raise AssertionError(f"pipeline {self.name} has no windows")
        return self.window

    @property
    def row_columns(self) -> dict[str, FieldType]:
        """A stateless pipeline's selected columns and their types, in order."""
        return dict(self._rows) if self.stateless else {}

    @property
    def record_columns(self) -> dict[str, RecordColumn]:
        """The record columns of the sinks of rows (``eos.core.config.rows.RecordColumn``), by
        staged name, in the order the sinks give them."""
        return dict(self._records)

    def record_column(self, sink: str, role: str) -> str | None:
        """The staged name of ``sink``'s record column for ``role`` (``key``,
        ``header:<name>``), or None when that role reads a column of the rows."""
        return next((name for name, c in self._records.items()
                     if c.sink == sink and c.role == role), None)

    @property
    def derived(self) -> dict[str, FieldType]:
        """An aggregating pipeline's derived fields (its ``select``) and their types."""
        return {} if self.stateless else dict(self._rows)

    @property
    def field_types(self) -> dict[str, FieldType]:
        """Every field group_by and aggregations may name, with its type: the declared
        fields, then the derived ones."""
        return {**{name: spec.type for name, spec in self.event.fields.items()},
                **self.derived}

    @property
    def outputs(self) -> tuple[str, ...]:
        """What each epoch produces, in commit order: ``windows``, ``late``, ``quarantine``;
        without windows ``rows`` and ``quarantine``."""
        return ROW_OUTPUTS if self.stateless else OUTPUTS

    def schema_view(self) -> dict[str, Any]:
        """The config that decides what committed rows mean: event parsing, grouping, windows,
        aggregations. Committed epochs record it; a pipeline whose view changed is refused."""
        event = self.event.model_dump(mode="json")
        # Added to the view later: shown only when set, so epochs committed before it existed
        # keep the view they were committed with.
        if event["max_string_bytes"] == MAX_STRING_BYTES:
            del event["max_string_bytes"]
        if event["key"] is None:  # likewise: a parsed key is in the view only when declared
            del event["key"]
        # Where writer schemas are fetched from does not change what a row means (the format
        # does, and stays in the view); a moved registry is not a schema change. Its URL is not
        # its identity either: one registry answers at several URLs, and a migration keeps ids
        # (Confluent's import mode). A registry with other ids is another source, as another
        # Kafka cluster is: in the view, a new URL would refuse the first and not see the second.
        del event["schema_registry"]
        if self.stateless:
            return {"event": event, "select": dict(self.select)}
        derived = {"select": dict(self.select)} if self.select else {}  # shown only when set
        return {
            **derived,
            "event": event,
            "group_by": list(self.group_by),
            "window": self.windows.model_dump(mode="json"),
            "aggregations": {k: str(v) for k, v in self.aggregations.items()},
        }

    @property
    def dag_id(self) -> str:
        """The Airflow DAG that runs this pipeline's epochs (``eos.airflow.pipeline_dag``)."""
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
        return resolve(self.tables.root or self.name, tables_base())
