"""Rewind and replay (``eos.core.rewind``): back to a committed epoch, then the next runs
recompute the later ones from their logged plans, exactly once, on real Spark, Delta and a
Kafka-protocol broker. Crashes are real (SIGKILL at a named point in an ``eos`` process,
``eos.core.faults``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from deltalake import DeltaTable

from eos.compute.epochs import run_epoch
from eos.compute.precommit.stager import SparkStager
from eos.core import checkpoints, epochlog
from eos.core.config import PipelineConfig
from eos.core.delta import read_table
from eos.core.errors import ConfigError, DataLoss, RewindRefused, RewindUnfinished
from eos.core.kafka import client_settings
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.pipeline_status import EpochState, pipeline_status
from eos.core.plan import Plan, plan_of
from eos.core.protocol import begin, checkpointed_epoch
from eos.core.rewind import rewind
from eos.core.sink import sinks_for
from eos.sinks.kafka.read_back import topic_records
from eos.tools.audit.verify import audit, verify
from eos.tools.generator import GeneratorSpec, generate
from eos.tools.produce import send

from support import harness
from support.apache_kafka import ApacheKafka, kafka_section
from support.harness import KILLED, delta_path, eos_cli, table_versions
from support.pipelines import kafka_sinks, make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = GeneratorSpec(events=2400, keys=20, interval_ms=25, disorder_ms=800, late_fraction=0.03,
                     late_delay_ms=20_000, bad_fraction=0.03, seed=11)
BEFORE = {"count": "count(*)", "sum": "sum(value)"}
AFTER = {**BEFORE, "max": "max(value)"}  # the fix: a new aggregation


def rewritten(config: PipelineConfig, directory: Path, **sections: Any) -> PipelineConfig:
    """``config`` with sections replaced: same name, topic and tables (the YAML is rewritten)."""
    return make_pipeline(directory, name=config.name,
                         kafka={"topic": config.kafka.topic, "read_timeout": "30s"},
                         tables={"root": str(config.root)},
                         max_records=config.epoch.max_records, staging_retention=1, **sections)


def run_epochs(config: PipelineConfig, spark: Any, tag: str, n: int) -> list[Plan]:
    return [run_epoch(config, f"{tag}-{i}", spark=spark).plan for i in range(n)]


def contents(config: PipelineConfig) -> dict[str, Any]:
    """What the pipeline holds, independent of versions and clocks: every Delta sink's rows and
    each checkpoint's epoch, plan, offsets, watermark and row counts."""
    held: dict[str, Any] = {
        sink.name: sorted(map(repr, read_table(sink.path).to_pylist()))
        for sink in sinks_for(config) if sink.kind == "delta"
    }
    held["checkpoints"] = [(c.epoch, c.plan_hash, c.until, c.watermark_ms, c.rows)
                           for c in checkpoints.read_all(tables_for(config))]
    return held


def markers(config: PipelineConfig) -> dict[str, int]:
    return {**{s.name: s.committed_epoch(fence=False) for s in sinks_for(config)},
            "checkpoint": checkpointed_epoch(config)}


# ---------------------------------------------------------------------------------------------
# The acceptance: change an aggregation, rewind to before epoch 0, replay ten epochs


def test_a_changed_aggregation_replays_ten_epochs_once_after_a_full_rewind(
    tmp_path: Path, kafka: str, spark: Any
) -> None:
    old = make_pipeline(tmp_path, max_records=240, staging_retention=1, records=SPEC,
                        aggregations=BEFORE)
    plans = run_epochs(old, spark, "first", 10)
    assert sum(p.records for p in plans) == SPEC.events
    assert audit(old).ok

    new = rewritten(old, tmp_path, aggregations=AFTER)
    with pytest.raises(ConfigError, match="rewind --to-epoch -1"):
        begin(new, run_id="too-early")
    # Epoch 0 was computed without max: keeping it committed would mix two schemas.
    with pytest.raises(RewindRefused, match=r"another schema .*aggregations.*Rewind to -1"):
        rewind(new, 0)
    assert markers(new)["checkpoint"] == 9  # a refusal writes nothing

    done = rewind(new, -1, run_id="fix-max")
    assert done.outcome is Outcome.REWOUND and done.plan is not None
    assert (done.plan.from_epoch, done.plan.to_epoch) == (9, -1)
    assert set(markers(new).values()) == {-1}
    target = delta_path(new, "target")
    history = [h["operation"] for h in reversed(DeltaTable(target).history())]
    assert history[:12] == ["CREATE TABLE", *["WRITE"] * 10, "RESTORE"]
    assert "max" in DeltaTable(target).schema().to_arrow().names  # the emptied table's new schema
    assert rewind(new, -1).outcome is Outcome.NOTHING_TO_REWIND

    replayed = run_epochs(new, spark, "replay", 10)
    assert [p.hash for p in replayed] == [p.hash for p in plans]  # the logged ranges, again
    report = verify(new)
    assert report.ok, report.render()
    assert report.records == SPEC.events and report.committed_epoch == 9
    windows = read_table(target).to_pylist()
    assert windows and all(row["max"] is not None for row in windows)
    keys = [(row["key"], row["window_start"]) for row in windows]
    assert len(keys) == len(set(keys))  # once per window
    for name in ("delta:target", "delta:late", "delta:quarantine"):
        assert harness.sink(new, name).commits() == list(range(10)), name

    logged = epochlog.rows(tables_for(new), 0)
    assert [r["phase"] for r in logged if r["phase"] in (epochlog.REWINDING,
                                                          epochlog.REWOUND)] == [
        epochlog.REWINDING, epochlog.REWOUND]


