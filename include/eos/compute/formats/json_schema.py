"""``event.format: json_schema``: JSON records in the Schema Registry wire format.

A record value is byte 0 (the magic byte), the writer schema's id (4 bytes, big-endian), then
UTF-8 JSON text (what confluent's ``JSONSerializer`` writes). The writer schema (a JSON Schema,
``schemaType JSON``) is fetched by id once per worker and compiled once with ``jsonschema``
(the validator class its ``$schema`` names, draft 7 when it names none, as confluent's
deserializer does); every record is validated against it, and one that does not validate is
quarantined with the validator's message, where it failed and the schema id. A record that
validates is a dict of JSON values: numbers with a fraction or exponent are read as exact
``Decimal`` (a ``decimal(p,s)`` field is then exact; a ``double`` is the correctly rounded
float, as from JSON text), integers as ``int``; the declared fields then apply
(``eos.compute.formats.records``).

Quarantined, with the reason: no magic byte, an id the registry does not know, a schema that is
not a JSON Schema (or uses references, or is not a valid schema), text that is not JSON (or not
UTF-8, or has NaN or Infinity, or nests past Python's limit), a value that is not an object,
and one that does not validate.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from eos.compute.formats import REASON_CHARS, Decoded, Rejected
from eos.compute.formats.records import RecordParser
from eos.compute.formats.registry import HEADER, RegistryDecoder
from eos.core.config import EventConfig


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads(text: bytes) -> Any:
    """JSON text -> values with exact decimals; raises ValueError (or RecursionError)."""
    return json.loads(text, parse_float=Decimal, parse_constant=_no_constant)


class JsonSchemaDecoder(RegistryDecoder):
    """``RecordDecoder`` for JSON Schema records in the wire format; validators once per id."""

    kind, what = "JSON", "a JSON Schema (event.format is json_schema)"

    def read(self, schema_id: int, raw: bytes) -> Decoded | Rejected:
        validator = self.writer(schema_id)
        if isinstance(validator, Rejected):
            return validator
        try:
            record = loads(raw[HEADER:])
            # Validated as confluent's deserializer reads it (floats: a schema's multipleOf
            # 0.01 is a float too); the values kept are the exact ones.
            plain = json.loads(raw[HEADER:])
        except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
            return Rejected(f"schema id {schema_id}: the payload is not JSON "
                            f"({type(error).__name__}: {error})"[:REASON_CHARS])
        problem = _invalid(validator, plain)
        if problem is not None:
            return Rejected(f"schema id {schema_id}: {problem}"[:REASON_CHARS])
        if type(record) is not dict:
            return Rejected(f"schema id {schema_id}: the payload is a JSON "
                            f"{type(record).__name__}, not an object")
        return Decoded(record, f"schema id {schema_id}")

    def build(self, schema_id: int, text: str) -> Any:
        built = compile_schema(text)
        if isinstance(built, str):
            return Rejected(f"schema id {schema_id} {built}"[:REASON_CHARS])
        return built


def compile_schema(text: str) -> Any:
    """A jsonschema validator for the schema text, or why it is not one (a phrase)."""
    from jsonschema import Draft7Validator, SchemaError
    from jsonschema.validators import validator_for

    try:
        schema = json.loads(text)
    except (ValueError, RecursionError) as error:
        return f"is not JSON: {error}"
    if not isinstance(schema, dict | bool):
        return "is not a JSON Schema (neither an object nor a boolean)"
    try:
        cls = validator_for(schema, default=Draft7Validator)
        cls.check_schema(schema)
    except SchemaError as error:
        return f"is not a valid JSON Schema: {error.message}"
    return cls(schema)


def _invalid(validator: Any, record: Any) -> str | None:
    """Why ``record`` does not validate (the most relevant error, with where), or None."""
    from jsonschema.exceptions import best_match
    from referencing.exceptions import Unresolvable

    try:
        error = best_match(validator.iter_errors(record))
    except Unresolvable as unresolvable:
        return f"the schema refers to what it does not hold ({unresolvable})"
    except (TypeError, ArithmeticError, RecursionError) as failure:  # multipleOf 0.1 and such
        return f"the schema cannot check the record ({type(failure).__name__}: {failure})"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "the record"
    return f"does not validate against its schema at {where}: {error.message}"


def parser(event: EventConfig) -> RecordParser:
    assert event.schema_registry is not None  # checked when the config loads
    return RecordParser(event, JsonSchemaDecoder(event.schema_registry))
