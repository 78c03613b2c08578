"""Avro events for an ``event.format: avro`` pipeline, written through its Schema Registry.

The writer schema is **derived from the pipeline's declared event**, not shipped beside it:
each declared path becomes a (nested) Avro field of the declared type (``decimal(p,s)`` as the
``decimal`` logical type at that precision and scale, an optional field as a union with null,
an ``epoch_ms`` event time as ``timestamp-millis``). So any Avro pipeline can be fed, and the
schema cannot drift from the fields it has to carry (a shipped ``.avsc`` and the generator that
fills it would be two things to keep in step). Version 2 is version 1 evolved the way producers
evolve: every decimal written at two more digits of scale (and precision), and a new optional
top-level field; a reader that declares the old fields reads both.

Generation is a pure function of the ``GeneratorSpec`` and the event (the records as Python
values, their kinds and arrival times); only the bytes depend on the ids the registry assigns.
``serializer`` writes them in the Schema Registry wire format with confluent-kafka's
``AvroSerializer`` (it registers each version under ``<topic>-value``). The registry's
credentials come from the pipeline's ``schema_registry`` (``auth_env`` or ``connection``) and
are never printed.

Bad records (``AVRO_BAD_KINDS``): the event as JSON (no magic byte), a valid payload behind a
schema id the registry does not know, a payload cut short, and a record of a third writer schema
that lost the first required declared field.
"""

from __future__ import annotations

import json
import random
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from eos.core.config import EventConfig, FieldType, PipelineConfig
from eos.tools.generator import GeneratedRecord, GeneratorSpec, iso_time
from eos.tools.produce import ProduceSummary, send

AVRO_BAD_KINDS = ("not_wire_format", "unknown_schema_id", "truncated", "missing_field")
UNKNOWN_ID = 2**31 - 1  # a schema id no registry here has assigned
NEW_FIELD = "channel"  # the optional field version 2 adds (suffixed if the event has one)
OPTIONAL_NULLS = 0.15  # optional fields that are null
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class AvroRecord:
    """One generated record before serialization: the datum, and which writer writes it."""

    key: bytes | None
    datum: dict[str, Any]
    timestamp_ms: int
    kind: str  # "good", "late" or one of AVRO_BAD_KINDS
    version: int  # 1 or 2: the writer schema (bad kinds say how they are broken)


# ------------------------------------------------------------------------ writer schemas


def _avro_type(ftype: FieldType, version: int) -> Any:
    if ftype.name == "decimal":
        assert ftype.precision is not None and ftype.scale is not None
        widen = 2 if version >= 2 else 0
        return {"type": "bytes", "logicalType": "decimal",
                "precision": min(38, ftype.precision + widen), "scale": ftype.scale + widen}
    return {"string": "string", "long": "long", "double": "double",
            "boolean": "boolean"}[ftype.name]


def _time_type(event: EventConfig) -> Any:
    return {"epoch_ms": {"type": "long", "logicalType": "timestamp-millis"},
            "epoch_s": "long", "iso8601": "string"}[event.time.format]


def _leaves(event: EventConfig, version: int) -> dict[tuple[str, ...], Any]:
    """Every path the writer writes and its Avro type (the event time first)."""
    leaves: dict[tuple[str, ...], Any] = {}
    if event.time.field:
        leaves[event.time.path] = _time_type(event)
    for spec in event.fields.values():
        kind = _avro_type(spec.type, version)
        leaves.setdefault(spec.path, ["null", kind] if spec.optional else kind)
    return leaves


