"""The ``postgres`` sink's options and type mapping, checked when a pipeline loads and before
any server is reached (the server's own tests: tests/integration/sinks/test_postgres_sink.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from eos.core import sink as sink_module
from eos.core.errors import ConfigError, SinkCannotTake
from eos.core.sink import register, sinks_for
from eos.sinks.postgres.sink import PostgresSink
from eos.sinks.postgres.types import Column, column_type, refuse_values

from support.pipelines import IN_MEMORY, make_pipeline


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    register(PostgresSink.kind, PostgresSink)


def load(tmp_path: Path, options: object) -> object:
    sinks = {"windows": [{"postgres": options}], "late": [], "quarantine": []}
    return make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)


@pytest.mark.parametrize(("options", "message"), [
    ({"table": "windows"}, "table: .*schema.name"),
    ({"table": "a.b", "tabel": "x"}, "tabel: Extra inputs"),
    ({"table": "a.b", "upsert_keys": ["k", "k"]}, "upsert_keys: .*distinct"),
    ({"table": "a.b", "marker_table": "a.b.c"}, "marker_table: .*schema"),
    ({"table": "a.b", "connection": ""}, "connection: "),
    ({}, "table: Field required"),
])
def test_options_errors_name_the_key(tmp_path: Path, options: object, message: str) -> None:
    with pytest.raises(ConfigError, match=f"a postgres sink: .*{message}"):
        load(tmp_path, options)


def test_the_name_shows_the_table_and_the_defaults(tmp_path: Path) -> None:
    (sink,) = sinks_for(load(tmp_path, "analytics.windows"))  # type: ignore[arg-type]
    assert sink.name == "postgres:analytics.windows"
    assert sink.options.connection == "postgres_default"
    assert sink.options.marker() == ("analytics", "eos_markers")
    assert PostgresSink.resources(sink.options, "p") == {
        "postgres-table:postgres_default:analytics.windows"}


def test_arrow_types_map_to_postgresql_types() -> None:
    cases = {pa.decimal128(12, 2): "numeric(12,2)", pa.float64(): "double precision",
             pa.timestamp("us", "UTC"): "timestamp with time zone",
             pa.timestamp("ms"): "timestamp with time zone", pa.string(): "text",
             pa.int64(): "bigint", pa.int32(): "integer", pa.bool_(): "boolean",
             pa.binary(): "bytea", pa.date32(): "date", pa.uint64(): "numeric(20,0)"}
    assert {t: column_type(pa.field("c", t)) for t in cases} == cases
    with pytest.raises(SinkCannotTake, match="column 'c' has type list<item: int64>"):
        column_type(pa.field("c", pa.list_(pa.int64())))


def test_the_package_installs_the_sink_type_and_its_drivers() -> None:
    """The entry point that names the type, and the extra that brings both drivers."""
    import tomllib

    project = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())["project"]
    assert (project["entry-points"]["eos.sinks"]["postgres"]
            == "eos.sinks.postgres.sink:PostgresSink")
    extra = " ".join(project["optional-dependencies"]["postgres"])
    assert "psycopg[binary]" in extra and "psycopg2-binary" in extra


def test_the_largest_decimal_a_numeric_column_holds_is_taken_exactly() -> None:
    """decimal(38,9)'s extremes (29 integer digits, 9 decimals: the poison records of
    ``eos chaos``) fit numeric(38,9); one more integer digit does not. Compared exactly, never
    rounded to Python's 28-digit decimal context."""
    from decimal import Decimal

    column = Column("max", "numeric(38,9)", True, False)
    largest = Decimal("9" * 29 + "." + "9" * 9)
    rows = pa.table({"max": pa.array([largest, largest.copy_negate()], pa.decimal128(38, 9))})
    refuse_values("s.t", rows, {"max": column}, ())
    wider = pa.table({"max": pa.array([Decimal("1" + "0" * 29)], pa.decimal128(38, 0))})
    with pytest.raises(SinkCannotTake, match="cannot hold"):
        refuse_values("s.t", wider, {"max": column}, ())
