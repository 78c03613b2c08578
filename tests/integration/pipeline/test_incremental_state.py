"""Incremental state (``eos.core.window_state``): epochs stage the open windows they changed, and a
snapshot every few epochs; the output is the same as staging every open window every epoch.

Real broker, real Spark, real Delta. Each test checks that what it names happened (change
epochs, a snapshot after epoch 0, a rewind into the middle of a chain), so a pipeline that
quietly staged snapshots only could not pass.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from eos.compute.epochs import run_epoch, run_until_caught_up
from eos.compute.precommit.stager import SparkStager
from eos.core import epochlog
from eos.core.config import PipelineConfig
from eos.core.delta import read_table
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.pipeline_status import epoch_rows
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.rewind import rewind
from eos.core.staging import CHANGE, STATE, WATERMARK
from eos.tools.audit.checks import row_identity, value_differences
from eos.tools.audit.verify import audit, verify
from eos.tools.generator import GeneratorSpec

from support.harness import delta_path, eos_cli, finish_and_audit
from support.pageviews import MESSY, pageview_pipeline, produce
from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KILLED = -9


def staged_kinds(config: PipelineConfig) -> dict[int, dict[str, Any]]:
    """Per committed epoch: its open-window rows by kind, and the base its watermark names."""
    found: dict[int, dict[str, Any]] = {}
    for row in epoch_rows(tables_for(config)):
        if row["phase"] == epochlog.PRECOMMITTED:
            rows = json.loads(row["details"])["rows"]
            found[row["epoch"]] = {STATE: rows.get(STATE, 0), CHANGE: rows.get(CHANGE)}
    return found


def bases(config: PipelineConfig) -> dict[int, int]:
    """Each staged epoch's base, from its watermark row (what staging still holds)."""
    staging = read_table(tables_for(config).staging)
    marks = staging.filter(pc.equal(staging["kind"], WATERMARK)).to_pylist()
    return {row["epoch"]: row["state_base"] for row in marks}


def windows_by_identity(config: PipelineConfig) -> dict[tuple, dict[str, Any]]:
    identity = row_identity(config, "windows")
    return {identity({**row, "epoch": 0}): row
            for row in read_table(delta_path(config, "target")).to_pylist()}


def late_records(config: PipelineConfig) -> list[tuple]:
    return sorted((r["partition"], r["offset"], r["window_start"])
                  for r in read_table(delta_path(config, "late")).to_pylist())


@pytest.mark.parametrize("window", ["tumbling", "hopping", "session"])
def test_changes_and_snapshots_give_the_same_output_over_random_splits(
        tmp_path: Path, kafka: str, spark: Any, window: str) -> None:
    """Every aggregation, late and malformed records: the same random split into epochs run
    with a snapshot every epoch and with changes (a snapshot every 3 epochs) commits the same
    windows, late records and watermarks, and both equal the audit's recomputation."""
    topic = produce(MESSY)
    split = random.Random(f"split-{window}").randrange(250, 700)
    runs = {}
    for every in (1, 3):
        directory = tmp_path / f"every{every}"
        config = pageview_pipeline(directory, window, topic, epoch={
            "max_records": split, "staging_retention": 1, "state_snapshot_every": every})
        plans = run_until_caught_up(config, f"every{every}", spark=spark)
        report = audit(config)
        assert report.ok, report.render()
        runs[every] = (config, [p.plan for p in plans])
    (snapshots, _), (changes, plans) = runs[1], runs[3]
    kinds = staged_kinds(changes)
    assert len(plans) >= 5, split
    every_epoch = staged_kinds(snapshots)
    assert all(k[CHANGE] is None for k in every_epoch.values()), "every=1: snapshots only"
    assert kinds[0][CHANGE] is None and kinds[3][CHANGE] is None, "epochs 0 and 3: snapshots"
    assert any(kinds[e][CHANGE] for e in (1, 2, 4)), kinds  # windows staged as changes
    assert all(kinds[e][STATE] == 0 for e in (1, 2, 4)), kinds

    want, got = windows_by_identity(snapshots), windows_by_identity(changes)
    assert want.keys() == got.keys() and len(want) > 10
    for key, row in want.items():
        assert value_differences(changes, row, got[key]) == [], key
    assert late_records(changes) == late_records(snapshots) and late_records(changes)
    marks = {e: c.watermark_ms for e, c in enumerate(checkpoint_rows(snapshots))}
    assert {e: c.watermark_ms for e, c in enumerate(checkpoint_rows(changes))} == marks


def checkpoint_rows(config: PipelineConfig) -> list[Any]:
    from eos.core import checkpoints

    return checkpoints.read_all(tables_for(config))


