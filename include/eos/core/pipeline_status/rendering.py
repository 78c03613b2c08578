"""A pipeline's status as ``eos status`` prints it."""

from __future__ import annotations

from eos.core.outcomes import NO_EPOCH
from eos.core.pipeline_status.model import PipelineStatus


def render(status: PipelineStatus) -> str:
    """The status as ``eos status`` prints it."""
    committed = status.committed_epoch
    lines = [f"pipeline {status.name}: {status.topic}, tables {status.tables_root}",
             f"last committed epoch: {committed if committed != NO_EPOCH else 'none'}", "",
             f"{'epoch':>5}  {'state':<12} {'records':>8} {'output':>7} {'late':>5} "
             f"{'quar.':>5} {'stage s':>7}  ranges"]
    for entry in status.epochs:
        counts = entry.counts
        lines.append(
            f"{entry.epoch:>5}  {entry.state:<12} {entry.records:>8} "
            f"{counts.get('output', 0):>7} {counts.get('late', 0):>5} "
            f"{counts.get('quarantine', 0):>5} "
            f"{(entry.durations_ms['precommit'] or 0) / 1000:>7.1f}  {entry.describe_ranges()}"
            + (f"  ({entry.describe_move()})" if entry.moved else "")
        )
    lines.append("")
    lines.append(f"sinks: {status.sinks_error}" if status.sinks_error else
                 "sinks: " + ", ".join(f"{name} at epoch {epoch}"
                                       for name, epoch in status.sinks.items()))
    lines.append("")
    if status.lag_error:
        lines.append(f"lag unknown: {status.lag_error}")
    several = len({p.topic for p in status.partitions}) > 1
    lines.append(("topic  " if several else "")
                 + f"{'partition':>9} {'committed':>10} {'high wm':>10} {'lag':>8}")
    for p in status.partitions:
        cells = ["-" if v is None else v for v in (p.committed, p.high, p.lag)]
        lines.append((f"{p.topic}  " if several else "")
                     + f"{p.partition:>9} {cells[0]:>10} {cells[1]:>10} "
                     + ("beyond the log's end" if p.beyond_log else f"{cells[2]:>8}"))
    if beyond := [p for p in status.partitions if p.beyond_log]:
        where = ", ".join(f"{p.topic}[{p.partition}]" for p in beyond)
        lines.append(
            f"committed offsets of {where} are beyond the log's end: the topic was recreated "
            "or truncated, or this is another broker (an embedded one restarted empty). The "
            "next epoch stops until you decide: `eos acknowledge-loss --pipeline "
            f"{status.name}` goes on from the log start, `eos move-source --pipeline "
            f"{status.name} --from earliest` moves the pipeline to another cluster's topic.")
    if status.last_audit is not None:
        audit = status.last_audit
        lines += ["", f"last audit {audit.at:%Y-%m-%d %H:%M:%S} UTC: "
                      f"{'OK' if audit.ok else 'FAILED'} (epochs 0..{audit.committed_epoch}, "
                      f"{audit.problems} problem(s))"]
    return "\n".join(lines)


