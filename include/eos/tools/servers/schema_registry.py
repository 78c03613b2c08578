"""A Schema-Registry-compatible HTTP server: a STAND-IN, not Confluent's server, for the tests
and the demo.

No Schema Registry server installs from the package registries reachable here, and the Spark
workers that decode records are other processes, so ``mock://`` (an in-process dictionary) cannot
serve them. This implements the REST endpoints ``confluent_kafka.schema_registry``'s client uses
for registering and fetching schemas, with the registry's own answers and error codes:

* ``GET /schemas/ids/{id}``: the schema (404, error code 40403, for an unknown id)
* ``POST /subjects/{subject}/versions``: register (a schema text already known keeps its id)
* ``POST /subjects/{subject}``: look a schema up under a subject (404 / 40401, 40403)
* ``GET /subjects``, ``GET /subjects/{subject}/versions``,
  ``GET /subjects/{subject}/versions/{version|latest}``

Schemas are kept as registered. Confluent's Python ``ProtobufSerializer`` registers a Protobuf
schema as a base64 ``FileDescriptorProto``; Confluent's server would keep it as .proto text and
answer it serialized only when asked ``?format=serialized`` (as its deserializer asks). The
stand-in converts neither way, so it answers a Protobuf schema only in the form it holds
(serialized to ``format=serialized``, .proto text to a plain request) and refuses the other
request (422, error code 42202) instead of answering the wrong form.

Every request must carry HTTP basic auth (401, error code 40101, without it). It binds
127.0.0.1 on a free port, counts the requests per path (to see caching), and can be stopped and
started again on the same port with its schemas kept (a registry that went away mid-epoch), or
made slow (``delay_s``). Compatibility checks, contexts, modes and configs are not implemented.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True


class SchemaRegistryServer:
    """``with SchemaRegistryServer() as registry:``, then ``registry.url``, ``.user_info``."""

    def __init__(self, user: str = "eos", password: str = "s3cret-Pa55") -> None:
        self.user, self.password = user, password
        self.schemas: list[dict[str, Any]] = []  # index + 1 is the id
        self.subjects: dict[str, list[int]] = {}  # subject -> ids, version i + 1 at index i
        self.requests: Counter[str] = Counter()
        self.delay_s = 0.0
        self.port = 0
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --

    def start(self) -> SchemaRegistryServer:
        server = _Server(("127.0.0.1", self.port), _handler(self))
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="schema-registry",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering (connections are refused) and keep the schemas for a restart."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> SchemaRegistryServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def user_info(self) -> str:
        return f"{self.user}:{self.password}"

    # -- the registry --

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        """The id of ``schema`` (``{"schema": text, "schemaType": ...}``) under ``subject``."""
        with self._lock:
            entry = {"schema": schema["schema"], "schemaType": schema.get("schemaType", "AVRO"),
                     "references": schema.get("references") or []}
            known = next((i + 1 for i, s in enumerate(self.schemas) if s == entry), None)
            if known is None:
                self.schemas.append(entry)
                known = len(self.schemas)
            versions = self.subjects.setdefault(subject, [])
            if known not in versions:
                versions.append(known)
            return known

    def schema_by_id(self, schema_id: int) -> dict[str, Any] | None:
        with self._lock:
            if not 1 <= schema_id <= len(self.schemas):
                return None
            return _shown(self.schemas[schema_id - 1])

    def version(self, subject: str, which: str) -> dict[str, Any] | None:
        with self._lock:
            versions = self.subjects.get(subject) or []
            if not versions:
                return None
            index = len(versions) - 1 if which == "latest" else int(which) - 1
            if not 0 <= index < len(versions):
                return None
            schema_id = versions[index]
            return {"subject": subject, "id": schema_id, "version": index + 1,
                    **_shown(self.schemas[schema_id - 1])}


def _shown(entry: dict[str, Any]) -> dict[str, Any]:
    """A schema as the registry answers it: ``schemaType`` is left out for AVRO."""
    shown = {"schema": entry["schema"]}
    if entry["schemaType"] != "AVRO":
        shown["schemaType"] = entry["schemaType"]
    if entry["references"]:
        shown["references"] = entry["references"]
    return shown


def _serialized(schema: str) -> bool:
    """Whether a Protobuf schema was registered as base64 (a FileDescriptorProto), not text."""
    try:
        base64.b64decode(schema, validate=True)
    except ValueError:
        return False
    return True


_IDS = re.compile(r"^/schemas/ids/(\d+)$")
_SUBJECT_VERSIONS = re.compile(r"^/subjects/([^/]+)/versions$")
_SUBJECT_VERSION = re.compile(r"^/subjects/([^/]+)/versions/(latest|\d+)$")
_SUBJECT = re.compile(r"^/subjects/([^/]+)$")


def _handler(registry: SchemaRegistryServer) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to ``registry`` and its credentials."""
    expected = "Basic " + base64.b64encode(registry.user_info.encode()).decode()
    return type("Handler", (_RegistryHandler,), {"registry": registry, "expected": expected})


