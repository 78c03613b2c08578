"""One test per row of the failure matrix (docs/guarantees.md), plus races, chaos, hostile input.

Each test injects the fault as a real crash (SIGKILL at a named point, in its own process, see
``eos.core.faults``), recovers the way an operator or Airflow would (rerun, retry, abort and rerun),
and then checks the committed tables against the independent audit: every sink equals the
ground truth, every sink has exactly one commit per epoch, the checkpoints agree, offsets are
contiguous. Races hold two real processes at a barrier right before a fenced write
(``point:wait``, see ``eos.core.faults``) and release them together.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable

from eos.compute.epochs import run_epoch
from eos.compute.precommit.stager import SparkStager
from eos.core import epochlog
from eos.core.config import PipelineConfig, load_config
from eos.core.delta import read_table
from eos.core.errors import EosError
from eos.core.kafka import client_settings
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.pipeline_status import EpochState, pipeline_status
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.staging import staged_epoch
from eos.core.tables import ensure_tables
from eos.tools.audit.verify import audit
from eos.tools.chaos import CONCURRENT_COMMITS, CONFIG_CHANGE, POISON, chaos
from eos.tools.pipelines import unique_topic, write_pipeline

from support.failure_matrix import (  # noqa: F401  # the rows run here and on the cluster
    SINKS,
    SPEC,
    finish_and_audit,
    held,
    in_any_order,
    mode,
    pipeline,
    race_commits,
    test_clearing_a_committed_run_changes_nothing,
    test_crash_after_begin_reruns_with_the_logged_plan,
    test_crash_after_the_checkpoint_retry_is_a_noop,
    test_crash_before_the_checkpoint_retry_only_checkpoints,
    test_crash_between_sink_commits_retry_skips_committed_sinks,
    test_two_commits_released_before_the_checkpoint_append_it_once,
    test_two_commits_released_before_their_first_sink_write_write_it_once,
    test_zombie_precommit_after_commit_changes_nothing,
)
from support.harness import KILLED, delta_path, eos_cli, table_versions

pytestmark = [pytest.mark.integration, pytest.mark.slow]


BOTH_MODES = pytest.mark.parametrize("mode", ["connect", "submit"])


@pytest.mark.parametrize("stagger_ms", [0, 400])
def test_two_planners_released_together_agree_on_one_logged_plan(
    pipeline: PipelineConfig, spark: Any, tmp_path: Path, stagger_ms: int
) -> None:
    """Two `eos begin` of different runs, each held after finding no plan for epoch 0, then
    released together or 400 ms apart. They plan *different* ranges (the second reads the same
    pipeline with a smaller ``max_records``), so agreeing is not a coincidence of equal plans:
    exactly one plan is logged (a fenced append, ``txn(<app>:plan, 0)``), the other run adopts
    it and binds itself to it, and both return it."""
    data = yaml.safe_load(Path(pipeline.source_path).read_text())
    data["epoch"]["max_records"] = 500
    smaller = tmp_path / "smaller.yaml"
    smaller.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {"EOS_BARRIER_STAGGER_MS": str(stagger_ms)}
    racers = [eos_cli(config, "begin", "--run-id", f"planner-{i}", faults="begin.before_log:wait",
                      faults_dir=tmp_path, env=env, wait=False)
              for i, config in enumerate((pipeline, load_config(smaller)))]
    outputs = [r.communicate(timeout=180) for r in racers]
    for racer, (_, err) in zip(racers, outputs, strict=True):
        assert racer.returncode == 0, err[-3000:]
    returned = {json.loads(out)["plan_hash"] for out, _ in outputs}
    tables = tables_for(pipeline)
    planned = [r for r in epochlog.rows(tables, 0) if r["phase"] == epochlog.PLANNED]
    assert returned == {r["plan_hash"] for r in planned} and len(returned) == 1
    assert sorted(r["run_id"] for r in planned) == ["planner-0", "planner-1"]
    assert DeltaTable(tables.epochs).transaction_version(f"{pipeline.app_id}:plan") == 0
    finish_and_audit(pipeline, spark, f"planners-{stagger_ms}")


@BOTH_MODES
@pytest.mark.parametrize("point", ["precommit.mid_read", "precommit.before_write"])
def test_spark_killed_during_precommit_stages_nothing(pipeline: PipelineConfig, spark: Any,
                                                      tmp_path: Path, point: str,
                                                      mode: str) -> None:
    plan = begin(pipeline, run_id="r0")
    tables = tables_for(pipeline)
    # A torn earlier attempt: data files in the epoch's partition that no Delta commit names.
    torn = Path(tables.staging) / "epoch=0" / "part-torn-attempt.parquet"
    torn.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"kind": ["output"], "key": ["torn"]}), torn)
    crashed = eos_cli(pipeline, "precommit", "--epoch", "0", faults=point, faults_dir=tmp_path)
    assert crashed.returncode != 0
    if mode == "connect" and point == "precommit.before_write":
        assert crashed.returncode == KILLED  # on Connect the driver is the eos process itself
    else:  # a Spark worker (or, submitted, the Spark app) died: the eos process reports it
        assert "precommit of epoch 0 failed" in crashed.stderr
    assert staged_epoch(tables, 0, plan.hash) is None
    assert read_table(tables.staging).num_rows == 0
    assert checkpointed_epoch(pipeline) == -1
    if point == "precommit.mid_read":
        assert eos_cli(pipeline, "abort", "--epoch", "0").returncode == 0
        assert epochlog.rows(tables, 0)[-1]["phase"] == epochlog.ABORTED
        shown = pipeline_status(pipeline, with_lag=False).epochs
        assert [(e.epoch, e.state, e.aborts) for e in shown] == [(0, EpochState.ABORTED, 1)]
    finish_and_audit(pipeline, spark, "mid-precommit")
    shown = pipeline_status(pipeline, with_lag=False).epochs  # a rerun committed epoch 0
    assert (shown[0].state, shown[0].run_id, shown[0].aborts) == (
        EpochState.COMMITTED, "r0", int(point == "precommit.mid_read"))


@BOTH_MODES
def test_crash_after_precommit_reuses_the_staged_epoch(pipeline: PipelineConfig, spark: Any,
                                                       tmp_path: Path) -> None:
    plan = begin(pipeline, run_id="r0")
    crashed = eos_cli(pipeline, "precommit", "--epoch", "0", faults="precommit.after_write",
                      faults_dir=tmp_path)
    assert crashed.returncode != 0
    tables = tables_for(pipeline)
    staged = staged_epoch(tables, 0, plan.hash)
    assert staged is not None
    version = table_versions(pipeline)["staging"]
    assert precommit(pipeline, 0, SparkStager(spark)).outcome is Outcome.REUSED_STAGE
    assert table_versions(pipeline)["staging"] == version
    assert commit(pipeline, 0).outcome is Outcome.COMMITTED
    finish_and_audit(pipeline, spark, "after-precommit")


def test_kafka_unreachable_during_precommit(pipeline: PipelineConfig, spark: Any) -> None:
    plan = begin(pipeline, run_id="r0")
    down = eos_cli(pipeline, "precommit", "--epoch", "0",
                   env={"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"})
    assert down.returncode != 0
    assert "KafkaUnavailable" in down.stderr and "127.0.0.1:1" in down.stderr
    assert staged_epoch(tables_for(pipeline), 0, plan.hash) is None
    finish_and_audit(pipeline, spark, "kafka-down")


def test_hostile_records_are_quarantined_or_counted(tmp_path: Path, kafka: str,
                                                    spark: Any) -> None:
    config = write_pipeline(tmp_path)
    kts = 1_767_225_600_000
    hostile = [
        # As large as a default broker accepts (message.max.bytes is 1 MB on Kafka and on the
        # embedded mock cluster, which refuses larger records with MSG_SIZE_TOO_LARGE): longer
        # than event.max_string_bytes, so quarantined (no window record could carry it).
        b'{"key": "' + b"x" * 900_000 + b'", "ts": 1767225600000, "value": 1}',
        b"\xff\xfe" * 450_000,
        None,
        b'{"key": "a", "ts": 99999999999999999, "value": 1}',
        b'{"key": "a", "ts": 4102444800000, "value": 1}',
        b'{"key": "a", "ts": 1767225600000, "value": 1e400}',
        b'{"key": "a", "ts": 1767225600000, "value": null}',
        b'{"key": "a", "ts": 1767225600000, "value": true}',
        b'{"key": "a", "ts": 1767225600000, "value": 2.5}',
        b'{"key": "a", "ts": 0, "value": 3}',
        b"",
    ]
    p = ck.Producer({**client_settings(), "message.max.bytes": 8_000_000})
    errors: list[Any] = []
    for i, value in enumerate(hostile):
        p.produce(config.kafka.topic, key=None if i % 2 else b"k", value=value, timestamp=kts,
                  on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(30) == 0
    assert errors == []
    run_epoch(config, "hostile", spark=spark)
    report = audit(config)
    assert report.ok, report.render()
    reasons = [r["reason"] for r in read_table(delta_path(config, "quarantine")).to_pylist()]
    assert len(reasons) == 9
    for expected in ("more than event.max_string_bytes (16384)", "not valid UTF-8",
                     "null record value",
                     "outside 1970..9999", "ahead of the record's Kafka timestamp",
                     "does not fit decimal(38,9)", "field 'value' is null", "got boolean",
                     "malformed JSON"):
        assert any(expected in r for r in reasons), (expected, reasons)


def test_one_oversized_record_never_halts_a_pipeline(tmp_path: Path, kafka: str,
                                                   spark: Any) -> None:
    """Before: a 600 KB group value made a window record over 1 MB (key and value both carry
    it) and an 800 KB undecodable record a quarantine record over 1 MB (base64); the Kafka
    sinks' producer refused both (MSG_SIZE_TOO_LARGE, permanent) on every retry. Now the first
    is quarantined naming the field and the limit, and every quarantine row is bounded."""
    windows, quarantine = unique_topic("big-windows"), unique_topic("big-q")
    config = write_pipeline(tmp_path, sinks={
        "windows": [{"kafka": windows}, {"delta": "target"}], "late": [{"delta": "late"}],
        "quarantine": [{"kafka": quarantine}, {"delta": "quarantine"}]})
    kts = 1_767_225_600_000
    undecodable = b"\xff" * 800_000
    records = [b'{"key": "' + b"k" * 600_000 + b'", "ts": 1767225600000, "value": 1}',
               undecodable, b'{"key": "a", "ts": 1767225600000, "value": 2}']
    producer = ck.Producer({**client_settings(), "message.max.bytes": 8_000_000})
    for value in records:  # one partition, so the offsets are 0, 1, 2
        producer.produce(config.kafka.topic, value=value, timestamp=kts, partition=0)
    assert producer.flush(30) == 0
    run_epoch(config, "oversized", spark=spark)
    assert checkpointed_epoch(config) == 0
    rows = sorted(read_table(delta_path(config, "quarantine")).to_pylist(),
                  key=lambda r: r["offset"])
    assert [r["offset"] for r in rows] == [0, 1]
    assert rows[0]["reason"].startswith("field 'key' is 600000 bytes, more than "
                                        "event.max_string_bytes (16384)")
    assert rows[1]["reason"].startswith("not valid UTF-8")
    assert [len(r["raw_value"]) for r in rows] == [4096, 4096]
    assert [r["raw_value_bytes"] for r in rows] == [len(records[0]), len(undecodable)]
    assert rows[1]["raw_value_sha256"] == hashlib.sha256(undecodable).hexdigest()
    report = audit(config)
    assert report.ok, report.render()


def test_unwritable_table_root_and_broken_config_fail_clearly(tmp_path: Path, kafka: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    config = write_pipeline(tmp_path, tables={"root": str(blocker / "tables")})
    with pytest.raises(EosError, match="cannot create table root"):
        ensure_tables(config)
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nkafka: {topic: 5}\nwindow: {size: 1s}\n")
    out = subprocess.run([sys.executable, "-m", "eos.tools.cli", "begin", "--config", str(broken)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 2  # a permanent error: EXIT_PERMANENT
    assert "field 'kafka.topic'" in out.stderr and "Traceback" not in out.stderr


def test_chaos_run_loses_and_doubles_nothing(tmp_path: Path, kafka: str, spark: Any) -> None:
    """The short CI version of `eos chaos`: every epoch has a fault in some phase; the faulty
    attempts run as ``eos`` processes on Spark Connect. (In spark-submit mode every faulty
    attempt starts a JVM of its own, 6 minutes for the same run: the faults a submitted
    precommit meets are the kills of ``test_spark_killed_during_precommit_stages_nothing``.)"""
    config = write_pipeline(tmp_path, compute={"mode": "connect"})
    report = chaos(config, epochs=7, seed=14, fault_rate=0.6, events_per_epoch=300, spark=spark)
    print(report.render())
    assert sum(report.faults.values()) >= 5
    assert report.faults[CONCURRENT_COMMITS] >= 1, "the seed must include a commit race"
    # Poison records: the default pipeline sums decimal(38,9), and two of its largest values
    # overflow: the window is null and flagged, and the epoch commits anyway.
    assert report.faults[POISON] >= 2, "the seed must poison some epochs"
    assert report.lost == 0 and report.doubled == 0
    assert report.ok, report.render()


def test_chaos_with_configuration_changes_loses_and_doubles_nothing(
        tmp_path: Path, kafka: str, spark: Any) -> None:
    """`eos chaos --changes`: between epochs a sink joins or leaves, the filter is edited and
    topics join the source, on top of the faults; every epoch's invariants hold and the audit
    (each sink from the epoch it joined, each epoch with its own filter, every topic from its
    log start) finds nothing lost or doubled."""
    config = write_pipeline(tmp_path)
    report = chaos(config, epochs=8, seed=26, fault_rate=0.4, events_per_epoch=200,
                   spark=spark, change_rate=0.7)
    print(report.render())
    assert report.faults[CONFIG_CHANGE] >= 4
    made = {note.split(": ", 1)[1] for note in report.notes if note.startswith("config changed")}
    assert made >= {"add sink", "remove sink", "edit filter", "add topic"}, report.notes
    assert report.lost == 0 and report.doubled == 0
    assert report.ok, report.render()
