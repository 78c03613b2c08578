"""A Kafka sink's transaction aborted under its producer (docs/guarantees.md, "Kafka sinks"):
the commit runs once more by a new producer, and the epoch lands once.

This is what a producer-id collision on the embedded broker looks like (librdkafka's mock
cluster draws producer ids at random and never checks them for uniqueness, so one producer in
a long run can be handed another's id and then has every transactional request refused with
``INVALID_PRODUCER_ID_MAPPING``), and what an expired transactional id looks like on Kafka.
The test injects that refusal with the mock's own fault injection, on a mock cluster of its own
(so no other test's requests draw the injected errors).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from eos.core.config import PipelineConfig
from eos.core.kafka import client_settings, forget_clients, read_partition, topic_watermarks
from eos.core.outcomes import Outcome
from eos.core.outputs import output_schema
from eos.core.sink import sinks_for
from eos.tools.pipelines import unique_topic, write_pipeline
from eos.tools.servers.mock_cluster import MockCluster

pytestmark = [pytest.mark.integration]

HASH = "0" * 16
ADD_PARTITIONS_TO_TXN = 24  # Kafka protocol ApiKey
INVALID_PRODUCER_ID_MAPPING = 49  # Kafka protocol error code


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[MockCluster]:
    """A mock cluster of this test's own, the bootstrap every client here resolves."""
    mock = MockCluster(brokers=1)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", mock.bootstrap)
    try:
        yield mock
    finally:
        forget_clients(mock.bootstrap)  # the process's kept metadata client of this cluster
        mock.close()


def rows_of(config: PipelineConfig, n: int) -> pa.Table:
    schema = output_schema(config, "windows")
    return pa.Table.from_pylist([{"epoch": 0, "count": i} for i in range(n)], schema=schema)


def epochs_on(topic: str) -> list[int]:
    """The ``eos-epoch`` header of every record of ``topic`` (one partition), in order."""
    settings = client_settings({})
    low, high = topic_watermarks(settings, topic)[0]
    return [int(dict(m.headers())["eos-epoch"])
            for m in read_partition(settings, topic, 0, low, high)]


def test_a_transaction_aborted_under_its_producer_is_committed_by_a_new_one(
        tmp_path: Path, cluster: MockCluster) -> None:
    out = unique_topic("windows")
    config = write_pipeline(tmp_path,
                            sinks={"windows": [{"kafka": {"topic": out, "partitions": 1}}]})
    (sink,) = [s for s in sinks_for(config) if s.kind == "kafka"]
    cluster.create_topic(out, 1)
    cluster.create_topic(sink.marker_topic, 1)
    assert sink.commit(0, rows_of(config, 3), HASH).outcome is Outcome.COMMITTED
    # The next transaction's first AddPartitionsToTxn is refused as for a producer id the
    # broker maps to another transactional id: that transaction is aborted under its producer.
    cluster.push_request_errors(ADD_PARTITIONS_TO_TXN, [INVALID_PRODUCER_ID_MAPPING])
    assert sink.commit(1, rows_of(config, 2), HASH).outcome is Outcome.COMMITTED
    assert sink.commits() == [0, 1]
    assert epochs_on(out) == [0, 0, 0, 1, 1]  # the aborted attempt's records never left
