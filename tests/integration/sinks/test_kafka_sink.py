"""The transactional Kafka sink: Kafka -> windows -> Kafka, exactly once.

Ground truth is the independent audit (``eos verify``) plus a plain ``read_committed`` consumer
written here, which checks the record format docs/pipelines.md, "Sinks" promises (key, value,
headers).

What runs where (docs/guarantees.md): the embedded broker is librdkafka's mock cluster, which does
not filter ``read_committed`` and does not fence transactional ids. The happy path, the skip after
a committed marker and crashes *outside* a transaction behave the same on it as on Kafka and run
on it. A crash *inside* a transaction (the retry must abort it so that consumers never see it),
two concurrent attempts (the broker must fence the older producer) and a transaction that outlives
its timeout depend on exactly what the mock lacks: those run on Apache Kafka (``apache_kafka``).
"""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from eos.compute.epochs import run_epoch, run_until_caught_up
from eos.compute.precommit.stager import SparkStager
from eos.core.config import PipelineConfig, load_pipeline
from eos.core.delta import read_table
from eos.core.errors import EXIT_TRANSIENT
from eos.core.kafka import client_settings, topic_watermarks
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.outputs import epoch_outputs
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.staging import staged_epoch
from eos.tools.audit.verify import audit
from eos.tools.generator import GeneratorSpec, generate
from eos.tools.produce import send

from support.apache_kafka import ApacheKafka, kafka_section
from support.harness import KILLED, commit_summary, delta_path, eos_cli
from support.pipelines import kafka_sinks, make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = GeneratorSpec(events=2400, keys=15, interval_ms=25, disorder_ms=800, late_fraction=0.03,
                     late_delay_ms=20_000, bad_fraction=0.03, seed=17)


def out_sink(config: PipelineConfig) -> Any:
    return next(s for s in _sinks(config) if s.kind == "kafka")


def _sinks(config: PipelineConfig) -> list[Any]:
    from eos.core.sink import sinks_for

    return sinks_for(config)


def read_committed(topic: str, isolation: str = "read_committed") -> list[ck.Message]:
    """Every record of ``topic`` a plain ``read_committed`` consumer sees, by partition (or,
    with ``isolation="read_uncommitted"``, every record in the log, aborted ones included)."""
    settings = client_settings()
    records: list[ck.Message] = []
    for partition, (low, _high) in sorted(topic_watermarks(settings, topic).items()):
        c = ck.Consumer({**settings, "group.id": "test-reader", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True})
        c.assign([ck.TopicPartition(topic, partition, low)])
        while True:
            message = c.poll(10.0)
            assert message is not None, f"no end of {topic}[{partition}] within 10s"
            if message.error():
                assert message.error().code() == ck.KafkaError._PARTITION_EOF, message.error()
                break
            records.append(message)
        c.close()
    return records


def window_of_record(message: ck.Message) -> tuple:
    value = json.loads(message.value(), parse_float=Decimal)
    return (value["key"], value["window_start"], value["window_end"], value["count"],
            value["sum"], value["min"], value["max"], float(value["avg"]), value["epoch"])


def window_of_row(row: dict[str, Any]) -> tuple:
    def iso(t: Any) -> str:
        return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"

    return (row["key"], iso(row["window_start"]), iso(row["window_end"]), row["count"],
            row["sum"], row["min"], row["max"], row["avg"], row["epoch"])


def assert_topic_equals_target_once(config: PipelineConfig) -> None:
    """The output topic (read_committed) and the Delta target hold the same windows, each once,
    and the audit agrees with both."""
    report = audit(config)
    assert report.ok, report.render()
    topic = out_sink(config).options.topic
    records = read_committed(topic)
    target = read_table(delta_path(config, "target")).to_pylist()
    assert len(target) > 0
    in_topic = Counter(window_of_record(m) for m in records)
    assert max(in_topic.values()) == 1, "a window appears twice in the output topic"
    assert in_topic == Counter(window_of_row(r) for r in target)
    epochs = [e for e in range(checkpointed_epoch(config) + 1)]
    assert out_sink(config).commits() == epochs


