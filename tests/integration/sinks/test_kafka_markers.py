"""The Kafka sink's markers (docs/pipelines.md, "Sinks"): a marker identifies one sink of
one pipeline, and lives in a marker partition only that sink's transactional id writes.

These tests call the sinks directly with hand-built rows (no Spark): what they check is what the
sink reads and writes on the broker. Everything here runs on the embedded broker except the
open-transaction case: librdkafka's mock cluster does not filter ``read_committed`` (its last
stable offset always equals the high watermark), so that one needs ``KAFKA_BOOTSTRAP_SERVERS``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pyarrow as pa
import pytest

from eos.core.config import PipelineConfig
from eos.core.errors import (
    ConfigError,
    MarkerTopicShared,
    MarkerTopicUnsafe,
    SinkRejected,
    SinkUnavailable,
)
from eos.core.kafka import client_settings, read_partition, topic_watermarks
from eos.core.outcomes import Outcome
from eos.core.outputs import output_schema
from eos.core.sink import sinks_for
from eos.sinks.kafka import topics as kafka_topics
from eos.sinks.kafka.sink import KafkaSink
from eos.sinks.kafka.topics import ensure_topic
from eos.tools.pipelines import unique_topic, write_pipeline

from support.apache_kafka import ApacheKafka

pytestmark = [pytest.mark.integration]

HASH = "0" * 16


def rows_of(config: PipelineConfig, output: str, n: int = 1) -> pa.Table:
    """``n`` rows of ``output``'s schema (every column null but the epoch, where there is one):
    what the rows hold does not matter here, only that they reach the topic."""
    schema = output_schema(config, output)
    row = {"epoch": 0} if "epoch" in schema.names else {}
    return pa.Table.from_pylist([row] * n, schema=schema)


def kafka_sinks(config: PipelineConfig) -> list[Any]:
    return [s for s in sinks_for(config) if s.kind == "kafka"]


def by_hand(config: PipelineConfig, output: str, options: dict[str, Any]) -> KafkaSink:
    """A Kafka sink of ``config`` built without the pipeline's load-time checks: what a config
    written before them, or two pipelines' configs together, amount to at run time."""
    return KafkaSink(config, output, KafkaSink.parse_options(options))


def records(topic: str, partition: int = 0) -> list[ck.Message]:
    settings = client_settings()
    marks = topic_watermarks(settings, topic)
    low, _high = marks[partition]
    return list(read_partition(settings, topic, partition, low, group="test-markers"))


def all_records(topic: str) -> list[ck.Message]:
    return [m for p in sorted(topic_watermarks(client_settings(), topic))
            for m in records(topic, p)]


def write_legacy_marker(topic: str, pipeline: str, epoch: int,
                        transactional_id: str) -> None:
    """A marker as version 2 of the sink wrote it: key = the pipeline name, partition 0, in a
    transaction of the sink's own transactional id."""
    ensure_topic(client_settings(), topic, 1, {"cleanup.policy": "compact"})
    producer = ck.Producer({**client_settings(), "transactional.id": transactional_id,
                            "enable.idempotence": True})
    producer.init_transactions(30)
    producer.begin_transaction()
    value = {"pipeline": pipeline, "epoch": epoch, "plan_hash": HASH, "rows": 1}
    producer.produce(topic, key=pipeline.encode(), value=json.dumps(value).encode(), partition=0)
    producer.commit_transaction(30)


# -- item 1: one marker per sink ------------------------------------------------------------------

