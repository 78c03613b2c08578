"""Where an epoch's outputs are written: each output's sinks (their options checked by the sink
type's own module, ``eos.sinks``) and the root of the pipeline's own tables."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema, field_validator

from eos.core.config.paths import tables_base
from eos.core.config.values import Strict, not_null_schema
from eos.core.errors import ConfigError
from eos.core.sink import sink_class
from eos.core.storage import refuse_unsafe_settings, resolve

# What an epoch produces, each to its sinks: with windows, and without (``PipelineConfig.outputs``).
OUTPUTS = ("windows", "late", "quarantine")
ROW_OUTPUTS = ("rows", "quarantine")


class TablesConfig(Strict):
    """Where the pipeline's own tables live (``eos.core.storage``): a local path (relative
    ones under the data directory) or an object-store URI (``s3://bucket/prefix``)."""

    root: str | None = Field(
        default=None,
        description="Where the pipeline's tables live: a local path (a relative one under the "
                    "data directory, or under $EOS_TABLES_BASE) or an object-store URI "
                    "(s3://, gs://, abfs://, abfss://). Default: the pipeline's name.")

    @field_validator("root")
    @classmethod
    def _supported_root(cls, root: str | None) -> str | None:
        if root is not None:
            try:
                refuse_unsafe_settings(resolve(root, tables_base()))
            except ConfigError as error:  # pydantic reports ValueErrors with the field's path
                raise ValueError(str(error)) from None
        return root


def _one_sink(value: Any) -> dict[str, Any]:
    """``{type: options}``: exactly one known sink type, its options checked by that sink's module
    (``eos.sinks``: the one place sink types are listed)."""
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"a sink is one mapping like {{delta: target}} or {{kafka: topic}}, "
                         f"got {value!r}")
    ((kind, options),) = value.items()
    return {kind: sink_class(kind).parse_options(options)}


# What an editor is told a sink looks like (``eos schema``): the options are each sink type's
# own, checked by its ``parse_options`` when the config loads (``eos validate``).
_SINK_SCHEMA = {
    "type": "object", "minProperties": 1, "maxProperties": 1,
    "description": "One sink: {TYPE: OPTIONS}, e.g. {delta: target} or {kafka: {topic: t}}. "
                   "TYPE is an installed sink type (the eos.sinks entry points: delta, kafka, "
                   "and any a package adds); OPTIONS are free-form here and validated by that "
                   "sink type's parse_options when the pipeline loads (eos validate). Each "
                   "sink type's options are in the configuration reference.",
}
SinkSpec = Annotated[dict[str, Any], BeforeValidator(_one_sink), WithJsonSchema(_SINK_SCHEMA)]


class SinksConfig(Strict):
    """Where each output of an epoch goes. Every sink receives each epoch exactly once."""

    # Defaults are validated too: each sink's options are its module's typed value.
    windows: list[SinkSpec] = Field(
        default_factory=lambda: [{"delta": "target"}], min_length=1, validate_default=True,
        description="Sinks of the closed windows, in commit order. Default: [{delta: target}].")
    late: list[SinkSpec] = Field(
        default_factory=lambda: [{"delta": "late"}], validate_default=True,
        description="Sinks of the late records (may be []). Default: [{delta: late}].")
    rows: list[SinkSpec] | None = Field(
        default=None, json_schema_extra=not_null_schema,
        description="A pipeline without windows: sinks of its rows (one per accepted event), "
                    "in commit order. Default there: [{delta: target}]; refused with windows.")
    quarantine: list[SinkSpec] = Field(
        default_factory=lambda: [{"delta": "quarantine"}], validate_default=True,
        description="Sinks of the quarantined records (may be []). Default: "
                    "[{delta: quarantine}].")

    def by_output(self) -> list[tuple[str, dict[str, Any]]]:
        """(output, spec) in commit order: outputs as declared here, sinks as listed. A
        pipeline without windows has ``rows`` (and ``quarantine``) only."""
        outputs = ROW_OUTPUTS if self.rows is not None else OUTPUTS
        return [(output, spec) for output in outputs for spec in getattr(self, output)]
