"""The Kafka sink's record limit, checked before the seal on what goes on the wire: the record's
key, value and headers (eos's own, the lineage header of a rewound line among them) and Kafka's
framing of a record in a record batch. librdkafka's own producer is the referee: a record the
check passes is one librdkafka enqueues, whatever lineage the sink's line has by then."""

from __future__ import annotations

from typing import Any

import confluent_kafka as ck
import pyarrow as pa
import pytest

from eos.core.config import parse_config
from eos.core.errors import SinkCannotTake
from eos.core.outputs import output_schema
from eos.core.sink import sinks_for
from eos.sinks.kafka import sink as kafka_module
from eos.sinks.kafka.sink import KafkaSink
from eos.sinks.records import eos_headers
from unit.core.test_config import GOOD

LINEAGE = "0123456789ab"  # a rewind's id, as eos.core.rewind draws them: 12 hex digits


def kafka_sink(limit: int) -> KafkaSink:
    config = parse_config({**GOOD, "name": "orders",
                           "event": {**GOOD["event"], "max_string_bytes": 64},
                           "sinks": {"windows": [{"kafka": {
                               "topic": "totals", "client": {"message.max.bytes": limit}}}],
                               "late": [], "quarantine": []}})
    sink = sinks_for(config)[0]
    assert isinstance(sink, KafkaSink)
    return sink


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    """``check`` asks the broker about the marker topic and the principal's rights once the
    records pass: not what is tested here (a closed port on loopback is configured; nothing
    connects to it)."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9")
    monkeypatch.setattr(kafka_module, "check_marker_topic", lambda *args: None)
    monkeypatch.setattr(KafkaSink, "_check_authorized", lambda self, epoch: None)


def window(sink: KafkaSink, page: str) -> pa.Table:
    schema = output_schema(sink.config, "windows")
    row: dict[str, Any] = {name: None for name in schema.names}
    return pa.Table.from_pylist([{**row, "page": page, "views": 1, "epoch": 3}], schema=schema)


def old_size(sink: KafkaSink, rows: pa.Table) -> int:
    """What the check counted before: key, value and eos's headers without the lineage one,
    names and values only."""
    keys, values, _ = sink._records(3, rows)
    eos = sum(len(k) + len(v) for k, v in eos_headers(sink.config.name, 3, "0" * 16))
    return len(values[0]) + len(keys[0] or b"") + eos


def librdkafka_takes(limit: int, sink: KafkaSink, rows: pa.Table, lineage: str | None) -> bool:
    """Whether librdkafka's producer (its ``message.max.bytes`` = ``limit``) enqueues the
    record the commit would produce; no broker is needed to be refused."""
    keys, values, _ = sink._records(3, rows)
    producer = ck.Producer({"bootstrap.servers": "127.0.0.1:9", "message.max.bytes": limit,
                            "log_level": 0})
    try:
        producer.produce("totals", value=values[0], key=keys[0],
                         headers=eos_headers(sink.config.name, 3, "f" * 16, lineage))
    except ck.KafkaException as error:
        assert error.args[0].code() == ck.KafkaError.MSG_SIZE_TOO_LARGE, error
        return False
    finally:
        producer.purge()
        producer.flush(0)
    return True


def test_a_record_the_old_check_passed_over_the_limit_on_the_wire_is_refused_before_the_seal(
        ) -> None:
    """Before: the check left out the lineage header (a rewound line's records carry it) and
    the record's framing, so a record at the limit by its count passed the check, was sealed,
    and librdkafka refused it on every commit (MSG_SIZE_TOO_LARGE). Now it is refused first."""
    limit = 3000
    probe = kafka_sink(limit)
    base = old_size(probe, window(probe, ""))
    page = "x" * ((limit - base) // 2)  # the page is in the key and the value: two bytes a char
    sink = kafka_sink(limit)
    rows = window(sink, page)
    assert old_size(sink, rows) in (limit - 1, limit)  # the old check's largest: it passed
    assert not librdkafka_takes(limit, sink, rows, LINEAGE)  # ... and the commit would fail
    with pytest.raises(SinkCannotTake, match=r"1 records exceed the producer's "
                                             rf"message.max.bytes \({limit}; the largest is "
                                             r"\d+ bytes.*nothing was sealed or written"):
        sink.check(3, rows)


def test_what_the_check_passes_librdkafka_takes_on_any_line() -> None:
    """At the largest record the check passes, librdkafka enqueues it with the longest lineage
    header; one byte more and the check refuses."""
    limit = 3000
    sink = kafka_sink(limit)
    page = ""
    while True:  # the longest page the check passes
        try:
            sink.check(3, window(sink, page + "x"))
        except SinkCannotTake:
            break
        page += "x"
    assert len(page) > 100
    assert librdkafka_takes(limit, sink, window(sink, page), LINEAGE)
    assert librdkafka_takes(limit, sink, window(sink, page), "f" * 32)


def test_a_records_size_on_the_wire_follows_kafkas_record_format() -> None:
    """Kafka's record batch (magic 2): a 61-byte batch header, then per record its length,
    attributes, timestamp and offset deltas (at their widest), and each length a zigzag
    varint (a null key is -1: one byte)."""
    from eos.sinks.records import (
        BATCH_HEADER_BYTES,
        RECORD_OVERHEAD_BYTES,
        record_bytes,
        varint_bytes,
    )

    assert BATCH_HEADER_BYTES == 61
    assert [varint_bytes(n) for n in (-1, 0, 63, 64, 8191, 8192, 2**31 - 1)] == \
        [1, 1, 1, 2, 2, 3, 5]
    assert RECORD_OVERHEAD_BYTES == 61 + 5 + 1 + 10 + 5 + 5
    assert record_bytes(None, b"", []) == RECORD_OVERHEAD_BYTES + 1 + 1
    assert record_bytes(b"k" * 64, b"v" * 100, [("eos-epoch", b"3"), ("h", None)]) == (
        RECORD_OVERHEAD_BYTES + 2 + 64 + 2 + 100 + (1 + 9 + 1 + 1) + (1 + 1 + 1))
