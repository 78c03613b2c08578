"""``eos fill``: a sink added to a running pipeline takes the epochs committed before it joined.

A sink added after epoch N-1 joins at N (``eos.core.protocol.join_sinks``): every epoch from N
on is committed to it with the others. The epochs before it come from another sink of the same
output that holds them (its rows are what those epochs committed: the same rows the new sink
would have been handed), read back epoch by epoch and written to the new sink through its
``SupportsFill``: each epoch once, in order, under the fill's own marker, so a fill that is
interrupted, rerun or raced by a second fill writes every epoch exactly once, and the pipeline
keeps committing to the sink meanwhile. ``eos verify`` then audits the sink from the first
filled epoch.

Refused (``FillRefused``, nothing written): a sink that was there from the first epoch (nothing
to fill), a sink type without ``SupportsFill``, no other sink of the output that can be read
back and holds the epochs (an upserting one holds only each key's last row, a shared table
other pipelines' rows), and a source whose commits do not cover them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from eos.core import checkpoints
from eos.core.config import PipelineConfig
from eos.core.errors import FillRefused
from eos.core.layout import tables_for
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.outputs import output_schema
from eos.core.phaselog import log_phase
from eos.core.protocol import join_sinks
from eos.core.sink import Sink, SupportsFill, SupportsReadBack, sinks_for


@dataclass
class Filled:
    """What a fill did: the sink, where its rows came from, and each epoch's outcome."""

    sink: str
    source: str
    first: int  # the first epoch of the fill
    until: int  # the epoch the sink joined at (filled: first..until-1)
    written: list[int] = field(default_factory=list)
    already: list[int] = field(default_factory=list)
    rows: int = 0

    def summary(self) -> dict[str, Any]:
        return {"sink": self.sink, "from": self.source, "epochs": [self.first, self.until - 1],
                "written": self.written, "already": self.already, "rows": self.rows}


def fill_sink(config: PipelineConfig, sink_name: str, source_name: str | None = None) -> Filled:
    """Fill ``sink_name`` with the epochs committed before it joined, from ``source_name`` (or
    the first sink of its output that can serve: see the module)."""
    tables = tables_for(config)
    committed = checkpoints.last_checkpointed(tables, config.app_id)
    last = checkpoints.last(tables, committed) if committed != NO_EPOCH else None
    sinks = join_sinks(sinks_for(config), last)
    target = _target(sinks, sink_name)
    source = _source(sinks, target, source_name)
    first, until = source.joined_at, target.joined_at
    _check_covered(source, first, until)
    done = Filled(target.name, source.name, first, until)
    held = target.filled()
    schema = output_schema(config, target.output)
    by_epoch = _rows_by_epoch(source, first, until)
    for epoch in range(first, until):
        if held is not None and epoch <= held[1]:
            done.already.append(epoch)
            continue
        rows = pa.Table.from_pylist([{n: row.get(n) for n in schema.names}
                                     for row in by_epoch.get(epoch, [])], schema=schema)
        result = target.fill(epoch, rows, first)
        if result.outcome is Outcome.ALREADY_COMMITTED:
            done.already.append(epoch)
        else:
            done.written.append(epoch)
            done.rows += result.rows
    log_phase("fill", pipeline=config.name, sink=target.name, source=source.name,
              epochs=f"{first}..{until - 1}", written=len(done.written), rows=done.rows)
    return done


def _target(sinks: list[Sink], name: str) -> SupportsFill:
    found = next((s for s in sinks if s.name == name), None)
    if found is None:
        raise FillRefused(f"the pipeline has no sink {name} (its sinks: "
                          f"{', '.join(s.name for s in sinks)})")
    if not isinstance(found, SupportsFill):
        raise FillRefused(f"sink {name}: a {found.kind} sink cannot be filled (no SupportsFill)")
    if found.joined_at == 0:
        raise FillRefused(f"sink {name} was there from the first epoch: nothing to fill")
    return found


def _source(sinks: list[Sink], target: Sink, name: str | None) -> SupportsReadBack:
    """The sink the rows come from: ``name``, or the first of the output that can serve."""
    candidates = [s for s in sinks if s.output == target.output and s is not target]
    if name is not None:
        candidates = [s for s in candidates if s.name == name]
        if not candidates:
            raise FillRefused(f"no sink {name} writes the {target.output} output of this "
                              "pipeline")
    reasons = []
    for sink in candidates:
        why = _cannot_serve(sink, target)
        if why is None:
            assert isinstance(sink, SupportsReadBack)
            return sink
        reasons.append(f"{sink.name}: {why}")
    raise FillRefused(f"sink {target.name}: no other sink of its {target.output} output holds "
                      f"the epochs before {target.joined_at} to fill it from"
                      + (f" ({'; '.join(reasons)})" if reasons else ""))


def _cannot_serve(sink: Sink, target: Sink) -> str | None:
    if not isinstance(sink, SupportsReadBack):
        return "its type cannot be read back"
    if sink.kept_by():
        return "it keeps one row per key, not every row"
    if (why := sink.unreadable()) is not None:
        return why
    if sink.joined_at >= target.joined_at:
        return f"it joined at epoch {sink.joined_at} itself"
    return None


def _check_covered(source: SupportsReadBack, first: int, until: int) -> None:
    """The source's commits include every epoch to fill (a sink may forget old commits: a
    compacted marker topic; then its rows cannot be told complete)."""
    commits = set(source.commits())
    missing = [e for e in range(first, until) if e not in commits]
    if missing:
        raise FillRefused(f"sink {source.name} records no commit of epoch(s) "
                          f"{missing[:10]}{'...' if len(missing) > 10 else ''}: it cannot vouch "
                          "for their rows")


def _rows_by_epoch(source: SupportsReadBack, first: int,
                   until: int) -> dict[int, list[dict[str, Any]]]:
    """The source's rows of epochs ``first..until-1``, by epoch (read once)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for row in source.read_back(first):
        epoch = int(row["epoch"])
        if epoch < until:
            out.setdefault(epoch, []).append(row)
    return out
