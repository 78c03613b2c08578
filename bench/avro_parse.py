"""``python -m bench.avro_parse [--events N] [--repeat R]``: the parser alone, 1 core, JSON
against Avro on the same events.

N order events (a nested customer, a decimal amount, an optional coupon, a millisecond time)
are encoded once as JSON and once as Avro in the Schema Registry wire format (written by
Confluent's ``AvroSerializer``), and ``parse_batch`` of each format's parser
(``eos.compute.formats.parser_for``) reads them in batches of 10,000, as the reader does. The
writer schema comes from confluent-kafka's in-process ``mock://`` registry: it is fetched once
per parser, so the registry is not what this measures. Prints events/s, the median of R runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from eos.compute.formats import parser_for
from eos.compute.formats.avro import AvroDecoder
from eos.compute.formats.records import RecordParser
from eos.compute.reader import RAW_SCHEMA
from eos.core.config import parse_config

SCHEMA = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
        {"name": "id", "type": "long"}, {"name": "tier", "type": "string"}]}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12,
                                "scale": 2}},
    {"name": "coupon", "type": ["null", "string"], "default": None},
]}
FIELDS = {"tier": {"path": "customer.tier", "type": "string"},
          "customer": {"path": "customer.id", "type": "long"},
          "amount": "decimal(12,2)", "coupon": {"type": "string", "optional": True}}
START = datetime(2026, 1, 1, tzinfo=UTC)
BATCH = 10_000


def _event(fmt: str) -> Any:
    registry = {"schema_registry": {"url": "http://127.0.0.1:1"}} if fmt == "avro" else {}
    return parse_config({
        "name": "bench", "kafka": {"topic": "t"},
        "event": {"format": fmt, **registry, "time": {"field": "ts", "format": "epoch_ms"},
                  "fields": FIELDS},
        "window": {"size": "10s"}, "aggregations": {"n": "count(*)"}}).event


def _orders(n: int) -> list[dict[str, Any]]:
    return [{"id": f"o-{i}", "ts": START + timedelta(milliseconds=i),
             "customer": {"id": i % 500, "tier": ("BASIC", "GOLD", "PLATINUM")[i % 3]},
             "amount": Decimal(i % 100_000) / 100, "coupon": "C" if i % 7 == 0 else None}
            for i in range(n)]


def _json(o: dict[str, Any]) -> bytes:
    """The order as JSON, the amount a JSON number with its exact digits."""
    ms = (o["ts"] - START) // timedelta(milliseconds=1) + 1_767_225_600_000
    customer = json.dumps(o["customer"])
    return (f'{{"id": "{o["id"]}", "ts": {ms}, "customer": {customer}, '
            f'"amount": {o["amount"]}, "coupon": {json.dumps(o["coupon"])}}}').encode()


def _batches(values: list[bytes]) -> list[pa.RecordBatch]:
    out = []
    for lo in range(0, len(values), BATCH):
        chunk = values[lo:lo + BATCH]
        n = len(chunk)
        out.append(pa.RecordBatch.from_arrays(
            [pa.array(["t"] * n), pa.array([0] * n, pa.int32()),
             pa.array(range(lo, lo + n), pa.int64()), pa.array([1_767_225_600_000] * n,
                                                                 pa.int64()),
             pa.array([None] * n, pa.binary()), pa.array(chunk, pa.binary())],
            schema=RAW_SCHEMA))
    return out


def _rate(parser: Any, batches: list[pa.RecordBatch], events: int, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        rows = sum(parser.parse_batch(b).num_rows for b in batches)
        samples.append(events / (time.perf_counter() - started))
        assert rows == events
    return statistics.median(samples)


def main() -> None:
    options = argparse.ArgumentParser(prog="python -m bench.avro_parse")
    options.add_argument("--events", type=int, default=200_000)
    options.add_argument("--repeat", type=int, default=3)
    args = options.parse_args()
    with warnings.catch_warnings():  # authlib (imported by the client) warns on import
        import authlib.deprecate  # noqa: F401
        warnings.simplefilter("ignore")
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

    orders = _orders(args.events)
    as_json = [_json(o) for o in orders]
    client = SchemaRegistryClient.new_client({"url": "mock://bench"})
    serialize = AvroSerializer(client, json.dumps(SCHEMA))
    context = SerializationContext("t", MessageField.VALUE)
    as_avro = [serialize(o, context) for o in orders]

    class Schemas:  # the mock registry behind the decoder's one fetch per id
        def get(self, schema_id: int) -> Any:
            return client.get_schema(schema_id)

    json_parser = parser_for(_event("json"))
    avro_parser = RecordParser(_event("avro"), AvroDecoder(Schemas()))  # type: ignore[arg-type]
    # Both formats give the same events.
    assert (json_parser.parse_batch(_batches(as_json[:BATCH])[0]).drop_columns(["__raw_key"])
            .equals(avro_parser.parse_batch(_batches(as_avro[:BATCH])[0])
                    .drop_columns(["__raw_key"])))
    json_rate = _rate(json_parser, _batches(as_json), args.events, args.repeat)
    avro_rate = _rate(avro_parser, _batches(as_avro), args.events, args.repeat)
    print(f"parse_batch, 1 core, {args.events:,} orders: json {json_rate:,.0f} events/s, "
          f"avro {avro_rate:,.0f} events/s (avro/json {avro_rate / json_rate:.2f}); "
          f"bytes per record json {sum(map(len, as_json)) / args.events:.0f}, "
          f"avro {sum(map(len, as_avro)) / args.events:.0f}")


if __name__ == "__main__":
    main()
