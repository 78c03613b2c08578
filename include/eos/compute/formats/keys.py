"""The record key parsed as ``event.key`` declares it (``key.<field>`` in an expression).

The key is parsed by the JSON parser with the same rules and reasons as a value (it is built
from an event of the key's fields, with no event time), so the audit, which parses the key the
same way (``KeyParser.parse``), recomputes every outcome. A record whose value parsed but whose
key does not is quarantined with the key's reason, prefixed ``key:``; its fields and event time
become null and its raw bytes are kept, as for any quarantined record. A record already
quarantined for its value keeps the value's reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from eos.compute.formats import Parsed, Rejected
from eos.core.schema import EVENT_MS, RAW_KEY, RAW_VALUE, REASON, key_schema

if TYPE_CHECKING:
    from eos.core.config import EventConfig

NO_KEY = "key: the record has no key"


def key_event(event: EventConfig) -> EventConfig:
    """An event of the key's fields, no event time: what the key parser is compiled from."""
    from eos.core.config import EventConfig
    from eos.core.config.event import TimeConfig

    assert event.key is not None
    fields = {name: {"path": ".".join(spec.path), "type": str(spec.type),
                     "optional": spec.optional} for name, spec in event.key.fields.items()}
    return EventConfig(format="json", fields=fields,  # type: ignore[arg-type]
                       time=TimeConfig(format="none"), max_string_bytes=event.max_string_bytes)


class KeyParser:
    """``event.key``'s parser: one key (``parse``), or a batch's keys merged into the batch the
    value parser made (``merge``)."""

    def __init__(self, event: EventConfig) -> None:
        from eos.compute.formats.json import Parser

        self.event = event
        self.parser = Parser(key_event(event))
        self.names = list(event.key.fields) if event.key is not None else []

    def parse(self, key: bytes | None) -> Parsed | Rejected:
        """One key: its fields (``Parsed.values``, declared order), or why it is refused."""
        if key is None:
            return Rejected(NO_KEY)
        parsed = self.parser.parse(key, None)
        return parsed if isinstance(parsed, Parsed) else Rejected(f"key: {parsed.reason}")

    def merge(self, parsed: pa.RecordBatch, raw: pa.RecordBatch) -> pa.RecordBatch:
        """``parsed`` (the value parser's rows of ``raw``) with the key's fields after its
        columns, and the records whose key does not parse quarantined."""
        keys = raw.column("key")
        as_values = raw.set_column(raw.schema.get_field_index("value"), "value", keys)
        out = self.parser.parse_batch(as_values)
        fields = [out.column(name) for name in self.names]
        reasons = pc.if_else(pc.is_null(keys), pa.scalar(NO_KEY),
                             pc.binary_join_element_wise("key: ", out.column(REASON), ""))
        refused = pc.and_(pc.is_null(parsed.column(REASON)), pc.is_valid(reasons))
        if not pc.any(refused).as_py():
            return _appended(parsed, fields, self.event)
        columns = {name: parsed.column(name) for name in parsed.schema.names}
        columns[REASON] = pc.if_else(refused, reasons, parsed.column(REASON))
        columns[RAW_KEY] = pc.if_else(refused, keys, parsed.column(RAW_KEY))
        columns[RAW_VALUE] = pc.if_else(refused, raw.column("value"), parsed.column(RAW_VALUE))
        for name in [EVENT_MS, *self.event.fields]:
            columns[name] = _nulled(columns[name], refused)
        merged = pa.RecordBatch.from_arrays(list(columns.values()), schema=parsed.schema)
        return _appended(merged, [_nulled(f, refused) for f in fields], self.event)


def _nulled(column: Any, where: Any) -> Any:
    return pc.if_else(where, pa.scalar(None, column.type), column)


def _appended(batch: pa.RecordBatch, fields: list[Any], event: EventConfig) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([*batch.columns, *fields],
                                      schema=pa.schema([*batch.schema, *key_schema(event)]))
