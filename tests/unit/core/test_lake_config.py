"""Lake-friendly output of a pipeline without windows, in the config: date and timestamp select
columns (typed at load, the audit's DuckDB translation agreeing with Spark's meaning), a Delta
sink's ``partition_by`` (refusals named at load) and which ``select`` changes between epochs
are additive."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from eos.core.checkpoints import Checkpoint, check_schema_view
from eos.core.config import parse_config
from eos.core.errors import ConfigError
from eos.core.filters import DUCKDB_TIME_ZONE, expression_for_duckdb
from eos.core.outputs import output_schema
from eos.sinks.kafka.avro import value_schema
from eos.sinks.records import decode_value, encode_values
from eos.tools.audit.independent.kafka import decode_json

BASE: dict[str, Any] = {
    "name": "ingest",
    "kafka": {"topic": "t"},
    "event": {"fields": {"page": "string", "ts": "string", "n": "long"}},
}
DAY = "CAST(to_timestamp(ts) AS date)"
AT = "CAST(timestamp_millis(kafka_timestamp) AS timestamp)"


def load(**changes: Any) -> Any:
    return parse_config({**BASE, **changes})


def test_date_and_timestamp_columns_are_spark_date_and_utc_microseconds() -> None:
    config = load(select={"page": "page", "day": DAY, "at": AT,
                          "seen": "CAST(timestamp_seconds(n) AS date)"})
    schema = output_schema(config, "rows")
    assert schema.field("day").type == pa.date32()
    assert schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert schema.field("seen").type == pa.date32()
    assert config.row_columns["day"].sql == "DATE" and config.row_columns["at"].sql == "TIMESTAMP"


@pytest.mark.parametrize(("changes", "match"), [
    ({"select": {"day": DAY}, "group_by": ["day"], "window": {"type": "tumbling", "size": "1m"},
      "aggregations": {"views": "count(*)"},
      "event": {**BASE["event"], "time": {"format": "kafka_timestamp"}}},
     r"select column 'day'.*a date or timestamp column is for a pipeline without windows"),
    ({"event": {"fields": {"ts": "date"}}}, "unknown type 'date'"),
    ({"select": {"page": "page"}, "sinks": {"rows": [{"delta": {
        "table": "t", "partition_by": ["day"]}}]}},
     r"partition_by: partition column 'day' is not a column of the rows output"),
    ({"select": {"x": "CAST(n AS double)"}, "sinks": {"rows": [{"delta": {
        "table": "t", "partition_by": ["x"]}}]}},
     r"partition_by: partition column 'x' is a double"),
    ({"sinks": {"rows": [{"delta": "t"}], "quarantine": [{"delta": {
        "table": "q", "partition_by": ["epoch"]}}]}},
     r"only a rows or windows output's table may be partitioned, not quarantine's"),
    ({"sinks": {"rows": [{"delta": {"table": "t", "partition_by": ["page", "page"]}}]}},
     r"a column is named twice"),
])
def test_refused_at_load_naming_the_key(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load(**changes)


def test_partition_by_a_date_column_and_the_coordinates_loads() -> None:
    config = load(select={"day": DAY}, sinks={"rows": [{"delta": {
        "table": "t", "partition_by": ["day", "kafka_partition"]}}]})
    ((_, options),) = config.sinks.rows[0].items()
    assert options.partition_by == ("day", "kafka_partition")


def test_the_audit_reads_a_time_with_its_offset_as_spark_does() -> None:
    """Spark's TIMESTAMP is an instant: '23:30-05:00' is the next UTC day. DuckDB's TIMESTAMP
    would drop the offset; the translation makes it TIMESTAMPTZ, in a UTC connection."""
    values = ["2026-11-27T23:30:00.123-05:00", "2026-11-27T23:30:00.123+05:30",
              "2026-11-27T00:10:00Z"]
    with duckdb.connect() as con:
        con.execute(DUCKDB_TIME_ZONE)
        con.register("e", pa.table({"ts": values, "kafka_timestamp": [0, 1_764_201_600_123,
                                                                      86_399_999]}))
        days = con.execute(f"SELECT {expression_for_duckdb(DAY, 'DATE')} FROM e").fetchall()
        ats = con.execute(f"SELECT {expression_for_duckdb(AT, 'TIMESTAMP')} FROM e").fetchall()
    assert [d for (d,) in days] == [date(2026, 11, 28), date(2026, 11, 27), date(2026, 11, 27)]
    assert [a for (a,) in ats] == [datetime(1970, 1, 1, tzinfo=UTC),
                                   datetime(2025, 11, 27, 0, 0, 0, 123000, tzinfo=UTC),
                                   datetime(1970, 1, 1, 23, 59, 59, 999000, tzinfo=UTC)]


def test_the_audit_s_concat_is_null_with_a_null_operand_as_spark_s_is() -> None:
    """Spark's CONCAT is null when an operand is; DuckDB's own CONCAT skips null operands, so
    a select with CONCAT over a nullable field was reported as wrong values by the audit."""
    import duckdb

    sql = expression_for_duckdb("CONCAT(page, '/', CONCAT(ts))", "string")
    with duckdb.connect() as con:
        con.register("e", pa.table({"page": ["a", None, "c"], "ts": ["1", "2", None]}))
        got = [v for (v,) in con.execute(f"SELECT {sql} FROM e").fetchall()]
    assert got == ["a/1", None, None]


def test_kafka_codecs_carry_a_date() -> None:
    rows = pa.table({"day": pa.array([date(2026, 11, 27), None], pa.date32())})
    values = encode_values(rows)
    assert values[0] == b'{"day":"2026-11-27"}'
    assert [decode_value(v, rows.schema) for v in values] == rows.to_pylist()
    assert [decode_json(v, rows.schema) for v in values] == rows.to_pylist()  # the audit's own
    (field,) = value_schema(rows.schema, "t", "p")["fields"]
    assert field["type"] == ["null", {"type": "int", "logicalType": "date"}]


def _committed_with(select: dict[str, str]) -> Checkpoint:
    view = load(select=select).schema_view()
    return Checkpoint(epoch=4, plan_hash="h", until={}, watermark_ms=None, config=view)


def test_select_may_gain_columns_between_epochs() -> None:
    before = _committed_with({"page": "page"})
    check_schema_view(before, load(select={"day": DAY, "page": "page"}))
    # no select is every declared field: spelling them out and adding one is additive too
    whole = Checkpoint(epoch=1, plan_hash="h", until={}, watermark_ms=None,
                       config=load().schema_view())
    check_schema_view(whole, load(select={"page": "page", "ts": "ts", "n": "n", "day": DAY}))


def test_an_expression_may_change_when_its_type_does_not() -> None:
    """The way out of a select that fails on a record: TRY_CAST (or CASE) in place of CAST."""
    before = _committed_with({"page": "page", "n2": "CAST(n * 2 AS bigint)"})
    check_schema_view(before, load(select={"page": "CAST(upper(page) AS string)",
                                           "n2": "TRY_CAST(n * 2 AS bigint)"}))


@pytest.mark.parametrize(("select", "named"), [
    ({"day": DAY}, "'page'"),  # removed
    ({"page": "length(page) > 3"}, "'page'"),  # retyped: a string became a boolean
])
def test_a_change_that_is_not_additive_is_refused_naming_the_column(
        select: dict[str, str], named: str) -> None:
    before = _committed_with({"page": "page"})
    with pytest.raises(ConfigError, match=rf"committed epochs 0..4 .*select\.page.*"
                                          rf"never remove or change one: put back {named} "
                                          r"as committed"):
        check_schema_view(before, load(select=select))


def test_a_windows_table_is_partitioned_by_group_fields_or_window_bounds() -> None:
    windows = {"group_by": ["page"], "window": {"type": "tumbling", "size": "1m"},
               "aggregations": {"views": "count(*)"},
               "event": {**BASE["event"], "time": {"format": "kafka_timestamp"}}}
    config = load(**windows, sinks={"windows": [{"delta": {
        "table": "w", "partition_by": ["page", "window_start"]}}]})
    ((_, options),) = config.sinks.windows[0].items()
    assert options.partition_by == ("page", "window_start")
    with pytest.raises(ConfigError, match=r"partition column 'views' is not a column of the "
                                          r"windows output that can partition it"):
        load(**windows, sinks={"windows": [{"delta": {"table": "w", "partition_by": ["views"]}}]})
