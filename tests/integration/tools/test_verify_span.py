"""``eos verify --last N`` / ``--since E`` on Apache Kafka: the audit compares only the span's
rows (a windowed pipeline's earlier epochs replayed for their open windows, their rows not
kept), and records retention deleted after an epoch read them are named and counted as not
auditable instead of failing the audit with ``DataLoss`` or passing it silently.

Apache Kafka: the embedded broker has no DeleteRecords (what retention does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin
import pytest

from eos.compute.epochs import run_epoch
from eos.core.kafka import client_settings, topic_watermarks
from eos.tools.audit.verify import audit
from eos.tools.generator import GeneratorSpec

from support.apache_kafka import ApacheKafka, kafka_section
from support.harness import eos_cli
from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = GeneratorSpec(events=2400, keys=20, interval_ms=25, disorder_ms=800, late_fraction=0.03,
                     late_delay_ms=20_000, bad_fraction=0.03, seed=17)


def test_the_last_epochs_alone_and_records_retention_deleted_named_not_failed(
        tmp_path: Path, apache_kafka: ApacheKafka, spark: Any) -> None:
    config = make_pipeline(tmp_path, max_records=600, staging_retention=1, records=SPEC,
                           kafka=kafka_section())
    for i in range(4):
        run_epoch(config, f"span-{i}", spark=spark)
    whole = audit(config)
    assert whole.ok, whole.render()
    target = "delta:target"

    span = audit(config, last=2)
    assert span.ok, span.render()
    assert (span.first_epoch, span.committed_epoch) == (2, 3)
    assert "epochs 2..3" in span.render()
    # Only the span's windows were compared (the earlier epochs' rows were neither read back
    # nor kept), and they are exactly the whole audit's windows of epochs 2 and 3.
    assert 0 < span.counts[target][0] < whole.counts[target][0], (span.counts, whole.counts)

    # Retention takes the first records of the partition epoch 0 read most of.
    settings = client_settings(config.kafka.client)
    partition, (low, _) = max(topic_watermarks(settings, config.kafka.topic).items(),
                                 key=lambda item: item[1][1] - item[1][0])
    admin = ck.admin.AdminClient(settings)
    gone = admin.delete_records([ck.TopicPartition(config.kafka.topic, partition, low + 5)])
    next(iter(gone.values())).result(timeout=30)

    after = audit(config)
    assert after.ok, after.render()
    assert len(after.not_auditable) == 1
    assert (f"epoch 0: topic '{config.kafka.topic}' partition {partition} offsets {low}.."
            in after.not_auditable[0]), after.not_auditable
    assert "of which 5 were deleted" in after.not_auditable[0]
    assert "verdict: OK WHERE AUDITABLE" in after.render()
    # Epoch 0 and every window that may hold its records are left out, on both sides; the
    # rest is compared as before.
    assert after.left_out.get(target, 0) > 0, after.render()
    assert 0 < after.counts[target][0] < whole.counts[target][0]

    # The command: the last epoch alone, exit 0, the span and the deleted range named.
    done = eos_cli(config, "verify", "--last", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "epochs 3..3" in done.stdout and "not auditable: epoch 0" in done.stdout
