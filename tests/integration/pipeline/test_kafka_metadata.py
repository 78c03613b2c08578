"""The record key and headers in and out, against a real broker, Spark and Delta: a key parsed
as ``event.key`` declares it (a key that does not parse is quarantined with its reason), the
raw key and every header as columns, one header read as text, and a Kafka sink of rows keyed
by a column, carrying the source headers and setting one of its own, each key's records in
their source order; the audit checks every key and header the sink wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from eos.core.delta import read_table
from eos.core.kafka import client_settings, consumer
from eos.tools.pipelines import unique_topic

from support.harness import delta_path, finish_and_audit
from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

USERS = ["ann", "bob", "cy", "dee"]
BAD_KEYS = {b"not json": "key: malformed JSON", None: "key: the record has no key",
            b'{"name": "x"}': "key: "}


def _records() -> list[tuple[int, bytes | None, bytes, list[tuple[str, bytes | None]]]]:
    """(partition, key, value, headers): each user's clicks in both partitions, headers that
    repeat a name and one of eos's own (never carried), a few keys that do not parse."""
    out = []
    for i in range(240):
        user = USERS[i % len(USERS)]
        headers = [("trace-id", f"t{i}".encode()), ("tenant", b"a"), ("trace-id", f"T{i}".encode())]
        if i % 10 == 0:
            headers.append(("eos-pipeline", b"upstream"))
        if i % 7 == 0:
            headers.append(("empty", None))
        value = json.dumps({"page": f"/p{i % 13}", "n": i}).encode()
        partition = (i // len(USERS)) % 2  # every user in both source partitions
        out.append((partition, json.dumps({"user": user, "shard": i % 3}).encode(), value,
                    headers))
    for key in BAD_KEYS:
        out.append((0, key, b'{"page": "/bad", "n": -1}', []))
    return out


def _produce(topic: str, records: list[Any]) -> None:
    producer = ck.Producer(client_settings())
    for partition, key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers, partition=partition)
    assert producer.flush(30) == 0


def _read(topic: str) -> list[Any]:
    c = consumer(client_settings(), group="meta-test", **{"enable.partition.eof": True})
    found, ends = [], 0
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(4)])
        while ends < 4:
            message = c.poll(10)
            assert message is not None, "the output topic ended early"
            if message.error():
                ends += 1
                continue
            found.append(message)
    finally:
        c.close()
    return found


def test_keys_and_headers_in_and_out(tmp_path: Path, spark: Any) -> None:
    topic, out = unique_topic("meta"), unique_topic("meta-out")
    records = _records()
    _produce(topic, records)
    config = make_pipeline(
        tmp_path, base={"kafka": {"topic": topic}}, group_by=None, window=None,
        aggregations=None, max_records=100,
        event={"fields": {"page": "string", "n": "long"},
               "key": {"format": "json", "fields": {"user": "string", "shard": "long"}},
               "filter": "header.tenant = 'a' OR n < 0"},
        select={"page": "page", "n": "n", "user": "key.user",
                "shard": "CAST(key.shard + 1 AS BIGINT)", "raw_key": "kafka_key_bytes",
                "trace": "header.`trace-id`", "all": "kafka_headers"},
        sinks={"rows": [{"kafka": {"topic": out, "partitions": 4, "key": "user",
                                   "headers": {"carry": True, "set": {"x-page": "page"}}}},
                        {"delta": "target"}],
               "quarantine": [{"delta": "quarantine"}]})
    finish_and_audit(config, spark, "meta", len(records))

    quarantined = read_table(delta_path(config, "quarantine")).to_pylist()
    assert sorted(r["raw_key"] or b"" for r in quarantined) == sorted(
        k or b"" for k in BAD_KEYS)
    for row in quarantined:
        assert row["reason"].startswith(BAD_KEYS[row["raw_key"]])
    rows = {r["n"]: r for r in read_table(delta_path(config, "target")).to_pylist()}
    assert sorted(rows) == list(range(240))
    first = rows[0]
    assert (first["user"], first["shard"], first["trace"]) == ("ann", 1, "T0")  # last trace-id
    assert json.loads(first["raw_key"]) == {"user": "ann", "shard": 0}
    assert [(h["key"], h["value"]) for h in first["all"]][:3] == [
        ("trace-id", b"t0"), ("tenant", b"a"), ("trace-id", b"T0")]
    assert first["kafka_headers"] == first["all"]  # carried: every row holds them

    published = _read(out)
    assert len(published) == 240
    by_key: dict[tuple[int, bytes], list[tuple[int, int]]] = {}
    for message in published:
        value = json.loads(message.value())
        assert "kafka_headers" not in value and message.key() == value["user"].encode()
        own = [(k, v) for k, v in message.headers() if not k.startswith("eos-")]
        source = [(k, v) for k, v in records[value["n"]][3] if not k.startswith("eos-")]
        assert own == [*source, ("x-page", value["page"].encode())]
        assert dict(message.headers())["eos-pipeline"] == config.name.encode()
        by_key.setdefault((message.partition(), message.key()), []).append(
            (value["kafka_partition"], value["kafka_offset"]))
    for placed in by_key.values():  # a key's records in their source order, per partition
        for partition in (0, 1):
            offsets = [o for p, o in placed if p == partition]
            assert offsets and offsets == sorted(offsets)
    assert len(by_key) == len(USERS)  # one partition per key


