"""Smoke test of the benchmarks: the smallest mode runs end to end and prints every figure.

No timing thresholds: the figures depend on the machine and on whatever else runs on it. This
only proves that ``python -m bench`` works and that its table is complete.
"""

from __future__ import annotations

# bench.epochs_view imports airflow: point it at the tests' throwaway AIRFLOW_HOME first.
import support.airflow_home  # noqa: F401  # isort: skip

import sys
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project root holds bench/

from bench import (
    epochs_view,
    overhead,
    read_path,
    rewind,
    sink_commits,
    staging_writers,
    state_scale,
    sweep,
    task_startup,
)
from bench.__main__ import options_from, parse_args
from bench.env import environment
from bench.report import FIGURES, NA, plot, render
from bench.run import run

from support.postgres import missing_reason as postgres_missing

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_quick_benchmark_prints_every_figure(
    kafka: str, spark: Any, data_dir: Path, tmp_path: Path
) -> None:
    argv = ["--quick", "--events", "2500", "--keys", "50", "500", "--key-events", "2000",
            "--epochlog-epochs", "3", "--warmup-events", "0",
            "--workdir", str(tmp_path / "bench")]
    opts = options_from(parse_args(argv), argv)
    results = run(opts, spark=spark, log=lambda _msg: None)
    table = render(results)

    lines = table.splitlines()
    for figure in FIGURES:
        found = [line for line in lines if line.startswith(figure)]
        assert found, f"figure {figure!r} missing from the table:\n{table}"
        assert NA not in found[0], f"figure {figure!r} has no value: {found[0]}"
    for section in ("== goals ==", "== one epoch, phase by phase ==", "== state size vs keys",
                    "== per-record cost", "== Spark read+parse"):
        assert section in table
    assert results["sizes"][0]["events"] == 2500
    assert [k["keys"] for k in results["keys"]] == [50, 500]

    png = tmp_path / "scaling.png"
    plot(results, png)
    assert png.stat().st_size > 0
    assert "| figure |" in render(results, markdown=True)


def test_epochs_view_benchmark_prints_every_figure(kafka: str, spark: Any, data_dir: Path,
                                                   tmp_path: Path) -> None:
    with environment(tmp_path / "view", spark=spark) as env:
        rows, shown = epochs_view.measure(env, epochs=3, epoch_records=100, repeat=1)
    assert shown == 3
    assert [label for label, _, _ in rows] == [
        "status (pipeline_status)", "page (HTML)", "json (API)", "index"]
    assert all(ms > 0 for _, ms, _ in rows)
    assert "median of 1" in epochs_view.render(rows, shown, 1)


def test_overhead_benchmark_counts_each_phase(kafka: str, spark: Any, data_dir: Path,
                                             tmp_path: Path) -> None:
    with environment(tmp_path / "overhead", spark=spark) as env:
        probes = overhead.measure(env, at=[3], probes=2, log=lambda _msg: None,
                                  sink_log_retention_ms=0)
        target = env.workdir / "tables" / "overhead" / "target"
    assert DeltaTable(str(target)).metadata().configuration[
        "delta.logRetentionDuration"] == "interval 0 seconds"
    assert [p.epochs_logged for p in probes] == [3]
    calls = probes[0].calls
    # begin reads the log once and the last checkpoint once; commit reads log (the plan),
    # staging and the previous checkpoint once each, and the log's rewind rows before it seals
    # the epoch (the staging fence): never a table twice for one question (the Delta calls per
    # phase measured on 2026-11-22, plus the fence's one read).
    assert calls["begin"]["reads"] == 2, calls
    assert calls["commit"]["reads"] == 4, calls
    assert probes[0].begin_ms > 0 and probes[0].commit_ms > 0
    assert "| 3 |" in overhead.render(probes)


def test_state_scale_benchmark_carries_the_injected_windows(kafka: str, spark: Any,
                                                            data_dir: Path,
                                                            tmp_path: Path) -> None:
    with environment(tmp_path / "state", spark=spark) as env:
        snapshot, changes = (state_scale.measure(env, windows=3000, epoch_records=400,
                                                 log=lambda _msg: None, snapshot_every=every)
                             for every in (1, None))
    # The 3,000 injected open windows stay open (one-day windows) next to the generator's keys:
    # a snapshot stages them all again, changes only the windows the 400 records touched.
    assert snapshot["records"] == changes["records"] == 400
    assert snapshot["mode"] == "snapshot" and changes["mode"] == "changes"
    assert 3000 < snapshot["state_written"] <= 3000 + 1000, snapshot
    assert changes["state_written"] == 0 and 0 < changes["change_written"] <= 400, changes
    assert changes["staged_mb"] < snapshot["staged_mb"]  # small files: mostly their footers
    assert snapshot["written_by"] == "driver", snapshot  # 4,400 rows at most: collected
    table = state_scale.render([snapshot, changes])
    for label, _, _ in state_scale.ROWS:
        assert label in table and "n/a" not in table.split(label, 1)[1].splitlines()[0], label
    assert "changes: epoch on" not in state_scale.ratios([snapshot, changes])  # one size each
    assert state_scale.plot([snapshot, changes], 400).startswith("<svg")