# ---------------------------------------------------------------------------------------------
# Crash at every step of a rewind and of the replay: rerunning converges to the same tables

REWIND_POINTS = ["rewind.before_log", "rewind.after_log", "rewind.between_tables",
                 "rewind.before_checkpoints", "rewind.before_done"]
REPLAY_CRASHES = [("precommit", "precommit.after_write"), ("commit", "sink.before_write"),
                  ("commit", "commit.between_sinks"), ("commit", "commit.before_checkpoint"),
                  ("commit", "commit.after_checkpoint")]


def crash_then_rerun(config: PipelineConfig, directory: Path, point: str, *args: str) -> None:
    """``eos <args>`` killed at ``point``, then the same command again to completion."""
    crashed = eos_cli(config, *args, faults=point, faults_dir=directory / point)
    assert crashed.returncode == KILLED, (point, crashed.stderr[-2000:])
    rerun = eos_cli(config, *args)
    assert rerun.returncode == 0, (point, rerun.stderr[-3000:])


def replay_with_a_crash(config: PipelineConfig, spark: Any, directory: Path, tag: str,
                        phase: str, point: str, epochs: int) -> None:
    """Replay ``epochs`` epochs; the first one crashes once at ``point`` and is rerun."""
    from eos.core.protocol import commit, precommit

    for i in range(epochs):
        plan = begin(config, run_id=f"{tag}-{i}")
        if i == 0 and phase == "precommit":
            crash_then_rerun(config, directory / tag, point, "precommit", "--epoch",
                             str(plan.epoch))
        else:
            precommit(config, plan.epoch, SparkStager(spark))
        if i == 0 and phase == "commit":
            crash_then_rerun(config, directory / tag, point, "commit", "--epoch",
                             str(plan.epoch))
        else:
            commit(config, plan.epoch)


def test_a_crash_at_every_step_of_a_rewind_and_of_the_replay_converges(
    tmp_path: Path, kafka: str, spark: Any
) -> None:
    config = make_pipeline(tmp_path, max_records=400, staging_retention=1, records=SPEC)
    run_epochs(config, spark, "first", 3)
    at_two = contents(config)
    run_epochs(config, spark, "more", 3)
    at_five = contents(config)
    assert markers(config)["checkpoint"] == 5

    for cycle, (point, (phase, replay_point)) in enumerate(
            zip(REWIND_POINTS, REPLAY_CRASHES, strict=True)):
        crash_then_rerun(config, tmp_path / f"c{cycle}", point, "rewind", "--to-epoch", "2")
        assert contents(config) == at_two, point
        assert set(markers(config).values()) == {2}, point
        replay_with_a_crash(config, spark, tmp_path, f"replay{cycle}", phase, replay_point, 3)
        assert contents(config) == at_five, replay_point
        assert audit(config).ok, replay_point

    rewinds = epochlog.rewind_rows(tables_for(config))
    ids = {json.loads(r["details"])["rewind_id"] for r in rewinds}
    assert len(ids) == len(REWIND_POINTS)  # a rerun finishes its rewind, never starts another


