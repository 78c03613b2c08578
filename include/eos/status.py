"""``eos status``: the epoch log, committed offsets and lag, as an operator reads them."""

from __future__ import annotations

import json
from typing import Any

from eos import checkpoints, epochlog
from eos.config import PipelineConfig
from eos.errors import EosError
from eos.plan import Plan
from eos.sinks.base import NO_EPOCH
from eos.tables import ensure_tables


def epoch_summaries(config: PipelineConfig) -> list[dict[str, Any]]:
    """One entry per epoch: plan, latest phase, counts and durations from the log."""
    tables = ensure_tables(config)
    committed = checkpoints.committed_epoch(tables, config.app_id)
    epochs: dict[int, dict[str, Any]] = {}
    for row in epochlog.rows(tables):
        entry = epochs.setdefault(row["epoch"], {"epoch": row["epoch"], "phases": []})
        entry["phases"].append(row["phase"])
        details = json.loads(row["details"]) if row["details"] else {}
        if row["phase"] == epochlog.PLANNED and "plan" not in entry:
            entry["plan"] = Plan.from_json(row["plan"])
        if row["phase"] == epochlog.PRECOMMITTED:
            entry["rows"] = details.get("rows", {})
            entry["precommit_ms"] = row["duration_ms"]
    for entry in epochs.values():
        entry["committed"] = entry["epoch"] <= committed
    return [epochs[e] for e in sorted(epochs)]


def render_status(config: PipelineConfig, limit: int = 20) -> str:
    from eos.kafka import client_settings, topic_watermarks
    from eos.protocol import check_sinks

    tables = ensure_tables(config)
    committed = checkpoints.committed_epoch(tables, config.app_id)
    lines = [f"pipeline {config.name}: topic '{config.kafka.topic}', tables {tables.root}",
             f"last committed epoch: {committed if committed != NO_EPOCH else 'none'}", "",
             f"{'epoch':>5}  {'state':<12} {'records':>8} {'output':>7} {'late':>5} "
             f"{'quar.':>5} {'stage s':>7}  ranges"]
    for entry in epoch_summaries(config)[-limit:]:
        plan: Plan | None = entry.get("plan")
        rows = entry.get("rows", {})
        state = "committed" if entry["committed"] else entry["phases"][-1]
        lines.append(
            f"{entry['epoch']:>5}  {state:<12} {plan.records if plan else 0:>8} "
            f"{rows.get('output', 0):>7} {rows.get('late', 0):>5} {rows.get('quarantine', 0):>5} "
            f"{(entry.get('precommit_ms') or 0) / 1000:>7.1f}  "
            f"{plan.describe_ranges() if plan else ''}"
        )
    lines.append("")
    try:
        held = check_sinks(config, committed, read_only=True)
        lines.append("sinks: " + ", ".join(f"{name} at epoch {epoch}"
                                           for name, epoch in held.items()))
    except EosError as error:
        lines.append(f"sinks: {error}")
    lines.append("")
    offsets = checkpoints.committed_offsets(tables, committed)
    try:
        marks = topic_watermarks(client_settings(config.kafka.client), config.kafka.topic)
    except EosError as error:
        lines.append(f"lag unknown: {error}")
        marks = {}
    lines.append(f"{'partition':>9} {'committed':>10} {'high wm':>10} {'lag':>8}")
    for p in sorted(set(offsets) | set(marks)):
        until = offsets.get(p)
        high = marks.get(p, (None, None))[1]
        lag = high - until if until is not None and high is not None else None
        cells = ["-" if v is None else v for v in (until, high, lag)]
        lines.append(f"{p:>9} {cells[0]:>10} {cells[1]:>10} {cells[2]:>8}")
    return "\n".join(lines)
