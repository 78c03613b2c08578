"""The DAG under the real Airflow scheduler: backfills, and per-phase task logs over the REST API.

tests/integration/airflow/test_dags.py drives runs through ``DAG.test()``; here nothing is
in-process. One ``airflow standalone`` (API server, scheduler with the LocalExecutor, DAG processor,
triggerer) runs in a process group of its own with a throwaway AIRFLOW_HOME (SQLite), the project's
dags/ folder building two DAGs from test pipeline YAMLs (``EOS_PIPELINES_DIR``, monthly schedule),
the embedded broker (found by every task through ``EOS_DATA_DIR``) and ``spark_default`` naming
``local[2]``: the environment ``eos ui`` gives Airflow (``eos.airflow.environment.airflow_env``).
Each pipeline's topic holds 2,400 events, and ``epoch.max_records`` is 1,000: three non-empty
epochs.

What it proves:
- ``airflow backfill create --max-active-runs 1`` over three logical dates creates three runs
  that the scheduler runs one after the other, each processing the next epoch (0, 1, 2 in
  logical-date order, none reprocessed, none skipped): the checkpoint ends at epoch 2 and
  the independent audit agrees with Kafka;
- a person reading the logs of ``begin``, ``precommit`` and ``commit`` through the API server
  (logged in as ``admin`` with the generated password) finds each phase's structured
  ``phase=... epoch=N plan_hash=H`` line, with the run's epoch and plan hash;
- with Airflow's default backfill (``airflow backfill create`` with no flag: reprocess behaviour
  "none", every run active at once, only ``begin``'s wait for earlier runs keeps the order) and
  the first commit crashing between two sinks, the
  retried commit skips the sink already committed, and each run still processes the next epoch
  (a regression test for the ``begin >> commit`` edge in ``eos.airflow.pipeline_dag``).
Everything Airflow started (the whole process group and any descendant) is gone afterwards.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from eos.core import epochlog
from eos.core.config import PipelineConfig
from eos.core.layout import tables_for
from eos.core.protocol import checkpointed_epoch
from eos.tools.audit.verify import audit
from eos.tools.generator import GeneratorSpec

from support.airflow_standalone import (
    RUNS,
    SCHEDULE,
    Airflow,
    backfill,
    phase_line,
    running_airflow,
    summarize,
    task_instance,
    task_log,
)
from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]

EVENTS = 2400  # epoch.max_records 1000: epochs of 1000, 1000 and 400 records
SPEC = GeneratorSpec(
    events=EVENTS, keys=20, interval_ms=250, late_fraction=0.02, late_delay_ms=30_000,
    bad_fraction=0.02, seed=20260102,
)


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, kafka: str
              ) -> dict[str, PipelineConfig]:
    """Two pipelines (two DAGs), each on its own topic holding SPEC's records."""
    directory = tmp_path_factory.mktemp("sched-pipelines")
    return {test: make_pipeline(directory, dag=(data_dir, prefix), records=SPEC,
                                schedule=SCHEDULE)
            for test, prefix in (("sequential", "afseq"), ("default", "afdef"))}


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory, pipelines: dict[str, PipelineConfig],
            data_dir: Path, kafka: str, spark_server: dict) -> Iterator[Airflow]:
    with running_airflow(tmp_path_factory.mktemp("airflow-home"), list(pipelines.values()),
                         data_dir) as instance:
        yield instance


