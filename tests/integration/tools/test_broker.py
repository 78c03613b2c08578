"""Broker conformance: the semantics the pipeline relies on, over TCP.

Runs against the embedded broker, and unchanged against any broker in KAFKA_BOOTSTRAP_SERVERS.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import confluent_kafka as ck
import pytest

from eos.core.errors import ConfigError, KafkaUnavailable, TopicMissing
from eos.core.kafka import broker_state_path, client_settings, local_broker, topic_watermarks
from eos.core.processes import alive
from eos.tools.audit.verify import read_range
from eos.tools.generator import GeneratorSpec, generate
from eos.tools.pipelines import unique_topic
from eos.tools.produce import produce
from eos.tools.servers import broker as embedded

pytestmark = pytest.mark.integration


def _produce(broker: str | dict[str, str], topic: str, n: int, partition: int | None = 0,
              value: bytes | None = None) -> None:
    """``n`` records to ``partition``, or with ``partition=None`` keyed and spread over the
    partitions by key; each value is ``value``, else ``v<i>``. ``broker``: a bootstrap address,
    or a client's settings (a broker that authenticates)."""
    settings = {"bootstrap.servers": broker} if isinstance(broker, str) else broker
    p = ck.Producer({**settings, "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        record = value if value is not None else b"v%d" % i
        if partition is None:
            p.produce(topic, key=b"k%d" % i, value=record)
        else:
            p.produce(topic, value=record, partition=partition)
        p.poll(0)
    assert p.flush(30) == 0


def test_high_watermark_is_exact_after_flush(kafka: str) -> None:
    topic = unique_topic()
    _produce(kafka, topic, 1234)
    marks = topic_watermarks(client_settings(), topic)
    assert marks[0] == (0, 1234)


def test_a_kept_metadata_client_answers_what_the_broker_holds_now(kafka: str) -> None:
    """The process keeps its metadata consumer between plans; its answers are never cached."""
    import eos.core.kafka

    topic = unique_topic()
    _produce(kafka, topic, 10)
    settings = client_settings()
    assert topic_watermarks(settings, topic)[0] == (0, 10)
    with eos.core.kafka.metadata_client(settings) as kept:
        pass
    _produce(kafka, topic, 5)
    assert topic_watermarks(settings, topic)[0] == (0, 15)
    with eos.core.kafka.metadata_client(settings) as again:
        assert again is kept
    with pytest.raises(TopicMissing):
        topic_watermarks(settings, unique_topic())  # a failed request drops the client
    with eos.core.kafka.metadata_client(settings) as fresh:
        assert fresh is not kept


def test_range_read_is_exact_and_stops_at_until(kafka: str) -> None:
    topic = unique_topic()
    _produce(kafka, topic, 500)
    records = read_range(client_settings(), topic, 0, 120, 380)
    assert [r.offset for r in records] == list(range(120, 380))
    assert [r.value for r in records] == [b"v%d" % i for i in range(120, 380)]
    tail = read_range(client_settings(), topic, 0, 490, 500)
    assert [r.offset for r in tail] == list(range(490, 500))


def test_nothing_at_or_beyond_high_watermark(kafka: str) -> None:
    topic = unique_topic()
    _produce(kafka, topic, 50)
    c = ck.Consumer({"bootstrap.servers": kafka, "group.id": "conf", "enable.partition.eof": True,
                     "auto.offset.reset": "error"})
    c.assign([ck.TopicPartition(topic, 0, 40)])
    offsets = []
    while True:
        m = c.poll(5.0)
        assert m is not None, "no EOF within 5s"
        if m.error():
            assert m.error().code() == ck.KafkaError._PARTITION_EOF
            assert m.offset() == 50
            break
        offsets.append(m.offset())
    c.close()
    assert offsets == list(range(40, 50))


def aborted_then_committed(broker: str | dict[str, str], topic: str) -> list[bytes]:
    """A transaction whose records reached the broker (flushed) and was then aborted, then a
    committed one; what a ``read_committed`` consumer reads of the partition afterwards.

    The flush matters: ``abort_transaction()`` purges records still queued in the client, so
    without it nothing aborted ever reaches the broker and the test proves nothing about it."""
    _produce(broker, topic, 1)  # the topic must exist before a transaction writes to it
    settings = {"bootstrap.servers": broker} if isinstance(broker, str) else broker
    tx = ck.Producer({**settings, "transactional.id": f"tx-{topic}"})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(5):
        tx.produce(topic, value=b"aborted-%d" % i, partition=0)
    assert tx.flush(30) == 0
    tx.abort_transaction(30)
    tx.begin_transaction()
    for i in range(5):
        tx.produce(topic, value=b"committed-%d" % i, partition=0)
    tx.commit_transaction(30)
    high = topic_watermarks(client_settings(), topic)[0][1]
    return [r.value for r in read_range(client_settings(), topic, 0, 0, high)]


@pytest.mark.skipif(bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")), reason="embedded only")
def test_the_embedded_broker_does_not_filter_read_committed(kafka: str) -> None:
    """What docs/guarantees.md says of the mock cluster, checked: flushed records of an aborted
    transaction stay visible to read_committed consumers, and a second producer with the same
    transactional id does not fence the first. If this starts failing, the mock learnt to
    conform and the tests on Apache Kafka (test_apache_kafka.py) may run on it."""
    topic = unique_topic()
    assert b"aborted-0" in aborted_then_committed(kafka, topic)
    first = ck.Producer({"bootstrap.servers": kafka, "transactional.id": f"fence-{topic}"})
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(topic, value=b"zombie", partition=0)
    second = ck.Producer({"bootstrap.servers": kafka, "transactional.id": f"fence-{topic}"})
    second.init_transactions(30)
    first.commit_transaction(30)  # a real broker raises: the first producer is fenced


def test_missing_topic_and_unreachable_broker_have_clear_errors(kafka: str) -> None:
    with pytest.raises(TopicMissing, match="topic 'no-such-topic-x' does not exist"):
        topic_watermarks(client_settings(), "no-such-topic-x")
    with pytest.raises(KafkaUnavailable, match="did not answer"):
        topic_watermarks({"bootstrap.servers": "127.0.0.1:1", "socket.timeout.ms": 2000},
                         "anything")


def test_produced_records_read_back_exactly(kafka: str) -> None:
    """Acceptance: 100000 events with 1% bad records, seed 7, all read back, nothing more."""
    topic = unique_topic("clicks")
    spec = GeneratorSpec(events=100_000, bad_fraction=0.01, seed=7)
    summary = produce(spec, topic, client_settings(), progress=False)
    assert summary.records == 100_000
    assert 500 < sum(summary.kinds[k] for k in summary.kinds if k != "good") < 1500
    marks = topic_watermarks(client_settings(), topic)
    assert sum(high for _, high in marks.values()) == 100_000
    read = Counter()
    for partition, (low, high) in marks.items():
        read.update(r.value for r in read_range(client_settings(), topic, partition, low, high))
    assert read == Counter(r.value for r in generate(spec))


@pytest.mark.skipif(bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")), reason="embedded only")
def test_broker_cli_start_stop_leaves_no_process(tmp_path: Path) -> None:
    env = {**os.environ, "EOS_DATA_DIR": str(tmp_path)}
    eos = [sys.executable, "-m", "eos.tools.cli"]
    out = subprocess.run([*eos, "broker", "start", "--topic", "x"], env=env, check=True,
                         capture_output=True, text=True).stdout
    assert "embedded broker running at 127.0.0.1:" in out
    state = local_broker(tmp_path)
    assert state is not None
    status = subprocess.run([*eos, "broker", "status"], env=env, capture_output=True, text=True)
    assert status.returncode == 0 and '"reachable": true' in status.stdout
    subprocess.run([*eos, "broker", "stop"], env=env, check=True, capture_output=True)
    assert not alive(state["pid"]) or _is_zombie(state["pid"])
    assert not broker_state_path(tmp_path).exists()
    status = subprocess.run([*eos, "broker", "status"], env=env, capture_output=True, text=True)
    assert status.returncode == 1


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


@pytest.mark.skipif(bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")), reason="embedded only")
def test_a_topic_named_at_start_gets_its_partitions_and_holds_more(tmp_path: Path) -> None:
    """The mock keeps 5 MiB per partition and drops the oldest beyond it: a topic started with
    16 partitions holds every one of 30 MB of records, one with the default 4 does not."""
    state = embedded.start(["wide:16", "narrow"], base=tmp_path)
    try:
        bootstrap = state["bootstrap"]
        assert state["topics"] == {"wide": 16, "narrow": 4}
        for topic in ("wide", "narrow"):
            _produce(bootstrap, topic, 30_000, partition=None, value=b"x" * 1000)
        settings = {"bootstrap.servers": bootstrap}
        wide = topic_watermarks(settings, "wide")
        narrow = topic_watermarks(settings, "narrow")
        assert len(wide) == 16 and len(narrow) == 4
        assert sum(high - low for low, high in wide.values()) == 30_000
        assert sum(high - low for low, high in narrow.values()) < 30_000  # the oldest dropped
        # A running broker returns as it is for a plain name, refuses a count it lacks.
        assert embedded.start(["other", "wide:16"], base=tmp_path)["pid"] == state["pid"]
        with pytest.raises(ConfigError, match=r"without topic wide:8 \(16 partitions\)"):
            embedded.start(["wide:8"], base=tmp_path)
    finally:
        embedded.stop(tmp_path)