def test_three_kafka_sinks_of_one_pipeline_each_publish_under_their_own_marker(
        tmp_path: Path, kafka: str) -> None:
    topics = {o: unique_topic(o) for o in ("windows", "late", "quarantine")}
    config = write_pipeline(tmp_path, sinks={o: [{"kafka": t}] for o, t in topics.items()})
    sinks = kafka_sinks(config)
    assert len(sinks) == 3
    for sink in sinks:
        sink.prepare(output_schema(config, sink.output))
        done = sink.commit(0, rows_of(config, sink.output), HASH)
        assert done.outcome is Outcome.COMMITTED, sink.name
    for sink in sinks:
        assert len(all_records(sink.options.topic)) == 1, sink.name
        assert sink.committed_epoch() == 0
        (marker,) = records(sink.marker_topic)
        assert marker.key() == f"{config.name}/{sink.name}".encode()
        value = json.loads(marker.value())
        assert (value["pipeline"], value["sink"], value["epoch"]) == (config.name, sink.name, 0)
    assert len({s.marker_topic for s in sinks}) == 3


def test_three_sinks_through_one_explicit_marker_topic_never_skip_silently(
        tmp_path: Path, kafka: str) -> None:
    """The defect: the second and third sink read the first one's marker N, reported "already
    committed" and never published. Now an explicit marker topic is exclusive to one sink: the
    first publishes, the others refuse loudly (a config error), none reports a skip."""
    markers = unique_topic("markers")
    config = write_pipeline(tmp_path)
    sinks = [by_hand(config, output, {"topic": unique_topic(output), "marker_topic": markers})
             for output in ("windows", "late", "quarantine")]
    for sink in sinks:
        sink.prepare(output_schema(config, sink.output))
    assert sinks[0].commit(0, rows_of(config, "windows"), HASH).outcome is Outcome.COMMITTED
    for sink in sinks[1:]:
        with pytest.raises(MarkerTopicShared, match=markers):
            sink.commit(0, rows_of(config, sink.output), HASH)
        with pytest.raises(MarkerTopicShared, match=markers):
            sink.committed_epoch()
        assert all_records(sink.options.topic) == []


def test_a_pipeline_whose_kafka_sinks_share_a_marker_topic_does_not_load(
        tmp_path: Path, kafka: str) -> None:
    """Load-time refusal through ``Sink.resources`` (the config's check that no two sinks of a
    pipeline claim one resource): needs that hook in ``eos.core.sink``/``eos.core.config``."""
    markers = unique_topic("markers")
    sinks = {"windows": [{"kafka": {"topic": unique_topic("w"), "marker_topic": markers}}],
             "late": [{"kafka": {"topic": unique_topic("l"), "marker_topic": markers}}]}
    with pytest.raises(ConfigError, match=markers):
        write_pipeline(tmp_path, sinks=sinks)


def test_a_too_long_default_marker_topic_is_refused_at_run_time(tmp_path: Path,
                                                                kafka: str) -> None:
    config = write_pipeline(tmp_path, name="p" * 40)
    sink = by_hand(config, "windows", {"topic": "t" * 200})
    with pytest.raises(SinkRejected, match="249"):
        sink.committed_epoch()


# -- item 2: a marker partition only this sink writes ---------------------------------------------

def test_two_pipelines_writing_one_output_topic_each_read_their_own_marker(
        tmp_path: Path, kafka: str) -> None:
    out = unique_topic("shared-out")
    first = kafka_sinks(write_pipeline(tmp_path / "a", sinks={"windows": [{"kafka": out}]}))[0]
    second = kafka_sinks(write_pipeline(tmp_path / "b", sinks={"windows": [{"kafka": out}]}))[0]
    assert first.marker_topic != second.marker_topic
    for sink in (first, second):
        sink.prepare(output_schema(sink.config, "windows"))
    for epoch in (0, 1):
        assert first.commit(epoch, rows_of(first.config, "windows"), HASH).outcome \
            is Outcome.COMMITTED
    assert second.committed_epoch() == -1
    assert second.commit(0, rows_of(second.config, "windows"), HASH).outcome \
        is Outcome.COMMITTED
    assert (first.committed_epoch(), second.committed_epoch()) == (1, 0)
    assert (first.commits(), second.commits()) == ([0, 1], [0])
    assert len(all_records(out)) == 3
    for sink in (first, second):  # each marker partition holds its own sink's markers only
        keys = {m.key() for m in records(sink.marker_topic)}
        assert keys == {f"{sink.config.name}/{sink.name}".encode()}


