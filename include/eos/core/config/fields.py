"""What a record holds: its declared fields, where each is in the record and the type it must
have (``event.fields``, ``event.key.fields``), and the types a ``select`` column may have."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, WithJsonSchema

from eos.core.config.values import Strict, check_name
from eos.core.metadata import METADATA

FIELD_TYPES = ("string", "long", "double", "boolean")  # and decimal(p,s)
# Types a ``select`` column may have besides the declared ones: the Kafka metadata's raw key
# (``binary``), its headers (``headers``), and a date or a time its CAST makes (a declared field
# is parsed from the record, where a date or a time is a string or a number the select converts).
SELECT_ONLY_TYPES = ("date", "timestamp")
OUTPUT_TYPES = ("binary", "headers", *SELECT_ONLY_TYPES)
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
# What an editor is told a type looks like (``eos schema``); ``FieldType.parse`` is the rule.
FIELD_TYPE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": r"^\s*(string|long|double|boolean|decimal\(\s*\d+\s*,\s*\d+\s*\))\s*$",
    "description": "string, long, double, boolean or decimal(p,s) (1 <= p <= 38, s <= p).",
}


class FieldType(Strict):
    """A declared type: ``string | long | double | boolean | decimal(p,s)``; a ``select``
    column may also be a ``date`` or a ``timestamp`` (Spark's TIMESTAMP: an instant, shown in
    UTC, the session's time zone)."""

    name: str
    precision: int | None = None
    scale: int | None = None

    @classmethod
    def parse(cls, text: Any, output: bool = False) -> FieldType:
        """A declared type; with ``output``, a select column's (``OUTPUT_TYPES`` too)."""
        if not isinstance(text, str):
            raise ValueError(f"a type is one of {FIELD_TYPES} or decimal(p,s), got {text!r}")
        text = text.strip().lower()
        if output and text in OUTPUT_TYPES:
            return cls(name=text)
        match = _DECIMAL.match(text)
        if match:
            precision, scale = int(match.group(1)), int(match.group(2))
            if not 1 <= precision <= 38 or scale > precision:
                raise ValueError(f"{text}: need 1 <= p <= 38 and s <= p")
            return cls(name="decimal", precision=precision, scale=scale)
        if text not in FIELD_TYPES:
            # ``{value: decimal(38,9)}`` in a flow mapping splits at the comma into
            # ``decimal(38`` and a key ``9)``: the type looks cut, say how to keep it whole.
            cut = (f"; it looks cut at a comma: quote the type, e.g. \"{text},s)\" — in a "
                   "{...} mapping YAML splits an unquoted decimal(p,s) at its comma"
                   if text.startswith("decimal(") and "," not in text else "")
            raise ValueError(f"unknown type '{text}': use one of {FIELD_TYPES} or "
                             f"decimal(p,s){cut}")
        return cls(name=text)

    def __str__(self) -> str:
        return f"decimal({self.precision},{self.scale})" if self.name == "decimal" else self.name

    @property
    def numeric(self) -> bool:
        return self.name in ("long", "double", "decimal")

    @property
    def temporal(self) -> bool:
        """A date or a timestamp: a select column's type only."""
        return self.name in SELECT_ONLY_TYPES

    @property
    def sql(self) -> str:
        """The type's Spark SQL name (what a select's column is cast to)."""
        from eos.core.metadata import HEADERS_SQL

        if self.name == "decimal":
            return f"DECIMAL({self.precision},{self.scale})"
        return {"string": "STRING", "long": "BIGINT", "double": "DOUBLE",
                "boolean": "BOOLEAN", "binary": "BINARY", "headers": HEADERS_SQL,
                "date": "DATE", "timestamp": "TIMESTAMP"}[self.name]


class FieldSpec(Strict):
    """One declared event field: where it is in the JSON object and what type it must have.

    ``optional`` fields may be absent or null (they become SQL NULL); every other field must be
    present, non-null and of its type, or the record is quarantined naming the field."""

    path: tuple[str, ...]
    type: FieldType
    optional: bool = False

    # What an editor is told a field looks like (``eos schema``): the forms ``parse`` takes.
    JSON_SCHEMA: ClassVar[dict[str, Any]] = {
        "anyOf": [
            FIELD_TYPE_SCHEMA,
            {"type": "object", "additionalProperties": False, "required": ["type"],
             "properties": {
                 "path": {"type": "string", "pattern": r"^[^.]+(\.[^.]+)*$",
                          "description": "Dotted keys into the record (`user.id`); default: "
                                         "the field's name."},
                 "type": FIELD_TYPE_SCHEMA,
                 "optional": {"type": "boolean", "default": False,
                              "description": "Absent or null is SQL NULL instead of a "
                                             "quarantined record."}}},
        ],
    }

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


def parse_fields(value: Any) -> dict[str, FieldSpec]:
    """``fields: {name: TYPE or {path, type, optional}}``; a pipeline declares at least one.
    The Kafka metadata's names (``eos.core.metadata``) are not a field's to take: a filter or
    a select naming one must mean one thing."""
    if not isinstance(value, dict) or not value:
        raise ValueError("fields: a mapping of name -> type (at least one)")
    taken = sorted(str(name) for name in value if str(name).lower() in METADATA)
    if taken:
        raise ValueError(f"fields: {taken} are reserved for Kafka metadata "
                         f"({', '.join(METADATA)}); give the fields other names (path: keeps "
                         "where they are in the record)")
    return {check_name(str(name), "field"): FieldSpec.parse(str(name), spec)
            for name, spec in value.items()}


# A section's ``fields`` (``event.fields``, ``event.key.fields``): parsed by ``parse_fields``,
# described to an editor as a mapping of names to ``FieldSpec.JSON_SCHEMA``.
DeclaredFields = Annotated[dict[str, FieldSpec], BeforeValidator(parse_fields),
                           WithJsonSchema({"type": "object", "minProperties": 1,
                                           "propertyNames": {"pattern": "^[A-Za-z][A-Za-z0-9_]*$"},
                                           "additionalProperties": FieldSpec.JSON_SCHEMA})]
