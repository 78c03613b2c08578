"""``eos fill`` into a Kafka sink (``eos.sinks.kafka.fill``): each filled epoch one transaction
of the fill's own transactional id, its records and a fill marker beside the pipeline's, read
back with ``read_committed`` to decide "already filled". Run on Apache Kafka, whose fencing and
``read_committed`` the decisions rely on (librdkafka's mock cluster does neither), through the
in-memory pipeline harness (``support.memory``: no Spark): the Kafka sink is added to a
pipeline writing ``delta:target``, which the fill reads the earlier epochs back from."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from unit.protocol.test_fill import epochs, held_epochs, joined, pipeline, rows

from eos.core.config import PipelineConfig
from eos.core.fill import FillRefused, fill_sink
from eos.core.protocol import check_sinks, checkpointed_epoch
from eos.core.rewind import rewind
from eos.sinks.kafka import fill as kafka_fill
from eos.sinks.kafka.markers import FILL_SUFFIX
from eos.tools.pipelines import unique_topic
from integration.sinks.test_kafka_markers import all_records, records

from support.apache_kafka import ApacheKafka
from support.memory import STORES, MemorySource

pytestmark = [pytest.mark.integration]

SOURCE = "delta:target"


class Killed(BaseException):
    """The process dies where it is raised: nothing of the fill handles it."""


@pytest.fixture(autouse=True)
def fresh_stores() -> None:
    """The memory sinks' stores are per pipeline name, which every test here shares."""
    STORES.clear()


@pytest.fixture
def topic(apache_kafka: ApacheKafka) -> str:
    return unique_topic("filled")


def added(tmp_path: Path, topic: str, source: MemorySource, before: int,
          after: int) -> PipelineConfig:
    """``before`` epochs with ``delta:target`` alone, then ``after`` more with the Kafka sink."""
    epochs(pipeline(tmp_path, [{"delta": "target"}]), source, before)
    config = pipeline(tmp_path, [{"delta": "target"}, {"kafka": topic}])
    epochs(config, source, after)
    return config


def published(topic: str) -> list[int]:
    """The ``eos-epoch`` of every committed record of the topic, partition by partition."""
    return [int(dict(m.headers())["eos-epoch"]) for m in all_records(topic)]


def partitions(topic: str) -> list[list[int]]:
    """The ``eos-epoch`` of each partition's committed records, in offset order."""
    from eos.core.kafka import client_settings, topic_watermarks

    return [[int(dict(m.headers())["eos-epoch"]) for m in records(topic, p)]
            for p in sorted(topic_watermarks(client_settings(), topic))]


def markers(sink: Any) -> list[dict[str, Any]]:
    """Every committed marker of the sink's marker partition, with its key."""
    return [{"key": m.key().decode(), **json.loads(m.value())}
            for m in records(sink.marker_topic)]


def test_a_kafka_sink_is_filled_with_every_earlier_epoch_once(tmp_path: Path,
                                                             topic: str) -> None:
    source = MemorySource()
    after = added(tmp_path, topic, source, 3, 2)  # joins at epoch 3
    name = f"kafka:{topic}"
    assert held_epochs(after, name) == {3, 4} and joined(after, name).filled() is None

    done = fill_sink(after, name)
    assert (done.source, done.first, done.until) == (SOURCE, 0, 3)
    assert done.written == [0, 1, 2] and done.already == [] and done.rows > 0
    assert rows(after, name) == rows(after, SOURCE)  # every epoch, every row, once
    sink = joined(after, name)
    assert sink.filled() == (0, 2)
    # Its own marker, of its own transactional id; the pipeline's still say 3 and 4.
    found = markers(sink)
    fills = [m for m in found if m["key"].endswith(FILL_SUFFIX)]
    assert [(m["epoch"], m["first"]) for m in fills] == [(0, 0), (1, 0), (2, 0)]
    assert {m["transactional_id"] for m in fills} == {sink.transactional_id + FILL_SUFFIX}
    assert [m["epoch"] for m in found if m not in fills] == [3, 4]
    assert sink.committed_epoch() == 4 and sink.commits() == [3, 4]
    # An append log: the filled epochs come after the ones committed since the sink joined.
    for partition in partitions(topic):
        joined_first = [epoch >= 3 for epoch in partition]
        assert joined_first == sorted(joined_first, reverse=True), partition

    again = fill_sink(after, name)  # a rerun writes nothing
    assert again.written == [] and again.already == [0, 1, 2]
    assert rows(after, name) == rows(after, SOURCE)
    epochs(after, source, 1)  # the pipeline goes on committing to it, under its own id
    assert check_sinks(after, checkpointed_epoch(after))[name] == 5
    assert rows(after, name) == rows(after, SOURCE)
    assert joined(after, name).commits() == [3, 4, 5]


