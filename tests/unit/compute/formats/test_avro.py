"""``event.format: avro`` (``eos.compute.formats``), without Spark: records written by
Confluent's own ``AvroSerializer`` (the wire format's reference) through a registry, decoded by
the reader's parser.

The registry is ``eos.tools.servers.schema_registry``: a Schema-Registry-compatible HTTP server
written for the tests, a stand-in for Confluent's (none installs here), speaking the REST
endpoints the confluent client uses, with basic auth. ``mock://`` is used only where a test
needs no HTTP at all."""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eos.compute.formats import Parsed, Rejected, parser_for
from eos.compute.formats.avro import AvroDecoder
from eos.compute.formats.registry import WriterSchemas
from eos.compute.reader import RAW_SCHEMA
from eos.core.config import parse_config
from eos.core.errors import ConfigError, SchemaRegistryUnavailable
from eos.core.schema import RAW_VALUE, REASON
from eos.tools.servers.schema_registry import SchemaRegistryServer

from support.registry_formats import AUTH_ENV, KTS, TOPIC, UNKNOWN_1, config_of, event

with warnings.catch_warnings():  # authlib (imported by the client) warns on import
    import authlib.deprecate  # noqa: F401  its import adds an "always" filter: then ours
    warnings.simplefilter("ignore")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer


V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
        {"name": "id", "type": "long"},
        {"name": "tier", "type": {"type": "enum", "name": "Tier",
                                  "symbols": ["BASIC", "GOLD"]}}]}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                "precision": 12, "scale": 2}},
    {"name": "note", "type": ["null", "string"], "default": None},
]}
# Version 2: amount at a finer scale, a new optional field, the note moved after it.
V2 = {**V1, "fields": [
    V1["fields"][0], V1["fields"][1], V1["fields"][2],
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                "precision": 16, "scale": 4}},
    {"name": "coupon", "type": ["null", "string"], "default": None},
    V1["fields"][4],
]}
# Version 3 lost customer.tier, which the pipeline declares as required.
V3 = {**V1, "fields": [
    V1["fields"][0], V1["fields"][1],
    {"name": "customer", "type": {"type": "record", "name": "Customer",
                                  "fields": [{"name": "id", "type": "long"}]}},
    V1["fields"][3], V1["fields"][4],
]}


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[SchemaRegistryServer]:
    with SchemaRegistryServer() as server:
        monkeypatch.setenv(AUTH_ENV, server.user_info)
        yield server


def serializer(server: SchemaRegistryServer, schema: dict) -> AvroSerializer:
    """Confluent's serializer, registering ``schema`` under the topic's value subject."""
    client = SchemaRegistryClient({"url": server.url, "basic.auth.user.info": server.user_info})
    return AvroSerializer(client, json.dumps(schema))


def write(ser: AvroSerializer, record: dict) -> bytes:
    data = ser(record, SerializationContext(TOPIC, MessageField.VALUE))
    assert data is not None
    return data


def order(**changes: Any) -> dict[str, Any]:
    base = {"id": "o-1", "ts": datetime(2026, 1, 1, 0, 0, 1, 250000, tzinfo=UTC),
            "customer": {"id": 7, "tier": "GOLD"}, "amount": Decimal("12.34"), "note": None}
    return {**base, **changes}


def raw_batch(values: list[bytes | None], stamps: list[int | None] | None = None) -> Any:
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [pa.array([TOPIC] * n), pa.array(range(n), pa.int32()), pa.array(range(n), pa.int64()),
         pa.array(stamps or [KTS] * n, pa.int64()),
         pa.array([b"k%d" % i for i in range(n)], pa.binary()), pa.array(values, pa.binary())],
        schema=RAW_SCHEMA)


# --- config ----------------------------------------------------------------------------------

