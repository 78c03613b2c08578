"""A pipeline without windows into PostgreSQL: rows appended once each, or upserted on their
coordinates, through the protocol, against a real server (``support.postgres``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from eos.core import sink as sink_module
from eos.core.config import PipelineConfig
from eos.core.protocol import checkpointed_epoch, commit
from eos.core.sink import register, sinks_for
from eos.sinks.postgres.connection import forget_dsns
from eos.sinks.postgres.sink import PostgresSink

from support.memory import STORES, MemorySource, run_epoch, store
from support.memory_rows import STATELESS_IN_MEMORY, RowStager
from support.pipelines import make_pipeline
from support.postgres import PostgresServer, missing_reason, postgres_server

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))]

DSN_ENV = "EOS_TEST_POSTGRES_DSN"
COORDINATES = ["kafka_topic", "kafka_partition", "kafka_offset"]


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with postgres_server() as running:
        yield running


@pytest.fixture(autouse=True)
def environment(server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    register(PostgresSink.kind, PostgresSink)
    monkeypatch.setenv(DSN_ENV, f"host={server.host} port={server.port} user={server.user} "
                                f"password={server.password} dbname={server.database}")
    yield
    STORES.clear()
    forget_dsns()


def query(server: PostgresServer, statement: str) -> list[tuple[Any, ...]]:
    conn = psycopg2.connect(host=server.host, port=server.port, user=server.user,
                            password=server.password, dbname=server.database)
    try:
        with conn, conn.cursor() as cursor:
            cursor.execute(statement)
            return cursor.fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("keys", [[], COORDINATES], ids=["appended", "upserted"])
def test_rows_land_once_each_at_their_coordinates(tmp_path: Path, server: PostgresServer,
                                                  keys: list[str]) -> None:
    schema = f"rows_{len(keys)}_{tmp_path.name[-6:].replace('-', '_')}"
    sink = {"postgres": {"table": f"{schema}.pageviews", "dsn_env": DSN_ENV,
                         "upsert_keys": keys}}
    config: PipelineConfig = make_pipeline(tmp_path, base=STATELESS_IN_MEMORY, sinks={
        "rows": [sink, {"memory": "a"}], "quarantine": [{"memory": "c"}]})
    source = MemorySource()
    for _ in range(2):
        run_epoch(config, source, RowStager())
        source.produce(1, 7)
    assert checkpointed_epoch(config) == 1
    assert commit(config, 1).outcome.name == "ALREADY_COMMITTED"
    memory = sorted((r["kafka_partition"], r["kafka_offset"], r["key"], r["at"], r["epoch"])
                    for t in store(config, "memory:a").rows.values() for r in t.to_pylist())
    held = query(server, "SELECT kafka_partition, kafka_offset, key, at, epoch "
                         f"FROM {schema}.pageviews ORDER BY 1, 2")
    assert held == memory and len(held) == 37 + 6
    types = dict(query(server, "SELECT column_name, data_type FROM information_schema.columns "
                               f"WHERE table_schema = '{schema}'"))
    assert types["kafka_partition"] == "integer" and types["kafka_offset"] == "bigint"
    postgres = sinks_for(config)[0]
    assert isinstance(postgres, PostgresSink)
    assert postgres.commits() == [0, 1]
    if not keys:
        assert sorted((r["kafka_partition"], r["kafka_offset"], r["key"], r["at"], r["epoch"])
                      for r in postgres.read_back()) == memory


def test_an_epoch_holding_a_key_several_times_upserts_its_last_record(
        tmp_path: Path, server: PostgresServer) -> None:
    """Upserting on a column that is not the Kafka key: one epoch holds key K four times in
    partition 0 and twice in partition 1. The table holds K's last record: within a partition
    the later offset (partition 1's offset 1 is its latest timestamp, but offset 2 follows
    it), across partitions the later Kafka timestamp (partition 0's offset 3, at 6 s, after
    partition 1's offset 2, at 4 s). A later epoch's record replaces it whatever its
    timestamp: epochs are applied in order. Every other sink still gets every row."""
    schema = f"last_{tmp_path.name[-6:].replace('-', '_')}"
    sink = {"postgres": {"table": f"{schema}.latest", "dsn_env": DSN_ENV,
                         "upsert_keys": ["key"]}}
    config: PipelineConfig = make_pipeline(tmp_path, base=STATELESS_IN_MEMORY, sinks={
        "rows": [sink, {"memory": "a"}], "quarantine": [{"memory": "c"}]})
    keys = {(1, 0): "J", (1, 3): "J"}
    seconds = {(0, 0): 1, (0, 1): 2, (0, 2): 3, (0, 3): 6, (0, 4): 0.5,
               (1, 0): 5, (1, 1): 7, (1, 2): 4, (1, 3): 0.1}
    stager = RowStager(key=lambda p, o: keys.get((p, o), "K"),
                       timestamp=lambda p, o: int(seconds[p, o] * 1000))
    source = MemorySource(marks={0: (0, 4), 1: (0, 3)})
    latest = f"SELECT key, kafka_partition, kafka_offset, epoch FROM {schema}.latest ORDER BY 1"
    run_epoch(config, source, stager)
    assert query(server, latest) == [("J", 1, 0, 0), ("K", 0, 3, 0)]
    source.produce(0, 1)
    source.produce(1, 1)
    run_epoch(config, source, stager)
    assert checkpointed_epoch(config) == 1
    assert query(server, latest) == [("J", 1, 3, 1), ("K", 0, 4, 1)]
    every = [t for t in store(config, "memory:a").rows.values()]
    assert sum(t.num_rows for t in every) == 9
    assert every[0].column_names == ["key", "at", "kafka_topic", "kafka_partition",
                                     "kafka_offset", "epoch"]
    postgres = sinks_for(config)[0]
    assert sorted((r["key"], r["kafka_offset"]) for r in postgres.read_back()) == [
        ("J", 3), ("K", 4)]
