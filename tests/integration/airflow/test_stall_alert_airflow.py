"""A stall alert end to end in a real ``airflow standalone``: the API server records the run's
deadline when the run is triggered, the scheduler finds it missed, the triggerer runs
``eos.airflow.alerts.stall_alert``, which reads the pipeline's checkpoint table and its topic on
the test broker and tells the notifier. Nothing is called directly.

The DAG stays paused, so its triggered run stays queued and never succeeds: the simplest stuck
run (a run stuck behind a failed one, or failing, misses its deadline the same way: the deadline
only asks whether the run succeeded in time). The same start also checks ``eos ui``'s
environment keeps Airflow's output quiet (no alembic ``setup plugin`` lines).
"""

from __future__ import annotations

# Must come first: it points Airflow at a throwaway AIRFLOW_HOME before airflow is imported.
import support.airflow_home  # noqa: F401  # isort: skip

import json
import os
import time
from pathlib import Path

import pytest

from eos.tools.generator import GeneratorSpec

from support.airflow_standalone import TESTS_DIR, running_airflow, wait_for
from support.alert_notifier import PATH as NOTIFIER
from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

STALL_AFTER_S = 20


@pytest.mark.timeout(900)
def test_a_queued_run_that_misses_its_deadline_alerts_through_the_triggerer(
        tmp_path: Path, data_dir: Path, kafka: str) -> None:
    sent = tmp_path / "sent.json"
    config = make_pipeline(
        tmp_path / "pipelines", dag=(data_dir, "alsa"),
        records=GeneratorSpec(events=120, keys=3, seed=3),
        alerts={"stall_after": f"{STALL_AFTER_S}s", "notifier": NOTIFIER,
                "notifier_kwargs": {"path": str(sent), "text": "{{ message }}"}})
    home = tmp_path / "home"
    home.mkdir()
    started = time.monotonic()
    # The triggerer imports the notifier by its dotted path: tests/ on its path.
    path = os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")]))
    with running_airflow(home, [config], data_dir,
                         extra_env={"PYTHONPATH": path}) as airflow:
        wait_for(f"{config.dag_id} to be parsed",
                 lambda: airflow.api("GET", f"/api/v2/dags/{config.dag_id}")["is_paused"],
                 120, airflow.problem)
        run = airflow.api("POST", f"/api/v2/dags/{config.dag_id}/dagRuns",
                          json={"logical_date": None})
        assert run["state"] == "queued"
        wait_for("the stall alert's notification", sent.exists, STALL_AFTER_S + 120,
                 airflow.problem)
        notified = json.loads(sent.read_text())
        assert notified["run_id"] == run["dag_run_id"]
        assert notified["text"] == (f"pipeline {config.name} is stalled: no epoch committed yet, "
                                    "120 records waiting")
        stall = notified["stall"]
        assert (stall["verdict"], stall["lag"], stall["dag_id"], stall["stall_after_s"]) == (
            "stalled", 120, config.dag_id, STALL_AFTER_S)
        output = airflow.output.read_text(errors="replace")
    print(f"standalone start to alert: {time.monotonic() - started:.0f} s; "
          f"{len(output.splitlines())} lines of output")
    # The alert line, in the triggerer's output (where deadline callbacks log).
    assert (f"eos alert: stall pipeline={config.name} dag_id={config.dag_id} "
            f"run_id={run['dag_run_id']} verdict=stalled committed_epoch=-1") in output
    # eos ui's environment: no alembic chatter, no deprecation warnings about Airflow's imports.
    assert "setup plugin" not in output
    assert "DeprecatedImportWarning" not in output
    assert "Not time to refresh bundle" not in output
