"""What an epoch computes: its event-time windows and the aggregations each window row holds."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from eos.core.aggregations import FUNCTIONS
from eos.core.config.values import DurationMs, Strict, check_name

_CALL = re.compile(r"^\s*([a-z_]+)\s*\(\s*(\*|[A-Za-z][A-Za-z0-9_]*)\s*\)\s*$")


class AggregationSpec(Strict):
    """``output: function(field)``; the functions live in ``eos.core.aggregations``."""

    function: str
    field: str | None  # None for count(*)

    @classmethod
    def parse(cls, output: str, text: Any) -> AggregationSpec:
        """One ``function(field)`` text, naming ``output`` in any message."""
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
    """``aggregations: {output column: function(field)}``; an aggregating pipeline computes at
    least one (null or absent: a stateless pipeline)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not value:
        raise ValueError("aggregations: a mapping of output column -> function(field), "
                         "e.g. {views: count(*)}")
    return {check_name(str(out), "aggregation"): AggregationSpec.parse(str(out), text)
            for out, text in value.items()}


# What an editor is told an aggregation looks like (``eos schema``); ``AggregationSpec.parse``
# is the rule.
_AGGREGATIONS_SCHEMA = {
    "type": "object", "minProperties": 1,
    "propertyNames": {"pattern": "^[A-Za-z][A-Za-z0-9_]*$"},
    "additionalProperties": {
        "type": "string",
        "pattern": rf"^\s*({'|'.join(FUNCTIONS)})\s*\(\s*(\*|[A-Za-z][A-Za-z0-9_]*)\s*\)\s*$",
        "description": f"function(field), one of: {', '.join(FUNCTIONS)}; count(*) counts "
                       "every event."},
}
Aggregations = Annotated[dict[str, AggregationSpec], BeforeValidator(_aggregations),
                         WithJsonSchema(_AGGREGATIONS_SCHEMA)]


class WindowConfig(Strict):
    """Event-time windows (docs/pipelines.md, "Windows"): tumbling (size), hopping (size,
    slide) or session (gap)."""

    type: Literal["tumbling", "hopping", "session"] = Field(
        default="tumbling",
        description="tumbling takes size; hopping takes size and slide (slide divides size); "
                    "session takes gap.")
    size: DurationMs | None = Field(default=None, description="Tumbling and hopping windows' "
                                    "length; windows are [start, start + size) in UTC.")
    slide: DurationMs | None = Field(default=None, description="How far a hopping window "
                                     "advances; an event is in size / slide windows.")
    gap: DurationMs | None = Field(default=None, description="A session closes after this "
                                   "long without an event of its group.")
    allowed_lateness: DurationMs = Field(
        default=0, description="How far the watermark trails the largest event time seen.")
    idle_timeout: DurationMs | None = Field(
        default=None,
        description="When set, an epoch with no records lets the watermark follow the wall "
                    "clock (read once, at plan time), so windows close on a quiet topic.")

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