SPEC = GeneratorSpec(events=2400, keys=20, interval_ms=25, disorder_ms=800, late_fraction=0.03,
                     late_delay_ms=20_000, bad_fraction=0.03, seed=7)


def clicks_pipeline(directory: Path, every: int, **overrides: Any) -> PipelineConfig:
    return make_pipeline(directory, records=SPEC, epoch={
        "max_records": 300, "staging_retention": 1, "state_snapshot_every": every}, **overrides)


def test_a_crash_at_each_step_of_a_snapshot_and_a_change_epoch_converges(
        tmp_path: Path, kafka: str, spark: Any) -> None:
    """Epoch 2 is a snapshot (every 2 epochs), epoch 3 a change epoch on it. A process killed
    after staging each, then after sealing each commit: the reruns reuse what was staged, the
    chain stays whole (the prune keeps its base), and the audit holds."""
    config = clicks_pipeline(tmp_path, every=2)
    for i in range(2):
        run_epoch(config, f"r{i}", spark=spark)
    for epoch in (2, 3):
        plan = begin(config, run_id=f"r{epoch}")
        crashed = eos_cli(config, "precommit", "--epoch", str(epoch),
                          faults="precommit.after_write", faults_dir=tmp_path / f"p{epoch}")
        assert crashed.returncode == KILLED, crashed.stderr
        again = precommit(config, epoch, SparkStager(spark))
        assert again.outcome is Outcome.REUSED_STAGE
        crashed = eos_cli(config, "commit", "--epoch", str(epoch), faults="commit.after_seal",
                          faults_dir=tmp_path / f"c{epoch}")
        assert crashed.returncode == KILLED, crashed.stderr
        assert commit(config, epoch).outcome is Outcome.COMMITTED
        assert checkpointed_epoch(config) == epoch and plan.epoch == epoch
    assert {e: bases(config)[e] for e in (2, 3)} == {2: 2, 3: 2}
    staging = read_table(tables_for(config).staging)
    kinds = {(row["epoch"], row["kind"]) for row in staging.select(["epoch", "kind"]).to_pylist()}
    assert (2, STATE) in kinds and (3, CHANGE) in kinds and (3, STATE) not in kinds, kinds
    finish_and_audit(config, spark, "after-crashes", SPEC.events)


def test_a_rewind_into_a_chain_replays_the_same_windows(tmp_path: Path, kafka: str,
                                                       spark: Any) -> None:
    """Snapshots at epochs 0, 3 and 6: rewinding to epoch 4 (its state: epoch 3's snapshot and
    4's changes) and to epoch 2 (epoch 0's snapshot and the changes of 1 and 2, before the
    snapshot at 3) and replaying commits the same windows, and ``eos verify`` holds."""
    config = clicks_pipeline(tmp_path, every=3)
    first = [r.plan for r in run_until_caught_up(config, "first", spark=spark)]
    assert len(first) >= 8
    before = windows_by_identity(config)
    assert set(bases(config).values()) >= {6}, bases(config)  # a chain on the last snapshot
    for to_epoch in (4, 2):
        done = rewind(config, to_epoch, run_id=f"back-{to_epoch}")
        assert done.outcome is Outcome.REWOUND
        assert checkpointed_epoch(config) == to_epoch
        replayed = [r.plan for r in run_until_caught_up(config, f"replay-{to_epoch}",
                                                         spark=spark)]
        assert [p.hash for p in replayed] == [p.hash for p in first[to_epoch + 1:]]
        after = windows_by_identity(config)
        assert after.keys() == before.keys()
        for key, row in before.items():
            assert value_differences(config, row, after[key]) == [], (to_epoch, key)
    report = verify(config)
    assert report.ok, report.render()
    assert report.records == SPEC.events


def test_a_local_frame_keeps_every_row_whatever_its_chunks(spark: Any) -> None:
    """Small state is read by precommit's own process and handed to Spark as a local relation
    (``eos.compute.precommit.resume.local_frame``). Classic PySpark 4.0.1's ``createDataFrame``
    of an Arrow table drops every row after an empty chunk between others (a chain file holding
    no row the epoch reads makes one); ``local_frame`` keeps them all."""
    import pyarrow as pa

    from eos.compute.precommit.resume import local_frame

    schema = pa.schema([("group_key", pa.string()), ("count_state", pa.int64())])

    def rows(n: int, start: int) -> pa.Table:
        return pa.table({"group_key": [f"k{i}" for i in range(start, start + n)],
                         "count_state": list(range(start, start + n))}, schema=schema)

    table = pa.concat_tables([rows(5, 0), rows(0, 5), rows(7, 5)])
    assert table.column(0).num_chunks == 3
    frame = local_frame(spark, table)
    assert sorted(r["count_state"] for r in frame.collect()) == list(range(12))

