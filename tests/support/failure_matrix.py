"""The failure matrix's crash and race rows (docs/guarantees.md) with the pipeline fixture they
take: run by tests/integration/pipeline/test_faults.py on the local Spark Connect server and by
tests/integration/storage/test_cluster_storage.py on a standalone cluster with every table on
the object store (each module imports the rows, so pytest collects them in both).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from eos.compute.precommit.stager import SparkStager
from eos.core import checkpoints, epochlog
from eos.core.config import PipelineConfig
from eos.core.delta import read_table, replace_epoch
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.pipeline_status import epoch_rows
from eos.core.plan import plan_of
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.staging import staged_epoch
from eos.tools.generator import GeneratorSpec

from support import harness
from support.harness import KILLED, commit_summary, delta_path, eos_cli, sink, table_versions
from support.pipelines import make_pipeline

SPEC = GeneratorSpec(events=2400, keys=20, interval_ms=25, disorder_ms=800, late_fraction=0.03,
                     late_delay_ms=20_000, bad_fraction=0.03, seed=5)


@pytest.fixture
def mode() -> str:
    """The compute mode of ``pipeline``: Connect (the default); tests whose fault is in Spark's
    part parametrize it over both modes."""
    return "connect"


@pytest.fixture
def pipeline(tmp_path: Path, kafka: str, mode: str) -> PipelineConfig:
    return make_pipeline(tmp_path, max_records=800, staging_retention=1, records=SPEC,
                         compute={"mode": mode})


def finish_and_audit(config: PipelineConfig, spark: Any, tag: str) -> None:
    harness.finish_and_audit(config, spark, tag, SPEC.events)


SINKS = ["delta:target", "delta:late", "delta:quarantine"]  # the default sinks, commit order


def in_any_order(rows: pa.Table) -> list[str]:
    """Staged rows as a comparable multiset: files hold an epoch's rows in no set order."""
    return sorted(map(repr, rows.to_pylist()))


def held(config: PipelineConfig) -> dict[str, int]:
    """The epoch each sink holds, and the checkpoint's."""
    return {**{name: sink(config, name).committed_epoch() for name in SINKS},
            "checkpoint": checkpointed_epoch(config)}


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


def test_crash_between_sink_commits_retry_skips_committed_sinks(
    pipeline: PipelineConfig, spark: Any, tmp_path: Path
) -> None:
    plan = begin(pipeline, run_id="r0")
    precommit(pipeline, plan.epoch, SparkStager(spark))
    crashed = eos_cli(pipeline, "commit", "--epoch", "0", faults="commit.between_sinks",
                      faults_dir=tmp_path)
    assert crashed.returncode == KILLED
    assert held(pipeline) == {"delta:target": 0, "delta:late": -1, "delta:quarantine": -1,
                              "checkpoint": -1}
    # The next run must not plan past an epoch whose checkpoint is missing.
    assert begin(pipeline, run_id="r1") == plan
    retried = commit(pipeline, 0)
    assert retried.outcome is Outcome.COMMITTED and retried.skipped == ["delta:target"]
    assert held(pipeline) == dict.fromkeys([*SINKS, "checkpoint"], 0)
    finish_and_audit(pipeline, spark, "between-sinks")


def test_crash_before_the_checkpoint_retry_only_checkpoints(
    pipeline: PipelineConfig, spark: Any, tmp_path: Path
) -> None:
    """Every sink holds N, the checkpoint does not: sinks may be one ahead; the retry writes no
    sink again and appends the checkpoint."""
    plan = begin(pipeline, run_id="r0")
    precommit(pipeline, plan.epoch, SparkStager(spark))
    crashed = eos_cli(pipeline, "commit", "--epoch", "0", faults="commit.before_checkpoint",
                      faults_dir=tmp_path)
    assert crashed.returncode == KILLED
    assert held(pipeline) == {**dict.fromkeys(SINKS, 0), "checkpoint": -1}
    assert begin(pipeline, run_id="r1") == plan
    sinks_before = {k: v for k, v in table_versions(pipeline).items() if k in SINKS}
    retried = commit(pipeline, 0)
    assert retried.outcome is Outcome.COMMITTED and retried.skipped == SINKS
    assert retried.checkpoint_version is not None
    assert {k: v for k, v in table_versions(pipeline).items() if k in SINKS} == sinks_before
    finish_and_audit(pipeline, spark, "before-checkpoint")


def test_crash_after_the_checkpoint_retry_is_a_noop(pipeline: PipelineConfig, spark: Any,
                                                    tmp_path: Path) -> None:
    plan = begin(pipeline, run_id="r0")
    precommit(pipeline, plan.epoch, SparkStager(spark))
    crashed = eos_cli(pipeline, "commit", "--epoch", "0", faults="commit.after_checkpoint",
                      faults_dir=tmp_path)
    assert crashed.returncode == KILLED
    before = table_versions(pipeline)
    retry = eos_cli(pipeline, "commit", "--epoch", "0")
    assert retry.returncode == 0, retry.stderr
    assert commit_summary(retry.stdout)["outcome"] == Outcome.ALREADY_COMMITTED
    assert table_versions(pipeline) == before
    finish_and_audit(pipeline, spark, "after-checkpoint")


