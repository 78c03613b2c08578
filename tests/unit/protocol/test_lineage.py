"""Asset names for lineage (``eos.core.lineage``, ``eos.airflow.assets``): the OpenLineage
dataset naming spec as Airflow's providers spell it, ``kafka://{bootstrap host}:{port}/{topic}``
for a topic (``apache-airflow-providers-apache-kafka``) and the table's location for a Delta
table (``file:///abs/path`` as ``common-io`` makes it, ``s3://bucket/path``); no credential in a
name. Nothing here reaches a broker: names come from settings only."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from eos.core.lineage import kafka_server, kafka_uri, table_uri, topic_uri
from eos.core.storage import scheme

from support.pipelines import IN_MEMORY, make_pipeline

SECRET = "s3cr3t"


def spec_ok(uri: str) -> tuple[str, str]:
    """(namespace, name) of an asset URI as OpenLineage reads it, checked the way the providers'
    ``sanitize_uri`` check it: a Kafka URI has a host:port and a topic, a file URI a path."""
    parts = urlsplit(uri)
    if parts.scheme == "kafka":
        host, _, port = parts.netloc.rpartition(":")
        assert host and port.isdigit(), uri
        assert parts.path.count("/") == 1 and len(parts.path) > 1, uri
        return f"kafka://{parts.netloc}", parts.path[1:]
    assert parts.path.startswith("/") and len(parts.path) > 1, uri
    return (f"{parts.scheme}://{parts.netloc}" if parts.netloc else parts.scheme), parts.path


def test_a_topic_is_named_by_the_first_bootstrap_server_without_credentials() -> None:
    assert kafka_server("b1.example:9093,b2.example:9093") == "b1.example:9093"
    assert kafka_server(" b1.example ") == "b1.example:9092"  # Kafka's default port
    assert kafka_server(f"SASL_SSL://user:{SECRET}@b1.example:9093,b2:1") == "b1.example:9093"
    assert kafka_server("[::1]:9094") == "[::1]:9094"
    uri = kafka_uri("127.0.0.1:39092,127.0.0.1:39093", "clicks")
    assert uri == "kafka://127.0.0.1:39092/clicks"
    assert spec_ok(uri) == ("kafka://127.0.0.1:39092", "clicks")
    with pytest.raises(ValueError):
        kafka_server(" , ")


def test_a_client_setting_names_its_cluster_else_the_deployment_else_nothing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EOS_DATA_DIR", str(tmp_path))  # no embedded broker's state file here
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    assert topic_uri({}, "clicks") is None
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "deploy:9092")
    assert topic_uri({}, "clicks") == "kafka://deploy:9092/clicks"
    assert topic_uri({"bootstrap.servers": "other:9095"}, "t") == "kafka://other:9095/t"
    # a setting read from the environment when a client starts names nothing at parse time
    assert topic_uri({"bootstrap.servers": "${BROKERS}"}, "t") == "kafka://deploy:9092/t"


def test_a_table_is_named_by_its_location(tmp_path: Path) -> None:
    local = table_uri(str(tmp_path / "a" / ".." / "target"))
    assert local == f"file://{(tmp_path / 'target').resolve()}"
    assert local.startswith("file:///")
    assert spec_ok(local) == ("file", str((tmp_path / "target").resolve()))
    assert table_uri(f"file://{tmp_path}/t") == f"file://{tmp_path.resolve()}/t"
    assert table_uri("s3://bucket/tables/target/") == "s3://bucket/tables/target"
    assert table_uri(f"s3://key:{SECRET}@bucket/t?versionId=1") == "s3://bucket/t"


def test_the_dag_declares_the_source_inlet_and_every_sink_outlet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from eos.airflow.assets import sink_assets, source_assets

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", f"PLAINTEXT://u:{SECRET}@b1:9093,b2:9093")
    config = make_pipeline(tmp_path, base=IN_MEMORY, sinks={
        "windows": [{"kafka": {"topic": "per-minute"}},
                    {"kafka": {"topic": "mirrored", "client": {"bootstrap.servers": "dr:19092"}}},
                    {"delta": "target"}],
        "late": [{"delta": {"table": "s3://bucket/late"}}],
        "quarantine": [{"memory": "q"}],  # a sink type without asset naming: no asset
    })
    assert [a.uri for a in source_assets(config)] == ["kafka://b1:9093/in-memory"]
    assets = sink_assets(config)
    assert {name: a.uri for name, a in assets.items()} == {
        "kafka:per-minute": "kafka://b1:9093/per-minute",
        "kafka:mirrored": "kafka://dr:19092/mirrored",
        # a local root, or the object store the whole fast tier runs on
        # (tests/integration/storage/test_storage.py)
        "delta:target": (f"{config.root}/target" if scheme(config.root) else
                         f"file://{Path(config.root).resolve()}/target"),
        "delta:s3://bucket/late": "s3://bucket/late",
    }
    for asset in [*assets.values(), *source_assets(config)]:
        assert asset.name == asset.uri  # the providers' create_asset: one name per dataset
        assert SECRET not in asset.uri and "@" not in asset.uri
        spec_ok(asset.uri)