def test_a_foreign_marker_in_an_exclusive_marker_partition_is_a_config_error(
        tmp_path: Path, kafka: str) -> None:
    """Two pipelines naming one explicit marker topic: the partition is no longer exclusive,
    so the second sink's answer could depend on the first one's transactions. Refused, typed,
    naming the topic; nothing of the second sink is published."""
    markers = unique_topic("markers")
    first, second = (kafka_sinks(write_pipeline(
        tmp_path / d, sinks={"windows": [{"kafka": {"topic": unique_topic("o"),
                                                    "marker_topic": markers}}]}))[0]
        for d in ("a", "b"))
    first.prepare(output_schema(first.config, "windows"))
    assert first.commit(0, rows_of(first.config, "windows"), HASH).outcome is Outcome.COMMITTED
    second.prepare(output_schema(second.config, "windows"))
    with pytest.raises(MarkerTopicShared, match=markers) as refused:
        second.commit(0, rows_of(second.config, "windows"), HASH)
    assert not refused.value.retryable
    with pytest.raises(MarkerTopicShared):
        second.committed_epoch()
    assert all_records(second.options.topic) == []
    assert first.committed_epoch() == 0


def test_a_rewind_marker_is_this_sinks_own(tmp_path: Path, kafka: str) -> None:
    """A rewind writes a marker of the sink's identity into its own partition; the next commits
    continue from it, and the sink's other markers are unaffected by another sink's rewind."""
    topics = {o: unique_topic(o) for o in ("windows", "late")}
    config = write_pipeline(tmp_path, sinks={o: [{"kafka": t}] for o, t in topics.items()})
    windows, late = kafka_sinks(config)
    for sink in (windows, late):
        sink.prepare(output_schema(config, sink.output))
        for epoch in (0, 1, 2):
            sink.commit(epoch, rows_of(config, sink.output), HASH)
    schema = output_schema(config, "windows")
    assert windows.rewind(0, None, "r1", schema) is None
    windows.rewind(0, None, "r1", schema)  # a rerun finds it rewound: no second marker
    assert (windows.committed_epoch(), late.committed_epoch()) == (0, 2)
    assert (windows.commits(), late.commits()) == ([0], [0, 1, 2])
    assert windows.commit(1, rows_of(config, "windows"), HASH).outcome is Outcome.COMMITTED
    values = [json.loads(m.value()) for m in records(windows.marker_topic)]
    assert [v["epoch"] for v in values] == [0, 1, 2, 0, 1]
    assert {v["sink"] for v in values} == {windows.name}
    assert values[-1]["lineage"] == "r1"


# -- migration from version 2's markers ----------------------------------------------------------

def test_an_upgraded_sink_reads_its_legacy_marker_then_writes_the_new_location(
        tmp_path: Path, kafka: str) -> None:
    out = unique_topic("out")
    config = write_pipeline(tmp_path, sinks={"windows": [{"kafka": out}]})
    (sink,) = kafka_sinks(config)
    legacy = out + ".eos-markers"
    # Another pipeline on the same output topic shared version 2's marker topic.
    write_legacy_marker(legacy, "someone-else", 7, "eos:someone-else:kafka:" + out)
    write_legacy_marker(legacy, config.name, 3, sink.transactional_id)
    assert sink.committed_epoch() == 3  # neither republishes epoch 3 ...
    assert sink.commit(3, rows_of(config, "windows"), HASH).outcome is Outcome.ALREADY_COMMITTED
    assert all_records(out) == []
    # ... nor refuses epoch 4, which lands in the new location.
    assert sink.commit(4, rows_of(config, "windows"), HASH).outcome is Outcome.COMMITTED
    assert sink.marker_topic != legacy
    (marker,) = records(sink.marker_topic)
    assert json.loads(marker.value())["epoch"] == 4
    assert sink.committed_epoch() == 4
    assert sink.commits() == [3, 4]
    assert len(records(legacy)) == 2  # the legacy topic is only read