def writer_schema(event: EventConfig, version: int = 1, without: tuple[str, ...] = ()
                  ) -> dict[str, Any]:
    """The Avro record schema of ``version`` (1 or 2) for ``event``'s declared paths; ``without``
    leaves one path out (the ``missing_field`` writer). A ValueError when a path is both a
    value and a record (``a`` and ``a.b`` both declared)."""
    tree: dict[str, Any] = {}
    for path, kind in _leaves(event, version).items():
        if path == without:
            continue
        node = tree
        for step in path[:-1]:
            node = node.setdefault(step, {})
            if not isinstance(node, dict):
                raise ValueError(f"path {'.'.join(path)} goes through a declared value")
        if path[-1] in node:
            raise ValueError(f"path {'.'.join(path)} is declared both as a value and a record")
        node[path[-1]] = kind
    fields = _fields(tree, "Event")
    if version >= 2:
        fields.append({"name": _new_field(event), "type": ["null", "string"], "default": None})
    return {"type": "record", "name": "Event", "namespace": "eos.generated", "fields": fields}


def _fields(tree: dict[str, Any], name: str) -> list[dict[str, Any]]:
    out = []
    for key, node in tree.items():
        if isinstance(node, dict) and "type" not in node:
            record = f"{name}_{key}"
            out.append({"name": key, "type": {"type": "record", "name": record,
                                              "fields": _fields(node, record)}})
        elif isinstance(node, list):
            out.append({"name": key, "type": node, "default": None})
        else:
            out.append({"name": key, "type": node})
    return out


def _new_field(event: EventConfig) -> str:
    taken = {spec.path[0] for spec in event.fields.values()} | set(event.time.path[:1])
    name = NEW_FIELD
    while name in taken:
        name += "_"
    return name


# ------------------------------------------------------------------------------ records


def _value(rng: random.Random, name: str, ftype: FieldType, spec: GeneratorSpec,
           grouped: bool) -> Any:
    if ftype.name == "string":
        return f"{name}-{rng.randrange(spec.keys if grouped else spec.users)}"
    if ftype.name == "long":
        return rng.randrange(spec.users)
    if ftype.name == "double":
        return round(rng.uniform(0, 1000), 3)
    if ftype.name == "boolean":
        return rng.random() < 0.5
    assert ftype.precision is not None and ftype.scale is not None
    digits = min(ftype.precision, 7)
    return Decimal(rng.randrange(10 ** digits)).scaleb(-ftype.scale)


def _time_value(event: EventConfig, ms: int) -> Any:
    if event.time.format == "epoch_ms":
        return _EPOCH + timedelta(milliseconds=ms)
    if event.time.format == "epoch_s":
        return ms // 1000
    return iso_time(ms)