@pytest.fixture
def pipeline(tmp_path: Path, kafka: str) -> PipelineConfig:
    config = make_pipeline(tmp_path, base=kafka_sinks(),
                           epoch={"max_records": 800, "staging_retention": 1})
    send(generate(SPEC), SPEC.events, config.kafka.topic, client_settings(), progress=False)
    return config


@pytest.fixture
def on_apache_kafka(tmp_path: Path, apache_kafka: ApacheKafka) -> PipelineConfig:
    """``pipeline``'s shape with its source, output topic and markers on Apache Kafka."""
    config = make_pipeline(tmp_path, base=kafka_sinks(), kafka=kafka_section(),
                           epoch={"max_records": 800, "staging_retention": 1})
    send(generate(SPEC), SPEC.events, config.kafka.topic, client_settings(), progress=False)
    return config


def test_windows_reach_the_topic_once_with_the_documented_record_format(
        pipeline: PipelineConfig, spark: Any) -> None:
    plans = [run.plan for run in run_until_caught_up(pipeline, "happy", spark=spark)]
    assert len(plans) >= 4
    assert_topic_equals_target_once(pipeline)
    records = read_committed(out_sink(pipeline).options.topic)
    hashes = {p.epoch: p.hash for p in plans}
    for message in records:
        value = json.loads(message.value())
        assert list(value) == ["key", "window_start", "window_end", "count", "sum", "min", "max",
                               "avg", "epoch"]
        assert message.key() == json.dumps({"key": value["key"]}, separators=(",", ":")).encode()
        assert value["window_start"].endswith(".000Z") and "T" in value["window_start"]
        headers = {k: v.decode() for k, v in message.headers()}
        assert headers == {"eos-pipeline": pipeline.name, "eos-epoch": str(value["epoch"]),
                           "eos-plan-hash": hashes[value["epoch"]]}
    # Same key, same partition (the Java clients' murmur2 partitioner).
    partitions: dict[bytes, set[int]] = {}
    for message in records:
        partitions.setdefault(message.key(), set()).add(message.partition())
    assert all(len(p) == 1 for p in partitions.values())


def test_a_committed_epoch_is_skipped_by_its_marker(pipeline: PipelineConfig, spark: Any) -> None:
    plan = run_epoch(pipeline, "r0", spark=spark).plan
    kafka_sink = out_sink(pipeline)
    topic = kafka_sink.options.topic
    marks = topic_watermarks(client_settings(), topic)
    staged = staged_epoch(tables_for(pipeline), plan.epoch, plan.hash)
    rows = epoch_outputs(pipeline, staged, plan.epoch, None)["windows"]
    again = kafka_sink.commit(plan.epoch, rows, plan.hash)
    assert again.outcome is Outcome.ALREADY_COMMITTED and not again.raced
    assert topic_watermarks(client_settings(), topic) == marks
    assert kafka_sink.committed_epoch() == 0


def test_crash_before_the_transaction_retry_writes_once(pipeline: PipelineConfig, spark: Any,
                                                        tmp_path: Path) -> None:
    plan = begin(pipeline, run_id="r0")
    precommit(pipeline, plan.epoch, SparkStager(spark))
    crashed = eos_cli(pipeline, "commit", "--epoch", "0", faults="sink.before_write",
                      faults_dir=tmp_path)
    assert crashed.returncode == KILLED
    assert out_sink(pipeline).committed_epoch() == -1
    assert commit(pipeline, 0).outcome is Outcome.COMMITTED
    run_until_caught_up(pipeline, "before-tx", spark=spark)
    assert_topic_equals_target_once(pipeline)


def test_crash_after_commit_transaction_retry_skips_the_topic(
        pipeline: PipelineConfig, spark: Any, tmp_path: Path) -> None:
    plan = begin(pipeline, run_id="r0")
    precommit(pipeline, plan.epoch, SparkStager(spark))
    crashed = eos_cli(pipeline, "commit", "--epoch", "0", faults="commit.between_sinks",
                      faults_dir=tmp_path)
    assert crashed.returncode == KILLED
    kafka_sink = out_sink(pipeline)
    assert kafka_sink.committed_epoch() == 0 and checkpointed_epoch(pipeline) == -1
    retried = commit(pipeline, 0)
    assert retried.skipped == [kafka_sink.name]
    run_until_caught_up(pipeline, "after-tx", spark=spark)
    assert_topic_equals_target_once(pipeline)


