"""The audit's own reading of Avro in the Schema Registry wire format.

The audit must not trust the decoder it checks (``eos.compute.formats.avro``: confluent's
registry client, its caches, its error classification). Here the header is unpacked and writer
schemas are fetched by the audit's own requests (``eos.tools.audit.registry``), and the datum is
read with fastavro directly. What a decoded record means (the declared fields,
their rules and reasons) is shared, as it is for JSON (``eos.compute.formats.records``): those
rules are the pipeline's semantics, not its decoder. A reason is written here a second time, so
the quarantine rows the pipeline staged are compared with text this module made.
"""

from __future__ import annotations

import json
from io import BytesIO
from typing import Any

from eos.compute.formats import REASON_CHARS, Decoded, Rejected
from eos.compute.formats.avro import unsafe_schema
from eos.core.config import SchemaRegistryConfig
from eos.tools.audit.registry import HEADER, AuditRegistryDecoder

_TRUNCATED = (EOFError, IndexError, ValueError, OverflowError, MemoryError, StopIteration,
              KeyError, TypeError)


class AuditAvroDecoder(AuditRegistryDecoder):
    """A ``RecordDecoder`` for the audit: independent of the pipeline's (see the module)."""

    kind, what = "AVRO", "Avro (event.format is avro)"

    def read(self, schema_id: int, raw: bytes) -> Decoded | Rejected:
        writer = self.writer(schema_id)
        if isinstance(writer, Rejected):
            return writer
        import fastavro

        stream = BytesIO(raw[HEADER:])
        try:
            record = fastavro.schemaless_reader(stream, writer, None)
        except _TRUNCATED as error:
            return Rejected(f"schema id {schema_id}: the payload does not decode "
                            f"({type(error).__name__}: {error})"[:REASON_CHARS])
        rest = len(raw) - HEADER - stream.tell()
        if rest:
            return Rejected(f"schema id {schema_id}: {rest} bytes are left after the record "
                            "(the payload is not one datum of this schema)")
        if not isinstance(record, dict):
            return Rejected(f"schema id {schema_id} is not a record schema "
                            f"(the datum is {type(record).__name__})")
        return Decoded(record, f"schema id {schema_id}")

    def build(self, schema_id: int, text: str) -> Any:
        import fastavro

        try:
            parsed = fastavro.parse_schema(json.loads(text))
        except Exception as error:  # fastavro's parse errors have no common base
            return Rejected(f"schema id {schema_id} is not a valid Avro schema: "
                            f"{error}"[:REASON_CHARS])
        # Which schemas are refused is the pipeline's rule (not a decoder's detail): shared.
        unsafe = unsafe_schema(parsed)
        if unsafe is not None:
            return Rejected(f"schema id {schema_id} {unsafe}; not read")
        return parsed


def sink_decoder(registry: SchemaRegistryConfig | None) -> Any:
    """How the audit reads an Avro Kafka sink's values a second time: this module's decoder
    (``struct``, ``urllib``, fastavro), not the sink's (``eos.sinks.kafka.avro``); a value it
    cannot decode becomes a row of its own, which no other reading holds (a disagreement)."""
    from eos.tools.audit.independent.compare import canonical_row

    assert registry is not None  # a format: avro sink has one (checked when the config loads)
    decoder = AuditAvroDecoder(registry)

    def decode(raw: bytes, schema: Any) -> dict[str, Any]:
        decoded = decoder.decode(raw)
        if isinstance(decoded, Rejected):
            return {"undecodable": decoded.reason}
        return canonical_row({name: decoded.record.get(name) for name in schema.names})

    return decode
