"""The grammar of a pipeline without windows: what loads, and every refusal named at load."""

from __future__ import annotations

from typing import Any

import pytest

from eos.core.config import parse_config
from eos.core.errors import ConfigError
from eos.core.outputs import output_schema
from eos.core.sink import sink_name
from eos.core.tables import staging_schema

STATELESS: dict[str, Any] = {
    "name": "ingest",
    "kafka": {"topic": "t"},
    "event": {"fields": {"page": "string", "n": "long", "amount": "decimal(12,2)"}},
}
WINDOWS = {"group_by": ["page"], "window": {"type": "tumbling", "size": "60s"},
           "aggregations": {"views": "count(*)"}}


def load(**changes: Any) -> Any:
    data = {**STATELESS, **changes}
    return parse_config({k: v for k, v in data.items() if v is not None})


def refused(match: str, **changes: Any) -> None:
    with pytest.raises(ConfigError, match=match):
        load(**changes)


def test_without_select_a_row_is_every_declared_field_and_its_coordinates() -> None:
    config = load()
    assert config.stateless and config.outputs == ("rows", "quarantine")
    assert config.event.time.format == "none"
    assert [o for o, _ in config.sinks.by_output()] == ["rows", "quarantine"]
    assert [sink_name(spec) for spec in config.sinks.rows or []] == ["delta:target"]
    assert output_schema(config, "rows").names == [
        "page", "n", "amount", "kafka_topic", "kafka_partition", "kafka_offset", "epoch"]
    assert "r__page" in staging_schema(config).names
    assert config.schema_view() == {"event": config.schema_view()["event"], "select": {}}


def test_select_columns_are_typed_from_their_expressions() -> None:
    config = load(select={"page": "page", "double_n": "CAST(n * 2 AS bigint)", "key": "kafka_key",
                          "at": "kafka_timestamp", "big": "amount > 10",
                          "cents": "cast(amount * 100 as decimal(14,0))"},
                  event={**STATELESS["event"], "filter": "kafka_partition = 0 and n > 1"})
    schema = output_schema(config, "rows")
    assert [(f.name, str(f.type)) for f in schema][:6] == [
        ("page", "string"), ("double_n", "int64"), ("key", "string"), ("at", "int64"),
        ("big", "bool"), ("cents", "decimal128(14, 0)")]


@pytest.mark.parametrize(("changes", "match"), [
    ({"window": WINDOWS["window"]}, r"\['window'\] given without \['aggregations'\]"),
    ({"aggregations": WINDOWS["aggregations"]},
     r"\['aggregations'\] given without \['window'\]"),
    ({"group_by": ["page"]}, r"\['group_by'\] given without \['aggregations', 'window'\]"),
    ({"sinks": {"windows": [{"delta": "w"}]}},
     r"sinks: \['windows'\] are outputs of an aggregating pipeline"),
    ({"sinks": {"rows": [{"delta": "r"}], "late": [{"delta": "l"}]}},
     r"sinks: \['late'\] are outputs of an aggregating pipeline"),
    ({"sinks": {"rows": []}}, "rows needs at least one sink"),
    ({"select": {"x": "nope + 1"}}, r"select column 'x'.*uses \['nope'\]"),
    ({"select": {"x": "rand()"}}, r"select column 'x'.*rand\(\) returns a different value"),
    ({"select": {"x": "sha2(page, 256)"}}, r"select column 'x'.*CAST\(\.\.\. AS type\)"),
    ({"select": {"x": "concat(n, page)"}}, r"select column 'x'.*no type eos can tell"),
    ({"select": {"x": "cast(page as timestamp_ntz)"}}, r"select column 'x'.*type TIMESTAMP_NTZ"),
    ({"select": {"kafka_offset": "n"}}, "every row carries"),
    ({"select": {"epoch": "n"}}, "every row carries|reserved"),
    ({"select": {"x": ""}}, "write a Spark SQL expression"),
    ({"event": {"fields": {"kafka_key": "string"}}}, r"\['kafka_key'\] are reserved for Kafka"),
    ({"event": {"fields": {"n": "long"}, "filter": "m > 1"}}, r"filter uses \['m'\]"),
])
def test_refused_at_load_naming_the_key(changes: dict[str, Any], match: str) -> None:
    refused(match, **changes)


def test_an_aggregating_pipeline_refuses_rows_and_a_timeless_event() -> None:
    timed = {**STATELESS["event"], "time": {"format": "kafka_timestamp"}}
    assert not load(**WINDOWS, event=timed).stateless
    refused("sinks: rows is the output of a pipeline without windows", **WINDOWS, event=timed,
            sinks={"rows": [{"delta": "r"}]})
    refused("windows need an event time", **WINDOWS)


def test_an_aggregating_pipeline_groups_and_aggregates_derived_fields() -> None:
    timed = {**STATELESS["event"], "time": {"format": "kafka_timestamp"}}
    config = load(event=timed, select={"section": "CAST(substring(page, 2, 3) AS string)",
                                       "cents": "CAST(amount * 100 AS bigint)"},
                  group_by=["section"], window=WINDOWS["window"],
                  aggregations={"views": "count(*)", "cents": "sum(cents)"})
    assert config.derived and not config.row_columns
    windows = output_schema(config, "windows")
    assert [(f.name, str(f.type)) for f in windows][:1] == [("section", "string")]
    assert str(windows.field("cents").type) == "int64"
    assert config.schema_view()["select"] == dict(config.select)
    assert "select" not in load(**WINDOWS, event=timed).schema_view()  # views before it stay
    refused(r"select: \['page'\] are declared fields", event=timed, select={"page": "page"},
            **WINDOWS)
    refused(r"aggregation 'm': field 'nope' is not declared in event.fields or select",
            event=timed, group_by=["page"], window=WINDOWS["window"],
            aggregations={"m": "max(nope)"})


def test_metadata_in_an_aggregating_pipelines_filter() -> None:
    timed = {**STATELESS["event"], "time": {"format": "kafka_timestamp"},
             "filter": "kafka_key is not null and kafka_timestamp_type = 'CreateTime'"}
    assert load(**WINDOWS, event=timed).event.filter
