"""When an epoch starts: the DAG's schedule, on a cron, when the data asks for one, or both."""

from __future__ import annotations

from typing import Annotated, Any

from croniter import croniter
from pydantic import BeforeValidator, Field, field_validator, model_validator

from eos.core.config.values import DurationMs, Strict

_CRON_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly",
                 "@annually", "@midnight")
# Presets Airflow takes that are no cron: one run, or a run as soon as the last one ends.
_AIRFLOW_PRESETS = ("@once", "@continuous")
MIN_POLL_MS = 1_000  # each poll reads the broker's watermarks and the checkpoint table's log


class ScheduleConfig(Strict):
    """When an epoch starts (the DAG's schedule, ``eos.airflow.triggers``): on a cron, when the
    data asks for one, or both, whichever comes first.

    - ``cron``: a cron expression or preset (``*/5 * * * *``, ``@hourly``);
    - ``lag_records``: an epoch starts once the records after the last checkpoint reach this many;
    - ``max_delay``: an epoch starts once the oldest record after the last checkpoint is this old
      (by its Kafka timestamp);
    - ``poll``: how often the trigger looks (the broker's watermarks, the checkpoint table).

    The plain string form (``schedule: "*/5 * * * *"``) is ``{cron: ...}``, passed to Airflow as
    written (``@once`` and ``@continuous`` included)."""

    cron: str | None = Field(
        default=None,
        description="Five cron fields or a preset (@hourly, @daily, ...): epochs on the clock.")
    lag_records: int | None = Field(
        default=None, gt=0,
        description="An epoch starts once the records after the last checkpoint reach this "
                    "many.")
    max_delay: DurationMs | None = Field(
        default=None,
        description="An epoch starts once the oldest record after the last checkpoint is this "
                    "old, by its Kafka timestamp.")
    poll: DurationMs = Field(
        default=5_000,
        description="How often the trigger reads the watermarks and the checkpoint (at least "
                    "1s).")

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
        """Five fields or a preset, each field one croniter (Airflow's cron parser) takes."""
        return None if value is None else check_cron(value)

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


def check_cron(value: str) -> str:
    """``value`` as a cron Airflow will take: five fields or a preset, every field valid
    (by croniter, which Airflow's cron timetables use); ``ValueError`` naming it otherwise."""
    text = value.strip()
    if text in _CRON_PRESETS:
        return text
    if len(text.split()) != 5 or not croniter.is_valid(text):
        raise ValueError(f"cron {value!r}: expected five valid fields like '*/5 * * * *' "
                         f"(minute hour day-of-month month day-of-week) or one of "
                         f"{', '.join(_CRON_PRESETS + _AIRFLOW_PRESETS)}")
    return text


def _schedule(value: Any) -> Any:
    """``schedule: "<cron>"`` (any string Airflow takes) or ``schedule: {cron, lag_records,
    max_delay, poll}``."""
    if value is None or isinstance(value, ScheduleConfig):
        return value
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("schedule: an empty string; omit schedule for manual runs only")
        text = value.strip()
        if text not in _AIRFLOW_PRESETS:
            check_cron(text)  # refused here, not when Airflow parses the DAG file
        return ScheduleConfig.model_construct(cron=text)
    if isinstance(value, dict):
        return value
    raise ValueError(f"schedule is a cron string or a mapping like {{lag_records: 50000, "
                     f"max_delay: 2m}}, got {value!r}")


def cron_string_schema(schema: dict[str, Any]) -> None:
    """What an editor is told a schedule is (``eos schema``): a cron string, as ``_schedule``
    takes, besides the mapping."""
    schema["anyOf"].insert(0, {"type": "string", "minLength": 1})


ScheduleSpec = Annotated[ScheduleConfig | None, BeforeValidator(_schedule)]
