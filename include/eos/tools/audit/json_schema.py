"""The audit's own reading of JSON Schema records in the Schema Registry wire format.

The header is unpacked and the writer schema fetched with urllib (``eos.tools.audit.registry``),
not by the pipeline's registry client and caches; the text is parsed with the standard library
and validated with ``jsonschema`` directly. What a failed validation is called
(the validator's best match, where it failed) is the pipeline's rule, written here a second
time so the quarantine rows are compared with text this module made.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from eos.compute.formats import REASON_CHARS, Decoded, Rejected
from eos.tools.audit.registry import HEADER, AuditRegistryDecoder


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class AuditJsonSchemaDecoder(AuditRegistryDecoder):
    """A ``RecordDecoder`` for the audit (see the module)."""

    kind, what = "JSON", "a JSON Schema (event.format is json_schema)"

    def read(self, schema_id: int, raw: bytes) -> Decoded | Rejected:
        validator = self.writer(schema_id)
        if isinstance(validator, Rejected):
            return validator
        text = raw[HEADER:]
        try:
            exact = json.loads(text, parse_float=Decimal, parse_constant=_refuse)
            plain = json.loads(text)
        except (ValueError, RecursionError) as error:
            return Rejected(f"schema id {schema_id}: the payload is not JSON "
                            f"({type(error).__name__}: {error})"[:REASON_CHARS])
        problem = _problem(validator, plain)
        if problem:
            return Rejected(f"schema id {schema_id}: {problem}"[:REASON_CHARS])
        if not isinstance(exact, dict):
            return Rejected(f"schema id {schema_id}: the payload is a JSON "
                            f"{type(exact).__name__}, not an object")
        return Decoded(exact, f"schema id {schema_id}")

    def build(self, schema_id: int, text: str) -> Any:
        from jsonschema import Draft7Validator, SchemaError
        from jsonschema.validators import validator_for

        try:
            schema = json.loads(text)
        except (ValueError, RecursionError) as error:
            return Rejected(f"schema id {schema_id} is not JSON: {error}"[:REASON_CHARS])
        if not isinstance(schema, dict | bool):
            return Rejected(f"schema id {schema_id} is not a JSON Schema (neither an object "
                            "nor a boolean)")
        cls = validator_for(schema, default=Draft7Validator)
        try:
            cls.check_schema(schema)
        except SchemaError as error:
            return Rejected(f"schema id {schema_id} is not a valid JSON Schema: "
                            f"{error.message}"[:REASON_CHARS])
        return cls(schema)


def _problem(validator: Any, record: Any) -> str | None:
    from jsonschema.exceptions import best_match
    from referencing.exceptions import Unresolvable

    try:
        error = best_match(validator.iter_errors(record))
    except Unresolvable as unresolvable:
        return f"the schema refers to what it does not hold ({unresolvable})"
    except (TypeError, ArithmeticError, RecursionError) as failure:
        return f"the schema cannot check the record ({type(failure).__name__}: {failure})"
    if error is None:
        return None
    where = "/".join(map(str, error.absolute_path)) or "the record"
    return f"does not validate against its schema at {where}: {error.message}"