def test_clicks_to_kafka_ten_epochs_with_crashes_at_every_commit_point(
        tmp_path: Path, kafka: str, spark: Any) -> None:
    """Acceptance: the shipped pipeline's shape, 10 epochs, each epoch's first commit attempt
    killed at one of the commit points in turn (between the Kafka sink and the Delta target,
    between the last sink and the checkpoint, after the checkpoint), recovered by retrying."""
    shipped = load_pipeline("clicks_to_kafka")
    assert [s.name for s in _sinks(shipped)][:2] == ["kafka:clicks-per-minute", "delta:target"]
    config = make_pipeline(tmp_path, base=kafka_sinks(), window=shipped.window.model_dump(),
                                 epoch={"max_records": 100_000, "staging_retention": 2})
    spec = GeneratorSpec(events=5000, keys=20, interval_ms=400, disorder_ms=3000,
                         late_fraction=0.02, late_delay_ms=180_000, bad_fraction=0.02, seed=10)
    records = list(generate(spec))
    points = ["commit.between_sinks", "commit.before_checkpoint", "commit.after_checkpoint"]
    for epoch in range(10):
        chunk = records[epoch * 500:(epoch + 1) * 500]
        send(chunk, len(chunk), config.kafka.topic, client_settings(), progress=False)
        plan = begin(config, run_id=f"k{epoch}")
        assert plan.epoch == epoch
        precommit(config, epoch, SparkStager(spark))
        faults_dir = tmp_path / f"faults-{epoch}"
        crashed = eos_cli(config, "commit", "--epoch", str(epoch),
                          faults=points[epoch % 3], faults_dir=faults_dir)
        assert crashed.returncode == KILLED, crashed.stderr[-2000:]
        retry = eos_cli(config, "commit", "--epoch", str(epoch))
        assert retry.returncode == 0, retry.stderr[-2000:]
        expected = (Outcome.ALREADY_COMMITTED if points[epoch % 3] == "commit.after_checkpoint"
                    else Outcome.COMMITTED)
        assert commit_summary(retry.stdout)["outcome"] == expected
    assert checkpointed_epoch(config) == 9
    assert_topic_equals_target_once(config)
    verify = eos_cli(config, "verify")
    assert verify.returncode == 0 and "verdict: OK" in verify.stdout, verify.stdout


def test_an_unwritable_record_fails_permanently_with_a_clear_message(
        tmp_path: Path, kafka: str) -> None:
    """A record larger than the broker accepts can never be written: a permanent error naming
    the topic, nothing of the epoch visible, the checkpoint not advanced."""
    import pyarrow as pa

    from eos.core.errors import SinkRejected
    from eos.core.outputs import windows_schema

    config = make_pipeline(tmp_path, base=kafka_sinks())
    sink_ = out_sink(config)
    # Parsing bounds keys to 1024 characters, so such a window is built by hand here.
    row = {"key": "x" * 2_000_000, "window_start": None, "window_end": None, "count": 1,
           "sum": Decimal(1), "min": Decimal(1), "max": Decimal(1), "avg": 1.0, "epoch": 0}
    rows = pa.Table.from_pylist([row], schema=windows_schema(config))
    with pytest.raises(SinkRejected, match=sink_.options.topic):
        sink_.commit(0, rows, "0" * 16)
    assert sink_.committed_epoch() == -1
    assert read_committed(sink_.options.topic) == []


