"""``eos validate`` refuses the mistakes a running pipeline would only meet later (or never
notice): a repeated YAML key, a librdkafka setting librdkafka does not know or would refuse, a
secret written in the file, a cron Airflow cannot parse, a Spark setting Spark would ignore or
that changes results, a source that reads the pipeline's own output, and two files of one
name. Each is named with its key path (YAML errors with their line and column)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from eos.core.config.loading import UniqueKeyLoader
from eos.core.config.spark_settings import defined_sql_settings
from unit.tools.test_validate import GOOD, validate, write

KAFKA_OUT = {"windows": [{"kafka": {"topic": "orders-out"}}]}


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], **changes: object) -> str:
    path = write(tmp_path, "orders", **changes)
    code, lines = validate(capsys, str(path))
    assert code == 1 and len(lines) == 1 and lines[0].startswith("ERROR "), lines
    return lines[0]


def test_a_repeated_key_is_refused_with_its_line_and_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "orders.yaml"
    text = yaml.safe_dump(GOOD, sort_keys=False)
    path.write_text(text + "group_by: [amount]\n")  # the second group_by would win silently
    code, lines = validate(capsys, str(path))
    last = len(text.splitlines()) + 1
    first = text.splitlines().index("group_by:") + 1
    assert code == 1
    assert lines == [f"ERROR pipeline config {path} is not valid YAML: line {last}, column 1: "
                     f"key group_by appears twice in one mapping (first at line {first}, "
                     "column 1); "
                     "YAML keys are unique, and the last one would silently win: remove one"]


def test_a_repeated_key_inside_a_section_and_a_merge_override(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nested = tmp_path / "nested.yaml"
    nested.write_text(yaml.safe_dump(GOOD, sort_keys=False).replace(
        "  topic: orders\n", "  topic: orders\n  topic: refunds\n"))
    assert "key topic appears twice" in validate(capsys, str(nested))[1][0]
    # A merge key's value overridden beside it is no repeat.
    merged = yaml.load("base: &w {type: tumbling, size: 5m}\nwindow: {<<: *w, size: 1m}\n",
                       Loader=UniqueKeyLoader)
    assert merged["window"] == {"type": "tumbling", "size": "1m"}


@pytest.mark.parametrize(("client", "named"), [
    ({"bootstrap.server": "localhost:9092"},
     "setting bootstrap.server: No such configuration property"),
    ({"security.protocol": "SASL_PLAINTEXTT"},
     "setting security.protocol: Invalid value for configuration property"),
    ({"fetch.wait.max.ms": "soon"}, "setting fetch.wait.max.ms: Invalid value"),
    ({"sasl.password": "hunter2"}, "setting sasl.password holds a secret"),
    ({"ssl.key.password": "${}x"}, "setting ssl.key.password holds a secret"),
    ({"sasl.oauthbearer.client.secret": "s3cr3t"}, "holds a secret"),
    ({"made.up.setting": "${SOME_VAR}"}, "setting made.up.setting: No such configuration"),
], ids=["typo", "bad enum", "bad number", "literal password", "half reference",
        "literal oauth secret", "unknown name, value from the environment"])
def test_librdkafka_settings_are_checked_by_librdkafka(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], client: dict[str, str],
        named: str) -> None:
    line = refused(tmp_path, capsys, kafka={"topic": "orders", "client": client})
    assert "field 'kafka.client'" in line and named in line
    assert "hunter2" not in line and "s3cr3t" not in line and "SASL_PLAINTEXTT" not in line


def test_a_kafka_sinks_producer_settings_are_checked_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(tmp_path, capsys, sinks={"windows": [
        {"kafka": {"topic": "out", "client": {"linger.msec": 5}}}]})
    assert "sinks.windows.0" in line and "setting linger.msec: No such configuration" in line


def test_good_librdkafka_settings_and_secrets_from_the_environment_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "orders", kafka={"topic": "orders", "client": {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "eos", "sasl.password": "${KAFKA_PASSWORD}",
        "fetch.wait.max.ms": 200, "enable.partition.eof": False}},
        sinks={"windows": [{"kafka": {"topic": "out", "client": {"linger.ms": 5}}}]})
    assert validate(capsys, str(path))[0] == 0


@pytest.mark.parametrize("schedule", ["every five minutes", "*/5 * * *", "61 * * * *",
                                      "* * * * * *", "@fortnightly"])
def test_a_schedule_airflow_cannot_parse_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], schedule: str) -> None:
    line = refused(tmp_path, capsys, schedule=schedule)
    assert "expected five valid fields" in line
    line = refused(tmp_path, capsys, schedule={"cron": schedule, "lag_records": 10})
    assert "field 'schedule.cron'" in line


@pytest.mark.parametrize("schedule", ["*/5 * * * *", "0 3 * * mon-fri", "@hourly", "@once",
                                      "@continuous", {"cron": "@daily", "max_delay": "2m"}])
def test_schedules_airflow_takes_load(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      schedule: object) -> None:
    assert validate(capsys, str(write(tmp_path, "orders", schedule=schedule)))[0] == 0


@pytest.mark.parametrize(("conf", "named"), [
    ({"spark.sql.ansi.enabled": "false"}, "changes what an epoch computes (eos runs"),
    ({"spark.sql.session.timeZone": "Europe/Paris"}, "eos computes event times and windows"),
    ({"spark.sql.legacy.timeParserPolicy": "LEGACY"}, "legacy behaviours change results"),
    ({"spark.sql.shuffle.partitons": "4"},
     "Spark defines no such SQL setting, and would ignore it; did you mean "
     "spark.sql.shuffle.partitions?"),
    ({"sql.shuffle.partitions": "4"}, "not a Spark setting"),
], ids=["ansi", "time zone", "legacy", "typo", "not spark"])
def test_spark_settings_spark_would_ignore_or_that_change_results_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], conf: dict[str, str],
        named: str) -> None:
    line = refused(tmp_path, capsys, spark={"conf": conf})
    assert "field 'spark.conf'" in line and named in line


def test_defined_spark_settings_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = {"spark.sql.shuffle.partitions": "4", "spark.sql.adaptive.enabled": "false",
            "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
            "spark.executor.memory": "2g"}
    assert validate(capsys, str(write(tmp_path, "orders", spark={"conf": conf})))[0] == 0
    assert "spark.sql.files.maxPartitionBytes" in defined_sql_settings()


@pytest.mark.parametrize("kafka", [
    {"pattern": "^orders.*"},  # matches orders-out, the sink's topic
    {"pattern": "^.*eos-markers.*"},  # matches the sink's marker topic
    {"topics": ["orders", "orders-out"]},
], ids=["pattern matches the output", "pattern matches the markers", "named"])
def test_a_source_that_reads_its_own_output_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], kafka: dict[str, object]) -> None:
    line = refused(tmp_path, capsys, kafka=kafka, sinks=KAFKA_OUT)
    assert "would read its own output as input" in line
    assert "sink kafka:orders-out (windows)" in line


def test_a_pattern_that_leaves_the_outputs_out_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "orders", kafka={"pattern": "^orders(?!-out)"}, sinks=KAFKA_OUT)
    assert validate(capsys, str(path))[0] == 0


def test_a_file_that_is_not_utf8_is_an_error_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(yaml.safe_dump(GOOD).encode() + b"# caf\xe9\n")
    code, lines = validate(capsys, str(path))
    assert code == 1 and lines[0].startswith(f"ERROR pipeline config {path} is not UTF-8 text")


def test_two_files_of_one_pipeline_name_are_both_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = write(tmp_path, "orders")
    second = tmp_path / "orders_copy.yaml"
    second.write_text(first.read_text())
    other = write(tmp_path, "refunds")
    code, lines = validate(capsys, str(tmp_path))
    assert code == 1
    both = f"two files declare pipeline 'orders': {first}, {second}"
    assert lines[0].startswith(f"ERROR pipeline config {first}: ") and both in lines[0]
    assert lines[1].startswith(f"ERROR pipeline config {second}: ") and both in lines[1]
    assert lines[2] == f"OK    {other} (pipeline refunds)"


def test_a_decimal_cut_at_its_comma_says_to_quote_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cut.yaml"
    path.write_text("name: cut\nkafka: {topic: t}\n"
                    "event:\n  fields: {key: string, value: decimal(38,9)}\n")
    code, lines = validate(capsys, str(path))
    assert code == 1 and "unknown type 'decimal(38'" in lines[0]
    assert 'quote the type, e.g. "decimal(38,s)"' in lines[0]
