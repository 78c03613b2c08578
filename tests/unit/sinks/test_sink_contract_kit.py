"""The sink contract kit (``eos.testing.SinkContract``) run against the shipped sinks it can reach
without a broker: Delta (a local table), files, Iceberg (a SQL catalog on SQLite) and
PostgreSQL (the tests' own server), and against the in-memory reference sinks. The Kafka sink's
run needs a broker: tests/integration/sinks/test_sink_contract_kafka.py."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from eos.core.config import PipelineConfig
from eos.core.sink import Sink
from eos.sinks.delta.sink import DeltaSink
from eos.sinks.files.sink import FilesSink
from eos.sinks.iceberg.sink import IcebergSink
from eos.sinks.postgres.connection import forget_dsns
from eos.sinks.postgres.sink import PostgresSink
from eos.testing import (
    STORES,
    MemorySink,
    RewindableMemorySink,
    SinkContract,
    epoch_rows,
    store,
    with_column_type,
)

from support.postgres import PostgresServer, missing_reason, postgres_server


def conflicting(config: PipelineConfig) -> pa.Table:
    """Epoch 1's rows with the count as text: a column of another type than the table's."""
    return with_column_type(epoch_rows(config, 1), "n", pa.string())


class TestDeltaContract(SinkContract):
    sink_type = DeltaSink

    def sink_spec(self, directory: Path) -> dict[str, Any]:
        return {"delta": str(directory / "delta-target")}

    def refused_rows(self, config: PipelineConfig, sink: Sink) -> pa.Table:
        return conflicting(config)


class TestFilesContract(SinkContract):
    sink_type = FilesSink

    def sink_spec(self, directory: Path) -> dict[str, Any]:
        return {"files": {"path": str(directory / "files-out"), "partition_by": ["key"]}}


class TestIcebergContract(SinkContract):
    sink_type = IcebergSink

    def sink_spec(self, directory: Path) -> dict[str, Any]:
        return {"iceberg": {"catalog": "kit", "table": "kit.windows", "catalog_properties": {
            "type": "sql", "uri": f"sqlite:///{directory}/catalog.db",
            "warehouse": str(directory / "warehouse")}}}

    def refused_rows(self, config: PipelineConfig, sink: Sink) -> pa.Table:
        return conflicting(config)


# PostgreSQL: skipped where no server can run here, but never in CI, where ./dev installs it.
NO_POSTGRES = missing_reason() if os.environ.get("CI") != "true" else None
DSN_ENV = "EOS_KIT_POSTGRES_DSN"


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with postgres_server() as running:
        yield running


@pytest.mark.skipif(NO_POSTGRES is not None, reason=str(NO_POSTGRES))
class TestPostgresContract(SinkContract):
    sink_type = PostgresSink

    @pytest.fixture(autouse=True)
    def dsn(self, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        fields = {"host": postgres.host, "port": postgres.port, "user": postgres.user,
                  "password": postgres.password, "dbname": postgres.database}
        monkeypatch.setenv(DSN_ENV, " ".join(f"{k}={v}" for k, v in fields.items()))
        yield
        forget_dsns()

    def sink_spec(self, directory: Path) -> dict[str, Any]:
        # A schema of the test's own: the tests share one server.
        return {"postgres": {"table": f"kit_{secrets.token_hex(4)}.windows",
                             "dsn_env": DSN_ENV}}

    def refused_rows(self, config: PipelineConfig, sink: Sink) -> pa.Table:
        return conflicting(config)


class MemoryContract(SinkContract):
    @pytest.fixture(autouse=True)
    def forget(self) -> Iterator[None]:
        yield
        STORES.clear()

    def refused_rows(self, config: PipelineConfig, sink: Sink) -> pa.Table:
        """A memory sink refuses what a test poisons its store with."""
        store(config, sink.name).refuse = "poisoned by the test"
        return epoch_rows(config, 1)


class TestMemoryContract(MemoryContract):
    """The reference sink: the two-phase commit only (the capabilities' tests skip)."""

    sink_type = MemorySink

    def sink_spec(self, directory: Path) -> dict[str, Any]:
        return {"memory": "kit"}


class TestRewindableMemoryContract(MemoryContract):
    sink_type = RewindableMemorySink

    def sink_spec(self, directory: Path) -> dict[str, Any]:
        return {"memory_rewind": "kit"}


def test_the_sink_authors_guide_shows_the_kits_example_whole() -> None:
    """docs/sinks.md ("Test your sink with eos.testing") includes test_jsonl_contract.py
    verbatim: the example a sink author copies is the one that runs."""
    example = Path(__file__).with_name("test_jsonl_contract.py").read_text()
    page = (Path(__file__).parents[3] / "docs" / "sinks.md").read_text()
    assert f"```python\n{example}```" in page
