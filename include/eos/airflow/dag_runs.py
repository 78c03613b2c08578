"""Drive a pipeline's real DAG from Python: ``eos demo`` runs its epochs as Airflow DAG runs.

Each epoch is one ``DAG.test()`` run of the same DAG the scheduler runs (parsed from the DAG file
in the home's ``dags/``, ``eos.airflow.environment``),
in a throwaway Airflow home with a SQLite metadata DB: Airflow's dependency checks, trigger rules
and retries apply; the tasks call the same library code and compute (Spark Connect or
``spark-submit``, per ``compute.mode``) as in production.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from eos.core.config import PipelineConfig, data_dir


@contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Send everything written to stdout/stderr (Airflow's task logs, spark-submit's output) to
    a file at the descriptor level, so the demo's own progress lines stay readable."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with path.open("ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


class DagRunner:
    """Runs successive DAG runs of one pipeline, one epoch each."""

    def __init__(self, config: PipelineConfig, home: Path | None = None) -> None:
        from eos.airflow.environment import airflow_env

        self.config = config
        self.home = home or data_dir() / "airflow-demo"
        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True)
        env = airflow_env([config], self.home)
        database = self.home / "airflow.db"
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{database}?timeout=60"
        # Airflow reads its settings once, at first import: they must be in place before it.
        os.environ.update(env)
        import airflow.settings
        from airflow.utils.db import initdb

        if str(self.home) not in str(airflow.settings.SQL_ALCHEMY_CONN):
            raise RuntimeError("Airflow was imported before its home could be set up")
        with _output_to(self.home / "dag-runs.log"):
            initdb()
            self.dag = self._load_dag()
        self.start = datetime.now(UTC).replace(microsecond=0)

    def _load_dag(self) -> Any:
        from airflow.dag_processing.dagbag import DagBag  # never loads Airflow's examples

        bag = DagBag(dag_folder=str(self.home / "dags"))
        if bag.import_errors:
            raise RuntimeError(f"DAG import errors: {bag.import_errors}")
        return bag.dags[f"eos_{self.config.name}"]

    def run_next(self, index: int) -> dict[str, Any]:
        """One DAG run; a summary of what it committed, read back from the epoch log."""
        from eos.core import checkpoints, epochlog
        from eos.core.layout import tables_for
        from eos.core.plan import Plan

        when = self.start + timedelta(minutes=index)
        started = time.monotonic()
        with _output_to(self.home / "dag-runs.log"):
            run = self.dag.test(logical_date=when, run_after=when)
        instances = run.get_task_instances()
        states = {ti.task_id: ti.state for ti in instances}
        if run.state != "success":
            raise RuntimeError(f"DAG run {run.run_id} ended {run.state}: {states}")
        tables = tables_for(self.config)
        planned = epochlog.plan_row_for_run(tables, run.run_id)
        plan = Plan.from_json(planned["plan"])
        checkpoint = checkpoints.read(tables, plan.epoch)
        return {"epoch": plan.epoch, "plan_hash": plan.hash, "records": plan.records,
                "outcome": "committed", "rows": checkpoint.rows if checkpoint else {},
                "run_id": run.run_id, "seconds": round(time.monotonic() - started, 1),
                "tasks": _task_times(instances)}


def _task_times(instances: list[Any]) -> dict[str, dict[str, float]]:
    """Start, end (epoch seconds) and duration of each task that ran."""
    return {ti.task_id: {"start": ti.start_date.timestamp(), "end": ti.end_date.timestamp(),
                         "seconds": (ti.end_date - ti.start_date).total_seconds()}
            for ti in instances if ti.start_date and ti.end_date}
