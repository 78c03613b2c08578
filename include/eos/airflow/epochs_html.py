"""HTML for the epochs view: a pipeline's ``PipelineStatus`` as a page, and the index of pipelines.

Rendering only: every figure comes from a ``PipelineStatus`` (``eos.core.pipeline_status``, what
``eos
status`` prints; the view's comes from ``eos.airflow.epochs_cache``), nothing is computed from
the tables here. Templates are Jinja2 with
autoescaping on. Links into the Airflow UI are marked ``data-airflow``: the page is shown in a
sandboxed iframe of the Airflow UI (an ``external_views`` entry), and ``base.html``'s script
hands those links to the UI's router instead of opening Airflow inside the frame.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from eos.airflow.epochs_cache import SinkState
from eos.core.checkpoints import NO_WATERMARK
from eos.core.pipeline_status import EpochStatus, PipelineStatus

TEMPLATES = Path(__file__).parent / "templates"
PHASES = ("begin", "precommit", "commit")
PHASE_COLOURS = {"begin": "#8ab4f8", "precommit": "#1a73e8", "commit": "#0b3d91"}
# Run ids Airflow makes (manual, scheduled, backfill, asset-triggered runs): these have a page.
AIRFLOW_RUN_ID = re.compile(r"^(manual|scheduled|backfill|asset_triggered|dataset_triggered)__")
CHART_W, CHART_H, CHART_PAD = 720, 120, 4
MAX_BAR_STEP = 36  # a few epochs get narrow bars, not a wall of colour


@lru_cache(maxsize=1)
def _environment() -> Any:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]))
    env.filters["ms_time"] = ms_time
    env.filters["seconds"] = seconds
    env.filters["run_type"] = run_type
    return env


@dataclass(frozen=True)
class Links:
    """Where the Airflow UI lives, relative to the page's server root."""

    airflow: str  # "" when Airflow serves at the root

    def dag(self, dag_id: str) -> str:
        return f"{self.airflow}/dags/{quote(dag_id, safe='')}"

    def run(self, dag_id: str, run_id: str | None) -> str | None:
        if not run_id or not AIRFLOW_RUN_ID.match(run_id):
            return None  # planned by ``eos run`` or a test, not by a DAG run
        return f"{self.dag(dag_id)}/runs/{quote(run_id, safe='')}"

    def task(self, dag_id: str, run_id: str | None, task_id: str,
             try_number: int | None = None) -> str | None:
        """A task's page (its log); with ``try_number``, that try's log, not the latest (after
        a clear, the latest try is the one that found the work done)."""
        run = self.run(dag_id, run_id)
        if not run:
            return None
        return f"{run}/tasks/{task_id}" + (f"?try_number={try_number}" if try_number else "")


def run_type(run_id: str | None) -> str:
    """How Airflow started the run, from the prefix of the ids it makes ("backfill",
    "scheduled", "manual", "asset_triggered"); "other" for a run id it did not make."""
    match = AIRFLOW_RUN_ID.match(run_id or "")
    return match.group(1) if match else "other"


def ms_time(value: int | None) -> str:
    """An event-time watermark (epoch ms) as UTC, to the second; "-" for none yet (before a
    first event, and always without windows: minus infinity, which no date can show)."""
    if value is None or value <= NO_WATERMARK:
        return "-"
    return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value / 1000:.2f}"


def pipeline_page(status: PipelineStatus, links: Links, took_ms: float,
                  sink_state: SinkState | None = None, can_audit: bool = True,
                  tasks: dict[str, str] | None = None) -> str:
    """``sink_state``: how old the sinks' epochs and the lag are (they are read in the
    background, ``eos.airflow.epochs_cache``); None: they were read for this page.
    ``can_audit``: the user may start an audit (the server checks again on the POST).
    ``tasks``: the DAG's task running each phase (``eos.airflow.tasks.phase_tasks``; by default the
    task named as the phase), whose logs the page links."""
    return _environment().get_template("pipeline.html").render(
        status=status, links=links, phases=PHASES, colours=PHASE_COLOURS,
        tasks=tasks or {p: p for p in PHASES},
        records_chart=records_chart(status.epochs), durations_chart=durations_chart(status.epochs),
        took_ms=took_ms, sink_state=sink_state, can_audit=can_audit)


def index_page(rows: list[dict[str, Any]], links: Links) -> str:
    return _environment().get_template("index.html").render(rows=rows, links=links)


# -- charts (inline SVG, numbers only) ----------------------------------------------------------

def _bars(epochs: list[EpochStatus], stacks: list[list[tuple[str, str, float]]],
          title: str) -> str:
    """One bar per epoch, stacked from the bottom; each segment is (label, colour, value)."""
    if not epochs:
        return ""
    top = max((sum(v for _, _, v in stack) for stack in stacks), default=0) or 1
    step = min((CHART_W - 2 * CHART_PAD) / len(epochs), MAX_BAR_STEP)
    width = max(step * 0.8, 1)
    parts = [f'<svg class="chart" viewBox="0 0 {CHART_W} {CHART_H}" width="{CHART_W}" '
             f'height="{CHART_H}" role="img" aria-label="{title}">']
    for i, (epoch, stack) in enumerate(zip(epochs, stacks, strict=True)):
        x, base = CHART_PAD + i * step, CHART_H - CHART_PAD
        for label, colour, value in stack:
            h = value / top * (CHART_H - 2 * CHART_PAD)
            base -= h
            parts.append(f'<rect x="{x:.1f}" y="{base:.1f}" width="{width:.1f}" '
                         f'height="{h:.1f}" fill="{colour}"><title>epoch {epoch.epoch} {label}: '
                         f'{value:g}</title></rect>')
    parts.append(f'<text x="{CHART_W - CHART_PAD}" y="12" text-anchor="end" class="axis">'
                 f'max {top:g}</text></svg>')
    return "".join(parts)


def records_chart(epochs: list[EpochStatus]) -> str:
    return _bars(epochs, [[("records", "#1a73e8", e.records)] for e in epochs],
                 "records per epoch")


def durations_chart(epochs: list[EpochStatus]) -> str:
    stacks = [[(f"{p} s", PHASE_COLOURS[p], round((e.durations_ms.get(p) or 0) / 1000, 2))
               for p in PHASES] for e in epochs]
    return _bars(epochs, stacks, "seconds per phase per epoch")
