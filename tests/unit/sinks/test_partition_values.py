"""Partition values a Delta or an Iceberg table cannot store as a path, on real local tables
(delta-rs, pyiceberg with a SQL catalog on SQLite): found by ``check``, before the seal, never
by a commit that could then never succeed.

Measured on this runtime (the tests hold it): delta-rs and pyiceberg percent-encode every
character a path cannot hold ('/', NUL, non-ASCII), and their logs keep the exact value, so
only length is a problem: a directory's name over 255 bytes fails with ``[Errno 36] File name
too long``. Readers of a Delta table take an empty string for a null. The files sink, which
owns its layout, takes all of these instead (tests/unit/sinks/test_files_sink.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyiceberg.catalog import load_catalog

from eos.core import sink as sink_module
from eos.core.config import PipelineConfig
from eos.core.delta import read_table
from eos.core.errors import SinkCannotTake
from eos.core.outcomes import Outcome
from eos.core.outputs import output_schema
from eos.core.protocol import abort, checkpointed_epoch
from eos.core.sink import register, sinks_for
from eos.sinks.iceberg.sink import IcebergSink

from support.memory import STORES, MemorySource, run_epoch
from support.pipelines import IN_MEMORY, make_pipeline

TABLE = "eos_test.windows"
NAME_MAX = 255
#: Values no path segment holds as they are, which both libraries encode: taken.
ODD = ["a\x00b", "..", ".", ".hidden", "tab\tnew\nline\x7f", "a\\b", "a=b%c", "NULL"]


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    register(IcebergSink.kind, IcebergSink)
    yield
    STORES.clear()


def with_sink(tmp_path: Path, sink: dict[str, Any]) -> PipelineConfig:
    return make_pipeline(tmp_path, base=IN_MEMORY, sinks={
        "windows": [sink, {"memory": "a"}], "late": [{"memory": "b"}],
        "quarantine": [{"memory": "c"}]})


def windows(*keys: str | None) -> pa.Table:
    """Window rows of the in-memory pipeline's schema, one per key."""
    schema = output_schema(with_sink(Path("/unused"), {"memory": "x"}), "windows")
    row = {"window_start": 0, "window_end": 10_000, "n": 1, "epoch": 0}
    return pa.Table.from_pylist([{**row, "key": key} for key in keys], schema=schema)


# -- Delta ---------------------------------------------------------------------------------------

def delta(tmp_path: Path) -> PipelineConfig:
    return with_sink(tmp_path, {"delta": {"table": str(tmp_path / "t"), "partition_by": ["key"]}})


def test_delta_takes_a_slash_and_non_ascii_and_refuses_a_long_key_before_the_seal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, source = delta(tmp_path), MemorySource()
    for key in ["country/region", "Zürich 東京"]:
        monkeypatch.setattr("support.memory.KEY", key)
        run_epoch(config, source)
        source.produce(0, 10)
    table = str(tmp_path / "t")
    assert checkpointed_epoch(config) == 1
    assert sorted(read_table(table).column("key").to_pylist()) == ["Zürich 東京", "country/region"]

    monkeypatch.setattr("support.memory.KEY", "k" * 300)
    with pytest.raises(SinkCannotTake, match=r"(?s)partition column 'key' holds 'k{40}\.\.\. "
                                             r"\(300 characters\)'.*over the file system's "
                                             r"limit of 255.*Nothing was sealed"):
        run_epoch(config, source)
    assert checkpointed_epoch(config) == 1
    assert abort(config, 2) is Outcome.ABORTED  # not sealed: it can still be aborted


