"""Doors a config could open (and the sinks' resources hook), refused
when the config loads: a filter that is not a pure function, a Spark Connect token sent in
plaintext to another host, a secret quoted by a YAML error or shown unredacted, a Delta sink
that is one of the pipeline's own tables or leaves its root, and two sinks claiming one place.

No broker, Spark or Delta table is needed: every check here runs before any of them is used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from eos.core import layout
from eos.core.config import PipelineConfig, load_config, parse_config
from eos.core.errors import ConfigError
from eos.core.kafka import client_settings, redact
from eos.core.plan import KafkaSource
from eos.core.sink import Sink, register

GOOD: dict[str, Any] = {
    "name": "doors",
    "kafka": {"topic": "t"},
    "event": {"time": {"field": "ts", "format": "iso8601"},
              "fields": {"page": "string", "n": "long", "amount": "decimal(12,2)"}},
    "group_by": ["page"],
    "window": {"type": "tumbling", "size": "60s"},
    "aggregations": {"views": "count(*)"},
}


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Relative roots resolve under this directory (``eos.core.config.data_dir``)."""
    monkeypatch.setenv("EOS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def with_filter(text: str) -> dict[str, Any]:
    return {**GOOD, "event": {**GOOD["event"], "filter": text}}


def with_sinks(**outputs: list[Any]) -> dict[str, Any]:
    return {**GOOD, "sinks": outputs}


# -- item 5: a filter is a pure function of the record -------------------------------------------

@pytest.mark.parametrize(("text", "name"), [
    ("rand() < 0.5", "rand"),
    ("random() < 0.5", "rand"),
    ("rand(7) < 0.5", "rand"),
    ("randn() > 0", "randn"),
    ("uuid() is not null", "uuid"),
    ("size(shuffle(array(page))) > 0", "shuffle"),
    ("uniform(0, 10) > n", "uniform"),
    ("current_timestamp() > to_timestamp(page)", "current_timestamp"),
    ("current_timestamp > to_timestamp(page)", "current_timestamp"),
    ("now() > to_timestamp(page)", "now"),
    ("current_date() = to_date(page)", "current_date"),
    ("curdate() = to_date(page)", "curdate"),
    ("localtimestamp() > to_timestamp(page)", "localtimestamp"),
    ("current_timezone() = 'UTC'", "current_timezone"),
    ("unix_timestamp() > n", "unix_timestamp"),
    ("monotonically_increasing_id() > 5", "monotonically_increasing_id"),
    ("spark_partition_id() = 0", "spark_partition_id"),
    ("input_file_name() = ''", "input_file_name"),
    ("input_file_block_start() >= 0", "input_file_block_start"),
    ("input_file_block_length() >= 0", "input_file_block_length"),
    ("reflect('java.lang.System', 'exit', '1') is null", "reflect"),
    ("java_method('java.lang.Runtime', 'getRuntime') is null", "java_method"),
    ("try_reflect('java.lang.Math', 'random') > 0.5", "try_reflect"),
    ("current_user() = 'etl'", "current_user"),
    ("user() = 'etl'", "user"),
    ("session_user() = 'etl'", "session_user"),
    ("assert_true(n > 0) is null", "assert_true"),
    ("raise_error('no') is null or n > 0", "raise_error"),
    ("my_udf(page)", "my_udf"),
    ("row_number() over (order by n) > 1", "row_number"),
    ("lower(page) = 'a' and rand() < 0.1", "rand"),
    # Spark reads these strings as the current time when they become a date or timestamp.
    ("to_timestamp(page) > cast('now' as timestamp)", "'now'"),
    ("to_date(page) = 'today'", "'today'"),
    ("to_date(page) < date'Tomorrow'", "'tomorrow'"),
])
def test_a_filter_that_is_not_a_pure_function_is_refused_naming_it(text: str, name: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(with_filter(text))
    message = str(refused.value)
    assert "event" in message and name in message.lower(), message


@pytest.mark.parametrize("text", [
    "n >= 0",
    "amount >= 0 and lower(page) like 'a%'",
    "coalesce(n, 0) > 1 and length(trim(page)) < 10",
    "page in ('a', 'b') and not (n between 1 and 2)",
    "if(n > 1, true, false) or page is null",
    "cast(n as double) / 2 > 0.5 and abs(n) % 2 = 0",
    "unix_timestamp(page) > 0 and year(to_date(page)) >= 2020",
    "page rlike '^[a-z]+$' and upper(substring(page, 1, 2)) <> 'X'",
    "page = 'nowhere' and page <> 'todays'",
    "case when n > 10 then true else page = 'home' end",
    "greatest(n, 1) < least(n, 100) or concat(page, 'x') = 'ax'",
])
def test_a_pure_filter_still_loads(text: str) -> None:
    assert parse_config(with_filter(text)).event.filter == text


# -- item 9: secrets stay out of errors and logs -------------------------------------------------

SECRET = "hunter2-s3cr3t-value"


@pytest.mark.parametrize("line", [
    f"    sasl.password: {SECRET}: more",  # a mapping value where none is allowed
    f'    sasl.password: "{SECRET}',  # an unterminated quote
    f"    sasl.password: !{SECRET} x",  # an unknown tag
    f"    sasl.password: *{SECRET}",  # an undefined alias
    f"    sasl.password: [{SECRET}",  # an unclosed flow sequence
])
def test_a_yaml_error_gives_line_and_column_never_the_text(tmp_path: Path, line: str) -> None:
    text = "name: doors\nkafka:\n  topic: t\n  client:\n" + line + "\nwindow: {size: 60s}\n"
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    message = str(refused.value)
    assert SECRET not in message and "sasl.password" not in message, message
    assert "line " in message and "column " in message, message


SECRET_KEYS = [
    "sasl.username", "sasl.password", "sasl.oauthbearer.config", "sasl.oauthbearer.extensions",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.client.credentials",
    "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.kerberos.keytab", "sasl.jaas.config", "ssl.key.password", "ssl.key.pem",
    "ssl.key.location", "ssl.keystore.password", "ssl.keystore.location", "ssl.certificate.pem",
    "ssl_key", "SASL.USERNAME",
]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_redact_hides_every_secret_setting(key: str) -> None:
    shown = redact({"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "PLAIN", key: SECRET})
    assert shown[key] == "***"
    assert shown["bootstrap.servers"] == "b:9092" and shown["security.protocol"] == "SASL_SSL"
    assert shown["sasl.mechanism"] == "PLAIN"


def test_the_begin_log_line_shows_no_secret_from_the_config_or_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``KafkaSource.describe`` is what ``begin`` logs (and the epochs view shows)."""
    monkeypatch.setenv("KAFKA_SASL_USERNAME", SECRET + "-user")
    # A secret setting is given from the environment (a literal one is refused at load).
    monkeypatch.setenv("OAUTH_CONFIG", f"principal=p scope=s clientSecret={SECRET}")
    client = {"sasl.oauthbearer.config": "${OAUTH_CONFIG}",
              "sasl.oauthbearer.extensions": f"logicalCluster={SECRET}"}
    config = parse_config({**GOOD, "kafka": {"topic": "t", "client": client}})
    settings = client_settings(config.kafka.client, bootstrap="b:9092")
    assert settings["sasl.username"] == SECRET + "-user"
    logged = json.dumps(KafkaSource(settings).describe(config))
    assert SECRET not in logged and "b:9092" in logged, logged


# -- item 10: a Delta sink is never a protocol table and stays under the root ---------------------

def test_the_protocol_tables_are_listed_once() -> None:
    tables = layout.Tables("/r")
    names = layout.PROTOCOL_TABLES
    assert set(names) >= {"epochs", "staging", "checkpoints", "audits"}
    assert {Path(getattr(tables, name)).name for name in names} == set(names)


@pytest.mark.parametrize("table", [
    "checkpoints", "epochs", "staging", "audits", "./staging", "staging/", "a/../checkpoints",
    "Checkpoints", "checkpoints/inside", {"table": "epochs", "log_retention": "7d"},
])
def test_a_delta_sink_may_not_be_a_protocol_table(table: Any) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(with_sinks(windows=[{"delta": table}]))
    assert "protocol table" in str(refused.value), refused.value


@pytest.mark.parametrize("table", ["../other/target", "a/../../x", "..", ".", "./", "x/../"])
def test_a_relative_delta_sink_may_not_leave_the_root(table: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(with_sinks(windows=[{"delta": table}]))
    assert "root" in str(refused.value), refused.value


def test_an_absolute_path_onto_a_protocol_table_or_the_root_is_refused(data_dir: Path) -> None:
    root = data_dir / "doors"
    for table in (str(root / "checkpoints"), f"{root}/./staging/", str(root), str(data_dir),
                  f"file://{root}/epochs"):
        with pytest.raises(ConfigError) as refused:
            parse_config(with_sinks(windows=[{"delta": table}]))
        assert "protocol table" in str(refused.value) or "root" in str(refused.value), table


@pytest.mark.parametrize("table", ["target", "out/windows", "checkpoints_copy", "s3://b/x",
                                   "/elsewhere/target"])
def test_other_delta_tables_load(table: str) -> None:
    config = parse_config(with_sinks(windows=[{"delta": table}]))
    assert config.sinks.windows[0]["delta"].table == table


# -- the resources hook: two sinks of one pipeline never claim one place ------------------------

@pytest.mark.parametrize("other", ["./target", "target/", "{root}/target", "x/../target"])
def test_two_delta_sinks_on_one_table_are_refused_naming_both(data_dir: Path, other: str) -> None:
    other = other.replace("{root}", str(data_dir / "doors"))
    with pytest.raises(ConfigError) as refused:
        parse_config(with_sinks(windows=[{"delta": "target"}], late=[{"delta": other}]))
    message = str(refused.value)
    assert "delta:target" in message and f"delta:{other}" in message, message
    assert str(data_dir / "doors" / "target") in message, message


def test_a_delta_sink_inside_another_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(with_sinks(windows=[{"delta": "target"}], late=[{"delta": "target/late"}]))
    assert "delta:target" in str(refused.value) and "delta:target/late" in str(refused.value)


def test_the_resolved_location_follows_the_tables_root(tmp_path: Path) -> None:
    root = tmp_path / "elsewhere"
    data = {**with_sinks(windows=[{"delta": "target"}], late=[{"delta": str(root / "target")}]),
            "tables": {"root": str(root)}}
    with pytest.raises(ConfigError):
        parse_config(data)
    data["sinks"]["late"] = [{"delta": str(tmp_path / "data" / "doors" / "target")}]
    assert isinstance(parse_config(data), PipelineConfig)


class ClaimingSink(Sink):
    """A sink type that claims what its options say, for the generic check."""

    kind: ClassVar[str] = "claims_for_test"

    @classmethod
    def describe(cls, options: Any) -> str:
        return str(options["name"])

    @classmethod
    def resources(cls, options: Any, pipeline_name: str) -> frozenset[str]:
        return frozenset({f"thing:{pipeline_name}:{options['claim']}"})

    def committed_epoch(self, fence: bool = True) -> int:
        raise NotImplementedError

    def commit(self, epoch: int, rows: Any, plan_hash: str) -> Any:
        raise NotImplementedError

    def abort(self, epoch: int) -> None:
        raise NotImplementedError


def test_two_sinks_claiming_one_resource_are_refused_through_the_hook(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from eos.core import sink

    monkeypatch.setattr(sink, "_registered", dict(sink._registered))  # known to this test only
    register(ClaimingSink.kind, ClaimingSink)
    first = {ClaimingSink.kind: {"name": "a", "claim": "m"}}
    second = {ClaimingSink.kind: {"name": "b", "claim": "m"}}
    with pytest.raises(ConfigError) as refused:
        parse_config(with_sinks(windows=[first], quarantine=[second]))
    message = str(refused.value)
    assert "claims_for_test:a" in message and "claims_for_test:b" in message, message
    assert "thing:doors:m" in message, message
    apart = {ClaimingSink.kind: {"name": "b", "claim": "n"}}
    assert parse_config(with_sinks(windows=[first], quarantine=[apart]))


def test_a_sink_claims_nothing_unless_it_says() -> None:
    assert Sink.resources({"any": "options"}, "p") == frozenset()


# -- item 8: the Spark Connect token never crosses a network in plaintext ------------------------

def test_a_token_to_a_remote_host_without_tls_is_refused() -> None:
    from eos.compute.connect import Endpoint

    for url in ("sc://spark.example.com:15002/;token=tok-123",
                "sc://10.1.2.3:15002/;token=tok-123;use_ssl=false",
                "sc://[2001:db8::1]:15002/;token=tok-123"):
        with pytest.raises(ConfigError) as refused:
            Endpoint.from_url(url, "EOS_SPARK_REMOTE")
        message = str(refused.value)
        assert "tok-123" not in message and "use_ssl" in message, message
        assert "allow_insecure_token" in message, message


@pytest.mark.parametrize("url", [
    "sc://spark.example.com:15002/;token=tok;use_ssl=true",
    "sc://spark.example.com:15002/;token=tok;allow_insecure_token=true",
    "sc://spark.example.com:15002",
    "sc://127.0.0.1:15002/;token=tok", "sc://127.9.8.7:15002/;token=tok",
    "sc://localhost:15002/;token=tok", "sc://[::1]:15002/;token=tok",
])
def test_tls_an_explicit_opt_in_no_token_or_loopback_are_accepted(url: str) -> None:
    from eos.compute.connect import Endpoint

    endpoint = Endpoint.from_url(url, "EOS_SPARK_REMOTE")
    assert "allow_insecure_token" not in endpoint.url()


def test_an_airflow_connection_says_so_explicitly(monkeypatch: pytest.MonkeyPatch) -> None:
    from eos.compute.connect import airflow_endpoint

    def connection(extra: dict[str, Any], host: str = "spark.example.com") -> None:
        monkeypatch.setenv("AIRFLOW_CONN_EOS_DOORS_TEST", json.dumps(
            {"conn_type": "spark_connect", "host": host, "port": 15002,
             "password": "tok-45678", "extra": extra}))

    connection({})
    with pytest.raises(ConfigError) as refused:
        airflow_endpoint("eos_doors_test")
    assert "tok-45678" not in str(refused.value)
    assert "allow_insecure_token" in str(refused.value)
    connection({"use_ssl": True})
    assert airflow_endpoint("eos_doors_test").use_ssl
    connection({"allow_insecure_token": True})
    assert airflow_endpoint("eos_doors_test").token == "tok-45678"
    connection({}, host="127.0.0.1")
    assert airflow_endpoint("eos_doors_test").host == "127.0.0.1"


def test_yaml_of_the_shipped_shape_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(with_sinks(windows=[{"delta": "target"}],
                                              late=[{"delta": "late"}])))
    assert load_config(path).name == "doors"


# -- item 6: no output record may outgrow a sink's record limit ----------------------------------

def wide(strings: int, **event: Any) -> dict[str, Any]:
    """A pipeline grouping by ``strings`` string fields, its windows to a Kafka topic."""
    fields = {f"s{i}": "string" for i in range(strings)}
    return {**GOOD, "event": {**GOOD["event"], "fields": {**fields, "n": "long"}, **event},
            "group_by": list(fields), "aggregations": {"views": "count(*)", "top": "max(s0)"},
            "sinks": {"windows": [{"kafka": "wide-out"}], "late": [], "quarantine": []}}


def test_a_kafka_sink_whose_largest_record_could_outgrow_its_limit_is_refused() -> None:
    """Before: nothing bounded a record, and one hostile value halted the pipeline at commit
    (MSG_SIZE_TOO_LARGE on every retry). Now a pipeline that could make such a record does not
    load, naming the output, the bound, the limit and both ways out."""
    with pytest.raises(ConfigError, match=r"kafka sink wide-out: a record of output 'windows' "
                                          r"may reach \d+ bytes .* message.max.bytes \(1000000\)"):
        parse_config(wide(5))
    assert parse_config(wide(5, max_string_bytes=4096)).event.max_string_bytes == 4096
    roomy = wide(5)
    roomy["sinks"]["windows"] = [{"kafka": {"topic": "wide-out",
                                            "client": {"message.max.bytes": 4_000_000}}}]
    parse_config(roomy)
    parse_config(wide(2))  # the default limit leaves room for a couple of string keys


@pytest.mark.parametrize("output", ["windows", "late", "quarantine", "rows"])
def test_the_record_bound_holds_for_the_worst_row_the_codec_can_make(output: str) -> None:
    """The bound is checked against the real codec (``eos.sinks.records``) on the worst
    row: every string at ``event.max_string_bytes`` of control characters (six bytes each in
    JSON), every binary at the quarantine prefix, every number at its widest."""
    import datetime as dt
    from decimal import Decimal

    import pyarrow as pa

    from eos.core.limits import RAW_PREFIX_BYTES, largest_record_bytes
    from eos.core.outputs import output_schema
    from eos.sinks.records import encode_keys, encode_values

    shape = wide(2, max_string_bytes=1024)
    if output == "rows":  # the same fields, without windows: every field, and coordinates
        shape = {**{k: v for k, v in shape.items() if k not in ("group_by", "aggregations",
                                                                   "window")},
                 "sinks": {"rows": [{"kafka": "wide-out"}], "quarantine": []}}
    config = parse_config(shape)
    schema = output_schema(config, output)

    def worst(field: pa.Field) -> Any:
        kind = field.type
        if field.name == "raw_value_sha256":
            return "f" * 64
        if field.name == "kafka_topic":  # Kafka's longest name, of its legal characters
            return "x" * 249
        if pa.types.is_string(kind):
            return "\x01" * (600 if field.name == "reason" else config.event.max_string_bytes)
        if pa.types.is_binary(kind):
            return b"\xff" * RAW_PREFIX_BYTES
        if pa.types.is_timestamp(kind):
            return dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC)
        if pa.types.is_decimal(kind):
            return -Decimal("9" * (kind.precision - kind.scale) + "." + "9" * kind.scale)
        if pa.types.is_floating(kind):
            return -1.7976931348623157e308
        return -(2 ** (kind.bit_width - 1))

    row = pa.Table.from_pylist([{f.name: worst(f) for f in schema}], schema=schema)
    group = list(config.group_by) if output not in ("quarantine", "rows") else []
    key = encode_keys(row, group)[0] or b""
    headers = 1024  # what the bound allows for eos-pipeline, eos-epoch, eos-plan-hash, lineage
    assert len(key) + len(encode_values(row)[0]) + headers <= largest_record_bytes(config, output)


def test_executors_get_client_settings_without_the_config_file(tmp_path: Path) -> None:
    """Executors on other machines may not have the pipeline's YAML: settings travel in the
    data source options, except a secret written literally (it stays in the file, and an
    executor that cannot read the file says so instead of connecting without it)."""
    from eos.compute.reader import KafkaRangeReader, shareable_client

    client = {"security.protocol": "SASL_SSL", "sasl.password": "${KAFKA_PW}",
              "sasl.username": "literal-user"}
    shared = shareable_client(client)
    assert shared == {"security.protocol": "SASL_SSL", "sasl.password": "${KAFKA_PW}"}
    options = {"topic": "t", "ranges": "[]", "bootstrap": "127.0.0.1:1",
               "config": str(tmp_path / "elsewhere.yaml"), "client": json.dumps(shared),
               "client_in_file": json.dumps(["sasl.username"])}
    with pytest.raises(ConfigError, match=r"sasl\.username"):
        KafkaRangeReader(options)._settings()
    options["client_in_file"] = "[]"
    import os
    os.environ["KAFKA_PW"] = "from-the-executor-env"
    try:
        settings = KafkaRangeReader(options)._settings()
    finally:
        del os.environ["KAFKA_PW"]
    assert settings["sasl.password"] == "from-the-executor-env"
    assert settings["security.protocol"] == "SASL_SSL"
