"""What the Schema Registry formats' unit tests share (Avro, Protobuf, JSON Schema): the
record time, the registry's credentials variable, the topic, and the parsed ``event`` section of
a pipeline reading a format."""

from __future__ import annotations

import warnings
from typing import Any

from eos.core.config import parse_config
from eos.tools.servers.schema_registry import SchemaRegistryServer

with warnings.catch_warnings():  # authlib (imported by the client) warns on import
    import authlib.deprecate  # noqa: F401  its import adds an "always" filter: then ours
    warnings.simplefilter("ignore")


KTS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


AUTH_ENV = "EOS_TEST_SR_AUTH"


TOPIC = "orders"


FIELDS = {
    "order_id": {"path": "id", "type": "string"},
    "customer": {"path": "customer.id", "type": "long"},
    "tier": {"path": "customer.tier", "type": "string"},
    "amount": {"type": "decimal(12,2)"},
    "note": {"type": "string", "optional": True},
}


def event(registry: dict[str, Any] | None, fields: dict | None = None,
          time: dict | None = None, fmt: str = "avro") -> Any:
    """The parsed ``event`` section of a pipeline reading ``fmt`` (every Schema Registry
    format's tests build theirs here)."""
    return parse_config({
        "name": "p", "kafka": {"topic": TOPIC},
        "event": {"format": fmt, "schema_registry": registry,
                  "time": time or {"field": "ts", "format": "epoch_ms"},
                  "fields": fields or FIELDS},
        "window": {"type": "tumbling", "size": "10s"},
        "aggregations": {"n": "count(*)"},
    }).event


def config_of(server: SchemaRegistryServer, **more: Any) -> dict[str, Any]:
    return {"url": server.url, "auth_env": AUTH_ENV, **more}


UNKNOWN_1 = "schema id 1 is not known to the Schema Registry"

