"""The exactly-once core against a real broker, real Spark and real Delta tables.

Ground truth is computed independently: the records the generator produced (checked to be
exactly what Kafka holds) are replayed through the plain-Python reference model of
``eos.tools.audit.reference`` using the epoch boundaries in the log, and compared with every
committed table.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from eos.compute.epochs import run_epoch, run_until_caught_up
from eos.compute.precommit.stager import SparkStager
from eos.core import checkpoints
from eos.core.config import PipelineConfig
from eos.core.delta import read_existing, read_table
from eos.core.errors import KafkaUnavailable, TopicMissing
from eos.core.kafka import client_settings, topic_watermarks
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.pipeline_status import EpochState, pipeline_status, render
from eos.core.protocol import abort, begin, checkpointed_epoch, commit, precommit
from eos.core.staging import PRECOMMIT, files_holding, staged_epoch
from eos.core.tables import ensure_tables
from eos.core.window_state import open_rows
from eos.tools.audit.verify import audit, read_range
from eos.tools.generator import BAD_KINDS, GeneratorSpec, generate
from eos.tools.pipelines import write_pipeline
from eos.tools.produce import send

from support.harness import delta_path, sink, table_versions
from support.pageviews import MESSY, pageview_pipeline, produce

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def topic_contents(config: PipelineConfig) -> Counter:
    settings = client_settings(config.kafka.client)
    found: Counter = Counter()
    for p, (low, high) in topic_watermarks(settings, config.kafka.topic).items():
        found.update(r.value for r in read_range(settings, config.kafka.topic, p, low, high))
    return found


def target_windows(config: PipelineConfig) -> Counter:
    rows = read_table(delta_path(config, "target")).to_pylist()
    return Counter(tuple(v for k, v in sorted(r.items()) if k != "epoch") for r in rows)


SPEC = GeneratorSpec(events=6000, keys=40, interval_ms=20, disorder_ms=1500, late_fraction=0.03,
                     late_delay_ms=30_000, bad_fraction=0.02, seed=42)


@pytest.fixture(scope="module")
def committed_pipeline(tmp_path_factory: pytest.TempPathFactory, kafka: str, spark: Any):
    """A pipeline run over several capped epochs with disorder, late and bad records; every
    second commit maintains the protocol tables, their Delta logs cleaned up to the latest
    checkpoint (no log retention: below the config's 1 h floor, which guards against racing
    attempts, and none race here), so everything checked here ran on cleaned-up logs. The
    executors write every epoch's files (``collect_rows: 0``), as for epochs too big to collect;
    the rest of the suite stages its small epochs from the driver."""
    config = write_pipeline(tmp_path_factory.mktemp("core"),
                            epoch={"max_records": 1500, "maintenance_every": 2},
                            spark={"master": "local[2]", "shuffle_partitions": 2,
                                   "collect_rows": 0})
    epoch = config.epoch.model_copy(update={"log_retention": 0})
    config = config.model_copy(update={"epoch": epoch})
    send(generate(SPEC), SPEC.events, config.kafka.topic, client_settings(), progress=False)
    plans = [run.plan for run in run_until_caught_up(config, "core", spark=spark)]
    return config, plans


def test_committed_tables_equal_ground_truth(committed_pipeline: tuple) -> None:
    config, plans = committed_pipeline
    assert len(plans) >= 5, "the cap must split the data into several epochs"
    produced = list(generate(SPEC))
    assert topic_contents(config) == Counter(r.value for r in produced)
    report = audit(config)
    assert report.ok, report.render()
    t = tables_for(config)
    quarantine = read_table(delta_path(config, "quarantine")).to_pylist()
    bad = [r.value for r in produced if r.kind in BAD_KINDS]
    assert Counter(r["raw_value"] for r in quarantine) == Counter(bad)
    assert all(r["reason"] for r in quarantine)
    late = read_table(delta_path(config, "late"))
    assert late.num_rows > 0, "the data set must exercise the late path"
    late_sources = {(r["partition"], r["offset"]) for r in late.to_pylist()}
    assert len(late_sources) == late.num_rows
    # Conservation: every good record is in exactly one committed window, the open state, or late.
    target = read_table(delta_path(config, "target"))
    # The open state of the last epoch: its base's snapshot and the changes since (alive rows).
    open_state = open_rows(t, checkpoints.read(t, plans[-1].epoch), ["s__count__n"])
    in_state = pc.sum(open_state["s__count__n"]).as_py() if open_state.num_rows else 0
    counted = pc.sum(target["count"]).as_py() + (in_state or 0)
    assert counted + late.num_rows + len(quarantine) == SPEC.events
    assert report.counts["delta:target"][0] == target.num_rows > 0


def test_offsets_reach_high_watermarks(committed_pipeline: tuple) -> None:
    config, plans = committed_pipeline
    marks = topic_watermarks(client_settings(), config.kafka.topic)
    final = {r.partition: r.until for r in plans[-1].ranges}
    assert final == {p: high for p, (_, high) in marks.items()}
    for before, after in itertools.pairwise(plans):
        assert {r.partition: r.until for r in before.ranges} == {
            r.partition: r.start for r in after.ranges
        }


def test_every_epoch_commits_once_with_its_txn(committed_pipeline: tuple) -> None:
    config, plans = committed_pipeline
    epochs = [p.epoch for p in plans]
    for name in ("delta:target", "delta:late", "delta:quarantine"):
        assert sink(config, name).commits() == epochs, name
    assert checkpointed_epoch(config) == plans[-1].epoch
    rows = checkpoints.read_all(tables_for(config))
    assert [c.epoch for c in rows] == epochs
    assert [c.plan_hash for c in rows] == [p.hash for p in plans]
    # Offsets by topic-partition: the one topic's partitions, where each epoch's ranges end.
    assert [c.until for c in rows] == [{r.key: r.until for r in p.ranges} for p in plans]
    assert {(k.topic, k.partition) for c in rows for k in c.until} == {
        (config.kafka.topic, r.partition) for r in plans[0].ranges}


def test_the_next_epoch_reads_only_the_files_that_hold_state(committed_pipeline: tuple) -> None:
    """An epoch's staged files: a few per kind (the write is coalesced to the shuffle
    partitions), and the state the next epoch resumes from is found by file statistics: the
    files kept hold every open window, and the files left out none."""
    config, plans = committed_pipeline
    staging = DeltaTable(tables_for(config).staging)
    open_files = 0
    for plan in plans[-2:]:
        every = staging.file_uris(file_pruning_predicate=[("epoch", "=", str(plan.epoch))])
        assert every, f"epoch {plan.epoch} is no longer staged"
        kinds = {uri: set(pq.read_table(uri, columns=["kind"])["kind"].to_pylist())
                 for uri in every}
        # An epoch stages its open windows as a snapshot (kind state) or as changes.
        kind = "state" if any("state" in held for held in kinds.values()) else "change"
        holding = set(files_holding(staging, plan.epoch, kind))
        with_state = {uri for uri, held in kinds.items() if kind in held}
        assert with_state <= holding, kinds  # (an epoch without open windows stages none)
        open_files += len(with_state)
        # What else is kept is the driver's file, whose kinds range over "state" (offsets ..
        # watermark): Spark opens it and filters its two rows out.
        assert all(kinds[uri] == {"offsets", "watermark"} for uri in holding - with_state)
        for kind in ("output", "state", "change", "late", "quarantine"):
            written = [uri for uri, held in kinds.items() if held == {kind}]
            assert len(written) <= config.spark.shuffle_partitions, (kind, written)
    assert open_files, "the last two epochs must stage open windows"


def test_the_reader_parses_as_a_separate_parse_stage_would(committed_pipeline: tuple,
                                                           spark: Any) -> None:
    """Precommit reads with the reader parsing (one Python stage): the same rows, quarantine
    reasons included, as the raw records parsed by a second stage, for every record of the
    range exactly once."""
    from eos.compute.precommit.read import parse_records, read_ranges
    from eos.core.schema import OFFSET, PARTITION, REASON, ddl, parsed_schema

    config, plans = committed_pipeline
    plan = plans[1]
    keys = [(PARTITION, "ascending"), (OFFSET, "ascending")]
    fused = read_ranges(spark, config, plan, parse=True).toArrow().sort_by(keys)
    staged = (read_ranges(spark, config, plan)
              .mapInArrow(parse_records(config.event), ddl(parsed_schema(config.event)))
              .toArrow().sort_by(keys))
    assert fused.num_rows == plan.records > 0
    assert fused.equals(staged)
    assert pc.sum(pc.is_valid(fused[REASON])).as_py() > 0, "the range must hold bad records"


def test_commit_compacts_the_epoch_log_every_n_epochs(committed_pipeline: tuple) -> None:
    """maintenance_every=2: even epochs compact the log and clean up the protocol tables'
    Delta logs; the audit above ran after them."""
    config, plans = committed_pipeline
    t = tables_for(config)
    # The last maintenance left one file; each epoch after it logs three rows (three files).
    since = plans[-1].epoch % 2
    assert len(DeltaTable(t.epochs).file_uris()) == 1 + 3 * since
    # Each epoch adds three commits to the epoch log and two to staging; what is left is the
    # last maintenance's checkpoint and what came after it, not the whole history.
    for path, per_epoch in ((t.epochs, 3), (t.staging, 2), (t.checkpoints, 1)):
        commits = list(Path(path, "_delta_log").glob("*.json"))
        assert 0 < len(commits) <= per_epoch * (since + 1) + 3 < per_epoch * len(plans), commits
    assert checkpointed_epoch(config) == plans[-1].epoch


def test_rerunning_committed_epochs_changes_nothing(committed_pipeline: tuple, spark: Any) -> None:
    config, plans = committed_pipeline
    before = table_versions(config)
    for i, plan in enumerate(plans):
        again = run_epoch(config, f"core-{i}", spark=spark)
        assert again.plan == plan
        assert again.staged.outcome is Outcome.ALREADY_COMMITTED
        assert again.committed.outcome is Outcome.ALREADY_COMMITTED
        assert abort(config, plan.epoch) is Outcome.NOTHING_TO_ABORT
    assert table_versions(config) == before


def test_two_precommits_stage_identical_rows(tmp_path: Path, kafka: str, spark: Any) -> None:
    """The second attempt runs through spark-submit, exactly as the DAG runs it."""
    config = write_pipeline(tmp_path)
    spec = GeneratorSpec(events=3000, keys=30, disorder_ms=800, bad_fraction=0.05, seed=9)
    send(generate(spec), spec.events, config.kafka.topic, client_settings(), progress=False)
    plan = begin(config, run_id="twice")
    first = precommit(config, plan.epoch, SparkStager(spark))
    assert first.outcome is Outcome.STAGED
    rows_a = staged_epoch(tables_for(config), plan.epoch, plan.hash)
    assert abort(config, plan.epoch, "test") is Outcome.ABORTED
    assert staged_epoch(tables_for(config), plan.epoch, plan.hash) is None
    cli = [sys.executable, "-m", "eos.tools.cli", "precommit", "--config", str(config.source_path),
           "--epoch", str(plan.epoch)]
    proc = subprocess.run(cli, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "outcome=staged" in proc.stdout
    rows_b = staged_epoch(tables_for(config), plan.epoch, plan.hash)
    # The same rows, in whatever order: a table's row order is not its content, and Spark's
    # shuffle fetches map outputs in the order they arrive (a loaded CI machine reordered them).
    assert _canonical(rows_a) == _canonical(rows_b)
    assert rows_a.num_rows == rows_b.num_rows > 0
    assert precommit(config, plan.epoch, SparkStager(spark)).outcome is Outcome.REUSED_STAGE


def _computed(rows: Any) -> list[dict[str, Any]]:
    """A staged epoch's computed rows, without its precommit row (who staged it and when), in
    the order of their texts: equal for equal multisets of rows."""
    return sorted((row for row in rows.to_pylist() if row["kind"] != PRECOMMIT),
                  key=lambda row: repr(sorted(row.items())))


def _canonical(rows: Any) -> list[str]:
    """``_computed`` as texts."""
    return [repr(sorted(row.items())) for row in _computed(rows)]


@pytest.mark.parametrize("shape", ["clicks", "pageviews: every aggregation, sessions"])
def test_the_driver_and_the_executors_stage_the_same_rows(tmp_path: Path, kafka: str,
                                                          spark: Any, shape: str) -> None:
    """``spark.collect_rows`` decides who writes an epoch's files (the driver, from the
    windows and side rows collected apart, with the emit rule and the cast applied there; or
    the executors, from one DataFrame cast by Spark). Each epoch is staged both ways, the first
    attempt aborted, and the committed writer alternates, so each resumes from state the other
    wrote. Epoch 1 also runs with a ``collect_rows`` below what epoch 0 staged: predicted big,
    the executors write it. Every aggregation on every type it takes is staged both ways too
    (its state and output columns are what the driver casts)."""
    def with_limit(config: PipelineConfig, rows: int) -> PipelineConfig:
        return config.model_copy(
            update={"spark": config.spark.model_copy(update={"collect_rows": rows})})

    if shape == "clicks":
        config = write_pipeline(tmp_path, epoch={"max_records": 1000})
        spec = GeneratorSpec(events=3000, keys=30, interval_ms=20, disorder_ms=1500,
                             late_fraction=0.05, late_delay_ms=20_000, bad_fraction=0.05,
                             seed=11)
        send(generate(spec), spec.events, config.kafka.topic, client_settings(),
             progress=False)
    else:
        config = pageview_pipeline(tmp_path, "session", produce(MESSY),
                                   epoch={"max_records": 1000})
    writers = [("executors", with_limit(config, 0)), ("driver", config)]
    kinds: Counter = Counter()
    for n in range(3):  # 1,000 records each
        plan = begin(config, run_id=f"writers-{n}")
        attempts = [("predicted big", with_limit(config, 5)), *writers] if n == 1 else writers
        staged = {}
        for i, (name, attempt) in enumerate(attempts):
            if i:
                assert abort(config, plan.epoch, "the next writer's turn") is Outcome.ABORTED
            result = precommit(attempt, plan.epoch, SparkStager(spark))
            expected = "executors" if name == "predicted big" else name
            assert (result.outcome, result.written_by) == (Outcome.STAGED, expected)
            staged[name] = _computed(staged_epoch(tables_for(config), plan.epoch, plan.hash))
            assert staged[name] == staged[attempts[0][0]], name
        kinds.update(r["kind"] for r in staged["driver"])
        assert commit(config, plan.epoch).outcome is Outcome.COMMITTED
        writers.reverse()
    assert all(kinds[k] > 0 for k in ("output", "late", "quarantine")), kinds
    assert kinds["state"] > 0 and kinds["change"] > 0, kinds  # epoch 0 a snapshot, then changes
    report = audit(config)
    assert report.ok, report.render()


@pytest.mark.parametrize("epochs", [1, 3, 10])
def test_any_split_into_epochs_gives_the_same_target(
    tmp_path_factory: pytest.TempPathFactory, kafka: str, spark: Any, epochs: int,
    split_results: dict[int, Counter],
) -> None:
    """Disorder inside the allowed lateness: no event is late, so epoch boundaries don't matter.

    Records arrive in ``epochs`` chunks with an epoch after each (uncapped), as a live topic would.
    """
    spec = GeneratorSpec(events=4000, keys=25, interval_ms=15, disorder_ms=1500, seed=77)
    records = list(generate(spec))
    config = write_pipeline(tmp_path_factory.mktemp(f"split{epochs}"))
    chunk = math.ceil(len(records) / epochs)
    plans = []
    for i in range(epochs):
        part = records[i * chunk : (i + 1) * chunk]
        send(part, len(part), config.kafka.topic, client_settings(), progress=False)
        plans.append(run_epoch(config, f"split-{i}", spark=spark).plan)
    assert sum(p.records for p in plans) == spec.events
    assert read_table(delta_path(config, "late")).num_rows == 0
    assert audit(config).ok
    split_results[epochs] = target_windows(config)
    assert sum(split_results[epochs].values()) > 0
    reference = next(iter(split_results.values()))
    assert split_results[epochs] == reference


@pytest.fixture(scope="module")
def split_results() -> dict[int, Counter]:
    return {}


def test_fresh_process_resumes_from_committed_state(tmp_path: Path, kafka: str,
                                                   spark_server: dict) -> None:
    """`eos run` in new processes (spark-submit each epoch) resumes offsets and open windows."""
    config = write_pipeline(tmp_path, window={"size": "5s", "allowed_lateness": "1s"})
    spec = GeneratorSpec(events=2000, keys=10, interval_ms=10, disorder_ms=500, seed=3)
    records = list(generate(spec))
    eos = [sys.executable, "-m", "eos.tools.cli"]
    for half in (records[:1000], records[1000:]):
        send(half, len(half), config.kafka.topic, client_settings(), progress=False)
        out = subprocess.run([*eos, "run", "--config", str(config.source_path), "--epochs", "1"],
                             capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "committed" in out.stdout
    verify = subprocess.run([*eos, "verify", "--config", str(config.source_path)],
                            capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "verdict: OK" in verify.stdout
    status = subprocess.run([*eos, "status", "--config", str(config.source_path)],
                            capture_output=True, text=True, check=True)
    assert "last committed epoch: 1" in status.stdout and "lag" in status.stdout
    assert "last audit" in status.stdout and ": OK (epochs 0..1, 0 problem(s))" in status.stdout
    shown = pipeline_status(config)
    assert [(e.epoch, e.state, e.records) for e in shown.epochs] == [
        (0, EpochState.COMMITTED, 1000), (1, EpochState.COMMITTED, 1000)]
    assert shown.lag == 0 and shown.last_audit is not None and shown.last_audit.ok
    assert [e.epoch for e in pipeline_status(config, limit=1).epochs] == [1]
    assert all(e.durations_ms["begin"] and e.durations_ms["precommit"] and e.durations_ms["commit"]
               for e in shown.epochs)


def test_status_of_a_pipeline_that_never_ran_creates_nothing(tmp_path: Path, kafka: str) -> None:
    """``eos status`` and the epochs view only read: no table appears, no sink is prepared."""
    config = write_pipeline(tmp_path)
    shown = pipeline_status(config)
    assert (shown.committed_epoch, shown.epochs, shown.last_audit) == (-1, [], None)
    assert shown.lag_error is not None and config.kafka.topic in shown.lag_error
    assert not Path(tables_for(config).root).exists()
    assert "last committed epoch: none" in render(shown)


def test_status_before_the_first_epoch_shows_the_backlog(tmp_path: Path, kafka: str) -> None:
    """Before any checkpoint, the lag is what the first epochs will read (the plan's start rule:
    the log start, or nothing with ``kafka.start: latest``), not unknown."""
    config = write_pipeline(tmp_path)
    records = list(generate(GeneratorSpec(events=300, keys=5, seed=5)))
    send(records, len(records), config.kafka.topic, client_settings(), progress=False)
    shown = pipeline_status(config)
    assert shown.committed_epoch == -1 and shown.lag_error is None
    assert shown.lag == 300, shown.partitions
    assert all(p.committed == 0 and p.lag == p.high for p in shown.partitions), shown.partitions
    rendered = render(shown)
    assert all(f"{p.lag:>8}" in rendered for p in shown.partitions), rendered
    # the epochs view's status (the broker read in the background, the tables now) agrees
    from eos.airflow.epochs_cache import read_broker, recorded_status

    assert recorded_status(config, 0, read_broker(config)).lag == 300
    # the same topic read by a pipeline that starts at the end: nothing to catch up on
    latest = write_pipeline(tmp_path / "latest", kafka={"topic": config.kafka.topic,
                                                       "start": "latest"})
    assert pipeline_status(latest).lag == 0


def test_phase_processes_exit_cleanly_after_reading_delta(tmp_path: Path, kafka: str) -> None:
    """A phase that did its work must not exit non-zero: reading Delta through delta-rs' Python
    filesystem made 50 of 60 `eos begin` processes abort at interpreter shutdown (SIGABRT)."""
    config = write_pipeline(tmp_path)
    records = list(generate(GeneratorSpec(events=200, keys=5, seed=11)))
    send(records, len(records), config.kafka.topic, client_settings(), progress=False)
    eos = [sys.executable, "-m", "eos.tools.cli"]
    for attempt in range(12):
        out = subprocess.run([*eos, "begin", "--config", str(config.source_path), "--run-id", "r"],
                             capture_output=True, text=True, check=False)
        assert out.returncode == 0, f"attempt {attempt}: {out.returncode} {out.stderr[-2000:]}"
    status = subprocess.run([*eos, "status", "--config", str(config.source_path)],
                            capture_output=True, text=True, check=False)
    assert status.returncode == 0, status.stderr[-2000:]


def test_missing_topic_fails_before_anything_is_written(tmp_path: Path, kafka: str) -> None:
    config = write_pipeline(tmp_path, kafka={"topic": "never-produced-topic-zz"})
    with pytest.raises(TopicMissing, match="never-produced-topic-zz"):
        begin(config, run_id="missing")
    tables = ensure_tables(config)
    assert read_table(tables.epochs).num_rows == 0


def test_unreachable_kafka_fails_clearly_and_stages_nothing(
    tmp_path: Path, kafka: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_pipeline(tmp_path)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    with pytest.raises(KafkaUnavailable, match=r"127\.0\.0\.1:1 did not answer"):
        begin(config, run_id="down")
    staged = read_existing(tables_for(config).staging)
    assert staged is None or staged.num_rows == 0


def test_audit_of_a_pipeline_with_a_subset_of_aggregations(tmp_path: Path, kafka: str,
                                                           spark: Any) -> None:
    """A pipeline computing two of the clicks aggregations used to make `eos verify` report
    every window as an unexpected row (it compared all five); it compares the configured ones."""
    config = write_pipeline(tmp_path, aggregations={"count": "count(*)", "max": "max(value)"})
    spec = GeneratorSpec(events=1500, keys=10, interval_ms=20, disorder_ms=500, seed=5)
    send(generate(spec), spec.events, config.kafka.topic, client_settings(), progress=False)
    run_until_caught_up(config, "subset", spark=spark)
    target = read_table(delta_path(config, "target"))
    assert target.column_names == ["key", "window_start", "window_end", "count", "max", "epoch"]
    report = audit(config)
    assert report.ok, report.render()
    assert report.counts["delta:target"] == (target.num_rows, target.num_rows) != (0, 0)