def test_config_requires_a_registry_for_avro_and_refuses_credentials_in_the_url() -> None:
    with pytest.raises(ConfigError, match=r"needs event\.schema_registry"):
        event(None)
    with pytest.raises(ConfigError, match="may not carry credentials"):
        event({"url": "http://eos:hunter2@127.0.0.1:8081"})
    with pytest.raises(ConfigError, match="auth_env or connection, not both"):
        event({"url": "http://127.0.0.1:8081", "auth_env": "A", "connection": "c"})
    with pytest.raises(ConfigError, match="environment variable"):
        event({"url": "http://127.0.0.1:8081", "auth_env": "not a name"})
    with pytest.raises(ConfigError, match=r"event\.format"):
        parse_config({"name": "p", "kafka": {"topic": "t"},
                      "event": {"format": "thrift", "time": {"format": "kafka_timestamp"},
                                "fields": {"v": "long"}},
                      "window": {"size": "10s"}, "aggregations": {"n": "count(*)"}})


def test_the_registry_is_not_in_the_schema_view_and_json_views_are_unchanged() -> None:
    base = {"name": "p", "kafka": {"topic": "t"}, "window": {"size": "10s"},
            "aggregations": {"n": "count(*)"}}
    json_event = {"time": {"format": "kafka_timestamp"}, "fields": {"v": "long"}}
    view = parse_config({**base, "event": json_event}).schema_view()["event"]
    assert set(view) == {"format", "time", "fields", "filter", "max_future"}
    avro = {**json_event, "format": "avro",
            "schema_registry": {"url": "http://127.0.0.1:1", "auth_env": "X"}}
    moved = {**avro, "schema_registry": {"url": "https://registry.example:8081"}}
    assert (parse_config({**base, "event": avro}).schema_view()
            == parse_config({**base, "event": moved}).schema_view())
    assert parse_config({**base, "event": avro}).schema_view()["event"]["format"] == "avro"


# --- decoding --------------------------------------------------------------------------------

def test_two_writer_versions_decode_exactly_and_a_lost_path_names_schema_and_field(
        registry: SchemaRegistryServer) -> None:
    parser = parser_for(event(config_of(registry)))
    v1 = write(serializer(registry, V1), order(note="first"))
    v2 = write(serializer(registry, V2), order(amount=Decimal("99999.5000"), coupon="X"))
    v3 = write(serializer(registry, V3), {**order(), "customer": {"id": 9}})
    ts = 1_767_225_601_250
    assert parser.parse(v1, KTS) == Parsed(ts, ("o-1", 7, "GOLD", Decimal("12.34"), "first"))
    out = parser.parse(v2, KTS)
    assert out == Parsed(ts, ("o-1", 7, "GOLD", Decimal("99999.50"), None))
    assert str(out.values[3]) == "99999.50"  # at the declared scale, not rounded
    assert parser.parse(v3, KTS) == Rejected(
        "schema id 3: missing field 'tier' (path customer.tier)")
    finer = write(serializer(registry, V2), order(amount=Decimal("1.2345")))
    assert parser.parse(finer, KTS) == Rejected(
        "schema id 2: field 'amount' = 1.2345 has more than 2 decimal places; "
        "decimal(12,2) is not rounded")
    too_big = write(serializer(registry, V2), order(amount=Decimal("12345678901.0000")))
    assert parser.parse(too_big, KTS).reason.startswith(  # type: ignore[union-attr]
        "schema id 2: field 'amount' = 12345678901.0000 does not fit decimal(12,2)")
    # One fetch per schema id, however many records.
    for _ in range(50):
        parser.parse(v1, KTS)
        parser.parse(v2, KTS)
    ids = {k: v for k, v in registry.requests.items() if k.startswith("GET /schemas/ids/")}
    assert ids == {"GET /schemas/ids/1": 1, "GET /schemas/ids/2": 1, "GET /schemas/ids/3": 1}