def test_delta_the_limit_is_the_file_systems_as_delta_rs_meets_it(tmp_path: Path) -> None:
    """``key=`` and 251 bytes make a 255-byte name: taken; one more byte is refused, and is
    what delta-rs itself cannot write. A '/' takes three bytes (%2F), a CJK character nine."""
    sink = sinks_for(delta(tmp_path))[0]
    sink.prepare(windows().schema)
    fits, over = "x" * (NAME_MAX - 4), "x" * (NAME_MAX - 3)
    taken = [fits, "/" * 83, "日" * 27, None, *ODD]
    sink.check(0, windows(*taken))
    assert sink.commit(0, windows(*taken), "h").outcome is Outcome.COMMITTED
    for value in [over, "/" * 84, "日" * 28]:
        with pytest.raises(SinkCannotTake, match="over the file system's limit of 255"):
            sink.check(1, windows("ok", value))
    with pytest.raises(Exception, match="File name too long"):
        write_deltalake(DeltaTable(str(tmp_path / "t")), windows(over), mode="append")
    assert sorted(read_table(str(tmp_path / "t")).column("key").to_pylist(),
                  key=str) == sorted(taken, key=str)


def test_delta_refuses_an_empty_string_which_readers_take_for_a_null(tmp_path: Path) -> None:
    """delta-rs logs an empty partition value as "" under the directory ``key=``: its own scan
    reads it back as "", its dataset (and the log's add actions) as a null."""
    sink = sinks_for(delta(tmp_path))[0]
    sink.prepare(windows().schema)
    with pytest.raises(SinkCannotTake, match="empty string, which readers of a Delta table "
                                             "take for a null"):
        sink.check(0, windows("a", ""))
    other = str(tmp_path / "other")
    write_deltalake(other, windows(""), partition_by=["key"])
    assert read_table(other).column("key").to_pylist() == [""]
    dataset = pa.table(DeltaTable(other).to_pyarrow_dataset().to_table())
    assert dataset.column("key").to_pylist() == [None]


# -- Iceberg -------------------------------------------------------------------------------------

