"""One test per row of the failure matrix (DESIGN.md section 5), plus chaos and hostile input.

Each test injects the fault as a real crash (SIGKILL at a named point, in its own process, see
``eos.faults``), recovers the way an operator or Airflow would (rerun, retry, abort and rerun),
and then checks the committed tables against the independent audit: target, late and quarantine
equal the ground truth, every sink has exactly one commit per epoch, offsets are contiguous.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from eos import epochlog
from eos.audit import audit
from eos.chaos import chaos
from eos.commit import commit
from eos.config import PipelineConfig
from eos.errors import EosError
from eos.kafka import client_settings
from eos.plan import begin, plan_of
from eos.produce import GeneratorSpec, generate, send
from eos.stage import precommit, staged_epoch
from eos.tables import ensure_tables, read_table, replace_epoch, tables_for, txn_version

from support import write_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = GeneratorSpec(events=2400, keys=20, interval_ms=25, disorder_ms=800, late_fraction=0.03,
                     late_delay_ms=20_000, bad_fraction=0.03, seed=5)
KILLED = -9


def eos_cli(config: PipelineConfig, *args: str, faults: str | None = None,
            faults_dir: Path | None = None, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    if faults:
        full_env["EOS_FAULTS"] = faults
        full_env["EOS_FAULTS_DIR"] = str(faults_dir)
    cmd = [sys.executable, "-m", "eos.cli", args[0], "--config", str(config.source_path),
           *args[1:]]
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, check=False)


@pytest.fixture
def pipeline(tmp_path: Path, kafka: str) -> PipelineConfig:
    config = write_pipeline(tmp_path, epoch={"max_records": 800, "staging_retention": 1})
    send(generate(SPEC), SPEC.events, config.kafka.topic, client_settings(), progress=False)
    return config


def finish_and_audit(config: PipelineConfig, spark: Any, tag: str) -> None:
    """Recovery by rerunning: run the remaining epochs, then audit everything from scratch."""
    for i in range(20):
        plan = begin(config, run_id=f"{tag}-{i}")
        precommit(config, plan.epoch, spark=spark)
        commit(config, plan.epoch)
        if plan.records == 0:
            break
    report = audit(config)
    assert report.ok, report.render()
    assert report.records == SPEC.events


def versions(config: PipelineConfig) -> dict[str, int]:
    t = tables_for(config)
    return {name: DeltaTable(path).version() for name, path in
            [("epochs", t.epochs), ("staging", t.staging), *t.sinks()]}


def test_crash_after_begin_reruns_with_the_logged_plan(pipeline: PipelineConfig, spark: Any,
                                                        tmp_path: Path) -> None:
    crashed = eos_cli(pipeline, "begin", "--run-id", "r0", faults="begin.after_log",
                      faults_dir=tmp_path)
    assert crashed.returncode == KILLED
    logged = plan_of(tables_for(pipeline), 0)
    rerun = eos_cli(pipeline, "begin", "--run-id", "r0")
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["plan_hash"] == logged.hash
    # A different run (a fresh trigger) also reads exactly the logged range.
    assert begin(pipeline, run_id="other") == logged
    finish_and_audit(pipeline, spark, "after-begin")


@pytest.mark.parametrize("point", ["precommit.mid_read", "precommit.before_write"])
def test_spark_killed_during_precommit_stages_nothing(pipeline: PipelineConfig, spark: Any,
                                                      tmp_path: Path, point: str) -> None:
    plan = begin(pipeline, run_id="r0")
    tables = tables_for(pipeline)
    # A torn earlier attempt: data files in the epoch's partition that no Delta commit names.
    torn = Path(tables.staging) / "epoch=0" / "part-torn-attempt.parquet"
    torn.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"kind": ["output"], "key": ["torn"]}), torn)
    crashed = eos_cli(pipeline, "precommit", "--epoch", "0", faults=point, faults_dir=tmp_path)
    assert crashed.returncode != 0
    assert "precommit of epoch 0 failed" in crashed.stderr
    assert staged_epoch(tables, 0, plan.hash) is None
    assert read_table(tables.staging).num_rows == 0
    assert txn_version(tables.target, pipeline.app_id) == -1
    if point == "precommit.mid_read":
        assert eos_cli(pipeline, "abort", "--epoch", "0").returncode == 0
        assert epochlog.rows(tables, 0)[-1]["phase"] == epochlog.ABORTED
    finish_and_audit(pipeline, spark, "mid-precommit")


def test_crash_after_precommit_reuses_the_staged_epoch(pipeline: PipelineConfig, spark: Any,
                                                       tmp_path: Path) -> None:
    plan = begin(pipeline, run_id="r0")
    crashed = eos_cli(pipeline, "precommit", "--epoch", "0", faults="precommit.after_write",
                      faults_dir=tmp_path)
    assert crashed.returncode != 0
    tables = tables_for(pipeline)
    staged = staged_epoch(tables, 0, plan.hash)
    assert staged is not None
    version = DeltaTable(tables.staging).version()
    assert precommit(pipeline, 0, spark=spark).outcome == "reused"
    assert DeltaTable(tables.staging).version() == version
    assert commit(pipeline, 0).outcome == "committed"
    finish_and_audit(pipeline, spark, "after-precommit")


def test_crash_between_sink_commits_retry_skips_committed_sinks(
    pipeline: PipelineConfig, spark: Any, tmp_path: Path
) -> None:
    plan = begin(pipeline, run_id="r0")
    precommit(pipeline, plan.epoch, spark=spark)
    crashed = eos_cli(pipeline, "commit", "--epoch", "0", faults="commit.between_sinks",
                      faults_dir=tmp_path)
    assert crashed.returncode == KILLED
    tables = tables_for(pipeline)
    assert txn_version(tables.late, pipeline.app_id) == 0
    assert txn_version(tables.target, pipeline.app_id) == -1
    # The next run must not plan past an epoch whose target commit is missing.
    assert begin(pipeline, run_id="r1") == plan
    retried = commit(pipeline, 0)
    assert retried.outcome == "committed" and retried.skipped == ["late"]
    finish_and_audit(pipeline, spark, "between-sinks")


def test_crash_after_target_commit_retry_is_a_noop(pipeline: PipelineConfig, spark: Any,
                                                   tmp_path: Path) -> None:
    plan = begin(pipeline, run_id="r0")
    precommit(pipeline, plan.epoch, spark=spark)
    crashed = eos_cli(pipeline, "commit", "--epoch", "0", faults="commit.after_target",
                      faults_dir=tmp_path)
    assert crashed.returncode == KILLED
    before = versions(pipeline)
    retry = eos_cli(pipeline, "commit", "--epoch", "0")
    assert retry.returncode == 0 and retry.stdout.strip() == "already committed"
    assert versions(pipeline) == before
    finish_and_audit(pipeline, spark, "after-target")


def test_clearing_a_committed_run_changes_nothing(pipeline: PipelineConfig, spark: Any) -> None:
    finish_and_audit(pipeline, spark, "done")
    before = versions(pipeline)
    again = eos_cli(pipeline, "begin", "--run-id", "done-0")
    assert json.loads(again.stdout)["epoch"] == 0
    staged = eos_cli(pipeline, "precommit", "--epoch", "0")
    assert staged.returncode == 0 and "outcome=already committed" in staged.stdout
    assert eos_cli(pipeline, "commit", "--epoch", "0").stdout.strip() == "already committed"
    assert versions(pipeline) == before


def test_zombie_precommit_after_commit_changes_nothing(pipeline: PipelineConfig,
                                                     spark: Any) -> None:
    """A stale attempt of epoch 0 whose Spark job outlived its task writes after the commit."""
    plan = begin(pipeline, run_id="r0")
    tables = tables_for(pipeline)
    precommit(pipeline, 0, spark=spark)
    zombie_rows = staged_epoch(tables, 0, plan.hash)
    commit(pipeline, 0)
    target_before = read_table(tables.target).to_pylist()
    replace_epoch(tables.staging, zombie_rows, 0)  # the zombie's late write lands
    assert staged_epoch(tables, 0, plan.hash).to_pylist() == zombie_rows.to_pylist()
    assert read_table(tables.target).to_pylist() == target_before
    # A zombie that is still computing discards its result at the pre-write check.
    assert precommit(pipeline, 0, spark=spark).outcome == "already committed"
    finish_and_audit(pipeline, spark, "zombie")


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
        # embedded mock cluster, which refuses larger records with MSG_SIZE_TOO_LARGE).
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
    plan = begin(config, run_id="hostile")
    precommit(config, plan.epoch, spark=spark)
    commit(config, plan.epoch)
    report = audit(config)
    assert report.ok, report.render()
    reasons = [r["reason"] for r in
               read_table(tables_for(config).quarantine).to_pylist()]
    assert len(reasons) == 9
    for expected in ("longer than 1024", "not valid UTF-8", "null record value",
                     "outside 1970..9999", "ahead of the record's Kafka timestamp",
                     "out of range", "field 'value' is null", "got boolean", "malformed JSON"):
        assert any(expected in r for r in reasons), (expected, reasons)


def test_unwritable_table_root_and_broken_config_fail_clearly(tmp_path: Path, kafka: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    config = write_pipeline(tmp_path, tables={"root": str(blocker / "tables")})
    with pytest.raises(EosError, match="cannot create table root"):
        ensure_tables(config)
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nkafka: {topic: 5}\nwindow: {size: 1s}\n")
    out = subprocess.run([sys.executable, "-m", "eos.cli", "begin", "--config", str(broken)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 2
    assert "field 'kafka.topic'" in out.stderr and "Traceback" not in out.stderr


def test_chaos_run_loses_and_doubles_nothing(tmp_path: Path, kafka: str, spark: Any) -> None:
    """The short CI version of `eos chaos`: every epoch has a fault in some phase."""
    config = write_pipeline(tmp_path)
    report = chaos(config, epochs=6, seed=11, fault_rate=0.6, events_per_epoch=300, spark=spark)
    print(report.render())
    assert sum(report.faults.values()) >= 5
    assert report.lost == 0 and report.doubled == 0
    assert report.audit_ok and not report.problems, report.render()