def test_hostile_payloads_are_quarantined_with_their_reason(
        registry: SchemaRegistryServer) -> None:
    parser = parser_for(event(config_of(registry)))
    good = write(serializer(registry, V1), order())
    assert isinstance(parser.parse(good, KTS), Parsed)
    json_text = b'{"id": "o-1"}'
    assert parser.parse(json_text, KTS) == Rejected(
        "not in the Schema Registry wire format (magic byte 0, a 4-byte schema id, the "
        "payload): byte 0 is 123, not the magic byte 0")
    assert parser.parse(b"\x00\x00\x01", KTS).reason.endswith(  # type: ignore[union-attr]
        "3 bytes, shorter than the 5-byte header")
    assert parser.parse(None, KTS) == Rejected("null record value")
    unknown = b"\x00" + (4242).to_bytes(4, "big") + good[5:]
    assert parser.parse(unknown, KTS) == Rejected(
        "schema id 4242 is not known to the Schema Registry")
    assert parser.parse(good + b"\x00", KTS) == Rejected(
        "schema id 1: 1 bytes are left after the record (the payload is not one datum of "
        "this schema)")
    for cut in range(5, len(good)):  # every truncation: quarantined, never an exception
        outcome = parser.parse(good[:cut], KTS)
        assert isinstance(outcome, Rejected), cut
        assert outcome.reason.startswith("schema id 1: the payload does not decode"), outcome
    huge = good[:5] + b"\xfe\xff\xff\xff\x0f" + b"o-1"  # a 2 GiB string length
    assert parser.parse(huge, KTS).reason.startswith(  # type: ignore[union-attr]
        "schema id 1: the payload does not decode (EOFError")


def test_a_schema_that_is_not_avro_quarantines_its_records(
        registry: SchemaRegistryServer) -> None:
    schema_id = registry.register("other-value", {"schema": 'syntax = "proto3";',
                                                  "schemaType": "PROTOBUF"})
    broken = registry.register("broken-value", {"schema": '{"type": "record"}'})
    parser = parser_for(event(config_of(registry)))
    assert parser.parse(b"\x00" + schema_id.to_bytes(4, "big") + b"\x02", KTS) == Rejected(
        f"schema id {schema_id} is a PROTOBUF schema, not Avro (event.format is avro)")
    reason = parser.parse(b"\x00" + broken.to_bytes(4, "big"), KTS).reason  # type: ignore
    assert reason.startswith(f"schema id {broken} is not a valid Avro schema")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(payload=st.binary(max_size=64))
def test_any_bytes_after_a_known_id_are_an_event_or_a_reason(
        registry: SchemaRegistryServer, payload: bytes) -> None:
    if not registry.schemas:
        write(serializer(registry, V1), order())
    one, other = _parsers(registry)
    outcome = one.parse(b"\x00\x00\x00\x00\x01" + payload, KTS)
    assert isinstance(outcome, Parsed | Rejected)
    assert outcome == other.parse(b"\x00\x00\x00\x00\x01" + payload, KTS)  # deterministic


_PARSERS: dict[str, tuple[Any, Any]] = {}


def _parsers(registry: SchemaRegistryServer) -> tuple[Any, Any]:
    """Two parsers (two workers) for the registry the hypothesis run started with."""
    if registry.url not in _PARSERS:
        _PARSERS[registry.url] = (parser_for(event(config_of(registry))),
                                  parser_for(event(config_of(registry))))
    return _PARSERS[registry.url]


