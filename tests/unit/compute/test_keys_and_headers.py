"""The reader's own work on a record's key and headers, without a broker: the key parsed as
``event.key`` declares it (a key that does not parse quarantines its record, naming why), and
the headers carried as ``kafka_headers`` (all, in order) and read as ``header.<name>``."""

from __future__ import annotations

import pyarrow as pa

from eos.compute.formats import parser_for
from eos.compute.formats.keys import NO_KEY, KeyParser
from eos.compute.reader import RAW_SCHEMA, TIMESTAMP_TYPE
from eos.core.config import parse_config
from eos.core.schema import (
    HEADERS,
    HEADERS_TYPE,
    RAW_KEY,
    REASON,
    Carried,
    header_column,
    key_field_column,
    read_schema,
    with_metadata,
)

CONFIG = parse_config({"name": "k", "kafka": {"topic": "t"},
                       "event": {"fields": {"page": "string"},
                                 "key": {"fields": {"user": "string",
                                                    "n": {"type": "long", "optional": True}}}}})


def raw(keys: list[bytes | None], values: list[bytes | None],
        headers: list[list[tuple[str, bytes | None]]] | None = None) -> pa.RecordBatch:
    n = len(keys)
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["t"] * n), pa.array(range(n), pa.int32()), pa.array(range(n), pa.int64()),
         pa.array([1_000] * n, pa.int64()), pa.array(keys, pa.binary()),
         pa.array(values, pa.binary())], schema=RAW_SCHEMA)
    batch = batch.append_column(TIMESTAMP_TYPE, pa.array(["CreateTime"] * n))
    lists = [[{"key": k, "value": v} for k, v in hs] for hs in headers or [[]] * n]
    return batch.append_column("headers", pa.array(lists, HEADERS_TYPE))


def test_a_key_that_does_not_parse_quarantines_its_record_with_its_reason() -> None:
    batch = raw([b'{"user": "u1", "n": 3}', b'{"user": "u2"}', None, b"not json",
                 b'{"n": 1}', b'{"user": "u6"}'],
                [b'{"page": "/a"}'] * 5 + [b"broken"])
    parsed = KeyParser(CONFIG.event).merge(parser_for(CONFIG.event).parse_batch(batch), batch)
    assert parsed.schema == read_schema(CONFIG.event, False)
    rows = parsed.to_pylist()
    assert [(r[key_field_column("user")], r[key_field_column("n")]) for r in rows[:2]] == [
        ("u1", 3), ("u2", None)]
    reasons = [r[REASON] for r in rows]
    assert reasons[:2] == [None, None]
    assert reasons[2] == NO_KEY
    assert reasons[3].startswith("key: malformed JSON")
    assert reasons[4].startswith("key: ") and "user" in reasons[4]
    assert not reasons[5].startswith("key:")  # the value's own reason comes first
    assert rows[3][RAW_KEY] == b"not json" and rows[3]["page"] is None
    assert rows[3][key_field_column("user")] is None
    # the audit's one-record parse gives each record the same outcome
    one = [KeyParser(CONFIG.event).parse(k) for k in batch.column("key").to_pylist()]
    assert [getattr(o, "reason", None) for o in one[:5]] == [None, None, *reasons[2:5]]


def test_headers_are_carried_whole_and_read_one_by_name() -> None:
    headers = [[("trace", b"t1"), ("tenant", b"a"), ("trace", b"t2")],
               [("tenant", None), ("other", b"\xff")], []]
    batch = raw([b"k"] * 3, [b'{"page": "/"}'] * 3, headers)
    carried = Carried(pair=True, key_bytes=True, headers=True, header_names=("tenant", "trace"))
    event = parse_config({"name": "h", "kafka": {"topic": "t"},
                          "event": {"fields": {"page": "string"}}}).event
    out = with_metadata(parser_for(event).parse_batch(batch), batch, carried)
    assert out.schema == read_schema(event, carried)
    rows = out.to_pylist()
    assert rows[0][HEADERS] == [{"key": "trace", "value": b"t1"},
                                {"key": "tenant", "value": b"a"},
                                {"key": "trace", "value": b"t2"}]  # repeats kept, in order
    assert [r[header_column(0)] for r in rows] == ["a", None, None]
    assert [r[header_column(1)] for r in rows] == ["t2", None, None]  # the last of a name
    assert rows[0]["__kafka_key_bytes"] == b"k"
    assert Carried.from_option(carried.to_json()) == carried
    assert Carried.from_option("true") == Carried(pair=True)