def assert_one_epoch_per_run_in_order(airflow: Airflow, config: PipelineConfig,
                                      runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run i (logical-date order) processed epoch i, after run i-1 committed; return the plans."""
    dag_id = config.dag_id
    summary = summarize(airflow, dag_id)
    tables = tables_for(config)
    plans = [epochlog.plan_row_for_run(tables, run["dag_run_id"]) for run in runs]
    assert all(plans), (plans, summary)
    begins = "\n".join(
        line for run in runs for line in task_log(airflow, dag_id, run["dag_run_id"], "begin")
        if "phase=begin " in line
    )
    assert [row["epoch"] for row in plans] == list(range(RUNS)), f"{summary}\n{begins}"
    ranges = [json.loads(row["plan"])["ranges"] for row in plans]
    assert [sum(r["until"] - r["start"] for r in rs) for rs in ranges] == [1000, 1000, 400]
    assert checkpointed_epoch(config) == RUNS - 1

    tis = [{task: task_instance(airflow, dag_id, run["dag_run_id"], task)
            for task in ("begin", "precommit", "commit", "abort")} for run in runs]
    for ti in tis:
        assert {task: t["state"] for task, t in ti.items()} == {
            "begin": "success", "precommit": "success", "commit": "success", "abort": "skipped"
        }, summary
    # One after the other: run i+1's begin started only once run i's commit had succeeded.
    for earlier, later in itertools.pairwise(tis):
        began, committed = later["begin"]["start_date"], earlier["commit"]["end_date"]
        assert datetime.fromisoformat(began) >= datetime.fromisoformat(committed), summary

    report = audit(config)
    assert report.ok, report.render()
    assert report.records == EVENTS
    return plans


@pytest.fixture(scope="module")
def sequential(airflow: Airflow, pipelines: dict[str, PipelineConfig]) -> dict[str, Any]:
    """A backfill of RUNS dates with ``--max-active-runs 1``: Airflow starts one run at a time."""
    config = pipelines["sequential"]
    airflow.arm_commit_crash(False)
    runs = backfill(airflow, config, "--max-active-runs", "1")
    return {"config": config, "runs": runs}


@pytest.mark.timeout(3000)
def test_backfill_runs_one_epoch_per_logical_date_in_order(
    airflow: Airflow, sequential: dict[str, Any]
) -> None:
    assert_one_epoch_per_run_in_order(airflow, sequential["config"], sequential["runs"])


@pytest.mark.timeout(3000)
def test_task_logs_show_each_phase_with_epoch_and_plan_hash(
    airflow: Airflow, sequential: dict[str, Any]
) -> None:
    """What a person reads in the UI's log view of run 2 (epoch 1), fetched from the API server."""
    config: PipelineConfig = sequential["config"]
    dag_id = config.dag_id
    run_id = sequential["runs"][1]["dag_run_id"]
    planned = epochlog.plan_row_for_run(tables_for(config), run_id)
    assert planned is not None and planned["epoch"] == 1
    expected = {"begin": "planned", "precommit": "staged", "commit": "committed"}
    for task_id, outcome in expected.items():
        fields = phase_line(task_log(airflow, dag_id, run_id, task_id), task_id)
        assert fields.get("epoch") == "1", (task_id, fields)
        assert fields.get("plan_hash") == planned["plan_hash"], (task_id, fields)
        assert fields.get("outcome") == outcome, (task_id, fields)
    # Reading the Spark Connect connection warns nothing (Connection.from_json, '_' scheme).
    precommit_log = "\n".join(task_log(airflow, dag_id, run_id, "precommit"))
    assert "from_json" not in precommit_log and "RFC3986" not in precommit_log, precommit_log


@pytest.mark.timeout(3000)
def test_default_backfill_with_a_retried_commit_still_runs_one_epoch_per_run(
    airflow: Airflow, pipelines: dict[str, PipelineConfig]
) -> None:
    """Airflow's default backfill (max_active_runs 10: every run is active at once) relies on
    the DAG's own ordering. The first commit crashes between two sinks and is retried >= 15s
    later: run 2 must not plan (or adopt) anything before run 1 has committed."""
    config = pipelines["default"]
    dag_id = config.dag_id
    counter = airflow.arm_commit_crash(True)
    runs = backfill(airflow, config)

    # Run 1's commit was killed after a side sink and its retry committed the rest.
    assert counter.read_text() == "x"
    first_commit = task_instance(airflow, dag_id, runs[0]["dag_run_id"], "commit")
    assert first_commit["try_number"] >= 2, first_commit
    lines = task_log(airflow, dag_id, runs[0]["dag_run_id"], "commit")
    fields = phase_line(lines, "commit")
    assert (fields["epoch"], fields["outcome"]) == ("0", "committed"), fields
    # The retry skipped what the crashed attempt had committed (the first sink).
    commit_line = next(line for line in reversed(lines) if "phase=commit " in line)
    assert '"delta:target":{"outcome":"already committed"' in commit_line, commit_line

    tables = tables_for(config)
    epochs = [(epochlog.plan_row_for_run(tables, run["dag_run_id"]) or {}).get("epoch")
              for run in runs]
    # Regression: without the begin >> commit edge, run 2 adopted epoch 0 ([0, 0, 1]).
    assert epochs == [0, 1, 2], epochs
    assert_one_epoch_per_run_in_order(airflow, config, runs)