def test_an_interrupted_fill_resumes_where_it_stopped(tmp_path: Path, topic: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    source = MemorySource()
    after = added(tmp_path, topic, source, 3, 1)
    name = f"kafka:{topic}"
    real, calls = kafka_fill.fill, []

    def dies_at_epoch_2(sink: Any, epoch: int, table: Any, first: int) -> Any:
        calls.append(epoch)
        if epoch == 2:
            raise RuntimeError("killed")
        return real(sink, epoch, table, first)

    monkeypatch.setattr(kafka_fill, "fill", dies_at_epoch_2)
    with pytest.raises(RuntimeError):
        fill_sink(after, name)
    assert joined(after, name).filled() == (0, 1)
    monkeypatch.setattr(kafka_fill, "fill", real)
    done = fill_sink(after, name)
    assert calls == [0, 1, 2] and done.already == [0, 1] and done.written == [2]
    assert rows(after, name) == rows(after, SOURCE)


def test_a_fill_killed_inside_its_transaction_is_aborted_by_the_next(
        tmp_path: Path, topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Epoch 1's records and marker are on the broker, in a transaction never committed: no
    ``read_committed`` reader sees them, and the rerun's ``init_transactions`` aborts it (the
    pipeline's next commit is not held back until the transaction times out)."""
    source = MemorySource()
    after = added(tmp_path, topic, source, 3, 1)
    name = f"kafka:{topic}"
    real, calls = kafka_fill.commit_transaction, []

    def killed_at_epoch_1(producer: Any) -> None:
        calls.append(producer)
        if len(calls) == 2:  # epoch 0 committed; epoch 1's transaction open on the broker
            assert producer.flush(30) == 0
            raise Killed
        real(producer)

    monkeypatch.setattr(kafka_fill, "commit_transaction", killed_at_epoch_1)
    with pytest.raises(Killed):
        fill_sink(after, name)
    monkeypatch.setattr(kafka_fill, "commit_transaction", real)
    assert joined(after, name).filled() == (0, 0)
    assert sorted(set(published(topic))) == [0, 3]  # epoch 1's records are not seen
    done = fill_sink(after, name)
    assert done.already == [0] and done.written == [1, 2]
    assert rows(after, name) == rows(after, SOURCE)
    epochs(after, source, 1)
    assert rows(after, name) == rows(after, SOURCE)


def test_two_fills_at_once_write_each_epoch_once(tmp_path: Path, topic: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Both fills check the sink before either writes epoch 0 (a barrier); they fence each
    other's transactions, and each epoch is written by exactly one of them."""
    source = MemorySource()
    after = added(tmp_path, topic, source, 3, 1)
    name = f"kafka:{topic}"
    real, barrier = kafka_fill.fill, threading.Barrier(2, timeout=60)

    def together(sink: Any, epoch: int, table: Any, first: int) -> Any:
        if epoch == 0:
            barrier.wait()
        return real(sink, epoch, table, first)

    monkeypatch.setattr(kafka_fill, "fill", together)
    results: list[Any] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            results.append(fill_sink(after, name))
        except BaseException as error:  # reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert sorted(e for done in results for e in done.written) == [0, 1, 2]
    assert rows(after, name) == rows(after, SOURCE)
    assert joined(after, name).filled() == (0, 2)


def test_the_audit_reads_a_filled_kafka_sink_from_its_first_filled_epoch(
        tmp_path: Path, topic: str) -> None:
    """``eos verify`` compares the filled epochs too, each record once, by both readers: with
    the reference of every epoch the sink agrees; told the filled epochs were never committed,
    it finds their rows extra."""
    from eos.tools.audit.reference import Expected
    from eos.tools.audit.report import AuditReport, ProblemKind
    from eos.tools.audit.span import Span
    from eos.tools.audit.verify import _audit_sink

    source = MemorySource()
    after = added(tmp_path, topic, source, 3, 2)
    name = f"kafka:{topic}"
    fill_sink(after, name)
    reference = joined(after, SOURCE).read_back()

    def audited(expected_rows: list[dict[str, Any]]) -> AuditReport:
        report = AuditReport(after.name, 4)
        expected = Expected()
        expected.rows["windows"] = expected_rows
        _audit_sink(report, after, joined(after, name), [], expected, Span(0, 4, 0))
        return report

    report = audited(reference)
    assert report.filled[name] == (0, 2)
    assert report.problems == []
    assert report.second_readings[name][1] == len(reference)  # the second reader too
    report = audited([r for r in reference if r["epoch"] >= 3])
    assert any(p.kind is not ProblemKind.SECOND_READER for p in report.problems)


def test_a_rewind_takes_filled_epochs_back_by_their_line(tmp_path: Path, topic: str) -> None:
    """Published records stay published: a rewind to K keeps the filled epochs up to K on the
    sink's line and supersedes those after it (the replay republishes them under its lineage);
    ``filled`` ends at K. A rewind to -1 takes everything back."""
    source = MemorySource()
    after = added(tmp_path, topic, source, 3, 2)  # joins at 3, holds 3 and 4
    name = f"kafka:{topic}"
    fill_sink(after, name)
    rewind(after, 3, republish=True)
    assert joined(after, name).filled() == (0, 2)
    assert held_epochs(after, name) == {0, 1, 2, 3}
    epochs(after, source, 1)  # replays 4
    assert rows(after, name) == rows(after, SOURCE)

    rewind(after, 1, republish=True)  # below the fill's last epoch
    sink = joined(after, name)
    assert sink.filled() == (0, 1) and sink.committed_epoch() == 1
    assert held_epochs(after, name) == {0, 1}
    assert fill_sink(after, name).written == []  # nothing left to fill: it joins at 2 now
    epochs(after, source, 3)  # replays 2..4 to it under the rewind's lineage
    assert rows(after, name) == rows(after, SOURCE)

    rewind(after, -1, republish=True)
    assert joined(after, name).filled() is None
    assert held_epochs(after, name) == set()


def test_a_fill_after_a_rewind_is_on_the_current_line(tmp_path: Path, topic: str) -> None:
    """The sink's line was rewound before the fill: the filled records carry the lineage that
    owns their epochs on it, so its read-back and the audit see them."""
    source = MemorySource()
    after = added(tmp_path, topic, source, 3, 2)
    name = f"kafka:{topic}"
    rewind(after, 3, republish=True)
    epochs(after, source, 1)  # replays 4 under the rewind's lineage
    done = fill_sink(after, name)
    assert done.written == [0, 1, 2]
    assert joined(after, name).filled() == (0, 2)
    assert rows(after, name) == rows(after, SOURCE)


def test_a_kafka_sink_with_no_epoch_of_its_own_yet_is_refused(tmp_path: Path,
                                                              topic: str) -> None:
    """Added to the config, but no epoch committed to it yet: which line a fill is on is not
    known, so nothing is written."""
    source = MemorySource()
    epochs(pipeline(tmp_path, [{"delta": "target"}]), source, 2)
    after = pipeline(tmp_path, [{"delta": "target"}, {"kafka": topic}])
    with pytest.raises(FillRefused, match="holds no epoch of the pipeline yet"):
        fill_sink(after, f"kafka:{topic}")
    assert published(topic) == []
