"""``eos.core.upserts``: an epoch reduced to each upsert key's last row, the one a changelog
upserted record by record would leave (within a partition the later offset, across partitions
and topics the later Kafka timestamp, then topic, partition and offset), and handed so to every
sink that keeps one row per key, while every other sink gets every row."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from eos.core import sink as sink_module
from eos.core.config import parse_config
from eos.core.outputs import sink_rows
from eos.core.sink import SupportsReadBack, register
from eos.core.upserts import RECORD_TIMESTAMP, ambiguous_keys, last_per_key

from support.memory import MemorySink
from support.memory_rows import STATELESS_IN_MEMORY
from support.pipelines import IN_MEMORY, make_pipeline

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def records(*rows: tuple[Any, ...], keys: tuple[str, ...] = ("user",)) -> pa.Table:
    """Rows of Kafka records: (*keys, topic, partition, offset, timestamp in seconds, value)."""
    names = [*keys, "kafka_topic", "kafka_partition", "kafka_offset", RECORD_TIMESTAMP, "v"]
    columns = list(zip(*rows, strict=True))
    types = [*[pa.string()] * len(keys), pa.string(), pa.int32(), pa.int64(),
             pa.timestamp("us", "UTC"), pa.int64()]
    values = [list(c) for c in columns]
    at = len(keys) + 3
    values[at] = [None if s is None else T0 + timedelta(seconds=s) for s in values[at]]
    return pa.table([pa.array(v, t) for v, t in zip(values, types, strict=True)], names=names)


def kept(table: pa.Table, keys: tuple[str, ...] = ("user",), output: str = "rows") -> list:
    return [row["v"] for row in last_per_key(table, keys, output).to_pylist()]


def test_within_a_partition_the_later_offset_wins_whatever_its_timestamp() -> None:
    table = records(("a", "t", 0, 5, 9, 1), ("a", "t", 0, 6, 1, 2), ("a", "t", 0, 4, 20, 3))
    assert kept(table) == [2]


def test_across_partitions_each_partitions_last_record_then_the_later_timestamp() -> None:
    """Partition 1's offset 1 has the epoch's latest timestamp, but its offset 2 follows it:
    partition 1's last record is at 4 s, partition 0's at 6 s, which wins."""
    table = records(("k", "t", 0, 0, 1, 1), ("k", "t", 0, 3, 6, 2), ("k", "t", 1, 1, 7, 3),
                    ("k", "t", 1, 2, 4, 4))
    assert kept(table) == [2]
    later = records(("k", "t", 0, 3, 6, 2), ("k", "t", 1, 2, 8, 4))
    assert kept(later) == [4]


def test_a_timestamp_tie_goes_to_the_later_topic_then_partition_then_offset() -> None:
    assert kept(records(("k", "b", 0, 9, 5, 1), ("k", "a", 3, 7, 5, 2))) == [1]
    assert kept(records(("k", "t", 2, 0, 5, 1), ("k", "t", 10, 0, 5, 2))) == [2]
    assert kept(records(("k", "a", 0, 1, 5, 1), ("k", "b", 0, 0, 4, 2),
                        ("k", "a", 1, 8, 5, 3))) == [3]


def test_a_null_key_is_a_key_like_any_other() -> None:
    table = records((None, "x", "t", 0, 0, 1, 1), (None, "x", "t", 0, 1, 1, 2),
                    (None, None, "t", 0, 2, 1, 3), ("a", None, "t", 0, 3, 1, 4),
                    (None, None, "t", 1, 0, 9, 5), keys=("user", "shop"))
    assert kept(table, ("user", "shop")) == [2, 4, 5]


def test_a_null_timestamp_is_the_earliest() -> None:
    assert kept(records(("k", "t", 0, 0, None, 1), ("k", "t", 1, 0, 0, 2))) == [2]


def test_rows_keep_their_order_and_every_column_and_unique_keys_change_nothing() -> None:
    table = records(("b", "t", 0, 0, 1, 1), ("a", "t", 0, 1, 1, 2), ("b", "t", 0, 2, 1, 3),
                    ("c", "t", 0, 3, 1, 4))
    reduced = last_per_key(table, ("user",), "rows")
    assert reduced.schema == table.schema
    assert reduced.column("v").to_pylist() == [2, 3, 4]
    assert last_per_key(reduced, ("user",), "rows") is reduced
    assert last_per_key(table, (), "rows") is table
    assert last_per_key(table.slice(0, 0), ("user",), "rows").num_rows == 0


def test_rows_without_their_timestamps_are_ordered_by_topic_partition_offset() -> None:
    table = records(("k", "t", 1, 0, 9, 1), ("k", "t", 0, 5, 1, 2)).drop_columns(
        [RECORD_TIMESTAMP])
    assert kept(table) == [1]


def minutes(*starts: int) -> list[datetime]:
    return [T0 + timedelta(minutes=m) for m in starts]


def test_windows_keep_a_keys_latest_window() -> None:
    """With the window among the keys no key comes twice in an epoch (a window is emitted
    once); without it, several windows of a group may close in one epoch: the latest wins."""
    table = pa.table({"page": ["a", "a", "b", "a"], "window_start": minutes(2, 0, 0, 1),
                      "window_end": minutes(3, 1, 1, 2), "n": [1, 2, 3, 4],
                      "epoch": [0, 0, 0, 0]})
    assert last_per_key(table, ("page",), "windows").column("n").to_pylist() == [1, 3]
    assert last_per_key(table, ("page", "window_start"), "windows") is table


def test_a_records_late_rows_are_ordered_by_their_window() -> None:
    """One late record makes a late row per window it missed (hopping windows)."""
    start = minutes(0, 1, 0)
    table = pa.table({"page": ["a", "a", "a"], "window_start": start,
                      "window_end": [s + timedelta(minutes=2) for s in start],
                      "partition": pa.array([0, 0, 1], pa.int32()), "offset": [7, 7, 3],
                      "kafka_timestamp": [T0, T0, T0 - timedelta(seconds=1)],
                      "epoch": [0, 0, 0], "kafka_topic": ["t", "t", "t"], "n": [1, 2, 3]})
    assert last_per_key(table, ("page",), "late").column("n").to_pylist() == [2]
    assert last_per_key(table, ("partition", "offset"), "late").column("n").to_pylist() == [
        2, 3]


def test_rows_nothing_orders_are_chosen_by_their_other_columns() -> None:
    """Quarantined overflows have no record: the greater of their other columns, whatever
    order they come in."""
    table = pa.table({"reason": ["overflow: y", "overflow: x"], "partition": pa.array(
        [None, None], pa.int32()), "offset": pa.array([None, None], pa.int64()),
        "epoch": [3, 3], "kafka_topic": pa.array([None, None], pa.string())})
    for rows in (table, table.take([1, 0])):
        assert last_per_key(rows, ("epoch",), "quarantine").column("reason").to_pylist() == [
            "overflow: y"]


def reference(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[int]:
    """The rule written out row by row: each (key, topic, partition)'s greatest offset (then
    value), then each key's greatest (timestamp, topic, partition, offset, value)."""
    def rank(value: Any) -> tuple[bool, Any]:
        return (False, 0) if value is None else (True, value)

    local: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        at = (*[row[k] for k in keys], row["kafka_topic"], row["kafka_partition"])
        if at not in local or (row["kafka_offset"], row["v"]) > (
                local[at]["kafka_offset"], local[at]["v"]):
            local[at] = row
    best: dict[tuple, dict[str, Any]] = {}

    def order(row: dict[str, Any]) -> tuple:
        return (rank(row[RECORD_TIMESTAMP]), row["kafka_topic"], row["kafka_partition"],
                row["kafka_offset"], row["v"])

    for row in local.values():
        key = tuple(row[k] for k in keys)
        if key not in best or order(row) > order(best[key]):
            best[key] = row
    return sorted(row["v"] for row in best.values())


