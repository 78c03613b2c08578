"""A Kafka sink's settable transactional-id prefix (``transactional_id_prefix``, README "Outputs
and sinks"): each marker records the id that wrote it; a sink whose last marker was written under
another id refuses, unless that id is its declared ``previous_transactional_id_prefix``, which it
then fences before it goes on.

The sinks are called directly with hand-built rows (no Spark). On the embedded broker the
decisions are shown (who refuses, what is published, what the markers say); what fencing the
old id does to its open transaction (aborted, the LSO released at once, its zombie unable to
commit) runs on Apache Kafka: librdkafka's mock cluster neither fences transactional ids nor
filters ``read_committed``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from eos.core.errors import SinkUnavailable, TransactionalIdChanged
from eos.core.kafka import client_settings
from eos.core.outcomes import Outcome
from eos.core.outputs import output_schema
from eos.sinks.kafka.sink import KafkaSink
from eos.tools.pipelines import unique_topic, write_pipeline
from integration.sinks.test_kafka_markers import HASH, all_records, by_hand, records, rows_of

from support.apache_kafka import ApacheKafka

pytestmark = [pytest.mark.integration]


def sink_of(tmp_path: Path, **options: Any) -> KafkaSink:
    topic = unique_topic("out")
    config = write_pipeline(tmp_path, sinks={"windows": [{"kafka": {"topic": topic,
                                                                    **options}}]})
    sink = by_hand(config, "windows", {"topic": topic, **options})
    sink.prepare(output_schema(config, "windows"))
    return sink


def with_options(sink: KafkaSink, **options: Any) -> KafkaSink:
    """The same sink of the same pipeline, its options changed (a redeployed YAML)."""
    return by_hand(sink.config, "windows", {"topic": sink.options.topic, **options})


def markers_of(sink: KafkaSink) -> list[dict[str, Any]]:
    return [json.loads(m.value()) for m in records(sink.marker_topic)]


def epochs_published(sink: KafkaSink) -> list[int]:
    return [int(dict(m.headers())["eos-epoch"]) for m in all_records(sink.options.topic)]


def test_the_default_prefix_keeps_todays_id_and_each_marker_names_its_writer(
        tmp_path: Path, kafka: str) -> None:
    sink = sink_of(tmp_path)
    assert sink.transactional_id == f"eos:{sink.config.name}:{sink.name}"
    assert sink.commit(0, rows_of(sink.config, "windows"), HASH).outcome is Outcome.COMMITTED
    assert [m["transactional_id"] for m in markers_of(sink)] == [sink.transactional_id]


def test_a_marker_written_before_the_prefix_existed_belongs_to_the_default_id(
        tmp_path: Path, kafka: str) -> None:
    """A marker with no writer (what the sink wrote before) was written by ``eos:...``: the
    default prefix goes on, another prefix is refused naming that id."""
    sink = sink_of(tmp_path)
    producer = ck.Producer({**client_settings(), "transactional.id": sink.transactional_id,
                            "enable.idempotence": True})
    producer.init_transactions(30)
    producer.begin_transaction()
    marker = {**sink.markers().identity(), "epoch": 0, "plan_hash": HASH, "rows": 1}
    producer.produce(sink.marker_topic, key=sink.markers().key,
                     value=json.dumps(marker).encode(), partition=0)
    producer.commit_transaction(30)
    moved = with_options(sink, transactional_id_prefix="prod")
    with pytest.raises(TransactionalIdChanged, match=f"'{sink.transactional_id}'"):
        moved.commit(1, rows_of(sink.config, "windows"), HASH)
    assert sink.commit(1, rows_of(sink.config, "windows"), HASH).outcome is Outcome.COMMITTED


def test_an_undeclared_prefix_change_is_refused_before_anything_is_written(
        tmp_path: Path, kafka: str) -> None:
    sink = sink_of(tmp_path)
    sink.commit(0, rows_of(sink.config, "windows"), HASH)
    moved = with_options(sink, transactional_id_prefix="eos-prod")
    with pytest.raises(TransactionalIdChanged) as refused:
        moved.commit(1, rows_of(sink.config, "windows"), HASH)
    assert not refused.value.retryable
    assert "previous_transactional_id_prefix: eos" in str(refused.value)
    with pytest.raises(TransactionalIdChanged):
        moved.committed_epoch()  # the fenced look refuses too ...
    assert moved.committed_epoch(fence=False) == 0  # ... an unfenced look (status) does not
    assert epochs_published(sink) == [0] and len(markers_of(sink)) == 1


def test_a_declared_prefix_change_hands_over_without_duplicating_or_losing_an_epoch(
        tmp_path: Path, kafka: str) -> None:
    sink = sink_of(tmp_path)
    for epoch in (0, 1):
        sink.commit(epoch, rows_of(sink.config, "windows"), HASH)
    moved = with_options(sink, transactional_id_prefix="eos-prod",
                         previous_transactional_id_prefix="eos")
    assert moved.transactional_id == f"eos-prod:{sink.config.name}:{sink.name}"
    assert moved.committed_epoch() == 1
    rows = rows_of(sink.config, "windows")
    assert moved.commit(1, rows, HASH).outcome is Outcome.ALREADY_COMMITTED  # not republished
    assert moved.commit(2, rows, HASH).outcome is Outcome.COMMITTED  # not lost
    assert epochs_published(sink) == [0, 1, 2]
    assert [m["transactional_id"] for m in markers_of(sink)] == [
        sink.transactional_id, sink.transactional_id, moved.transactional_id]
    # The old deployment, still running, is refused now: no ping-pong of fences.
    with pytest.raises(TransactionalIdChanged, match=moved.transactional_id):
        sink.commit(3, rows, HASH)
    assert epochs_published(sink) == [0, 1, 2]


def test_two_deployments_of_one_pipeline_never_share_output_silently(
        tmp_path: Path, kafka: str) -> None:
    """Staging and production of one pipeline on one cluster, each with its own prefix: on the
    same topics the second to commit is refused (nothing of it published); on topics of their
    own each commits every epoch once."""
    staging = sink_of(tmp_path, transactional_id_prefix="staging")
    production = with_options(staging, transactional_id_prefix="production")
    rows = rows_of(staging.config, "windows")
    assert staging.commit(0, rows, HASH).outcome is Outcome.COMMITTED
    with pytest.raises(TransactionalIdChanged, match="another deployment"):
        production.commit(0, rows, HASH)
    assert epochs_published(staging) == [0]
    separate = by_hand(staging.config, "windows", {"topic": unique_topic("prod-out"),
                                                   "transactional_id_prefix": "production"})
    separate.prepare(output_schema(staging.config, "windows"))
    assert separate.marker_topic != staging.marker_topic
    assert separate.commit(0, rows, HASH).outcome is Outcome.COMMITTED
    assert staging.commit(1, rows, HASH).outcome is Outcome.COMMITTED
    assert (epochs_published(staging), epochs_published(separate)) == ([0, 1], [0])


def test_fencing_the_previous_id_aborts_its_open_transaction_at_once(
        tmp_path: Path, apache_kafka: ApacheKafka) -> None:
    """The old id left a transaction open on the output and marker partitions (a zombie of the
    old deployment): the first commit under the new id aborts it through ``init_transactions``
    instead of waiting for the broker's transaction timeout, its records never become visible,
    and the zombie can no longer commit."""
    sink = sink_of(tmp_path)
    sink.commit(0, rows_of(sink.config, "windows"), HASH)
    zombie = ck.Producer({**client_settings(), "transactional.id": sink.transactional_id,
                          "enable.idempotence": True, "transaction.timeout.ms": 600_000})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(sink.options.topic, key=b"zombie", value=b"{}",
                   headers=[("eos-epoch", b"1")])
    zombie.produce(sink.marker_topic, key=sink.markers().key, partition=0,
                   value=json.dumps({**sink.markers().identity(), "epoch": 1}).encode())
    assert zombie.flush(30) == 0
    moved = with_options(sink, transactional_id_prefix="eos-prod",
                         previous_transactional_id_prefix="eos")
    started = time.monotonic()
    assert moved.commit(1, rows_of(sink.config, "windows"), HASH).outcome is Outcome.COMMITTED
    assert time.monotonic() - started < 60  # not the zombie's 10-minute timeout
    with pytest.raises(ck.KafkaException):
        zombie.commit_transaction(30)
    assert epochs_published(sink) == [0, 1]
    assert [m["epoch"] for m in markers_of(sink)] == [0, 1]


def test_a_transaction_that_outlives_its_timeout_loses_and_doubles_nothing(
        tmp_path: Path, apache_kafka: ApacheKafka, arm: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Flink's documented loss mode: a transaction open longer than ``transaction.timeout.ms``
    is aborted by the broker. Here the commit stalls inside its transaction (a barrier no one
    else reaches) three times as long as its 2 s timeout: the broker aborts it, the commit
    fails transiently saying nothing is visible (its own rerun stalls the same way), and the
    next attempt commits the epoch once."""
    sink = sink_of(tmp_path, client={"transaction.timeout.ms": 2000})
    rows = rows_of(sink.config, "windows")
    monkeypatch.setenv("EOS_BARRIER_TIMEOUT_S", "6")
    arm("sink.kafka.in_transaction:wait")
    with pytest.raises(SinkUnavailable, match="nothing of it is visible"):
        sink.commit(0, rows, HASH)
    assert all_records(sink.options.topic) == [] and sink.committed_epoch() == -1
    arm("")
    assert sink.commit(0, rows, HASH).outcome is Outcome.COMMITTED
    assert epochs_published(sink) == [0] and [m["epoch"] for m in markers_of(sink)] == [0]
