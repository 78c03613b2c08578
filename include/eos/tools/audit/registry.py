"""The audit's own reading of the Schema Registry wire format, shared by its decoders
(``eos.tools.audit.avro``, ``audit_protobuf``, ``audit_json_schema``).

The audit must not trust the decoders it checks (``eos.compute.formats``: confluent's registry
client, its caches, its error classification). Here the header is unpacked with ``struct`` and
writer schemas are fetched with ``urllib`` straight from ``GET /schemas/ids/{id}``; a reason is
written here a second time, so the quarantine rows the pipeline staged are compared with text
this module made.
"""

from __future__ import annotations

import base64
import json
import struct
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from eos.compute.formats import Decoded, Rejected
from eos.core.config import SchemaRegistryConfig
from eos.core.errors import SchemaRegistryUnavailable

HEADER = 5  # magic byte + 4-byte schema id


class AuditRegistryDecoder(ABC):
    """A ``RecordDecoder`` skeleton for the audit: the header unpacked, the writer schema
    fetched and refused when it is not of the format or uses references, and built once per
    id (an audit is one moment: its registry answers hold for its run).

    A format states what differs: ``kind`` and ``what`` (the registry's ``schemaType`` and its
    name in a reason), ``query`` (added to ``GET /schemas/ids/{id}``: Protobuf asks
    ``?format=serialized``), ``build`` (the schema's text -> what reads its records, or the
    ``Rejected`` its records get) and ``read`` (one value of a known id -> the record)."""

    kind: ClassVar[str]
    what: ClassVar[str]
    query: ClassVar[str] = ""

    def __init__(self, registry: SchemaRegistryConfig) -> None:
        from eos.compute.formats.registry import user_info

        self.url = registry.url
        self.timeout_s = registry.timeout / 1000
        secret = user_info(registry)
        self._auth = ("Basic " + base64.b64encode(secret.encode()).decode()) if secret else None
        self._writers: dict[int, Any] = {}

    def new_batch(self) -> None:
        """Nothing to forget: an audit is one moment, its registry answers hold for its run."""
        return

    def decode(self, raw: bytes) -> Decoded | Rejected:
        schema_id = self._schema_id(raw)
        if isinstance(schema_id, Rejected):
            return schema_id
        return self.read(schema_id, raw)

    @abstractmethod
    def build(self, schema_id: int, text: str) -> Any:
        """The writer schema ``text`` of ``schema_id`` -> what reads its records, or the
        ``Rejected`` every record of it gets."""

    @abstractmethod
    def read(self, schema_id: int, raw: bytes) -> Decoded | Rejected:
        """One record value of ``schema_id`` (``raw`` whole) -> the decoded record, or why
        it cannot be."""

    def _writer(self, schema_id: int) -> Any:
        answer = self._answer(schema_id, self.kind, self.what)
        if isinstance(answer, Rejected):
            return answer
        return self.build(schema_id, answer["schema"])

    @staticmethod
    def _schema_id(raw: bytes) -> int | Rejected:
        """The writer schema's id in a value of the wire format, or why it is not in it."""
        if not raw:
            return _not_wire("the value is empty")
        if raw[0] != 0:
            return _not_wire(f"byte 0 is {raw[0]}, not the magic byte 0")
        if len(raw) < HEADER:
            return _not_wire(f"{len(raw)} bytes, shorter than the 5-byte header")
        schema_id: int = struct.unpack(">I", raw[1:HEADER])[0]
        return schema_id

    def writer(self, schema_id: int) -> Any:
        """The id's writer (``build``, once per id), or the Rejected its records get."""
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
