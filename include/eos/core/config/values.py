"""The value rules every section of a pipeline config shares: its sections refuse unknown keys
and never change once loaded, durations are written like ``60s``, and declared names are plain
SQL identifiers that keep clear of the window columns."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, WithJsonSchema

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")  # a field or output column: a plain SQL identifier
# Columns every window row has; a field or aggregation may not take these names.
RESERVED = ("window_start", "window_end", "epoch")


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


# What an editor is told a duration looks like (``eos schema``); the loader's rule is above.
DURATION_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "string", "pattern": r"^\s*\d+\s*(ms|s|m|h|d)\s*$"},
              {"type": "integer", "minimum": 0}],
    "x-eos-duration": True,
}
DurationMs = Annotated[int, BeforeValidator(parse_duration_ms), WithJsonSchema(DURATION_SCHEMA)]


def not_null_schema(schema: dict[str, Any]) -> None:
    """An optional section's editor schema without its null: leaving the key out is how a
    file says "none" (``eos schema``; the loader takes null too)."""
    options = [o for o in schema.pop("anyOf", []) if o.get("type") != "null"]
    if options:
        schema.update(options[0])
    schema.pop("default", None)


def check_name(value: str, what: str) -> str:
    """A declared field or aggregation name becomes a column: it must be one SQL can name
    unquoted and must not shadow a window column."""
    if not _NAME.match(value):
        raise ValueError(f"{what} '{value}' must be a plain identifier (letters, digits, _; "
                         "starting with a letter)")
    if value.lower() in RESERVED:
        raise ValueError(f"{what} '{value}' is reserved for the window columns {RESERVED}")
    return value


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def dotted_path(value: str | None, what: str, example: str) -> str | None:
    """``value`` when it is a dotted import path (``package.module.name``) or None; else a
    ``ValueError`` naming ``what`` it is for, with ``example``."""
    if value is not None and not _DOTTED.match(value):
        raise ValueError(f"{what} is a dotted path like {example}, got {value!r}")
    return value


class Strict(BaseModel):
    """A config section: a mistyped key is an error, not ignored, and the loaded config is
    immutable so every phase sees the same view."""

    model_config = ConfigDict(extra="forbid", frozen=True)