def test_three_kafka_sinks_of_one_pipeline_each_hold_what_their_delta_twin_holds(
        tmp_path: Path, kafka: str, spark: Any) -> None:
    """End to end: windows, late and quarantine each go to a Kafka topic and a
    Delta table; every topic holds as many records as its twin (the defect left the late and
    quarantine topics empty while their markers said "committed")."""
    from eos.tools.pipelines import unique_topic, write_pipeline

    outputs = {"windows": "target", "late": "late", "quarantine": "quarantine"}
    topics = {o: unique_topic(o) for o in outputs}
    config = write_pipeline(tmp_path, epoch={"max_records": 800, "staging_retention": 1},
                            sinks={o: [{"kafka": topics[o]}, {"delta": t}]
                                   for o, t in outputs.items()})
    send(generate(SPEC), SPEC.events, config.kafka.topic, client_settings(), progress=False)
    run_until_caught_up(config, "three", spark=spark)
    report = audit(config)
    assert report.ok, report.render()
    last = checkpointed_epoch(config)
    for output, table in outputs.items():
        twin = read_table(delta_path(config, table)).num_rows
        assert twin > 0, output
        assert len(read_committed(topics[output])) == twin, output
    for s in _sinks(config):
        if s.kind == "kafka":
            assert s.committed_epoch() == last and s.commits() == list(range(last + 1))


# -- on Apache Kafka -----------------------------------------------------------------------------

def test_crash_inside_a_transaction_is_never_visible(on_apache_kafka: PipelineConfig,
                                                     spark: Any, tmp_path: Path) -> None:
    """The commit process is SIGKILLed with its transaction open and its records flushed: a
    ``read_committed`` consumer never sees them, and the retry fences the zombie's id (aborting
    its transaction at once, not after the transaction timeout) and commits the epoch once."""
    pipeline = on_apache_kafka
    plan = begin(pipeline, run_id="r0")
    precommit(pipeline, plan.epoch, SparkStager(spark))
    crashed = eos_cli(pipeline, "commit", "--epoch", "0", faults="sink.kafka.in_transaction",
                      faults_dir=tmp_path)
    assert crashed.returncode == KILLED
    topic = out_sink(pipeline).options.topic
    in_log = len(read_committed(topic, "read_uncommitted"))
    assert in_log > 0  # the killed attempt's records did reach the broker
    assert commit(pipeline, 0).outcome is Outcome.COMMITTED
    # Its transaction was aborted by the retry's fencing, not left to time out: no consumer
    # ever sees those records, and the log holds both attempts' records.
    committed = read_committed(topic)
    assert len(committed) > 0 and len(read_committed(topic, "read_uncommitted")) == 2 * in_log
    assert len(committed) == in_log
    run_until_caught_up(pipeline, "in-tx", spark=spark)
    assert_topic_equals_target_once(pipeline)


@pytest.mark.parametrize("stagger_ms", [0, 400])
def test_two_commits_at_once_write_the_topic_once(on_apache_kafka: PipelineConfig, spark: Any,
                                                  tmp_path: Path, stagger_ms: int) -> None:
    """Two attempts of one epoch's commit, both past their marker check (epoch 0 not there)
    and released together (or 400 ms apart) into their transactions: the broker fences the
    older producer, exactly one attempt commits, the other fails transiently saying it was
    fenced, and the topic holds the epoch once."""
    pipeline = on_apache_kafka
    plan = begin(pipeline, run_id="r0")
    precommit(pipeline, plan.epoch, SparkStager(spark))
    env = {"EOS_BARRIER_STAGGER_MS": str(stagger_ms)}
    racers = [eos_cli(pipeline, "commit", "--epoch", "0", faults="sink.kafka.before_write:wait",
                      faults_dir=tmp_path, env=env, wait=False) for _ in range(2)]
    name = out_sink(pipeline).name
    outcomes = []
    for racer in racers:
        out, err = racer.communicate(timeout=300)
        if racer.returncode == 0:
            sink_ = commit_summary(out)["sinks"][name]
            outcomes.append("raced" if sink_["raced"] else sink_["outcome"])
        else:
            # Fenced, it failed transiently, saying so; or, when the winner had committed by
            # the time it looked, it reported the epoch already committed by a race.
            assert racer.returncode == EXIT_TRANSIENT, err[-2000:]
            assert "fenced" in err and "nothing of it is visible" in err, err[-2000:]
            outcomes.append("fenced")
    assert sorted(outcomes) in (["committed", "fenced"], ["committed", "raced"]), outcomes
    assert commit(pipeline, 0).outcome is Outcome.ALREADY_COMMITTED
    assert out_sink(pipeline).commits() == [0]
    run_until_caught_up(pipeline, "race", spark=spark)
    assert_topic_equals_target_once(pipeline)