def test_an_upgraded_sink_with_an_explicit_marker_topic_keeps_using_it(
        tmp_path: Path, kafka: str) -> None:
    markers = unique_topic("markers")
    config = write_pipeline(tmp_path, sinks={"windows": [
        {"kafka": {"topic": unique_topic("out"), "marker_topic": markers}}]})
    (sink,) = kafka_sinks(config)
    assert sink.marker_topic == markers
    write_legacy_marker(markers, config.name, 0, sink.transactional_id)
    assert sink.committed_epoch() == 0  # its own legacy marker is not a foreign one
    assert sink.commit(1, rows_of(config, "windows"), HASH).outcome is Outcome.COMMITTED
    keys = [m.key() for m in records(markers)]
    assert keys == [config.name.encode(), f"{config.name}/{sink.name}".encode()]
    assert sink.committed_epoch() == 1 and sink.commits() == [0, 1]


def test_an_open_foreign_transaction_seen_by_the_embedded_broker_is_refused(
        tmp_path: Path, kafka: str) -> None:
    """What the embedded broker shows of the open-transaction case: it does not filter
    ``read_committed``, so another producer's open transaction's record is read, and refused as
    a foreign record in this sink's marker partition; on a real broker the LSO check answers
    first (the next test). Either way no answer is read past it."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        pytest.skip("the embedded broker's view of an open transaction (a real broker hides it)")
    config = write_pipeline(tmp_path, sinks={"windows": [{"kafka": unique_topic("out")}]})
    (sink,) = kafka_sinks(config)
    sink.prepare(output_schema(config, "windows"))
    assert sink.commit(0, rows_of(config, "windows"), HASH).outcome is Outcome.COMMITTED
    intruder = ck.Producer({**client_settings(), "transactional.id": f"intruder-{config.name}",
                            "enable.idempotence": True})
    intruder.init_transactions(30)
    intruder.begin_transaction()
    intruder.produce(sink.marker_topic, key=b"intruder", value=b"{}", partition=0)
    assert intruder.flush(30) == 0
    try:
        with pytest.raises(MarkerTopicShared, match="intruder"):
            sink.commit(1, rows_of(config, "windows"), HASH)
    finally:
        intruder.abort_transaction(30)
    assert all_records(sink.options.topic) and len(all_records(sink.options.topic)) == 1


# -- a marker topic that deletes its markers ------------------------------------------------------


def test_on_the_embedded_broker_the_marker_topic_is_not_checked_and_the_log_says_so(
        tmp_path: Path, kafka: str, caplog: pytest.LogCaptureFixture) -> None:
    """librdkafka's mock cluster does not answer DescribeConfigs ("Failed while waiting for
    controller" after the request's timeout): the sink prepares, and says once what it could
    not check."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        pytest.skip("the embedded broker's answer (a real broker is checked: the next tests)")
    config = write_pipeline(tmp_path, sinks={"windows": [{"kafka": unique_topic("out")}]})
    (sink,) = kafka_sinks(config)
    with caplog.at_level("WARNING", logger=kafka_topics.__name__):
        sink.prepare(output_schema(config, "windows"))
        sink.prepare(output_schema(config, "windows"))
    said = [r.getMessage() for r in caplog.records if sink.marker_topic in r.getMessage()]
    assert len(said) == 1 and "not checked" in said[0] and "DescribeConfigs" in said[0]
    assert sink.commit(0, rows_of(config, "windows"), HASH).outcome is Outcome.COMMITTED


# -- on Apache Kafka (the mock's last stable offset is always its high watermark, and it
# -- implements neither CreateTopics with configs nor DescribeConfigs) -------------------------