def test_logical_types_map_exactly(registry: SchemaRegistryServer) -> None:
    schema = {"type": "record", "name": "T", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ratio", "type": "float"},
        {"name": "ok", "type": "boolean"},
        {"name": "small", "type": "int"},
    ]}
    fields = {"day": "string", "seen": "long", "seen_text": {"path": "seen", "type": "string"},
              "ratio": "double", "ok": "boolean", "small": "long"}
    parser = parser_for(event(config_of(registry), fields, {"field": "at", "format": "epoch_ms"}))
    ser = serializer(registry, schema)
    record = {"at": datetime(2026, 1, 1, 0, 0, 0, 5000, tzinfo=UTC), "day": date(2026, 2, 3),
              "seen": datetime(2025, 12, 31, 23, 59, 59, 999000, tzinfo=UTC), "ratio": 0.5,
              "ok": True, "small": -3}
    assert parser.parse(write(ser, record), KTS) == Parsed(
        1_767_225_600_005,
        ("2026-02-03", 1_767_225_599_999, "2025-12-31T23:59:59.999000Z", 0.5, True, -3))
    finer = write(ser, {**record, "at": datetime(2026, 1, 1, 0, 0, 0, 5001, tzinfo=UTC)})
    assert parser.parse(finer, KTS) == Rejected(
        "schema id 1: field 'at' = 2026-01-01T00:00:00.005001+00:00 is finer than a "
        "millisecond; event time is kept in ms and not rounded")
    ahead = write(ser, {**record, "at": datetime(2026, 1, 3, tzinfo=UTC)})
    assert parser.parse(ahead, KTS) == Rejected(
        "schema id 1: field 'at' is 172800000 ms ahead of the record's Kafka timestamp "
        "(max_future is 86400000 ms)")


def test_parse_batch_agrees_with_parse_and_is_deterministic(
        registry: SchemaRegistryServer) -> None:
    ser1, ser3 = serializer(registry, V1), serializer(registry, V3)
    values: list[bytes | None] = [
        write(ser1, order(id=f"o-{i}", amount=Decimal(i) / 4)) for i in range(20)]
    values[3] = None
    values[5] = b"not avro"
    values[8] = write(ser3, {**order(), "customer": {"id": 1}})
    values[13] = values[0][:-2]  # type: ignore[index]
    batch = raw_batch(values)
    first = parser_for(event(config_of(registry))).parse_batch(batch)
    again = parser_for(event(config_of(registry))).parse_batch(batch)
    assert first.equals(again)
    one = parser_for(event(config_of(registry)))
    rows = first.to_pylist()
    for value, row in zip(values, rows, strict=True):
        outcome = one.parse(value, KTS)
        if isinstance(outcome, Parsed):
            assert row[REASON] is None
            assert (row["order_id"], row["customer"], row["tier"], row["amount"],
                    row["note"]) == outcome.values
        else:
            assert row[REASON] == outcome.reason and row[RAW_VALUE] == value
    assert [r[REASON] is not None for r in rows].count(True) == 4
    assert rows[6]["amount"] == Decimal("1.50")


# --- an id the registry does not know (yet) -------------------------------------------------


def test_an_unknown_id_is_asked_again_in_the_next_batch_not_for_the_worker_life(
        registry: SchemaRegistryServer) -> None:
    """A 404 (error code 40403) says what the registry holds now: a producer may register the
    id a moment later. One answer per id per batch (every record of the id in a batch gets it,
    one request), never kept for the worker's life: the same parser (a Spark worker reuses
    it for every read) decodes the id's records in its next batch once the id is there."""
    with SchemaRegistryServer(registry.user, registry.password) as elsewhere:
        early = write(serializer(elsewhere, V1), order())  # id 1 there; not registered here
    parser = parser_for(event(config_of(registry)))
    batch = raw_batch([early] * 5)
    assert parser.parse_batch(batch).column(REASON).to_pylist() == [UNKNOWN_1] * 5
    assert registry.requests["GET /schemas/ids/1"] == 1  # one question for the whole batch
    assert write(serializer(registry, V1), order()) == early  # registered here: id 1
    decoded = parser.parse_batch(batch)
    assert decoded.column(REASON).to_pylist() == [None] * 5
    assert decoded.column("order_id").to_pylist() == ["o-1"] * 5
    assert parser.parse(early, KTS) == Parsed(1_767_225_601_250,
                                              ("o-1", 7, "GOLD", Decimal("12.34"), None))
    parser.parse_batch(batch)
    assert registry.requests["GET /schemas/ids/1"] == 2  # a known schema is kept: ids are final


