"""The sink contract kit (``eos.testing.SinkContract``) run against the Kafka sink, no Spark: on
the tests' broker (the embedded one, or ``KAFKA_BOOTSTRAP_SERVERS``), and on Apache Kafka for
what librdkafka's mock cluster cannot show: it does not fence transactional ids, so two
attempts at one epoch both commit there (docs/guarantees.md). The other shipped sinks' runs need
no broker: tests/unit/sinks/test_sink_contract_kit.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from eos.core.config import PipelineConfig
from eos.core.sink import Sink
from eos.sinks.kafka.sink import KafkaSink
from eos.testing import SinkContract, epoch_rows
from eos.tools.pipelines import unique_topic

from support.apache_kafka import ApacheKafka, kafka_section

pytestmark = [pytest.mark.integration]

# The producer's message.max.bytes: over the largest record a window can make (the config
# refuses a sink whose records could outgrow it), under the refused rows' record.
RECORD_LIMIT = 300_000


class KafkaContract(SinkContract):
    sink_type = KafkaSink

    def sink_spec(self, directory: Path) -> dict[str, Any]:
        return {"kafka": {"topic": unique_topic("kit"),
                          "client": {"message.max.bytes": RECORD_LIMIT}}}

    def refused_rows(self, config: PipelineConfig, sink: Sink) -> pa.Table:
        """A window whose key alone is over the producer's record limit."""
        rows = epoch_rows(config, 1, 1)
        return rows.set_column(0, rows.schema.field(0), pa.array(["k" * 2 * RECORD_LIMIT]))


class TestKafkaContract(KafkaContract):
    @pytest.fixture(autouse=True)
    def broker(self, kafka: str) -> None:
        """The session's broker runs before the sink is built."""

    def test_two_commits_of_one_epoch_at_once_write_it_once(
            self, contract_config: PipelineConfig) -> None:
        pytest.skip("librdkafka's mock cluster does not fence transactional ids: "
                    "TestKafkaContractOnApacheKafka runs this")


@pytest.mark.slow
class TestKafkaContractOnApacheKafka(KafkaContract):
    @pytest.fixture(autouse=True)
    def broker(self, apache_kafka: ApacheKafka) -> None:
        """Apache Kafka's variables set for the test."""

    def pipeline_sections(self, directory: Path) -> dict[str, Any]:
        return {"kafka": kafka_section()}
