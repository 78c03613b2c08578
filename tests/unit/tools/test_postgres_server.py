"""What the demo and ``eos chaos`` do for a pipeline's ``postgres`` sinks before starting a
server (``eos.tools.servers.postgres_server``): a clear error naming Debian's package when none can
run, nothing for a pipeline without such sinks, and the credentials handed over the way the
sink reads them (its ``dsn_env``, its Airflow connection's variable)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from eos.core.config import PipelineConfig, load_config
from eos.core.errors import ConfigError
from eos.tools.servers import postgres_server
from eos.tools.servers.postgres_server import PostgresServer

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "include" / "pipelines"


def lakehouse(tmp_path: Path, **postgres: object) -> PipelineConfig:
    data = yaml.safe_load((SHIPPED / "clicks_lakehouse.yaml").read_text())
    data["sinks"]["windows"][1]["postgres"].update(postgres)
    path = tmp_path / "clicks_lakehouse.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_config(path)


def test_no_server_binaries_is_an_error_naming_the_debian_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres_server, "server_bin", lambda: None)
    monkeypatch.delenv("EOS_POSTGRES_DSN", raising=False)
    with pytest.raises(ConfigError, match=r"apt-get install postgresql"), \
            postgres_server.serving(lakehouse(tmp_path)):
        pass
    # A pipeline without postgres sinks needs no server.
    with postgres_server.serving(load_config(SHIPPED / "clicks.yaml")) as server:
        assert server is None
    # With reuse, a DSN already in every sink's dsn_env is that server.
    monkeypatch.setenv("EOS_POSTGRES_DSN", "host=db.example port=5432")
    with postgres_server.serving(lakehouse(tmp_path), reuse=True) as server:
        assert server is None


def test_the_credentials_go_where_the_sink_reads_them(tmp_path: Path) -> None:
    server = PostgresServer("127.0.0.1", 5999, "airflow", "eos", "p/w+d")
    config = lakehouse(tmp_path, connection="lake_pg", dsn_env="LAKE_DSN")
    sinks = postgres_server._postgres_sinks(config)
    variables = postgres_server._hand_over(server, sinks)
    assert variables == {
        "LAKE_DSN": "host=127.0.0.1 port=5999 user=airflow password=p/w+d dbname=eos",
        "AIRFLOW_CONN_LAKE_PG": "postgres://airflow:p%2Fw%2Bd@127.0.0.1:5999/eos"}
    assert "p/w+d" not in repr(server)
    without = lakehouse(tmp_path, dsn_env=None)
    with pytest.raises(ConfigError, match="set dsn_env on the postgres sink"):
        postgres_server._hand_over(server, postgres_server._postgres_sinks(without))