def test_writer_schemas_keep_an_unknown_id_for_one_batch_only(
        registry: SchemaRegistryServer) -> None:
    """``WriterSchemas`` itself: an unknown id is answered from memory until ``new_batch``
    (the batch's records agree), then asked again; a known schema is never asked again."""
    from eos.compute.formats.registry import UNKNOWN

    schemas = WriterSchemas(event(config_of(registry)).schema_registry)
    assert schemas.get(1) is UNKNOWN
    registry.register("orders-value", {"schema": json.dumps(V1)})
    assert schemas.get(1) is UNKNOWN  # the same batch: the same answer
    assert registry.requests["GET /schemas/ids/1"] == 1
    schemas.new_batch()
    assert json.loads(schemas.get(1).schema_str)["name"] == "Order"
    schemas.new_batch()
    assert schemas.get(1).schema_str
    assert registry.requests["GET /schemas/ids/1"] == 2


# --- the registry away, credentials ----------------------------------------------------------

def test_a_registry_that_is_down_or_slow_is_transient_and_quarantines_nothing(
        registry: SchemaRegistryServer) -> None:
    good = write(serializer(registry, V1), order())
    v2 = write(serializer(registry, V2), order())
    parser = parser_for(event(config_of(registry, timeout="500ms")))
    assert isinstance(parser.parse(good, KTS), Parsed)
    registry.stop()
    assert isinstance(parser.parse(good, KTS), Parsed)  # id 1 is cached on this worker
    with pytest.raises(SchemaRegistryUnavailable, match="did not answer fetching schema id 2"):
        parser.parse(v2, KTS)
    registry.start()
    registry.delay_s = 1.0
    with pytest.raises(SchemaRegistryUnavailable, match="ReadTimeout"):
        parser.parse(v2, KTS)
    registry.delay_s = 0
    assert isinstance(parser.parse(v2, KTS), Parsed)  # the failure was not cached


def test_credentials_come_from_the_environment_and_are_never_in_messages(
        registry: SchemaRegistryServer, monkeypatch: pytest.MonkeyPatch) -> None:
    good = write(serializer(registry, V1), order())
    monkeypatch.setenv(AUTH_ENV, f"{registry.user}:wrong-password")
    with pytest.raises(ConfigError) as refused:
        parser_for(event(config_of(registry))).parse(good, KTS)
    assert f"refused the credentials in ${AUTH_ENV} (HTTP 401)" in str(refused.value)
    assert "wrong-password" not in str(refused.value)
    monkeypatch.delenv(AUTH_ENV)
    with pytest.raises(ConfigError, match=f"names {AUTH_ENV}, which is not set"):
        parser_for(event(config_of(registry))).parse(good, KTS)
    with pytest.raises(ConfigError, match="no credentials"):
        parser_for(event({"url": registry.url})).parse(good, KTS)