def test_an_unfinished_rewind_stops_epochs_until_it_is_rerun(tmp_path: Path, kafka: str,
                                                             spark: Any) -> None:
    config = make_pipeline(tmp_path, max_records=800, staging_retention=1, records=SPEC)
    run_epochs(config, spark, "first", 3)
    crashed = eos_cli(config, "rewind", "--to-epoch", "0", faults="rewind.between_tables",
                      faults_dir=tmp_path)
    assert crashed.returncode == KILLED
    with pytest.raises(RewindUnfinished, match="rewind --to-epoch 0"):
        begin(config, run_id="during")
    with pytest.raises(RewindUnfinished, match="to epoch 0"):
        rewind(config, 1)  # another target must wait for the first rewind
    status = pipeline_status(config, with_lag=False)
    (tmp_path / "moved").mkdir()
    moved = rewritten(config, tmp_path / "moved", sinks={"late": [{"delta": "late2"}]})
    before = table_versions(config)
    with pytest.raises(ConfigError, match="finish the rewind under the config it began with"):
        rewind(moved, 0)  # the sinks changed between the crash and the rerun
    assert table_versions(config) == before
    assert rewind(config, 0).outcome is Outcome.REWOUND
    assert status.committed_epoch == 2  # the checkpoint moves last
    states = {e.epoch: e.state for e in pipeline_status(config, with_lag=False).epochs}
    assert states == {0: EpochState.COMMITTED, 1: EpochState.REWOUND, 2: EpochState.REWOUND}
    run_epochs(config, spark, "replay", 2)
    report = audit(config)
    assert report.ok and report.records == SPEC.events, report.render()


@pytest.mark.parametrize("stagger_ms", [0, 400])
def test_two_rewinds_released_together_log_one_rewind_and_agree(
    tmp_path: Path, kafka: str, spark: Any, stagger_ms: int
) -> None:
    """Two attempts of the rewind task at once (a zombie and its retry), held right before the
    rewind is logged: exactly one logs it; the other finishes that rewind or finds it done."""
    config = make_pipeline(tmp_path, max_records=800, staging_retention=1, records=SPEC)
    run_epochs(config, spark, "first", 3)
    reference = contents(config)
    env = {"EOS_BARRIER_STAGGER_MS": str(stagger_ms)}
    racers = [eos_cli(config, "rewind", "--to-epoch", "0", faults="rewind.before_log:wait",
                      faults_dir=tmp_path, env=env, wait=False) for _ in range(2)]
    outputs = [r.communicate(timeout=180) for r in racers]
    for racer, (_, err) in zip(racers, outputs, strict=True):
        assert racer.returncode == 0, err[-3000:]
    outcomes = sorted(json.loads(out.strip().splitlines()[-1])["outcome"] for out, _ in outputs)
    assert outcomes in ([Outcome.NOTHING_TO_REWIND, Outcome.REWOUND],
                        [Outcome.REWOUND, Outcome.REWOUND]), outcomes
    started = [r for r in epochlog.rewind_rows(tables_for(config))
               if r["phase"] == epochlog.REWINDING]
    assert len(started) == 1
    assert set(markers(config).values()) == {0}
    run_epochs(config, spark, "replay", 2)
    assert contents(config) == reference


def test_rewinds_that_cannot_be_done_are_refused_before_anything_is_written(
    tmp_path: Path, kafka: str, spark: Any
) -> None:
    config = make_pipeline(tmp_path, max_records=1200, staging_retention=1, records=SPEC)
    run_epochs(config, spark, "first", 2)
    before = harness.table_versions(config)
    with pytest.raises(RewindRefused, match=r"committed epochs are 0\.\.1"):
        rewind(config, 2)
    with pytest.raises(RewindRefused, match=r"committed epochs are 0\.\.1"):
        rewind(config, -2)
    assert rewind(config, 1).outcome is Outcome.NOTHING_TO_REWIND
    assert harness.table_versions(config) == before


# ---------------------------------------------------------------------------------------------
# A Kafka sink: refused unless republishing is accepted; then consumers see the replay again


def test_a_kafka_sink_is_rewound_only_by_republishing(tmp_path: Path, kafka: str,
                                                      spark: Any) -> None:
    config = make_pipeline(tmp_path, base=kafka_sinks(),
                           epoch={"max_records": 800, "staging_retention": 1})
    send(generate(SPEC), SPEC.events, config.kafka.topic, client_settings(), progress=False)
    run_epochs(config, spark, "first", 3)
    topic_sink = next(s for s in sinks_for(config) if s.kind == "kafka")
    published = len(list(topic_records(client_settings(), topic_sink.options.topic,
                                           config.name)))

    with pytest.raises(RewindRefused, match=r"kafka:.*cannot withdraw.*--republish"):
        rewind(config, 0)
    assert markers(config)["checkpoint"] == 2
    done = rewind(config, 0, republish=True)
    assert done.plan is not None and done.plan.republish == [topic_sink.name]
    assert topic_sink.committed_epoch() == 0
    run_epochs(config, spark, "replay", 2)

    report = audit(config)  # the current line: each window once
    assert report.ok, report.render()
    assert topic_sink.commits() == [0, 1, 2]
    # What a consumer of the topic sees: the original epochs 1..2, then their replay, told
    # apart by the eos-lineage header.
    records = list(topic_records(client_settings(), topic_sink.options.topic, config.name))
    replayed = [r for r in records if dict(r.headers() or []).get("eos-lineage")]
    first_line = [r for r in records if not dict(r.headers() or []).get("eos-lineage")]
    assert len(first_line) == published
    assert {dict(r.headers())["eos-lineage"].decode() for r in replayed} == {done.plan.rewind_id}
    assert {int(dict(r.headers())["eos-epoch"]) for r in replayed} == {1, 2}