class _RegistryHandler(BaseHTTPRequestHandler):
    """The stand-in's routes, each a named method; ``_handler`` binds the registry it serves."""

    registry: SchemaRegistryServer
    expected: str  # the Authorization header every request must carry
    # HTTP/1.0: one request per connection, so a stopped server leaves no kept-alive
    # connection answering for it.
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read ``registry.requests``, not an access log."""

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: int, message: str) -> None:
        self._answer(status, {"error_code": code, "message": message})

    def _allowed(self) -> bool:
        path = self.path.split("?", 1)[0]
        self.registry.requests[f"{self.command} {path}"] += 1
        if self.registry.delay_s:
            time.sleep(self.registry.delay_s)
        if self.headers.get("Authorization") != self.expected:
            self._error(401, 40101, "Unauthorized")
            return False
        return True

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def _route(self, path: str, routes: tuple[tuple[re.Pattern[str], Callable[..., None]], ...]
               ) -> None:
        """Answer with the first route whose pattern matches ``path`` (its groups are the
        arguments), or 404."""
        for pattern, answer in routes:
            if match := pattern.match(path):
                answer(*match.groups())
                return
        self._error(404, 404, f"no such endpoint in the test stand-in: {path}")

    def do_GET(self) -> None:
        if not self._allowed():
            return
        path = self.path.split("?", 1)[0]
        if path == "/subjects":
            self._answer(200, sorted(self.registry.subjects))
            return
        self._route(path, ((_IDS, self._get_schema), (_SUBJECT_VERSIONS, self._get_versions),
                           (_SUBJECT_VERSION, self._get_version)))

    def do_POST(self) -> None:
        if not self._allowed():
            return
        path = self.path.split("?", 1)[0]
        body = self._body()
        self._route(path, ((_SUBJECT_VERSIONS, lambda subject: self._register(subject, body)),
                           (_SUBJECT, lambda subject: self._lookup(subject, body))))

    def _get_schema(self, schema_id: str) -> None:
        """GET /schemas/ids/{id}: a Protobuf schema only in the form it was registered."""
        found = self.registry.schema_by_id(int(schema_id))
        if found is None:
            self._error(404, 40403, "Schema not found")
        elif (found.get("schemaType") == "PROTOBUF"
              and _serialized(found["schema"]) != ("format=serialized" in
                                                   self.path.partition("?")[2].split("&"))):
            self._error(422, 42202, "the stand-in answers a Protobuf schema only in "
                        "the form it was registered (serialized or .proto text)")
        else:
            self._answer(200, found)

    def _get_versions(self, subject: str) -> None:
        """GET /subjects/{subject}/versions."""
        versions = self.registry.subjects.get(subject)
        if versions is None:
            self._error(404, 40401, "Subject not found")
        else:
            self._answer(200, list(range(1, len(versions) + 1)))

    def _get_version(self, subject: str, version: str) -> None:
        """GET /subjects/{subject}/versions/{version|latest}."""
        found = self.registry.version(subject, version)
        if found is None:
            self._error(404, 40402, "Version not found")
        else:
            self._answer(200, found)

    def _register(self, subject: str, body: dict[str, Any]) -> None:
        """POST /subjects/{subject}/versions."""
        self._answer(200, {"id": self.registry.register(subject, body)})

    def _lookup(self, subject: str, body: dict[str, Any]) -> None:
        """POST /subjects/{subject}: the version of ``subject`` holding this schema."""
        for version, schema_id in enumerate(self.registry.subjects.get(subject, []), 1):
            entry = self.registry.schema_by_id(schema_id) or {}
            if entry.get("schema") == body.get("schema"):
                self._answer(200, {"subject": subject, "id": schema_id,
                                   "version": version, **entry})
                return
        code = 40403 if subject in self.registry.subjects else 40401
        self._error(404, code, "Schema not found")
