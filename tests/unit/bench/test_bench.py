"""The benchmarks' parts that need no broker, Spark or Airflow: the Delta log benchmark on local
tables, and the DAG-runs benchmark's turns and report."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project root holds bench/

from bench import dag_runs, deltalog, storage, sweep


def test_delta_log_benchmark_times_kept_and_cleaned_logs() -> None:
    rows = deltalog.run([12], repeat=2)
    assert [label for _, label, _ in rows] == ["kept (30-day default)", "cleaned up"]
    kept, cleaned = rows[0][2], rows[1][2]
    assert cleaned["log files"] < kept["log files"]  # the cleanup really removed commit files
    assert all(ms > 0 for name, ms in kept.items() if name != "log files")
    assert "| 12 | cleaned up |" in deltalog.render(rows)


def test_dag_runs_take_turns_and_print_the_seconds_by_place() -> None:
    # Over four epochs each DAG run is in each place once (a fixed order charged what a run
    # leaves on the shared server to the same next way every epoch).
    places = {way: sorted(dag_runs.turns(i).index(way) for i in range(4))
              for way in dag_runs.DAG_WAYS}
    assert places == {way: [0, 1, 2, 3] for way in dag_runs.DAG_WAYS}
    figures = dag_runs.Figures(records=[10, 10, 10, 10])
    for i in range(4):
        for place, way in enumerate(dag_runs.turns(i)):
            seconds = 1.0 + place + (way == dag_runs.ALO) + 0.5 * (way == dag_runs.ALO_STATE)
            figures.seconds[way].append(seconds)
            figures.by_place.setdefault((way, place), []).append(seconds)
        figures.seconds[dag_runs.ALO_IN_PROCESS].append(1.0)
        figures.seconds[dag_runs.EO_IN_PROCESS].append(1.25)
        for way in dag_runs.DAG_WAYS:
            figures.waited[way].append(2.0)
        figures.tasks.append({"begin": 0.1, "precommit": 1.0, "commit": 0.1, "span": 1.5,
                              "begin -> precommit": 0.2, "precommit -> commit": 0.1})
        figures.one_task.append({"epoch": 1.2})
    out = dag_runs.render(figures)
    assert "| at-least-once DAG run | 2.00 | 3.00 | 4.00 | 5.00 |" in out, out
    assert "| exactly-once DAG run, one task | 1.00 | 2.00 | 3.00 | 4.00 |" in out, out
    # 10 s over four runs each way: ALO with state 12 s, plain ALO 14 s, ALO in-process 4 s
    assert "| exactly-once DAG run | 2.50 | 2.00 | 4 | 1.20x | 1.40x | 0.40x |" in out, out
    # one task 2.5 and ALO 3.5 (medians), in-process 1.25 and 1.0
    assert "| in-process | 1.25 | 1.00 | +0.25 |" in out, out
    assert "| DAG run - in-process (Airflow's share) | 1.25 | 2.50 | -1.25 |" in out, out
    assert "| three tasks | 0.10 | 1.00 | 0.10 | 0.30 | 0.20 | 0.10 |" in out, out



def test_store_requests_are_named_by_table_and_object() -> None:
    root = "/eos/bench-1/storage-s3-ab"
    assert [storage.request_kind(line) for line in (
        f"GET {root}/staging/_delta_log/00000000000000000012.json",
        f"GET {root}/staging/_delta_log/00000000000000000010.checkpoint.parquet",
        "GET /eos/?list-type=2&prefix=bench-1%2Fstorage-s3-ab%2Fepochs%2F_delta_log%2F",
        f"HEAD {root}/checkpoints/_delta_log/_last_checkpoint",
        f"PUT {root}/staging/epoch=3/attempt-ab/rows/part-0.parquet",
        f"HEAD {root}/staging/epoch%3D3/attempt-ab/state/part-0.parquet",
        f"POST {root}/out/event_date=2026-11-27/part-1.parquet?uploads",
    )] == ["GET staging commit", "GET staging checkpoint", "LIST epochs _delta_log",
           "HEAD checkpoints _last_checkpoint", "PUT staging data", "HEAD staging data",
           "POST out data"]


def test_the_sweep_fits_fixed_and_per_record_cost_and_prints_both_ratios() -> None:
    # eos: 1.0 s + 2 us per record; the fair ALO 0.5 s + 2 us; the plain ALO 0.4 s + 1 us.
    samples = [sweep.Sample(n, {"eos": 1.0 + 2e-6 * n, "alo_state": 0.5 + 2e-6 * n,
                                "alo_plain": 0.4 + 1e-6 * n})
               for n in (100_000, 200_000, 400_000) for _ in range(2)]
    result = sweep.Sweep(samples)
    fit = result.fit("eos")
    assert abs(fit.fixed - 1.0) < 1e-9 and abs(fit.per_record - 2e-6) < 1e-15
    assert round(result.ratio(200_000), 3) == round(0.9 / 1.4, 3)
    out = sweep.render(result, markdown=True)
    assert "| 200,000 | 2 | 1.40 (1.40-1.40) | 0.90 (0.90-0.90) | 0.60 (0.60-0.60) | 0.64x | " \
        "0.43x |" in out, out
    assert "fixed cost +0.500 s per epoch, per-record cost ratio 1.000" in out, out
    assert "ratio at 400k 0.72x vs at 200k 0.64x" in out, out
    assert sweep.plot(result).lstrip().startswith("<?xml")


def test_a_line_needs_two_epoch_sizes() -> None:
    with pytest.raises(ValueError, match="two sizes"):
        sweep.Fit.of([(100, 1.0), (100, 1.1)])


def test_the_ingestion_table_sets_each_way_beside_the_bare_consumer() -> None:
    from bench import ingest

    result = ingest.Result(events=200, eo=[2.0, 2.0], stream=[1.6, 1.6], bare=[0.4, 0.4],
                           spark_only=[1.0, 1.0], eo_rows=190, peer_rows=190, quarantined=2)
    out = ingest.render(result, 100, markdown=True)
    assert "| records/s | 50 | 62 | 250 | 100 |" in out, out
    assert "| eos over it | 1.00x | 0.80x | 0.20x | 0.50x |" in out, out
    assert "| over the bare consumer | 0.20x | 0.25x | 1.00x | 0.40x |" in out, out