def test_rewind_benchmark_replays_and_verifies(kafka: str, spark: Any, data_dir: Path,
                                               tmp_path: Path) -> None:
    with environment(tmp_path / "rewind", spark=spark) as env:
        result = rewind.measure(env, epochs=4, records=300, log=lambda _msg: None)
    assert [(r["to_epoch"], r["rewound"]) for r in result["rewinds"]] == [(1, 2), (-1, 4)]
    assert all(r["verified"] and r["tables"] == 5 for r in result["rewinds"]), result
    assert "| -1 | 4 | 5 |" in rewind.render(result)


def test_staging_writers_benchmark_stages_each_pipeline_by_its_writer(
        kafka: str, spark: Any, data_dir: Path, tmp_path: Path) -> None:
    with environment(tmp_path / "writers", spark=spark) as env:
        timings = staging_writers.measure(env, epochs=2, epoch_records=500, warmup=200,
                                          log=lambda _msg: None)
    # measure() itself raises if an epoch read other records or was staged by the other writer.
    assert {name: len(runs) for name, runs in timings.items()} == {"driver": 2, "executors": 2}
    table = staging_writers.render(timings)
    assert "| driver | 2 |" in table and "| executors | 2 |" in table


def test_task_startup_benchmark_prints_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    assert task_startup.main(["--tasks", "1", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "| a task's start-up" in out and "preloaded by the scheduler" in out
    assert "saved per task:" in out


def test_read_path_benchmark_reads_every_record_each_way(kafka: str, spark: Any, data_dir: Path,
                                                        tmp_path: Path) -> None:
    with environment(tmp_path / "read", spark=spark) as env:
        plan, seconds = read_path.measure(env, "bench-read-path-smoke", 3_000, repeat=1)
    assert plan.records == 3_000  # measure() checks every way counted them all
    assert set(seconds) == {"Spark read stage", "Spark read+parse",
                            "Spark read+parse, through the eos_kafka data source",
                            "Spark read+parse, a split per partition", read_path.BARE}
    assert "| Spark read+parse |" in read_path.render(plan, seconds)




@pytest.mark.skipif(postgres_missing() is not None, reason=str(postgres_missing()))
def test_sink_commits_benchmark_commits_a_new_epoch_to_every_sink(
        kafka: str, spark: Any, data_dir: Path, tmp_path: Path) -> None:
    kinds = ["delta", "kafka", "postgres", "files", "iceberg"]
    with (environment(tmp_path / "sinks", spark=spark) as env,
          sink_commits.places(env.workdir, kinds) as where):
        figures = sink_commits.measure(env, [40, 90], kinds, where, repeat=1, warmup=1,
                                       log=lambda _msg: None)
    # measure() raises unless each commit wrote its epoch and, at the end, every sink read back
    # both epochs' rows once.
    assert {n: {k: len(t.total) for k, t in by.items()} for n, by in figures.items()} == {
        n: dict.fromkeys(kinds, 1) for n in (40, 90)}
    table = sink_commits.render(figures, where, {40: 4, 90: 4})
    assert "| 90 | postgres |" in table and "| 40 | delta |" in table, table
    assert "| 90 | iceberg |" in table and "SQL catalog on SQLite" in table, table
    assert "| 1.00x |" in table and "librdkafka's mock cluster" in table, table


def test_the_fair_baseline_computes_what_eos_commits(kafka: str, spark: Any, data_dir: Path,
                                                     tmp_path: Path) -> None:
    """The sweep's ALO with state is equal work: epoch after epoch on eos's ranges, with its
    state carried, it appends exactly the windows, late rows and quarantine rows eos
    commits (the plain ALO, from an empty state each epoch, does not: it is kept apart)."""
    from eos.core.delta import read_table

    with environment(tmp_path / "sweep", spark=spark) as env:
        result = sweep.run(env, [300, 900], epochs=2, warmup=1, partitions=4,
                           log=lambda _msg: None, topic="bench-sweep-smoke")
        eo, alo = (Path(env.workdir / "tables" / name) for name in ("sweep-eo", "sweep-alo"))
        for eo_table, alo_table in (("target", "alo-windows"), ("late", "alo-late"),
                                    ("quarantine", "alo-quarantine")):
            ours, theirs = (read_table(str(path)) for path in (eo / eo_table, alo / alo_table))
            assert ours.num_rows > 0, eo_table
            keys = [(name, "ascending") for name in ours.column_names
                    if name not in ("raw_value", "raw_key")]
            assert ours.sort_by(keys).equals(
                theirs.select(ours.column_names).sort_by(keys)), eo_table
    assert [s.records for s in result.samples] == [300, 300, 900, 900]
    assert all(set(s.seconds) == set(sweep.WAYS) for s in result.samples)
    assert "| 900 | 2 |" in sweep.render(result, markdown=True)