def test_credentials_from_an_airflow_connection(registry: SchemaRegistryServer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    good = write(serializer(registry, V1), order())
    monkeypatch.setenv("AIRFLOW_CONN_EOS_TEST_REGISTRY", json.dumps(
        {"conn_type": "http", "host": "127.0.0.1", "login": registry.user,
         "password": registry.password}))
    parser = parser_for(event({"url": registry.url, "connection": "eos_test_registry"}))
    assert isinstance(parser.parse(good, KTS), Parsed)
    with pytest.raises(ConfigError, match="'eos_test_missing' is not defined"):
        parser_for(event({"url": registry.url, "connection": "eos_test_missing"})).parse(
            good, KTS)


def test_the_config_pickled_for_workers_holds_no_secret(
        registry: SchemaRegistryServer) -> None:
    from eos.compute.reader import event_option

    option = event_option(event(config_of(registry)))
    assert registry.password not in option
    import base64
    assert registry.password.encode() not in base64.b64decode(option)


# --- mock:// (unit only): our decoder reads Confluent's mock client's ids ---------------------

def test_decoder_reads_what_a_mock_registry_serializer_wrote() -> None:
    client = SchemaRegistryClient.new_client({"url": "mock://eos-unit"})
    data = AvroSerializer(client, json.dumps(V1))(order(), SerializationContext(
        TOPIC, MessageField.VALUE))

    class Schemas(WriterSchemas):  # the mock client in place of HTTP: WriterSchemas' get
        def __init__(self) -> None:
            pass

        def get(self, schema_id: int) -> Any:
            return client.get_schema(schema_id)

    decoder = AvroDecoder(Schemas())
    decoded = decoder.decode(data)
    assert decoded.record["amount"] == Decimal("12.34")  # type: ignore[union-attr]
    buffer = io.BytesIO(data[5:])
    assert fastavro.schemaless_reader(buffer, fastavro.parse_schema(V1), None) == \
        decoded.record  # type: ignore[union-attr]


def test_an_array_of_weightless_items_is_refused_not_decoded(
        registry: SchemaRegistryServer) -> None:
    """Ten bytes could claim 2^62 nulls: fastavro would build the list until the worker's
    memory ran out. Such a schema's records are quarantined (measured: 10^7 nulls took 0.3 s)."""
    nulls = {"type": "record", "name": "N", "fields": [
        {"name": "ts", "type": "long"},
        {"name": "inner", "type": {"type": "record", "name": "I", "fields": [
            {"name": "xs", "type": {"type": "array", "items": {
                "type": "record", "name": "E", "fields": [{"name": "z", "type": "null"}]}}}]}}]}
    fine = {"type": "record", "name": "F", "fields": [
        {"name": "ts", "type": "long"},
        {"name": "xs", "type": {"type": "array", "items": ["null", "long"]}},
        {"name": "m", "type": {"type": "map", "values": "null"}}]}
    bad_id = registry.register("n-value", {"schema": json.dumps(nulls)})
    fine_id = registry.register("f-value", {"schema": json.dumps(fine)})
    parser = parser_for(event(config_of(registry), {"v": {"path": "ts", "type": "long"}},
                              {"format": "kafka_timestamp"}))
    count = b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f"  # 2^62 items, zigzag varint
    bomb = b"\x00" + bad_id.to_bytes(4, "big") + b"\x02" + count + b"\x00"
    reason = parser.parse(bomb, KTS).reason  # type: ignore[union-attr]
    assert reason.startswith(f"schema id {bad_id} has an array of ")
    assert reason.endswith("whose items take no bytes: a record of a few bytes could claim "
                           "billions of them; not read")
    ok = b"\x00" + fine_id.to_bytes(4, "big") + b"\x02" + b"\x04\x00\x02\x04\x00" + b"\x00"
    assert parser.parse(ok, KTS) == Parsed(KTS, (1,))


def test_a_recursive_schema_is_refused_not_decoded(registry: SchemaRegistryServer) -> None:
    """A linked list 10,000 levels deep (10 KB) segfaults fastavro's compiled reader: the worker
    would die on every retry. Records of a recursive writer schema are quarantined instead."""
    node = {"type": "record", "name": "Node", "fields": [
        {"name": "ts", "type": "long"}, {"name": "next", "type": ["null", "Node"]}]}
    node_id = registry.register("node-value", {"schema": json.dumps(node)})
    parser = parser_for(event(config_of(registry), {"v": {"path": "ts", "type": "long"}},
                              {"format": "kafka_timestamp"}))
    deep = b"\x00" + node_id.to_bytes(4, "big") + b"\x02\x02" * 10_000 + b"\x02\x00"
    assert parser.parse(deep, KTS) == Rejected(
        f"schema id {node_id} is recursive (record Node contains itself); not read")


def test_a_union_with_null_is_an_optional_value_at_any_depth(
        registry: SchemaRegistryServer) -> None:
    """A null where a declared path passes (a nullable nested record) is NULL for an optional
    field and names the null step for a required one, as JSON's rules do."""
    schema = {"type": "record", "name": "U", "fields": [
        {"name": "ts", "type": "long"},
        {"name": "customer", "type": ["null", {"type": "record", "name": "C", "fields": [
            {"name": "tier", "type": ["null", "string"]}]}]}]}
    ser = serializer(registry, schema)
    optional = parser_for(event(config_of(registry), {
        "tier": {"path": "customer.tier", "type": "string", "optional": True}}))
    required = parser_for(event(config_of(registry), {
        "tier": {"path": "customer.tier", "type": "string"}}))
    no_customer = write(ser, {"ts": KTS, "customer": None})
    null_tier = write(ser, {"ts": KTS, "customer": {"tier": None}})
    gold = write(ser, {"ts": KTS, "customer": {"tier": "GOLD"}})
    assert [optional.parse(v, KTS) for v in (no_customer, null_tier, gold)] == [
        Parsed(KTS, (None,)), Parsed(KTS, (None,)), Parsed(KTS, ("GOLD",))]
    assert [required.parse(v, KTS) for v in (no_customer, null_tier, gold)] == [
        Rejected("schema id 1: field 'tier' (path customer.tier): 'customer' is null, not an "
                 "object"),
        Rejected("schema id 1: field 'tier' (path customer.tier) is null"),
        Parsed(KTS, ("GOLD",))]


_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True), st.text(max_size=5), st.binary(max_size=3),
    st.decimals(allow_nan=False, places=3, min_value=-(10**12), max_value=10**12),
    st.datetimes(timezones=st.just(UTC)), st.datetimes(), st.dates(),
    st.lists(st.integers(), max_size=2))
