"""Pipeline configs: the demo loads; a bad file fails with one message naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from eos.core.config import (
    PIPELINES_DIR_ENV,
    list_pipelines,
    load_config,
    load_pipeline,
    parse_duration_ms,
)
from eos.core.errors import ConfigError

GOOD = {
    "name": "x",
    "kafka": {"topic": "t"},
    "event": {"time": {"field": "ts", "format": "iso8601"},
              "fields": {"page": "string", "user": {"path": "user.id", "type": "string"},
                         "amount": "decimal(12,2)", "n": "long"}},
    "group_by": ["page"],
    "window": {"type": "tumbling", "size": "60s", "allowed_lateness": "10s"},
    "aggregations": {"views": "count(*)", "revenue": "sum(amount)"},
}


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(autouse=True)
def shipped_pipelines(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--pipeline NAME`` here means the shipped pipelines, whatever directory the Airflow
    tests pointed ``EOS_PIPELINES_DIR`` at for the session."""
    shipped = Path(__file__).resolve().parents[3] / "include" / "pipelines"
    monkeypatch.setenv(PIPELINES_DIR_ENV, str(shipped))


def test_every_shipped_pipeline_loads() -> None:
    assert list_pipelines(), "the demo pipeline must ship"
    for path in list_pipelines():
        config = load_config(path)
        assert config.name == path.stem
    clicks = load_pipeline("clicks")
    assert clicks.window.size == 60_000
    assert clicks.window.allowed_lateness == 10_000
    assert clicks.app_id == "eos:clicks"
    demo = load_pipeline("pageviews")
    assert demo.window.type == "hopping" and demo.group_by == ["page", "country"]
    assert demo.event.fields["user"].path == ("user", "id")


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"window": {"size": "sixty"}}, "window.size"),
        ({"window": {"size": "60s", "allowed_lateness": [1]}}, "window.allowed_lateness"),
        ({"kafka": {"topic": "t", "start": "middle"}}, "kafka.start"),
        ({"epoch": {"max_records": "many"}}, "epoch.max_records"),
        ({"epoch": {"max_records": 0}}, "epoch.max_records"),
        ({"aggregations": ["count", "median"]}, "aggregations"),
        ({"aggregations": {"m": "median(amount)"}}, "aggregations"),
        ({"aggregations": {"m": "sum(*)"}}, "aggregations"),
        ({"window": {"type": "hopping", "size": "5m"}}, "window"),
        ({"window": {"type": "hopping", "size": "5m", "slide": "2m"}}, "window"),
        ({"window": {"type": "session", "size": "5m"}}, "window"),
        ({"window": {"type": "sliding", "size": "5m"}}, "window.type"),
        ({"event": {"time": {"format": "iso8601"}, "fields": {"a": "string"}}}, "event.time"),
        ({"event": {"time": {"field": "ts"}, "fields": {"a": "text"}}}, "event.fields"),
        ({"event": {"time": {"field": "ts"}, "fields": {"a": "decimal(40,2)"}}},
         "event.fields"),
        ({"event": {**GOOD["event"], "filter": "amount >= >"}}, "event"),
        ({"kafka": {"topic": "t", "colour": "red"}}, "kafka.colour"),
    ],
)
def test_bad_field_is_named(tmp_path: Path, patch: dict, field: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(_write(tmp_path, {**GOOD, **patch}))
    message = str(error.value)
    assert f"field '{field}'" in message
    assert message.count("\n") == 0


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"group_by": ["country"]}, "group_by: field 'country' is not declared"),
        ({"aggregations": {"users": "count_distinct(uid)"}},
         "aggregation 'users': field 'uid' is not declared"),
        ({"aggregations": {"total": "sum(page)"}}, "sum needs a long, double or decimal field"),
        ({"event": {**GOOD["event"], "filter": "country = 'DE'"}},
         "filter uses ['country'], which are not declared fields"),
        ({"event": {**GOOD["event"], "filter": "amount >"}}, "is not a Spark SQL expression"),
        ({"aggregations": {"window_start": "count(*)"}}, "'window_start' is reserved"),
    ],
)
def test_a_field_used_but_not_declared_is_named(tmp_path: Path, patch: dict,
                                                message: str) -> None:
    """One line naming the field, at load time: no plan, no Spark."""
    with pytest.raises(ConfigError) as error:
        load_config(_write(tmp_path, {**GOOD, **patch}))
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_the_schema_view_is_what_committed_rows_mean() -> None:
    """What a committed checkpoint records: a change there is refused; a change elsewhere (the
    epoch cap, the Spark settings) is not part of it."""
    base = load_config_dict(GOOD)
    view = base.schema_view()
    assert view["aggregations"] == {"views": "count(*)", "revenue": "sum(amount)"}
    assert load_config_dict({**GOOD, "epoch": {"max_records": 5}}).schema_view() == view
    changed = load_config_dict({**GOOD, "window": {"size": "2m"}}).schema_view()
    assert changed != view