def catalog_properties(tmp_path: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": str(tmp_path / "warehouse")}


def iceberg(tmp_path: Path, transform: Any = None, column: str = "key",
            name: str = "key") -> PipelineConfig:
    """A pipeline whose windows go to an Iceberg table made beforehand, partitioned by
    ``transform(column)`` (identity by default) named ``name``, as a person would make it."""
    from pyiceberg.transforms import IdentityTransform

    config = with_sink(tmp_path, {"iceberg": {"catalog": "test", "table": TABLE,
                                              "catalog_properties": catalog_properties(tmp_path)}})
    catalog = load_catalog("test", **catalog_properties(tmp_path))
    catalog.create_namespace_if_not_exists("eos_test")
    schema = output_schema(config, "windows")
    if column not in schema.names:
        schema = schema.append(pa.field(column, pa.string()))
    made = catalog.create_table(TABLE, schema=schema)
    with made.update_spec() as spec:
        spec.add_field(column, transform or IdentityTransform(), name)
    return config


def test_iceberg_takes_a_slash_and_non_ascii_and_refuses_a_long_key_before_the_seal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, source = iceberg(tmp_path), MemorySource()
    for key in ["country/region", "Zürich 東京"]:
        monkeypatch.setattr("support.memory.KEY", key)
        run_epoch(config, source)
        source.produce(0, 10)
    sink = sinks_for(config)[0]
    assert checkpointed_epoch(config) == 1
    assert sorted(r["key"] for r in sink.read_back()) == ["Zürich 東京", "country/region"]

    monkeypatch.setattr("support.memory.KEY", "k" * 300)
    with pytest.raises(SinkCannotTake, match=r"(?s)the partition key=k{56}\.\.\. \(304 "
                                             r"characters\).*limit of 255.*Nothing was sealed"):
        run_epoch(config, source)
    assert checkpointed_epoch(config) == 1 and sink.commits() == [0, 1]
    assert abort(config, 2) is Outcome.ABORTED


def test_iceberg_the_limit_is_the_file_systems_as_pyiceberg_meets_it(tmp_path: Path) -> None:
    """pyiceberg's ``quote_plus``: a '/' takes three bytes, a CJK character nine."""
    sink = sinks_for(iceberg(tmp_path))[0]
    sink.prepare(windows().schema)
    fits, over = "x" * (NAME_MAX - 4), "x" * (NAME_MAX - 3)
    taken = [fits, "/" * 83, "日" * 27, None, "", *ODD]
    sink.check(0, windows(*taken))
    assert sink.commit(0, windows(*taken), "h").outcome is Outcome.COMMITTED
    for value in [over, "/" * 84, "日" * 28]:
        with pytest.raises(SinkCannotTake, match="over the file system's limit of 255"):
            sink.check(1, windows("ok", value))
    table = load_catalog("test", **catalog_properties(tmp_path)).load_table(TABLE)
    with pytest.raises(OSError, match="File name too long"):
        table.append(windows(over))
    assert sorted((r["key"] for r in sink.read_back()), key=str) == sorted(taken, key=str)


def test_iceberg_a_truncate_transform_bounds_a_long_key(tmp_path: Path) -> None:
    from pyiceberg.transforms import TruncateTransform

    sink = sinks_for(iceberg(tmp_path, TruncateTransform(10), name="key_prefix"))[0]
    sink.prepare(windows().schema)
    sink.check(0, windows("k" * 300))
    assert sink.commit(0, windows("k" * 300), "h").outcome is Outcome.COMMITTED
    assert [r["key"] for r in sink.read_back()] == ["k" * 300]


def test_iceberg_a_partition_column_the_output_lacks_is_refused_before_the_seal(
        tmp_path: Path) -> None:
    """pyiceberg's append fails on it (a KeyError), which would otherwise come after the seal."""
    sink = sinks_for(iceberg(tmp_path, column="region", name="region"))[0]
    with pytest.raises(SinkCannotTake, match=r"partitioned by identity\(region\), a column the "
                                             "output lacks"):
        sink.check(0, windows("a"))


# -- Path rules: decided at precommit (eos.core.path_rules) --------------------------------------

def test_delta_path_rules_quarantine_exactly_what_check_would_refuse(tmp_path: Path) -> None:
    sink = sinks_for(delta(tmp_path))[0]
    (rule,) = sink.path_rules()
    at, over = "x" * rule.max_bytes, "x" * (rule.max_bytes + 1)
    sink.prepare(windows().schema)
    sink.check(0, windows(at, "/" * (rule.max_bytes // 3), None))
    assert rule.problem(over) == rule.too_long and rule.problem("") == rule.empty
    with pytest.raises(SinkCannotTake):
        sink.check(0, windows(over))


def test_iceberg_path_rules_bound_an_identity_partition_by_what_pyiceberg_writes(
        tmp_path: Path) -> None:
    """The spec's identity partition of a string: a value at the rule's bound is one pyiceberg
    writes, one byte more it cannot; an empty string is a value of its own (no rule); a
    truncate transform bounds the value itself, so it needs no rule."""
    from eos.sinks.iceberg.schema import partition_value_problems

    sink = sinks_for(iceberg(tmp_path))[0]
    (rule,) = sink.path_rules()
    assert (rule.column, rule.max_bytes, rule.empty_is_null) == ("key", NAME_MAX - 4, False)
    table = load_catalog("test", **catalog_properties(tmp_path)).load_table(TABLE)
    at, over = "x" * rule.max_bytes, "x" * (rule.max_bytes + 1)
    assert partition_value_problems(table, windows(at, "+" * (rule.max_bytes // 3), "")) == []
    assert rule.problem(over) == rule.too_long and partition_value_problems(table, windows(over))
    assert rule.problem("a b") is None  # a space is a '+': one byte

    from pyiceberg.transforms import TruncateTransform

    truncated = tmp_path / "truncated"
    truncated.mkdir()
    assert sinks_for(iceberg(truncated, TruncateTransform(10), name="key_prefix"))[0] \
        .path_rules() == []


def test_an_iceberg_catalog_out_of_reach_gives_no_rules_and_check_stays_the_guard(
        tmp_path: Path) -> None:
    config = with_sink(tmp_path, {"iceberg": {"catalog": "test", "table": TABLE,
                                              "catalog_properties": {
                                                  "type": "rest", "uri": "http://127.0.0.1:9"}}})
    assert sinks_for(config)[0].path_rules() == []