def race_commits(config: PipelineConfig, faults_dir: Path, points: str,
                 stagger_ms: int) -> list[dict[str, Any]]:
    """Two real ``eos commit --epoch 0`` processes held at the barriers ``points``, released
    together (``stagger_ms`` 0) or one after the other (both checked before either wrote, the
    second writes after the first committed). Both must succeed; returns their summaries."""
    env = {"EOS_BARRIER_STAGGER_MS": str(stagger_ms)}
    racers = [eos_cli(config, "commit", "--epoch", "0", faults=points, faults_dir=faults_dir,
                      env=env, wait=False) for _ in range(2)]
    outputs = [r.communicate(timeout=180) for r in racers]
    for racer, (_, err) in zip(racers, outputs, strict=True):
        assert racer.returncode == 0, err[-3000:]
    return [commit_summary(out) for out, _ in outputs]


@pytest.mark.parametrize("stagger_ms", [0, 400])
def test_two_commits_released_before_their_first_sink_write_write_it_once(
    pipeline: PipelineConfig, spark: Any, tmp_path: Path, stagger_ms: int
) -> None:
    """The reported bug: two `eos commit --epoch N` released right before their first append
    wrote epoch N twice into one sink. Fenced, each sink is written by exactly one. (Released at
    the same instant, delta-rs' conflict check often caught even the unfenced write; released
    400 ms apart, the unfenced second attempt always appended again.)"""
    plan = begin(pipeline, run_id="r0")
    precommit(pipeline, plan.epoch, SparkStager(spark))
    results = race_commits(pipeline, tmp_path, "sink.before_write:wait", stagger_ms)
    first = [r["sinks"]["delta:target"] for r in results]
    assert sorted(s["outcome"] for s in first) == [Outcome.ALREADY_COMMITTED, Outcome.COMMITTED]
    assert [s["raced"] for s in first if s["outcome"] == Outcome.ALREADY_COMMITTED] == [True]
    for name in SINKS:
        assert sink(pipeline, name).commits() == [0], name
    assert [c.epoch for c in checkpoints.read_all(tables_for(pipeline))] == [0]
    finish_and_audit(pipeline, spark, "race-sinks")


def test_two_commits_released_before_the_checkpoint_append_it_once(
    pipeline: PipelineConfig, spark: Any, tmp_path: Path
) -> None:
    plan = begin(pipeline, run_id="r0")
    precommit(pipeline, plan.epoch, SparkStager(spark))
    results = race_commits(pipeline, tmp_path, "checkpoint.before_write:wait", stagger_ms=400)
    assert sorted(r["outcome"] for r in results) == [Outcome.ALREADY_COMMITTED,
                                                     Outcome.COMMITTED]
    assert [c.epoch for c in checkpoints.read_all(tables_for(pipeline))] == [0]
    committed_log = [r for r in epoch_rows(tables_for(pipeline), 0)
                     if r["phase"] == epochlog.COMMITTED]
    assert len(committed_log) == 1  # the loser leaves the bookkeeping to the winner
    for name in SINKS:
        assert sink(pipeline, name).commits() == [0], name
    finish_and_audit(pipeline, spark, "race-checkpoint")


def test_clearing_a_committed_run_changes_nothing(pipeline: PipelineConfig, spark: Any) -> None:
    finish_and_audit(pipeline, spark, "done")
    before = table_versions(pipeline)
    again = eos_cli(pipeline, "begin", "--run-id", "done-0")
    assert json.loads(again.stdout)["epoch"] == 0
    staged = eos_cli(pipeline, "precommit", "--epoch", "0")
    assert staged.returncode == 0 and "outcome=already committed" in staged.stdout
    again = eos_cli(pipeline, "commit", "--epoch", "0")
    assert commit_summary(again.stdout)["outcome"] == Outcome.ALREADY_COMMITTED
    assert table_versions(pipeline) == before


def test_zombie_precommit_after_commit_changes_nothing(pipeline: PipelineConfig,
                                                     spark: Any) -> None:
    """A stale attempt of epoch 0 whose Spark job outlived its task writes after the commit."""
    plan = begin(pipeline, run_id="r0")
    tables = tables_for(pipeline)
    precommit(pipeline, 0, SparkStager(spark))
    zombie_rows = staged_epoch(tables, 0, plan.hash)
    commit(pipeline, 0)
    target_before = read_table(delta_path(pipeline, "target")).to_pylist()
    replace_epoch(tables.staging, zombie_rows, 0)  # the zombie's late write lands
    assert in_any_order(staged_epoch(tables, 0, plan.hash)) == in_any_order(zombie_rows)
    assert read_table(delta_path(pipeline, "target")).to_pylist() == target_before
    # A zombie that is still computing finds the epoch committed and stages nothing.
    assert precommit(pipeline, 0, SparkStager(spark)).outcome is Outcome.ALREADY_COMMITTED
    finish_and_audit(pipeline, spark, "zombie")