def test_a_key_and_a_header_given_as_expressions_stay_out_of_the_rows(
        tmp_path: Path, spark: Any) -> None:
    """A key and a header written as expressions (not columns of the rows): Spark computes
    them with each row, the Kafka sink writes them as the record's key and header, and they
    are in no row, neither the record's value nor the Delta twin's; the audit recomputes both
    with DuckDB and checks every record."""
    topic, out = unique_topic("meta-x"), unique_topic("meta-x-out")
    records = [r for r in _records() if r[1] not in BAD_KEYS]
    _produce(topic, records)
    key = "CAST(concat(key.user, '/', CAST(key.shard AS STRING)) AS STRING)"
    config = make_pipeline(
        tmp_path, base={"kafka": {"topic": topic}}, group_by=None, window=None,
        aggregations=None, max_records=100,
        event={"fields": {"page": "string", "n": "long"},
               "key": {"format": "json", "fields": {"user": "string", "shard": "long"}}},
        select={"page": "page", "n": "n"},
        sinks={"rows": [{"kafka": {"topic": out, "partitions": 4, "key": key,
                                   "headers": {"set": {"x-page": "CAST(upper(page) AS STRING)",
                                                       "x-raw": "kafka_key_bytes"}}}},
                        {"delta": "target"}],
               "quarantine": [{"delta": "quarantine"}]})
    finish_and_audit(config, spark, "meta-x", len(records))

    rows = read_table(delta_path(config, "target"))
    assert not [c for c in rows.column_names if c.startswith("__")]
    published = _read(out)
    assert len(published) == len(records)
    for message in published:
        value = json.loads(message.value())
        assert set(value) == {"page", "n", "kafka_topic", "kafka_partition", "kafka_offset",
                              "epoch"}
        source = json.loads(records[value["n"]][1])
        assert message.key() == f"{source['user']}/{source['shard']}".encode()
        own = [(k, v) for k, v in message.headers() if not k.startswith("eos-")]
        assert own == [("x-page", value["page"].upper().encode()),
                       ("x-raw", records[value["n"]][1])]


def test_a_record_over_the_limit_by_its_key_or_headers_is_refused_before_the_seal(
        tmp_path: Path, kafka: str) -> None:
    """The producer's limit counts a record's key and own headers: an epoch holding one that
    outgrows it is refused by the sink's check (before the seal), nothing written."""
    import pyarrow as pa

    from eos.core.errors import SinkCannotTake
    from eos.core.outputs import output_schema

    from support.harness import sink

    out = unique_topic("meta-big")
    config = make_pipeline(
        tmp_path, base={"kafka": {"topic": unique_topic("meta-src")}}, group_by=None,
        window=None, aggregations=None,
        event={"fields": {"page": "string"}, "max_string_bytes": 64},
        select={"page": "page", "raw": "kafka_key_bytes"},
        sinks={"rows": [{"kafka": {"topic": out, "key": "raw", "headers": {"set": {"p": "raw"}},
                                   "client": {"message.max.bytes": 4000}}}],
               "quarantine": []})
    kafka_sink = sink(config, f"kafka:{out}")
    schema = output_schema(config, "rows")

    def rows(raw: bytes) -> pa.Table:
        return pa.Table.from_pylist([{"page": "/", "raw": raw, "kafka_topic": "t",
                                      "kafka_partition": 0, "kafka_offset": 0, "epoch": 0}],
                                    schema=schema)

    kafka_sink.check(0, rows(b"k" * 1000))  # 2 x 1000 bytes and the value: within the limit
    with pytest.raises(SinkCannotTake, match=r"1 records exceed the producer's "
                                             r"message.max.bytes \(4000"):
        kafka_sink.check(0, rows(b"k" * 1900))