_RECORDS = st.recursive(_VALUES, lambda inner: st.dictionaries(
    st.sampled_from(["a", "b", "ts"]), inner, max_size=3), max_leaves=12)


@settings(max_examples=600, deadline=None)
@given(record=st.dictionaries(st.sampled_from(["a", "b", "ts"]), _RECORDS, max_size=3),
       kts=st.one_of(st.none(), st.integers(min_value=-5, max_value=2 * KTS)))
def test_the_fast_path_accepts_nothing_the_rules_refuse_with_the_same_values(
        record: dict[str, Any], kts: int | None) -> None:
    """``RecordParser._accept`` (indexing, no reasons) against ``_event`` (the rules written
    out): whatever it accepts, the rules accept with the same values."""
    from eos.compute.formats.records import RecordParser

    fields = {"s": {"path": "a.b", "type": "string", "optional": True},
              "n": {"path": "b", "type": "long"},
              "d": {"path": "a.a", "type": "decimal(10,2)", "optional": True},
              "f": {"path": "a.ts", "type": "double", "optional": True},
              "t": {"path": "b.a", "type": "boolean", "optional": True}}
    for time in ({"field": "ts", "format": "epoch_ms"}, {"field": "a.ts", "format": "epoch_s"},
                 {"format": "kafka_timestamp"}):
        parser = RecordParser(event({"url": "http://127.0.0.1:1"}, fields, time),
                              None)  # type: ignore[arg-type]
        fast = parser._accept(record, kts)
        if fast is not None:
            assert parser._event(record, kts) == fast


def test_the_fast_path_does_accept_what_it_should() -> None:
    """The property above holds for a path that accepts nothing: it must accept the plain
    records (a mutation that disabled it would show here, and in the benchmark)."""
    from eos.compute.formats.records import RecordParser

    parser = RecordParser(event({"url": "http://127.0.0.1:1"}, {
        "n": {"path": "b", "type": "long"}, "s": {"path": "a.b", "type": "string"}}), None)  # type: ignore[arg-type]
    record = {"ts": datetime(2026, 1, 1, tzinfo=UTC), "b": 3, "a": {"b": "x"}}
    assert parser._accept(record, KTS) == Parsed(KTS, (3, "x")) == parser._event(record, KTS)
    assert parser._accept({**record, "b": None}, KTS) is None
