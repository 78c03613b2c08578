"""Who hears of a stalled pipeline, and after how long."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from eos.core.config.values import DurationMs, Strict, dotted_path


class AlertsConfig(Strict):
    """When a stalled pipeline raises an alert (``eos.core.pipeline_status.check_stall``, the DAG's
    deadline in ``eos.airflow.alerts``). ``stall_after``: how long the checkpoint may stay put
    while records wait (unset: no alert). ``notifier``: the dotted path of what is told besides
    the log: an Airflow notifier class (``BaseNotifier``, built with ``notifier_kwargs``) or a
    function called with the alert's context and ``notifier_kwargs``."""

    stall_after: DurationMs | None = Field(
        default=None, ge=1000,
        description="Alert when the checkpoint has not advanced this long while records wait; "
                    "unset: no alert.")
    notifier: str | None = Field(
        default=None,
        description="Who is told besides the log: the dotted path of an Airflow notifier class "
                    "(BaseNotifier) or of a function called as f(context, **notifier_kwargs).")
    notifier_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Arguments of the notifier; its template fields are rendered with the "
                    "alert's context ({{ message }}, {{ eos_stall.lag }}, ...).")

    @field_validator("notifier")
    @classmethod
    def _dotted(cls, value: str | None) -> str | None:
        return dotted_path(value, "a notifier", "package.module.Name")

    @model_validator(mode="after")
    def _notifier_needs_a_stall(self) -> AlertsConfig:
        if self.stall_after is None and (self.notifier or self.notifier_kwargs):
            raise ValueError("a notifier is told about stalls: set alerts.stall_after too")
        return self