@pytest.mark.parametrize("seed", range(20))
def test_the_reduction_is_the_rule_on_random_epochs(seed: int) -> None:
    draw = random.Random(seed)
    rows = [(draw.choice(["a", "b", None]), draw.choice(["x", None]), draw.choice(["s", "t"]),
             draw.randrange(3), draw.randrange(6), draw.choice([None, *range(4)]),
             draw.randrange(1000)) for _ in range(draw.randrange(1, 60))]
    table = records(*rows, keys=("user", "shop"))
    got = sorted(kept(table, ("user", "shop")))
    assert got == reference(table.to_pylist(), ("user", "shop"))


def test_windows_keys_leaving_out_a_group_field_are_ambiguous() -> None:
    config = parse_config({**_grouped(), "name": "w"})
    assert ambiguous_keys(config, "windows", ("page", "country", "window_start")) is None
    assert ambiguous_keys(config, "windows", ("page", "country")) is None  # latest window
    why = ambiguous_keys(config, "windows", ("page", "window_start"))
    assert why is not None and "['country']" in why
    assert ambiguous_keys(config, "late", ("page",)) is None


def _grouped() -> dict[str, Any]:
    return {"kafka": {"topic": "t"},
            "event": {"time": {"field": "ts", "format": "epoch_ms"},
                      "fields": {"page": "string", "country": "string"}},
            "group_by": ["page", "country"], "window": {"type": "tumbling", "size": "1m"},
            "aggregations": {"n": "count(*)"}}


class KeptSink(MemorySink, SupportsReadBack):
    """A memory sink that keeps one row per ``key`` (an upsert)."""

    kind = "memory_upsert"

    def kept_by(self) -> tuple[str, ...]:
        return ("key",)

    def read_back(self, since: int = 0) -> list[dict[str, Any]]:
        return []

    def commits(self) -> list[int]:
        return []


def test_the_protocol_hands_a_kept_by_sink_each_keys_last_row_and_no_sink_the_timestamps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    register(KeptSink.kind, KeptSink)
    config = make_pipeline(tmp_path, base=STATELESS_IN_MEMORY, sinks={
        "rows": [{"memory_upsert": "u"}, {"memory": "a"}], "quarantine": [{"memory": "c"}]})
    table = records(("K", "t", 0, 0, 5, 1), ("K", "t", 1, 0, 3, 2), ("J", "t", 1, 1, 3, 3),
                    keys=("key",))
    upserted = sink_rows(config, "memory_upsert:u", table)
    assert upserted.column("v").to_pylist() == [1, 3]
    every = sink_rows(config, "memory:a", table)
    assert every.column("v").to_pylist() == [1, 2, 3]
    assert RECORD_TIMESTAMP not in upserted.column_names + every.column_names
    windows = make_pipeline(tmp_path, base=IN_MEMORY, sinks={
        "windows": [{"memory_upsert": "w"}], "late": [], "quarantine": [{"memory": "c"}]})
    rows = pa.table({"key": ["a", "a"], "window_start": minutes(1, 0),
                     "window_end": minutes(2, 1), "n": [1, 2], "epoch": [0, 0]})
    assert sink_rows(windows, "memory_upsert:w", rows).column("n").to_pylist() == [1]