# ---------------------------------------------------------------------------------------------
# Data loss is loud: a replayed range Kafka no longer holds


def test_a_replay_of_a_range_kafka_no_longer_holds_fails_naming_it(
    tmp_path: Path, apache_kafka: ApacheKafka, spark: Any
) -> None:
    """On Apache Kafka: the embedded broker has no DeleteRecords (what retention does)."""
    admin = ck.admin.AdminClient(client_settings())
    config = make_pipeline(tmp_path, max_records=800, staging_retention=1, records=SPEC,
                           kafka=kafka_section())
    run_epochs(config, spark, "first", 3)
    gone = admin.delete_records([ck.TopicPartition(config.kafka.topic, 0, 500)])
    next(iter(gone.values())).result(timeout=30)
    rewind(config, -1)
    plan = begin(config, run_id="replay-0")
    from eos.compute.spark import connect_precommit

    # The precommit as a deployment runs it: the executor's DataLoss comes back as its class.
    with pytest.raises(DataLoss, match=r"partition 0: offsets \[\d+,500\)"):
        connect_precommit(config, plan.epoch)
    assert plan == plan_of(tables_for(config), 0)


def test_two_pipelines_on_one_table_neither_loses_the_others_rows(tmp_path: Path, kafka: str,
                                                                   spark: Any) -> None:
    """Two pipelines whose ``windows`` sink is the same absolute Delta table. Unshared, the
    second is refused at ``begin`` (before, both wrote it); declared shared, both commit, a
    rewind of one is refused while the other has committed since its target (before, the RESTORE
    removed the other's rows for good, its ``txn`` still saying committed), the table holds
    every window both checkpointed, and each audit holds (the shared table reported unaudited,
    not the other's rows as problems)."""
    from eos.core.errors import TableOwned

    table = tmp_path / "windows-of-both"

    def on_table(directory: str, shared: bool) -> PipelineConfig:
        sink = {"table": str(table), **({"shared": True} if shared else {})}
        return make_pipeline(tmp_path / directory, max_records=1000, staging_retention=1,
                             records=SPEC,
                             sinks={"windows": [{"delta": sink}], "late": [{"delta": "late"}],
                                    "quarantine": [{"delta": "quarantine"}]})

    a = on_table("a", shared=False)
    run_epochs(a, spark, "own-a", 2)
    intruder = on_table("b", shared=False)
    with pytest.raises(TableOwned, match="windows-of-both"):
        begin(intruder, run_id="intruder")
    assert checkpointed_epoch(intruder) == -1

    # The owner declares the table shared, then a second pipeline joins.
    a = rewritten(a, tmp_path / "a", sinks={
        "windows": [{"delta": {"table": str(table), "shared": True}}],
        "late": [{"delta": "late"}], "quarantine": [{"delta": "quarantine"}]})
    b = on_table("c", shared=True)
    run_epochs(a, spark, "shared-a", 1)
    run_epochs(b, spark, "shared-b", 3)
    theirs = sorted(map(repr, (r for r in read_table(str(table)).to_pylist())))
    with pytest.raises(RewindRefused, match=f"pipeline {b.name}"):
        rewind(a, 0)
    assert sorted(map(repr, read_table(str(table)).to_pylist())) == theirs
    assert checkpointed_epoch(a) == 2 and checkpointed_epoch(b) == 2
    checkpointed = sum(c.rows["windows"] for config in (a, b)
                       for c in checkpoints.read_all(tables_for(config)))
    assert len(theirs) == checkpointed > 0
    for config in (a, b):  # the shared table is not audited, saying why; the rest is
        report = audit(config)
        assert report.ok, report.render()
        assert report.unaudited == {f"delta:{table}": "a shared table: its rows do not say "
                                                      "which pipeline wrote them"}
