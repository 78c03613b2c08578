"""The audit's own reading of Avro in the Schema Registry wire format.

The audit must not trust the decoder it checks (``eos.compute.formats.avro``: confluent's
registry client, its caches, its error classification). Here the header is unpacked with
``struct``, writer schemas are fetched with ``urllib`` straight from ``GET /schemas/ids/{id}``,
and the datum is read with fastavro directly. What a decoded record means (the declared fields,
their rules and reasons) is shared, as it is for JSON (``eos.compute.formats.records``): those
rules are the pipeline's semantics, not its decoder. A reason is written here a second time, so
the quarantine rows the pipeline staged are compared with text this module made.
"""

from __future__ import annotations

import base64
import json
import struct
import urllib.error
import urllib.request
from io import BytesIO
from typing import Any

from eos.compute.formats import REASON_CHARS, Decoded, Rejected
from eos.compute.formats.avro import unsafe_schema
from eos.core.config import SchemaRegistryConfig
from eos.core.errors import SchemaRegistryUnavailable

_TRUNCATED = (EOFError, IndexError, ValueError, OverflowError, MemoryError, StopIteration,
              KeyError, TypeError)


class AuditAvroDecoder:
    """A ``RecordDecoder`` for the audit: independent of the pipeline's (see the module).

    The other Schema Registry formats' audit decoders extend it (the registry requests)."""

    query = ""  # added to ``GET /schemas/ids/{id}`` (Protobuf asks ``?format=serialized``)

    def __init__(self, registry: SchemaRegistryConfig) -> None:
        from eos.compute.formats.registry import user_info

        self.url = registry.url
        self.timeout_s = registry.timeout / 1000
        secret = user_info(registry)
        self._auth = ("Basic " + base64.b64encode(secret.encode()).decode()) if secret else None
        self._writers: dict[int, Any] = {}

    def new_batch(self) -> None:
        """Nothing to forget: an audit is one moment, its registry answers hold for its run."""

    def decode(self, raw: bytes) -> Decoded | Rejected:
        schema_id = self._schema_id(raw)
        if isinstance(schema_id, Rejected):
            return schema_id
        writer = self._writer_of(schema_id)
        if isinstance(writer, Rejected):
            return writer
        import fastavro

        stream = BytesIO(raw[5:])
        try:
            record = fastavro.schemaless_reader(stream, writer, None)
        except _TRUNCATED as error:
            return Rejected(f"schema id {schema_id}: the payload does not decode "
                            f"({type(error).__name__}: {error})"[:REASON_CHARS])
        rest = len(raw) - 5 - stream.tell()
        if rest:
            return Rejected(f"schema id {schema_id}: {rest} bytes are left after the record "
                            "(the payload is not one datum of this schema)")
        if not isinstance(record, dict):
            return Rejected(f"schema id {schema_id} is not a record schema "
                            f"(the datum is {type(record).__name__})")
        return Decoded(record, f"schema id {schema_id}")

    def _writer(self, schema_id: int) -> Any:
        import fastavro

        answer = self._answer(schema_id, "AVRO", "Avro (event.format is avro)")
        if isinstance(answer, Rejected):
            return answer
        try:
            parsed = fastavro.parse_schema(json.loads(answer["schema"]))
        except Exception as error:  # fastavro's parse errors have no common base
            return Rejected(f"schema id {schema_id} is not a valid Avro schema: "
                            f"{error}"[:REASON_CHARS])
        # Which schemas are refused is the pipeline's rule (not a decoder's detail): shared.
        unsafe = unsafe_schema(parsed)
        if unsafe is not None:
            return Rejected(f"schema id {schema_id} {unsafe}; not read")
        return parsed

    @staticmethod
    def _schema_id(raw: bytes) -> int | Rejected:
        """The writer schema's id in a value of the wire format, or why it is not in it."""
        if not raw:
            return _not_wire("the value is empty")
        if raw[0] != 0:
            return _not_wire(f"byte 0 is {raw[0]}, not the magic byte 0")
        if len(raw) < 5:
            return _not_wire(f"{len(raw)} bytes, shorter than the 5-byte header")
        schema_id: int = struct.unpack(">I", raw[1:5])[0]
        return schema_id

    def _writer_of(self, schema_id: int) -> Any:
        """The id's writer (``_writer``, built once per id), or the Rejected its records get."""
        if schema_id not in self._writers:
            self._writers[schema_id] = self._writer(schema_id)
        return self._writers[schema_id]

    def _answer(self, schema_id: int, kind: str, what: str) -> dict[str, Any] | Rejected:
        """The registry's answer for the id if it is a ``kind`` schema without references
        (``what`` names the kind in a reason), or why its records are not read."""
        answer = self._get(schema_id)
        if answer is None:
            return Rejected(f"schema id {schema_id} is not known to the Schema Registry")
        found = answer.get("schemaType") or "AVRO"
        if found != kind:
            return Rejected(f"schema id {schema_id} is a {found} schema, not {what}")
        if answer.get("references"):
            return Rejected(f"schema id {schema_id} refers to other schemas (references), "
                            "which this reader does not resolve")
        return answer

    def _get(self, schema_id: int) -> dict[str, Any] | None:
        """The registry's answer for the id; None when it says it does not know it."""
        request = urllib.request.Request(f"{self.url}/schemas/ids/{schema_id}{self.query}")
        if self._auth:
            request.add_header("Authorization", self._auth)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as error:
            body = error.read()
            code = json.loads(body or b"{}").get("error_code") if body else None
            if error.code == 404 and code == 40403:
                return None
            raise SchemaRegistryUnavailable(
                f"the audit could not read schema id {schema_id} from {self.url}: HTTP "
                f"{error.code}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            raise SchemaRegistryUnavailable(
                f"the audit could not reach {self.url} for schema id {schema_id} "
                f"({type(error).__name__})") from None


def _not_wire(problem: str) -> Rejected:
    return Rejected("not in the Schema Registry wire format (magic byte 0, a 4-byte schema id, "
                    f"the payload): {problem}")


def sink_decoder(registry: SchemaRegistryConfig | None) -> Any:
    """How the audit reads an Avro Kafka sink's values a second time: this module's decoder
    (``struct``, ``urllib``, fastavro), not the sink's (``eos.sinks.kafka_avro``); a value it
    cannot decode becomes a row of its own, which no other reading holds (a disagreement)."""
    from eos.tools.independent import canonical_row

    assert registry is not None  # a format: avro sink has one (checked when the config loads)
    decoder = AuditAvroDecoder(registry)

    def decode(raw: bytes, schema: Any) -> dict[str, Any]:
        decoded = decoder.decode(raw)
        if isinstance(decoded, Rejected):
            return {"undecodable": decoded.reason}
        return canonical_row({name: decoded.record.get(name) for name in schema.names})

    return decode
