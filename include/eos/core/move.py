"""Moving a pipeline to another source: ``eos move-source`` (docs/operating.md).

A checkpoint's offsets belong to one topic on one cluster (``eos.core.identity``); ``begin``
refuses to plan a configured source other than the last checkpoint's (``SourceChanged``). Moving
is an operator's explicit, logged decision of where the new source is read from: its log start
(``earliest``), its end (``latest``), the first record at or after a timestamp, or given offsets.

The move *is* the plan of the next epoch, c + 1, on the configured source from those offsets,
logged through the same fenced append as every plan (``epochlog.log_plan``), its row carrying
the move (old and new source, start offsets). So a move and a planner that race are decided
like two planners: exactly one plan of c + 1 is logged; a move that loses changed nothing.
``begin`` then finds c + 1's plan in the log and returns it, the epochs after it start from its
checkpoint, whose offsets are of the new source; the audit reads each plan's ranges from the
topic it was planned on and knows, from the plan row, where a new source starts. A ``moved``
row follows, for people (the epochs view).

Refused (``MoveRefused``), with nothing written: while an epoch is in flight (c + 1 is planned:
it reads the old source and must commit first), while a rewind is unfinished, when the
configured source is the one the offsets are of already, or for offsets outside the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eos.core import checkpoints, epochlog
from eos.core.config import PipelineConfig
from eos.core.config.positions import POSITIONS, StartPosition
from eos.core.errors import MoveRefused
from eos.core.identity import SourceIdentity
from eos.core.phaselog import elapsed_ms, log_phase, timed
from eos.core.plan import Plan, Source, committed_source, default_source, plan_from, position_starts
from eos.core.rewind import check_none_unfinished
from eos.core.tables import ensure_tables
from eos.core.topics import topics_of

__all__ = ["POSITIONS", "Moved", "StartPosition", "move_source"]

@dataclass(frozen=True)
class Moved:
    """What ``move_source`` did: the plan of the first epoch on the new source, and the move
    its log row carries."""

    plan: Plan
    move: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        return {**self.move, "epoch": self.plan.epoch, "plan_hash": self.plan.hash,
                "ranges": self.plan.describe_ranges(), "records": self.plan.records}


def move_source(config: PipelineConfig, position: StartPosition, *,
                source: Source | None = None, run_id: str | None = None) -> Moved:
    """Move the pipeline to its configured source (``source``, default its Kafka topic), read
    from ``position``: log the plan of the epoch after the last checkpoint from there (see the
    module's docstring). ``MoveRefused`` when it cannot, nothing written."""
    with timed() as took, ensure_tables(config) as tables:
        committed = checkpoints.last_checkpointed(tables, config.app_id)
        last = checkpoints.last(tables, committed)
        logged = epochlog.plan_rows(tables, committed + 1, None)
        check_none_unfinished(logged)
        _check_none_in_flight(config, logged, committed)
        source = default_source(config, source)
        marks = source.watermarks(config)
        target = SourceIdentity(tuple(topics_of(marks) or (config.kafka.named_topics or [])),
                                source.cluster(config))
        old = committed_source(tables, last)
        _check_moves(config, old, target, committed)
        starts = position_starts(position, config, source, marks)
        plan = plan_from(config, committed + 1, starts, marks, target, source)
        move = {"from": old.to_dict() if old else None, "to": target.to_dict(),
                "start": _starts(plan),
                "position": position.describe(), "after_epoch": committed}
        details = {epochlog.MOVED: move}
        if not epochlog.log_plan(tables, config.app_id, plan.epoch, plan.to_json(), plan.hash,
                                 run_id, elapsed_ms(took), details=details):
            raise MoveRefused(
                f"epoch {plan.epoch} of '{config.name}' was planned by a concurrent begin (or "
                "move) while this move was logged: nothing was moved. Let that epoch commit "
                "(`eos status` shows it), then run eos move-source again if still needed")
        epochlog.append(tables, plan.epoch, epochlog.MOVED, run_id=run_id, plan_hash=plan.hash,
                        duration_ms=elapsed_ms(took), details=move)
    log_phase("move-source", epoch=plan.epoch, plan_hash=plan.hash,
              source_from=old.describe() if old else None, source_to=target.describe(),
              position=position.describe(), ranges=plan.describe_ranges(","),
              records=plan.records, duration_ms=took["ms"])
    return Moved(plan, move)


def _starts(plan: Plan) -> dict[str, Any]:
    """The move's start offsets: ``{partition: offset}`` of a plan of one topic (the form a move
    was always logged in), else ``{topic: {partition: offset}}``."""
    if plan.topic:
        return {str(r.partition): r.start for r in plan.ranges}
    nested: dict[str, dict[str, int]] = {}
    for r in plan.ranges:
        nested.setdefault(r.topic, {})[str(r.partition)] = r.start
    return nested


def _check_none_in_flight(config: PipelineConfig, logged: list[dict[str, Any]],
                          committed: int) -> None:
    """A planned epoch after the checkpoint reads the source it was planned on, whatever the
    config says now: it must commit (or be replayed) before anything moves."""
    row = epochlog.first_planned([r for r in logged if r["epoch"] == committed + 1])
    if row is None:
        return
    planned = Plan.from_json(row["plan"])
    raise MoveRefused(
        f"epoch {planned.epoch} of '{config.name}' is in flight: planned on "
        f"{planned.source.describe()} ({planned.describe_ranges()}) and not committed (the "
        f"last checkpoint is epoch {committed}). Let it commit first (its DAG run, or eos run: "
        "a logged plan reads its own topic), then move")


def _check_moves(config: PipelineConfig, old: SourceIdentity | None, target: SourceIdentity,
                 committed: int) -> None:
    """A move goes somewhere else than where the offsets are already."""
    if old is not None and old.same_as(target):
        raise MoveRefused(
            f"'{config.name}' reads {target.describe()} already (the offsets of its checkpoint "
            f"{committed} are of it): nothing to move. To change the kafka source, edit the "
            "config's kafka section first; to read records again, eos rewind")
