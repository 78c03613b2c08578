"""``python -m bench.epochs_view``: how long the Airflow UI's epochs view takes for a pipeline
with 50 epochs (the goal: "in under a second", measured, not asserted).

A pipeline runs ``--epochs`` non-empty epochs in-process (``bench.scenarios.eo_epoch``, run ids
shaped like Airflow's so every row has its links), is verified once (so the page has a verdict),
and then the view is timed, median of ``--repeat``:
- ``status``: ``eos.core.pipeline_status.pipeline_status(limit=50)``, what every page and ``eos
status`` read
  (epoch log and checkpoints of those epochs, each sink's marker, the topic's high watermarks);
- ``page``: ``GET /pipelines/<name>`` on the plugin's FastAPI app in this process (Starlette's
  test client; Airflow's authentication dependency replaced by a fixed user, since the app's
  own work is what is measured; tests/integration/airflow/test_epochs_view.py covers the real
  login);
- ``json``: ``GET /api/pipelines/<name>``;
- ``index``: ``GET /`` (every pipeline's committed epoch and verdict).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench import scenarios as sc
from bench.env import Env, environment


def timed(call: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Median milliseconds of ``call`` over ``repeat`` runs (after one untimed warm-up)."""
    result = call()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result


Row = tuple[str, float, str]  # what, median ms, response size


def measure(env: Env, epochs: int, epoch_records: int, repeat: int) -> tuple[list[Row], int]:
    """Run ``epochs`` epochs and one audit, then time the view; the rows and the epochs shown."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from eos.airflow.epochs_app import create_app
    from eos.core.config import PIPELINES_DIR_ENV
    from eos.core.pipeline_status import pipeline_status
    from eos.tools.audit.verify import verify

    config = env.config("view", "bench-view", max_records=epoch_records)
    sc.produce_topic(env, "bench-view", epochs * epoch_records)
    for i in range(epochs):
        sc.eo_epoch(config, env.spark, f"manual__bench-{i}")
    verify(config)
    # The view asks Airflow's auth manager per DAG: initialise the default one (Simple), and
    # stand in an admin for the login it would otherwise require.
    os.environ.setdefault("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "True")
    init_auth_manager()
    app = create_app()
    app.dependency_overrides[get_user] = lambda: SimpleAuthManagerUser(username="bench",
                                                                       role="admin")
    client = TestClient(app)

    def get(path: str) -> Callable[[], object]:
        def call() -> object:
            response = client.get(path)
            response.raise_for_status()
            return response
        return call

    # The app lists pipelines from the pipelines directory: the bench's, while measuring.
    previous = os.environ.get(PIPELINES_DIR_ENV)
    os.environ[PIPELINES_DIR_ENV] = str(Path(config.source_path).parent)
    try:
        status_ms, status = timed(lambda: pipeline_status(config, limit=50), repeat)
        rows: list[Row] = [("status (pipeline_status)", status_ms, "-")]
        for label, path in (("page (HTML)", f"/pipelines/{config.name}"),
                            ("json (API)", f"/api/pipelines/{config.name}"), ("index", "/")):
            ms, response = timed(get(path), repeat)
            rows.append((label, ms, f"{len(response.content) / 1024:.0f} KiB"))
    finally:
        if previous is None:
            os.environ.pop(PIPELINES_DIR_ENV, None)
        else:
            os.environ[PIPELINES_DIR_ENV] = previous
    return rows, len(status.epochs)


def render(rows: list[Row], shown: int, repeat: int) -> str:
    lines = [f"Epochs view of a pipeline with {shown} epochs shown, median of {repeat}:",
             f"{'what':<26} {'ms':>8} {'size':>9}"]
    lines += [f"{label:<26} {ms:>8.0f} {size:>9}" for label, ms, size in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.epochs_view",
                                description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=50, help="epochs to run and show (default 50)")
    p.add_argument("--epoch-records", type=int, default=200, help="records per epoch (default 200)")
    p.add_argument("--repeat", type=int, default=7, help="timed requests per figure (default 7)")
    p.add_argument("--workdir", type=Path, help="keep tables here instead of a temp dir")
    args = p.parse_args(argv)
    with environment(args.workdir) as env:
        print(f"running {args.epochs} epochs of {args.epoch_records} records...", file=sys.stderr)
        rows, shown = measure(env, args.epochs, args.epoch_records, args.repeat)
    print("\n" + render(rows, shown, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