def test_log_retention_has_a_floor_that_outlasts_an_attempt(tmp_path: Path) -> None:
    """Below an hour a racing attempt could commit under a log version a cleanup freed."""
    assert load_config_dict(GOOD).epoch.log_retention == 86_400_000
    assert load_config_dict({**GOOD, "epoch": {"log_retention": "1h"}}).epoch.log_retention \
        == 3_600_000
    with pytest.raises(ConfigError, match="log_retention"):
        load_config(_write(tmp_path, {**GOOD, "epoch": {"log_retention": "10m"}}))


@pytest.mark.parametrize("missing", ["kafka", "name", "event"])
def test_missing_field_is_named(tmp_path: Path, missing: str) -> None:
    data = {k: v for k, v in GOOD.items() if k != missing}
    with pytest.raises(ConfigError, match=f"field '{missing}': Field required"):
        load_config(_write(tmp_path, data))


def test_unreadable_and_unknown(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read pipeline config"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="no pipeline named 'nope'"):
        load_pipeline("nope")
    (tmp_path / "bad.yaml").write_text("name: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")


def test_durations() -> None:
    assert parse_duration_ms("500ms") == 500
    assert parse_duration_ms("2m") == 120_000
    assert parse_duration_ms("1d") == 86_400_000
    assert parse_duration_ms(250) == 250
    for bad in ("1 fortnight", -1, True, "s"):
        with pytest.raises(ValueError):
            parse_duration_ms(bad)


def test_sinks_default_to_the_three_delta_tables_and_are_declared_per_output() -> None:
    from eos.core.sink import sinks_for

    default = load_config_dict(GOOD)
    assert [(s.output, s.name) for s in sinks_for(default)] == [
        ("windows", "delta:target"), ("late", "delta:late"), ("quarantine", "delta:quarantine")]
    seeds = load_pipeline("clicks_to_kafka")
    kafka_sink = sinks_for(seeds)[0]
    assert (kafka_sink.output, kafka_sink.name) == ("windows", "kafka:clicks-per-minute")
    assert kafka_sink.marker_topic == "clicks-per-minute.eos-markers.clicks_to_kafka"
    assert kafka_sink.transactional_id == "eos:clicks_to_kafka:kafka:clicks-per-minute"
    bounded = load_config_dict({**GOOD, "sinks": {"windows": [
        {"delta": {"table": "target", "log_retention": "2h"}}]}})
    delta_sink = sinks_for(bounded)[0]
    assert delta_sink.name == "delta:target" and delta_sink.path.endswith("/target")
    assert delta_sink.options.log_retention == 7_200_000


@pytest.mark.parametrize(
    ("sinks", "message"),
    [
        ({"windows": [{"s3": "x"}]}, "unknown sink type 's3'; known: delta, files, iceberg, kafka"),
        ({"windows": [{"delta": "a", "kafka": "b"}]}, "a sink is one mapping"),
        ({"windows": [{"kafka": {"topic": "bad topic!"}}]}, "kafka sink: topic"),
        ({"windows": [{"kafka": {"topic": "t", "acks": 0}}]}, "kafka sink: acks"),
        ({"windows": [{"delta": ""}]}, "a delta sink names a table"),
        ({"windows": [{"delta": {"table": "t", "log_retention": "10m"}}]},
         "log_retention: Input should be greater than or equal to 3600000"),
        ({"windows": [{"delta": {"table": "t", "vacuum": "1d"}}]}, "vacuum: Extra inputs"),
        ({"windows": []}, "sinks.windows"),
        ({"windows": [{"delta": "t"}], "late": [{"delta": "t"}]}, "repeated: ['delta:t']"),
    ],
)
def test_bad_sinks_fail_at_load_time_naming_the_problem(tmp_path: Path, sinks: dict,
                                                         message: str) -> None:
    with pytest.raises(ConfigError, match=r"field 'sinks") as caught:
        load_config(_write(tmp_path, {**GOOD, "sinks": sinks}))
    assert message in str(caught.value)


def load_config_dict(data: dict):
    from eos.core.config import parse_config

    return parse_config(data)
