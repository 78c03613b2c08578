"""``eos demo``: the main job on the embedded default, end to end, from a clean slate.

Starts the embedded broker, produces sample events, runs epochs until the pipeline has caught up
(through real Airflow DAG runs by default, or ``--via cli``), then prints a summary of the
committed tables and the verdict of the independent audit.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import pyarrow.compute as pc

from eos import broker
from eos.config import PipelineConfig
from eos.kafka import client_settings
from eos.produce import GeneratorSpec, produce
from eos.tables import read_table, tables_for


def reset(config: PipelineConfig) -> None:
    """A demo starts clean: a fresh broker (empty topic) and no tables."""
    broker.stop()
    shutil.rmtree(config.root, ignore_errors=True)
    broker.start(topics=[config.kafka.topic])


def run_until_caught_up(config: PipelineConfig, via: str, max_epochs: int) -> list[dict]:
    from eos.commands import run_epoch

    lines: list[dict[str, Any]] = []
    runner = _airflow_runner(config) if via == "airflow" else None
    session = time.strftime("%Y%m%dT%H%M%S")
    for i in range(max_epochs):
        line = runner(i) if runner else run_epoch(config, run_id=f"demo-{session}-{i}")
        lines.append(line)
        print(
            f"  epoch {line['epoch']:>3}: {line['records']:>7} records -> "
            f"{line['rows'].get('target', 0):>5} windows, {line['rows'].get('late', 0):>4} late, "
            f"{line['rows'].get('quarantine', 0):>4} quarantined  ({line['seconds']}s)",
            flush=True,
        )
        if line["records"] == 0:
            break
    return lines


def _airflow_runner(config: PipelineConfig):
    from eos.dag_runs import DagRunner

    runner = DagRunner(config)
    print(f"      Airflow home {runner.home} (SQLite); task logs: {runner.home / 'dag-runs.log'}",
          flush=True)
    return runner.run_next


def summary(config: PipelineConfig) -> str:
    from eos.status import render_status

    t = tables_for(config)
    target = read_table(t.target)
    late = read_table(t.late).num_rows
    quarantine = read_table(t.quarantine)
    reasons = pc.value_counts(quarantine["reason"]).to_pylist() if quarantine.num_rows else []
    lines = [
        render_status(config),
        "",
        f"target: {target.num_rows} windows over "
        f"{len(set(target['key'].to_pylist()))} keys, "
        f"{pc.sum(target['count']).as_py() or 0} events aggregated; late: {late}; "
        f"quarantined: {quarantine.num_rows}",
    ]
    for item in sorted(reasons, key=lambda r: -r["counts"])[:6]:
        lines.append(f"  quarantine reason x{item['counts']}: {item['values']}")
    return "\n".join(lines)


def demo(config: PipelineConfig, events: int, via: str, max_epochs: int = 50) -> int:
    from eos.audit import audit

    print(f"[1/4] starting the embedded broker and clearing {config.root}", flush=True)
    reset(config)
    spec = GeneratorSpec(events=events, keys=200, interval_ms=10, disorder_ms=3000,
                         late_fraction=0.01, late_delay_ms=180_000, bad_fraction=0.005, seed=1)
    print(f"[2/4] producing {events} events to '{config.kafka.topic}'", flush=True)
    done = produce(spec, config.kafka.topic, client_settings(config.kafka.client))
    print(f"      {done.records} records in {done.seconds:.1f}s: {dict(done.kinds)}", flush=True)
    print(f"[3/4] running epochs ({'Airflow DAG runs' if via == 'airflow' else 'eos run'}, "
          f"at most {config.epoch.max_records} records each)", flush=True)
    run_until_caught_up(config, via, max_epochs)
    print("[4/4] summary and independent audit", flush=True)
    print(summary(config))
    report = audit(config)
    print(report.render())
    return 0 if report.ok else 1