def test_another_producers_open_transaction_on_the_marker_partition_is_never_a_wrong_answer(
        tmp_path: Path, apache_kafka: ApacheKafka) -> None:
    config = write_pipeline(tmp_path, sinks={"windows": [{"kafka": unique_topic("out")}]})
    (sink,) = kafka_sinks(config)
    sink.prepare(output_schema(config, "windows"))
    assert sink.commit(0, rows_of(config, "windows"), HASH).outcome is Outcome.COMMITTED
    intruder = ck.Producer({**client_settings(), "transactional.id": f"intruder-{config.name}",
                            "enable.idempotence": True})
    intruder.init_transactions(30)
    intruder.begin_transaction()
    intruder.produce(sink.marker_topic, key=b"intruder", value=b"{}", partition=0)
    assert intruder.flush(30) == 0  # on the broker, open: the LSO stays before it
    try:
        with pytest.raises(SinkUnavailable, match="open transaction") as held:
            sink.committed_epoch()
        assert held.value.retryable
        with pytest.raises(SinkUnavailable, match="open transaction"):
            sink.commit(1, rows_of(config, "windows"), HASH)
    finally:
        intruder.abort_transaction(30)
    assert sink.committed_epoch() == 0  # the aborted record is invisible and not foreign


def create_topic(topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_settings())
    created = admin.create_topics([NewTopic(topic, 1, replication_factor=-1, config=configs)])
    created[topic].result(30)


@pytest.mark.parametrize(("configs", "loss"), [
    ({"cleanup.policy": "delete", "retention.ms": "3600000"},
     "cleanup.policy=delete with retention.ms=3600000"),
    ({"cleanup.policy": "compact,delete", "retention.ms": "-1", "retention.bytes": "1048576"},
     "cleanup.policy=compact,delete with retention.bytes=1048576"),
])
def test_a_pre_created_marker_topic_that_deletes_records_is_refused(
        tmp_path: Path, apache_kafka: ApacheKafka, configs: dict[str, str], loss: str) -> None:
    """The defect: a marker topic someone created with deletion lost its markers after the
    retention, and the pipeline then halted for good (the sink "behind" its checkpoint). Now
    ``begin``'s prepare and ``commit``'s check before the seal refuse it, naming the topic, the
    setting and the fix; nothing written."""
    markers = unique_topic("markers")
    create_topic(markers, configs)
    config = write_pipeline(tmp_path, sinks={"windows": [
        {"kafka": {"topic": unique_topic("out"), "marker_topic": markers}}]})
    (sink,) = kafka_sinks(config)
    with pytest.raises(MarkerTopicUnsafe, match=rf"'{markers}' has {loss}.*cleanup\.policy="
                                                r"compact") as refused:
        sink.prepare(output_schema(config, "windows"))
    assert not refused.value.retryable
    with pytest.raises(MarkerTopicUnsafe):  # commit's check before the seal refuses it too
        sink.check(0, rows_of(config, "windows"))
    assert records(markers) == []


def test_a_marker_topic_the_sink_creates_is_compacted_and_accepted(
        tmp_path: Path, apache_kafka: ApacheKafka) -> None:
    config = write_pipeline(tmp_path, sinks={"windows": [{"kafka": unique_topic("out")}]})
    (sink,) = kafka_sinks(config)
    sink.prepare(output_schema(config, "windows"))
    configs = kafka_topics._topic_configs(client_settings(), sink.marker_topic)
    assert configs is not None and configs["cleanup.policy"] == "compact"
    assert sink.commit(0, rows_of(config, "windows"), HASH).outcome is Outcome.COMMITTED
    kept = unique_topic("kept")  # deletion on, but no limit: nothing is ever deleted
    create_topic(kept, {"cleanup.policy": "delete", "retention.ms": "-1",
                        "retention.bytes": "-1"})
    other = by_hand(config, "late", {"topic": unique_topic("late"), "marker_topic": kept})
    other.prepare(output_schema(config, "late"))

