"""``event.format: protobuf`` and ``json_schema`` (``eos.compute.formats``), without Spark:
records written by Confluent's own ``ProtobufSerializer`` / ``JSONSerializer`` (the wire
format's reference) through a registry, decoded by the reader's parser, and by the audit's
decoders (``eos.tools.audit.protobuf``, ``audit_json_schema``), which must agree record by
record.

The registry is ``eos.tools.servers.schema_registry``: a Schema-Registry-compatible HTTP server
written for the tests, a stand-in for Confluent's (none installs here)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eos.compute.formats import Parsed, Rejected, parser_for
from eos.compute.formats.records import RecordParser
from eos.compute.reader import RAW_SCHEMA
from eos.core.config import parse_config
from eos.core.errors import ConfigError, SchemaRegistryUnavailable
from eos.core.schema import REASON
from eos.tools.audit.json_schema import AuditJsonSchemaDecoder
from eos.tools.audit.protobuf import AuditProtobufDecoder
from eos.tools.servers.schema_registry import SchemaRegistryServer

from support.protobuf_messages import F, build, field, new_file, order, order_class, serializer
from support.registry_formats import AUTH_ENV, KTS, TOPIC, UNKNOWN_1, config_of
from support.registry_formats import event as avro_event

with warnings.catch_warnings():  # authlib (imported by the client) warns on import
    import authlib.deprecate  # noqa: F401  its import adds an "always" filter: then ours
    warnings.simplefilter("ignore")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

TS = datetime(2026, 1, 1, 0, 0, 1, 250000, tzinfo=UTC)
FIELDS = {
    "order_id": {"path": "id", "type": "string"},
    "customer": {"path": "customer.id", "type": "long"},
    "tier": {"path": "customer.tier", "type": "string"},
    "amount": {"type": "decimal(12,2)"},
    "note": {"type": "string", "optional": True},
}


def event(fmt: str, registry: dict[str, Any] | None, fields: dict | None = None,
          time: dict | None = None) -> Any:
    return avro_event(registry, fields or FIELDS, time, fmt=fmt)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[SchemaRegistryServer]:
    with SchemaRegistryServer() as server:
        monkeypatch.setenv(AUTH_ENV, server.user_info)
        yield server


def parsers(server: SchemaRegistryServer, fmt: str = "protobuf",
            **kwargs: Any) -> tuple[Any, RecordParser]:
    """The reader's parser and one over the audit's decoder, for the same event."""
    ev = event(fmt, config_of(server), **kwargs)
    audit = AuditProtobufDecoder if fmt == "protobuf" else AuditJsonSchemaDecoder
    assert ev.schema_registry is not None
    return parser_for(ev), RecordParser(ev, audit(ev.schema_registry))


def both(pair: tuple[Any, RecordParser], raw: bytes | None, kts: int | None = KTS) -> Any:
    """The reader's outcome, after checking that the audit's decoder comes to the same."""
    ours, audit = pair
    outcome = ours.parse(raw, kts)
    assert audit.parse(raw, kts) == outcome, raw
    return outcome


def v1(**changes: Any) -> Any:
    values = {"oid": "o-1", "ts": TS, "customer": 7, "tier": "GOLD",
              "amount": Decimal("12.34"), **changes}
    return order(1, **values)


# --- config ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["protobuf", "json_schema"])
def test_config_requires_a_registry(fmt: str) -> None:
    with pytest.raises(ConfigError, match=r"needs event\.schema_registry"):
        event(fmt, None)
    assert event(fmt, {"url": "http://127.0.0.1:1"}).format == fmt
    with pytest.raises(ConfigError, match="avro, protobuf or json_schema"):
        parse_config({"name": "p", "kafka": {"topic": "t"},
                      "event": {"schema_registry": {"url": "http://127.0.0.1:1"},
                                "time": {"format": "kafka_timestamp"},
                                "fields": {"v": "long"}},
                      "window": {"size": "10s"}, "aggregations": {"n": "count(*)"}})
    with pytest.raises(ConfigError, match=r"event\.format"):
        event("thrift", {"url": "http://127.0.0.1:1"})


# --- Protobuf --------------------------------------------------------------------------------

def test_two_writer_versions_decode_exactly_and_a_lost_path_names_schema_and_field(
        registry: SchemaRegistryServer) -> None:
    pair = parsers(registry)
    one = serializer(registry, order_class(1))(TOPIC, v1(note="first"))
    two = serializer(registry, order_class(2))(TOPIC, order(
        2, "o-2", TS, 2**40, "BASIC", Decimal("99999.5000"), coupon="X"))
    three = serializer(registry, order_class(3))(TOPIC, order(
        3, "o-3", TS, 9, None, Decimal("1.00")))
    ts = 1_767_225_601_250
    assert both(pair, one) == Parsed(ts, ("o-1", 7, "GOLD", Decimal("12.34"), "first"))
    out = both(pair, two)
    assert out == Parsed(ts, ("o-2", 2**40, "BASIC", Decimal("99999.50"), None))
    assert str(out.values[3]) == "99999.50"  # at the declared scale, not rounded
    assert both(pair, three) == Rejected(
        "schema id 3: missing field 'tier' (path customer.tier)")
    finer = serializer(registry, order_class(2))(TOPIC, order(
        2, "o-2", TS, 1, "GOLD", Decimal("1.2345")))
    assert both(pair, finer) == Rejected(
        "schema id 2: field 'amount' = 1.2345 has more than 2 decimal places; "
        "decimal(12,2) is not rounded")
    for _ in range(50):  # one fetch per schema id, however many records
        pair[0].parse(one, KTS)
        pair[0].parse(two, KTS)
    ids = {k: v for k, v in registry.requests.items() if k.startswith("GET /schemas/ids/")}
    assert ids == {"GET /schemas/ids/1": 2, "GET /schemas/ids/2": 2, "GET /schemas/ids/3": 2}
    # (2 each: the reader's decoder and the audit's; both ask format=serialized, or the
    # stand-in would refuse: it answers a schema only in the form it was registered)


def test_hostile_payloads_are_quarantined_with_their_reason(
        registry: SchemaRegistryServer) -> None:
    pair = parsers(registry)
    good = serializer(registry, order_class(1))(TOPIC, v1(note="n"))
    assert isinstance(both(pair, good), Parsed)
    assert good[5] == 0  # the single 0: the file's first message
    assert both(pair, b'{"id": "o-1"}') == Rejected(
        "not in the Schema Registry wire format (magic byte 0, a 4-byte schema id, the "
        "payload): byte 0 is 123, not the magic byte 0")
    assert both(pair, b"\x00\x00\x01").reason.endswith("3 bytes, shorter than the 5-byte header")
    assert both(pair, None) == Rejected("null record value")
    unknown = b"\x00" + (4242).to_bytes(4, "big") + good[5:]
    assert both(pair, unknown) == Rejected("schema id 4242 is not known to the Schema Registry")
    head = good[:5]
    assert both(pair, head) == Rejected("schema id 1: the message indexes are cut short")
    assert both(pair, head + b"\x02\x06" + good[6:]) == Rejected(
        "schema id 1: message indexes [3] name no message of the schema")
    assert both(pair, head + b"\x04\x00\x04" + good[6:]) == Rejected(
        "schema id 1: message indexes [0, 2] name no message of the schema")
    assert both(pair, head + b"\x03" + good[6:]) == Rejected(
        "schema id 1: the message indexes claim -2 indexes")
    assert both(pair, head + b"\xfe\x01" + good[6:]) == Rejected(
        "schema id 1: the message indexes claim 127 indexes")
    assert both(pair, head + b"\x02\x01" + good[6:]) == Rejected(
        "schema id 1: message index -1 is negative")
    assert both(pair, head + b"\x02" + b"\xff" * 12) == Rejected(
        "schema id 1: the message indexes are cut short")
    # Every truncation of the message: quarantined where the cut is inside a field; a cut
    # between fields is a shorter valid message (Protobuf has no end marker), read as one.
    message_class, body = order_class(1), good[6:]
    inside = 0
    for cut in range(len(body)):
        outcome = both(pair, good[:6 + cut])
        try:
            prefix = message_class.FromString(body[:cut])
        except DecodeError:
            inside += 1
            assert isinstance(outcome, Rejected), cut
            assert outcome.reason.startswith("schema id 1: the payload does not decode "
                                             "(DecodeError"), outcome
            continue
        assert outcome == both(pair, head + b"\x00" + prefix.SerializeToString()), cut
    assert inside > len(body) // 2
    assert both(pair, good + b"\xff") .reason.startswith(  # type: ignore[union-attr]
        "schema id 1: the payload does not decode")
    bad_utf8 = head + b"\x00" + b"\x0a\x02\xc3\x28"  # field 1 (string id): invalid UTF-8
    assert both(pair, bad_utf8).reason.startswith("schema id 1: the payload does not decode")


def test_message_indexes_name_nested_and_later_messages(registry: SchemaRegistryServer) -> None:
    file = new_file("shop/many.proto")
    first = file.message_type.add(name="First")
    field(first, "v", 1, F.TYPE_INT64)
    second = file.message_type.add(name="Second")
    field(second, "v", 1, F.TYPE_STRING)
    inner = second.nested_type.add(name="Inner")
    field(inner, "v", 1, F.TYPE_INT64)
    field(inner, "ts", 2, F.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    pool = build(file)
    from google.protobuf.message_factory import GetMessageClass

    inner_class = GetMessageClass(pool.FindMessageTypeByName("shop.Second.Inner"))
    message = inner_class(v=-5)
    message.ts.FromMilliseconds(KTS + 7)
    data = serializer(registry, inner_class)(TOPIC, message)
    assert data[5:8] == b"\x04\x02\x00"  # two indexes: [1, 0]
    pair = parsers(registry, fields={"v": "long"})
    assert both(pair, data) == Parsed(KTS + 7, (-5,))
    second_class = GetMessageClass(pool.FindMessageTypeByName("shop.Second"))
    text = serializer(registry, second_class)(TOPIC, second_class(v="x"))
    assert text[5:7] == b"\x02\x02"  # one index: [1]
    assert both(pair, text) == Rejected("schema id 1: missing field 'ts'")


def test_types_map_exactly(registry: SchemaRegistryServer) -> None:
    file = new_file("shop/types.proto")
    t = file.message_type.add(name="T")
    field(t, "ts", 1, F.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    field(t, "day", 2, F.TYPE_MESSAGE, ".google.type.Date")
    field(t, "big", 3, F.TYPE_UINT64)
    field(t, "ratio", 4, F.TYPE_FLOAT)
    field(t, "ok", 5, F.TYPE_BOOL)
    field(t, "small", 6, F.TYPE_SINT32)
    field(t, "count", 7, F.TYPE_MESSAGE, ".google.protobuf.Int64Value")
    field(t, "tags", 8, F.TYPE_STRING, repeated=True)
    field(t, "level", 9, F.TYPE_ENUM, ".shop.T.Level")
    field(t, "price", 10, F.TYPE_MESSAGE, ".google.type.Decimal")
    field(t, "plain", 11, F.TYPE_INT32)  # proto3 without presence: 0 when not written
    level = t.enum_type.add(name="Level")
    level.value.add(name="LOW", number=0)
    level.value.add(name="HIGH", number=1)
    from google.protobuf.message_factory import GetMessageClass

    cls = GetMessageClass(build(file).FindMessageTypeByName("shop.T"))
    write = serializer(registry, cls)
    fields = {"day": "string", "big": "long", "ratio": "double", "ok": "boolean",
              "small": "long", "count": {"type": "long", "optional": True},
              "level": "string", "price": {"type": "decimal(20,4)", "optional": True},
              "plain": "long", "seen": {"path": "ts", "type": "string"}}
    pair = parsers(registry, fields=fields)

    def message(**values: Any) -> Any:
        m = cls(big=2**62 + 1, ratio=0.1, ok=True, small=-3, level=1, tags=["a"])
        m.ts.FromMilliseconds(KTS + 5)
        m.day.year, m.day.month, m.day.day = 2026, 2, 3
        m.count.value = 2**53 + 1
        m.price.value = "123456789012.3456"
        for name, value in values.items():
            setattr(m, name, value) if not callable(value) else value(m)
        return write(TOPIC, m)

    assert both(pair, message()) == Parsed(KTS + 5, (
        "2026-02-03", 2**62 + 1, float.fromhex("0x1.99999ap-4"), True, -3, 2**53 + 1, "HIGH",
        Decimal("123456789012.3456"), 0, "2026-01-01T00:00:00.005000Z"))
    unset = message(count=lambda m: m.ClearField("count"), price=lambda m: m.ClearField("price"))
    assert both(pair, unset).values[5] is None  # type: ignore[union-attr]
    assert both(pair, unset).values[7] is None  # type: ignore[union-attr]
    micro = message(ts=lambda m: m.ts.FromNanoseconds((KTS + 5) * 10**6 + 1000))
    assert both(pair, micro) == Rejected(
        "schema id 1: field 'ts' = 2026-01-01T00:00:00.005001+00:00 is finer than a "
        "millisecond; event time is kept in ms and not rounded")
    nano = message(ts=lambda m: m.ts.FromNanoseconds((KTS + 5) * 10**6 + 1))
    assert isinstance(both(pair, nano), Rejected)  # never rounded to the ms
    bad_day = message(day=lambda m: setattr(m.day, "month", 0))
    assert both(pair, bad_day) == Rejected(
        "schema id 1: field day: Date 2026-0-3 is not a full calendar date")
    bad_price = message(price=lambda m: setattr(m.price, "value", "1_000"))
    assert both(pair, bad_price) == Rejected(
        "schema id 1: field price: Decimal '1_000' is not a decimal number")
    nan_price = message(price=lambda m: setattr(m.price, "value", "NaN"))
    assert both(pair, nan_price).reason.endswith("is not a decimal number")  # type: ignore
    unnamed = message(level=5)  # an enum number the writer schema does not name
    assert both(pair, unnamed) == Rejected(
        "schema id 1: field 'level' must be a string, got integer")


def test_a_schema_that_is_not_protobuf_quarantines_its_records(
        registry: SchemaRegistryServer) -> None:
    avro = registry.register("a-value", {"schema": '{"type": "string"}'})
    import base64

    empty = new_file("e.proto").SerializeToString()  # imports, no message
    no_messages = registry.register("e-value", {
        "schema": base64.b64encode(empty).decode(), "schemaType": "PROTOBUF"})
    broken = registry.register("b-value", {"schema": "AAAA", "schemaType": "PROTOBUF"})
    pair = parsers(registry)
    assert both(pair, b"\x00" + avro.to_bytes(4, "big") + b"\x00") == Rejected(
        f"schema id {avro} is a AVRO schema, not Protobuf (event.format is protobuf)")
    assert both(pair, b"\x00" + no_messages.to_bytes(4, "big") + b"\x00") == Rejected(
        f"schema id {no_messages} has no message types")
    reason = both(pair, b"\x00" + broken.to_bytes(4, "big") + b"\x00").reason
    assert reason.startswith(f"schema id {broken} is not")


def raw_batch(values: list[bytes | None]) -> Any:
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [pa.array([TOPIC] * n), pa.array(range(n), pa.int32()), pa.array(range(n), pa.int64()),
         pa.array([KTS] * n, pa.int64()),
         pa.array([b"k%d" % i for i in range(n)], pa.binary()), pa.array(values, pa.binary())],
        schema=RAW_SCHEMA)


def test_parse_batch_agrees_with_parse_and_is_deterministic(
        registry: SchemaRegistryServer) -> None:
    write1, write3 = serializer(registry, order_class(1)), serializer(registry, order_class(3))
    values: list[bytes | None] = [
        write1(TOPIC, v1(oid=f"o-{i}", amount=Decimal(i) / 4)) for i in range(20)]
    values[3] = None
    values[5] = b"not protobuf"
    values[8] = write3(TOPIC, order(3, "o", TS, 1, None, Decimal(1)))
    values[13] = values[0][:-2]  # type: ignore[index]
    batch = raw_batch(values)
    first = parser_for(event("protobuf", config_of(registry))).parse_batch(batch)
    assert first.equals(parser_for(event("protobuf", config_of(registry))).parse_batch(batch))
    one = parser_for(event("protobuf", config_of(registry)))
    for value, row in zip(values, first.to_pylist(), strict=True):
        outcome = one.parse(value, KTS)
        assert row[REASON] == (None if isinstance(outcome, Parsed) else outcome.reason)
    assert [r[REASON] is not None for r in first.to_pylist()].count(True) == 4


@settings(max_examples=300, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(payload=st.binary(max_size=64))
def test_any_bytes_after_a_known_id_are_an_event_or_a_reason(
        registry: SchemaRegistryServer, payload: bytes) -> None:
    if not registry.schemas:
        serializer(registry, order_class(1))(TOPIC, v1())
    pair = _PAIRS.setdefault(registry.url, parsers(registry))
    outcome = both(pair, b"\x00\x00\x00\x00\x01" + payload)
    assert isinstance(outcome, Parsed | Rejected)


_PAIRS: dict[str, Any] = {}


def test_a_registry_that_is_down_or_slow_is_transient_and_quarantines_nothing(
        registry: SchemaRegistryServer) -> None:
    good = serializer(registry, order_class(1))(TOPIC, v1())
    two = serializer(registry, order_class(2))(TOPIC, order(2, "o", TS, 1, "GOLD", Decimal(1)))
    parser = parser_for(event("protobuf", config_of(registry, timeout="500ms")))
    audit = parsers(registry)[1]
    assert isinstance(parser.parse(good, KTS), Parsed)
    registry.stop()
    assert isinstance(parser.parse(good, KTS), Parsed)  # id 1 is cached on this worker
    with pytest.raises(SchemaRegistryUnavailable, match="did not answer fetching schema id 2"):
        parser.parse(two, KTS)
    with pytest.raises(SchemaRegistryUnavailable, match="could not reach"):
        audit.parse(two, KTS)
    registry.start()
    registry.delay_s = 1.0
    with pytest.raises(SchemaRegistryUnavailable, match="ReadTimeout"):
        parser.parse(two, KTS)
    registry.delay_s = 0
    assert isinstance(parser.parse(two, KTS), Parsed)  # the failure was not cached


# --- JSON Schema -----------------------------------------------------------------------------

J1 = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
      "properties": {"id": {"type": "string"}, "ts": {"type": "integer"},
                     "customer": {"type": "object", "properties": {
                         "id": {"type": "integer"},
                         "tier": {"enum": ["BASIC", "GOLD"]}}, "required": ["id"]},
                     "amount": {"type": "number", "multipleOf": 0.01},
                     "note": {"type": ["string", "null"]}},
      "required": ["id", "ts", "customer", "amount"]}
J2 = {**J1, "properties": {**J1["properties"], "amount": {"type": "number"},  # type: ignore
                           "coupon": {"type": "string"}}}


def json_serializer(registry: SchemaRegistryServer, schema: dict) -> Any:
    client = SchemaRegistryClient({"url": registry.url, "basic.auth.user.info": registry.user_info})
    ser = JSONSerializer(json.dumps(schema), client)
    return lambda record: ser(record, SerializationContext(TOPIC, MessageField.VALUE))


def test_json_schema_two_versions_validation_and_hostile_records(
        registry: SchemaRegistryServer) -> None:
    pair = parsers(registry, "json_schema")
    record = {"id": "o-1", "ts": KTS + 1250, "customer": {"id": 7, "tier": "GOLD"},
              "amount": 12.34, "note": None}
    one = json_serializer(registry, J1)(record)
    assert one[:5] == b"\x00\x00\x00\x00\x01"
    assert both(pair, one) == Parsed(KTS + 1250, ("o-1", 7, "GOLD", Decimal("12.34"), None))
    two = json_serializer(registry, J2)({**record, "amount": 99999.5, "coupon": "X"})
    assert both(pair, two) == Parsed(KTS + 1250, ("o-1", 7, "GOLD", Decimal("99999.50"), None))
    head1, head2 = one[:5], two[:5]
    exact = head2 + b'{"id": "o", "ts": 1767225601250, "customer": {"id": 1, "tier": "GOLD"},' \
        b' "amount": 0.1000000000000000055511151231257827}'
    assert both(pair, exact) == Rejected(  # an exact decimal, not a float's rounding
        "schema id 2: field 'amount' = 0.1000000000000000055511151231257827 has more than 2 "
        "decimal places; decimal(12,2) is not rounded")
    no_tier = head2 + json.dumps({**record, "customer": {"id": 1}}).encode()
    assert both(pair, no_tier) == Rejected(
        "schema id 2: missing field 'tier' (path customer.tier)")
    invalid = head1 + json.dumps({**record, "customer": {"id": "seven"}}).encode()
    assert both(pair, invalid) == Rejected(
        "schema id 1: does not validate against its schema at customer/id: 'seven' is not of "
        "type 'integer'")
    off_cent = head1 + json.dumps({**record, "amount": 12.345}).encode()
    assert both(pair, off_cent).reason.startswith(  # type: ignore[union-attr]
        "schema id 1: does not validate against its schema at amount: 12.345 is not a "
        "multiple of 0.01")
    assert both(pair, head1 + b"[1]") == Rejected(
        "schema id 1: does not validate against its schema at the record: [1] is not of type "
        "'object'")
    assert both(pair, head1 + b'{"id": NaN}').reason.startswith(  # type: ignore[union-attr]
        "schema id 1: the payload is not JSON (ValueError: NaN is not a JSON number")
    assert both(pair, head1 + b"\xff").reason.startswith(  # type: ignore[union-attr]
        "schema id 1: the payload is not JSON (UnicodeDecodeError")
    for cut in range(5, len(one)):  # every truncation
        outcome = both(pair, one[:cut])
        assert isinstance(outcome, Rejected), cut
        assert outcome.reason.startswith("schema id 1: the payload is not JSON"), outcome
    assert both(pair, b"{}") .reason.endswith("byte 0 is 123, not the magic byte 0")  # type: ignore
    assert both(pair, b"\x00\x00\x00\x10\x00{}") == Rejected(
        "schema id 4096 is not known to the Schema Registry")
    deep = head2 + b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert both(pair, deep).reason.startswith(  # type: ignore[union-attr]
        "schema id 2: the payload is not JSON (RecursionError")


def test_json_schema_registry_down_is_transient(registry: SchemaRegistryServer) -> None:
    good = json_serializer(registry, J1)({"id": "o", "ts": KTS, "customer": {"id": 1,
                                          "tier": "GOLD"}, "amount": 1})
    registry.stop()
    with pytest.raises(SchemaRegistryUnavailable, match="did not answer fetching schema id 1"):
        parser_for(event("json_schema", config_of(registry, timeout="500ms"))).parse(good, KTS)
    registry.start()
    assert isinstance(parser_for(event("json_schema", config_of(registry))).parse(good, KTS),
                      Parsed)


def test_a_deeply_nested_recursive_message_is_quarantined_not_a_crash(
        registry: SchemaRegistryServer) -> None:
    """A recursive type (a linked list) 10,000 levels deep in 20 KB: the protobuf runtime stops
    at its recursion limit (100), so the record is quarantined; the worker lives on."""
    file = new_file("shop/node.proto")
    node = file.message_type.add(name="Node")
    field(node, "v", 1, F.TYPE_INT64)
    field(node, "next", 2, F.TYPE_MESSAGE, ".shop.Node")
    from google.protobuf.message_factory import GetMessageClass

    cls = GetMessageClass(build(file).FindMessageTypeByName("shop.Node"))
    shallow = cls(v=3)
    shallow.next.v = 4
    data = serializer(registry, cls)(TOPIC, shallow)
    pair = parsers(registry, fields={"v": "long", "w": {"path": "next.v", "type": "long"}},
                   time={"format": "kafka_timestamp"})
    assert both(pair, data) == Parsed(KTS, (3, 4))
    deep = b""
    for _ in range(10_000):  # next { next { ... } }, built from the inside out
        deep = b"\x12" + _varint(len(deep)) + deep
    outcome = both(pair, data[:6] + deep)
    assert outcome.reason.startswith(  # type: ignore[union-attr]
        "schema id 1: the payload does not decode (DecodeError")


def _varint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def test_json_schema_refers_to_nothing_it_fetches(registry: SchemaRegistryServer) -> None:
    """A ``$ref`` to a URL is not fetched (a worker makes no requests a schema asks for): the
    record is quarantined naming what could not be resolved."""
    remote = registry.register("r-value", {"schema": json.dumps(
        {"type": "object", "properties": {"x": {"$ref": "https://example.com/x.json"}}}),
        "schemaType": "JSON"})
    pair = parsers(registry, "json_schema", fields={"x": "long"},
                   time={"format": "kafka_timestamp"})
    raw = b"\x00" + remote.to_bytes(4, "big") + b'{"x": 1}'
    assert both(pair, raw) == Rejected(
        f"schema id {remote}: the schema refers to what it does not hold (Unresolvable: "
        "https://example.com/x.json)")
    assert both(pair, b"\x00" + remote.to_bytes(4, "big") + b'{"y": 1}') == Rejected(
        f"schema id {remote}: missing field 'x'")


# --- an id the registry does not know (yet) -------------------------------------------------

@pytest.mark.parametrize("fmt", ["protobuf", "json_schema"])
def test_an_unknown_id_is_asked_again_in_the_next_batch(registry: SchemaRegistryServer,
                                                        fmt: str) -> None:
    """As for Avro (``test_formats_avro``): a 404 holds for one batch, not for the worker's
    life; the parser that quarantined the id's records decodes them once it is registered."""
    record = {"id": "o-1", "ts": KTS + 1250, "customer": {"id": 7, "tier": "GOLD"},
              "amount": 12.34, "note": None}

    def produce(server: SchemaRegistryServer) -> bytes:
        if fmt == "protobuf":
            return serializer(server, order_class(1))(TOPIC, v1())
        return json_serializer(server, J1)(record)

    with SchemaRegistryServer() as elsewhere:
        early = produce(elsewhere)  # id 1 there, unknown to the pipeline's registry
    parser = parser_for(event(fmt, config_of(registry)))
    batch = raw_batch([early] * 3)
    assert parser.parse_batch(batch).column(REASON).to_pylist() == [UNKNOWN_1] * 3
    assert produce(registry)[:5] == early[:5]  # registered: id 1
    decoded = parser.parse_batch(batch)
    assert decoded.column(REASON).to_pylist() == [None] * 3
    assert decoded.column("order_id").to_pylist() == ["o-1"] * 3