def _put(datum: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for step in path[:-1]:
        datum = datum.setdefault(step, {})
    datum[path[-1]] = value


def generate_avro(spec: GeneratorSpec, config: PipelineConfig,
                  evolve_at: int | None = None) -> Iterator[AvroRecord]:
    """The records of ``spec`` for ``config``'s event: arrival ``start_ms + i * interval_ms``,
    event time up to ``disorder_ms`` earlier (or late), values drawn per declared type; records
    from ``evolve_at`` on are written with version 2 (None: all version 1). Pure."""
    event = config.event
    rng = random.Random(spec.seed)
    grouped = set(config.group_by)
    key_field = next((g for g in config.group_by if event.fields[g].type.name == "string"), None)
    new_field = _new_field(event)
    for i in range(spec.events):
        arrival = spec.start_ms + i * spec.interval_ms
        ts = arrival - (rng.randrange(spec.disorder_ms + 1) if spec.disorder_ms else 0)
        kind = "good"
        if spec.late_fraction and rng.random() < spec.late_fraction:
            ts = arrival - spec.late_delay_ms - rng.randrange(spec.late_delay_ms + 1)
            kind = "late"
        if event.time.format == "epoch_s":
            ts -= ts % 1000
        version = 2 if evolve_at is not None and i >= evolve_at else 1
        datum: dict[str, Any] = {}
        if event.time.field:
            _put(datum, event.time.path, _time_value(event, ts))
        values = {}
        for name, field in event.fields.items():
            value = _value(rng, name, field.type, spec, name in grouped)
            if field.optional and rng.random() < OPTIONAL_NULLS:
                value = None
            values[name] = value
            _put(datum, field.path, value)
        if version == 2:
            datum[new_field] = rng.choice(("web", "app", None))
        if spec.bad_fraction and rng.random() < spec.bad_fraction:
            kind = AVRO_BAD_KINDS[rng.randrange(len(AVRO_BAD_KINDS))]
        key = str(values[key_field]).encode() if key_field and values[key_field] else None
        yield AvroRecord(key, datum, arrival, kind, version)


# ---------------------------------------------------------------------------- the wire


def registry_client(config: PipelineConfig) -> Any:
    """confluent-kafka's registry client for the pipeline's ``event.schema_registry``."""
    from eos.compute.formats.registry import user_info

    registry = config.event.schema_registry
    if registry is None:
        raise ValueError(f"pipeline {config.name} has no event.schema_registry")
    with warnings.catch_warnings():  # authlib (imported by the client) warns on import
        import authlib.deprecate  # noqa: F401  its import adds an "always" filter: then ours
        warnings.simplefilter("ignore")
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: F401
    settings: dict[str, Any] = {"url": registry.url, "timeout": registry.timeout / 1000}
    secret = user_info(registry)
    if secret is not None:
        settings["basic.auth.user.info"] = secret
    return SchemaRegistryClient(settings)


def serializer(config: PipelineConfig, client: Any | None = None
               ) -> Callable[[AvroRecord], GeneratedRecord]:
    """``AvroRecord`` -> the Kafka record in the wire format, through ``AvroSerializer`` (each
    writer version registered under ``<topic>-value`` on first use)."""
    client = client or registry_client(config)  # imports the client quietly first
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    event = config.event
    context = SerializationContext(config.kafka.sole_topic, MessageField.VALUE)
    writers = {v: AvroSerializer(client, json.dumps(writer_schema(event, v))) for v in (1, 2)}
    required = [spec.path for spec in event.fields.values() if not spec.optional]
    lost = writer_schema(event, 1, without=required[0]) if required else None
    missing = AvroSerializer(client, json.dumps(lost)) if lost else None

    def wire(record: AvroRecord) -> GeneratedRecord:
        value = _bad(record, event, writers, missing, context, required)
        if value is None:
            value = writers[record.version](record.datum, context)
        return GeneratedRecord(record.key, value, record.timestamp_ms, record.kind)

    return wire


def _bad(record: AvroRecord, event: EventConfig, writers: dict[int, Any], missing: Any,
         context: Any, required: list[tuple[str, ...]]) -> bytes | None:
    """The bytes of a bad record (None for a good one)."""
    if record.kind in ("good", "late"):
        return None
    if record.kind == "not_wire_format":
        return json.dumps(record.datum, default=str, separators=(",", ":")).encode()
    good: bytes = writers[record.version](record.datum, context)
    if record.kind == "unknown_schema_id":
        return b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + good[5:]
    if record.kind == "truncated" or missing is None:
        return good[:max(5, len(good) - 3)]
    return bytes(missing(_without(record.datum, required[0], _new_field(event)), context))


def _without(datum: dict[str, Any], path: tuple[str, ...], drop: str) -> dict[str, Any]:
    """``datum`` less ``path`` (copied along the path only) and less the field ``drop`` (the
    one version 2 added: the ``missing_field`` writer is version 1 less a path)."""
    out = {k: v for k, v in datum.items() if k != drop}
    if len(path) == 1:
        out.pop(path[0], None)
        return out
    out[path[0]] = _without(datum[path[0]], path[1:], drop)
    return out


def produce_avro(spec: GeneratorSpec, config: PipelineConfig, settings: dict[str, Any],
                 evolve_at: int | None = None, rate: float = 0.0,
                 progress: bool = True) -> ProduceSummary:
    """Produce ``spec``'s records for ``config`` to its topic in Avro through its registry
    (version 2 from record ``evolve_at``); raise on any loss, as ``produce`` does."""
    wire = serializer(config)
    return send(map(wire, generate_avro(spec, config, evolve_at)), spec.events,
                config.kafka.sole_topic, settings, rate, progress)
