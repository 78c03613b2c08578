"""Going on after records were lost from the source: ``eos acknowledge-loss``.

``begin`` refuses to plan an epoch whose committed offsets the log no longer holds
(``DataLoss``): retention deleted records no epoch read yet, or the partition was truncated
or recreated (the committed offset is beyond its end). eos never skips records on its own, so
the pipeline stops until a person decides. This is that decision, explicit and recorded: the
operator acknowledges the lost ranges, and the next epoch starts each such partition at its
log start; every other partition goes on from its committed offset.

The acknowledgment is the plan of the epoch after the last checkpoint, logged like a move of
the source (``eos.core.move``: the same fenced append, so a planner racing it is decided like
two planners), its row carrying the lost ranges under ``loss``. The epoch log and the epochs
view show it; ``eos verify`` reports each acknowledged range as lost, never as a silent OK.

Refused (``LossRefused``), nothing written: while an epoch is in flight or a rewind is
unfinished, when the configured source is not the one the offsets are of (that is a move),
and when nothing is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eos.core import checkpoints, epochlog
from eos.core.config import PipelineConfig
from eos.core.errors import MoveRefused
from eos.core.identity import SourceIdentity
from eos.core.phaselog import elapsed_ms, log_phase, timed
from eos.core.plan import Plan, Source, committed_source, default_source, plan_from
from eos.core.rewind import check_none_unfinished
from eos.core.tables import ensure_tables
from eos.core.topics import Marks, Offsets, TopicPartition, topics_of

POSITION = "acknowledged-loss"  # the move's position: where the lost partitions start


class LossRefused(MoveRefused):
    """An acknowledgment that cannot be made; nothing was written."""


@dataclass(frozen=True)
class LostRange:
    """Offsets ``[start, until)`` of one partition that no epoch read and the log no longer
    holds. ``recreated``: the committed offset was beyond the partition's end (truncated or
    recreated), so how many records were lost is unknown: ``until`` is the new log start."""

    topic: str
    partition: int
    start: int
    until: int
    recreated: bool = False

    @property
    def records(self) -> int | None:
        return None if self.recreated else self.until - self.start

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "start": self.start,
                "until": self.until, "recreated": self.recreated}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LostRange:
        return cls(str(data["topic"]), int(data["partition"]), int(data["start"]),
                   int(data["until"]), bool(data.get("recreated", False)))

    def describe(self) -> str:
        where = f"topic '{self.topic}' partition {self.partition}"
        if self.recreated:
            return (f"{where}: committed offset {self.start} is beyond the partition's end; "
                    f"it restarts at its log start {self.until} (records lost: unknown)")
        return f"{where}: offsets [{self.start}, {self.until}) ({self.records} records)"


@dataclass(frozen=True)
class Acknowledged:
    """What ``acknowledge_loss`` did: the plan of the next epoch and the ranges it skips."""

    plan: Plan
    lost: list[LostRange]

    def summary(self) -> dict[str, Any]:
        return {"epoch": self.plan.epoch, "plan_hash": self.plan.hash,
                "ranges": self.plan.describe_ranges(), "records": self.plan.records,
                "lost": [r.to_dict() for r in self.lost]}


def lost_ranges(committed: Offsets, marks: Marks) -> list[LostRange]:
    """The ranges between each partition's committed offset and what its log holds now."""
    lost = []
    for tp, (low, high) in sorted(marks.items()):
        start = committed.get(tp)
        if start is None:
            continue  # a partition no checkpoint knows starts at its log start anyway
        if start < low:
            lost.append(LostRange(tp.topic, tp.partition, start, low))
        elif start > high:
            lost.append(LostRange(tp.topic, tp.partition, start, low, recreated=True))
    return lost


def acknowledge_loss(config: PipelineConfig, *, source: Source | None = None,
                     run_id: str | None = None) -> Acknowledged:
    """Acknowledge every range the source lost after the last checkpoint and log the next
    epoch's plan from past them (see the module's docstring)."""
    with timed() as took, ensure_tables(config) as tables:
        committed = checkpoints.last_checkpointed(tables, config.app_id)
        last = checkpoints.last(tables, committed)
        logged = epochlog.plan_rows(tables, committed + 1, None)
        check_none_unfinished(logged)
        if epochlog.first_planned([r for r in logged if r["epoch"] == committed + 1]):
            raise LossRefused(
                f"epoch {committed + 1} of '{config.name}' is planned already and reads its "
                "logged ranges: let it commit, or rewind it, before acknowledging a loss")
        source = default_source(config, source)
        marks = source.watermarks(config)
        target = SourceIdentity(tuple(topics_of(marks) or (config.kafka.named_topics or [])),
                                source.cluster(config))
        old = committed_source(tables, last)
        if old is not None and not target.continues(old):
            raise LossRefused(
                f"'{config.name}' committed offsets of {old.describe()} and its config reads "
                f"{target.describe()}: that is a move of the source (eos move-source), not a "
                "loss")
        offsets = last.until if last is not None else {}
        lost = lost_ranges(offsets, marks)
        if not lost:
            raise LossRefused(f"'{config.name}': every committed offset is still in its "
                              "partition's log; nothing to acknowledge")
        starts = {tp: _start(offsets, tp, low, lost) for tp, (low, _) in marks.items()}
        plan = plan_from(config, committed + 1, starts, marks, target, source)
        move = {"from": old.to_dict() if old else None, "to": target.to_dict(),
                "start": {f"{r.topic}/{r.partition}": r.start for r in plan.ranges},
                "position": POSITION, "after_epoch": committed,
                "loss": [r.to_dict() for r in lost]}
        if not epochlog.log_plan(tables, config.app_id, plan.epoch, plan.to_json(), plan.hash,
                                 run_id, elapsed_ms(took), details={epochlog.MOVED: move}):
            raise LossRefused(
                f"epoch {plan.epoch} of '{config.name}' was planned by a concurrent begin while "
                "the acknowledgment was logged: nothing was acknowledged")
        epochlog.append(tables, plan.epoch, epochlog.MOVED, run_id=run_id, plan_hash=plan.hash,
                        duration_ms=elapsed_ms(took), details=move)
    log_phase("acknowledge-loss", epoch=plan.epoch, plan_hash=plan.hash,
              lost=[r.describe() for r in lost], ranges=plan.describe_ranges(","),
              records=plan.records, duration_ms=took["ms"])
    return Acknowledged(plan, lost)


def _start(offsets: Offsets, tp: TopicPartition, low: int, lost: list[LostRange]) -> int:
    """Where the next epoch reads ``tp``: past its lost range, else its committed offset (a
    partition no checkpoint knows: its log start)."""
    if any(r.topic == tp.topic and r.partition == tp.partition for r in lost):
        return low
    return offsets.get(tp, low)


def acknowledged_losses(move: dict[str, Any] | None) -> list[LostRange]:
    """The ranges a logged plan's move acknowledged as lost (none for a plain move)."""
    if not move or move.get("position") != POSITION:
        return []
    return [LostRange.from_dict(r) for r in move.get("loss") or []]
