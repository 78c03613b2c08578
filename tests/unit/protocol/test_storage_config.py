"""Where tables may live, decided when the config loads (``eos.core.storage``): local paths and the
object stores both delta-rs and pyarrow write; nothing else, and no storage setting under which
two writers could commit one Delta version. No store is contacted here
(tests/integration/storage/test_storage.py runs pipelines on a real S3 server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eos.core.config import parse_config
from eos.core.errors import ConfigError, StoreUnsafe
from eos.core.layout import tables_for
from eos.core.storage import join, refuse_unsafe_settings, resolve

GOOD: dict[str, Any] = {
    "name": "stored",
    "kafka": {"topic": "t"},
    "event": {"time": {"field": "ts", "format": "iso8601"}, "fields": {"page": "string"}},
    "group_by": ["page"],
    "window": {"type": "tumbling", "size": "60s"},
    "aggregations": {"views": "count(*)"},
}


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EOS_DATA_DIR", str(tmp_path / "data"))
    # Neither an unsafe setting nor a deployment's base for relative roots from outside (the
    # fast tier also runs with EOS_TABLES_BASE on a store:
    # tests/integration/storage/test_storage.py).
    for name in ("AWS_S3_ALLOW_UNSAFE_RENAME", "AWS_S3_LOCKING_PROVIDER", "AWS_CONDITIONAL_PUT",
                 "EOS_TABLES_BASE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "data"


def with_root(root: str, **more: Any) -> dict[str, Any]:
    return {**GOOD, "tables": {"root": root}, **more}


def test_an_s3_root_is_the_store_not_a_local_directory(data_dir: Path) -> None:
    """The first regression: ``s3://bucket/clicks`` used to become ``data/s3:/bucket/clicks``."""
    config = parse_config(with_root("s3://bucket/clicks/"))
    assert config.root == "s3://bucket/clicks"
    tables = tables_for(config)
    assert tables.staging == "s3://bucket/clicks/staging"
    assert tables.checkpoints == "s3://bucket/clicks/checkpoints"
    assert not data_dir.exists() or not any(data_dir.rglob("*s3*"))


@pytest.mark.parametrize("root", ["gs://b/p", "abfss://c@acct.dfs.core.windows.net/p",
                                  "abfs://c@acct.dfs.core.windows.net/p"])
def test_other_stores_both_libraries_write_are_accepted(root: str) -> None:
    assert parse_config(with_root(root)).root == root


@pytest.mark.parametrize(("root", "says"), [
    ("hdfs://namenode:8020/p", "hdfs:// scheme is not supported"),
    ("ftp://host/p", "ftp:// scheme is not supported"),
    ("s3a://bucket/p", "s3a:// scheme is not supported"),
    ("s3:/bucket/p", "mistyped scheme separator"),
    ("s3:bucket/p", "mistyped scheme separator"),
    ("s3://", "names a bucket"),
])
def test_a_root_nothing_can_write_is_refused_at_load(root: str, says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(with_root(root))
    assert says in str(refused.value), refused.value


def test_local_roots_stay_local(data_dir: Path, tmp_path: Path) -> None:
    assert parse_config(with_root("clicks")).root == str(data_dir / "clicks")
    assert parse_config(with_root(str(tmp_path / "abs"))).root == str(tmp_path / "abs")
    assert parse_config(with_root(f"file://{tmp_path}/abs")).root == str(tmp_path / "abs")
    assert parse_config(GOOD).root == str(data_dir / "stored")


@pytest.mark.parametrize(("name", "value"), [
    ("AWS_S3_ALLOW_UNSAFE_RENAME", "true"),
    ("AWS_S3_LOCKING_PROVIDER", "dynamodb"),
    ("AWS_CONDITIONAL_PUT", "disabled"),
])
def test_an_unsafe_setting_is_refused_naming_it(name: str, value: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        parse_config(with_root("s3://bucket/p"))
    assert name in str(refused.value)
    # A Delta sink on the store is refused the same way, and a local pipeline is not affected.
    with pytest.raises(ConfigError) as sink_refused:
        parse_config({**GOOD, "sinks": {"windows": [{"delta": "s3://bucket/out"}]}})
    assert name in str(sink_refused.value)
    parse_config(with_root("local"))


def test_unsafe_settings_are_checked_again_when_tables_open(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The environment of the task that writes decides (an Airflow worker's may differ from
    the DAG processor's): ``ensure_tables`` checks again before anything is written."""
    from eos.core.tables import ensure_tables

    config = parse_config(with_root("s3://bucket/p"))
    monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "1")
    with pytest.raises(StoreUnsafe):
        ensure_tables(config)
    monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "false")
    refuse_unsafe_settings("s3://bucket/p")


def test_delta_sink_tables_under_a_store_root() -> None:
    from eos.core.sink import sinks_for

    config = parse_config(with_root("s3://bucket/p", sinks={
        "windows": [{"delta": "target"}, {"delta": "s3://other/t/"}]}))
    paths = {s.name: s.path for s in sinks_for(config)}
    assert paths["delta:target"] == "s3://bucket/p/target"
    assert paths["delta:s3://other/t/"] == "s3://other/t"
    with pytest.raises(ConfigError, match="scheme is not supported"):
        parse_config({**GOOD, "sinks": {"windows": [{"delta": "hdfs://nn/t"}]}})


def test_join_and_resolve() -> None:
    assert join("s3://b/p/", "staging") == "s3://b/p/staging"
    assert join("/tmp/x", "a", "b") == "/tmp/x/a/b"
    assert resolve("s3://b//p//", Path("/d")) == "s3://b//p"


def test_a_deployment_puts_every_relative_root_on_a_store(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """``EOS_TABLES_BASE`` (the compose file sets it): relative roots live under it."""
    monkeypatch.setenv("EOS_TABLES_BASE", "s3://bucket/tables/")
    assert parse_config(GOOD).root == "s3://bucket/tables/stored"
    assert parse_config(with_root("x/y")).root == "s3://bucket/tables/x/y"
    assert parse_config(with_root("/abs")).root == "/abs"
    monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "true")
    with pytest.raises(ConfigError, match="AWS_S3_ALLOW_UNSAFE_RENAME"):
        parse_config(with_root("x"))
    with pytest.raises(ConfigError, match="AWS_S3_ALLOW_UNSAFE_RENAME"):
        parse_config(GOOD)  # a default root under the store's base too


def test_an_airflow_connection_becomes_the_standard_variables() -> None:
    """``eos.airflow.storage``: an ``aws`` connection (the Amazon provider's shape) maps to the
    variables delta-rs and pyarrow read; nothing it does not set is invented."""
    from types import SimpleNamespace

    from eos.airflow.storage import connection_env

    conn = SimpleNamespace(login="AKIA", password="s3cr3t", extra_dejson={
        "endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"})
    assert connection_env(conn) == {
        "AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "eu-west-1"}
    role = SimpleNamespace(login=None, password=None, extra_dejson={"region_name": "us-east-1"})
    assert connection_env(role) == {"AWS_REGION": "us-east-1"}
