"""Which epochs an audit compares, which records it must read for them, and what in them it
cannot audit because the source no longer holds it.

``eos verify`` compares epochs ``first..committed`` (``--since E``, ``--last N``; every epoch
by default) and reads the source epoch by epoch, in batches of at most ``BATCH_RECORDS``
records, so what it holds at once is one batch of records, the windows still open, and the
span's own rows: never the whole history.

- A pipeline without windows needs no history: each epoch's rows follow from its records
  alone, so only the span's epochs are read.
- A windowed pipeline's windows hold records of earlier epochs, so the reference replays every
  epoch from the first, keeping the open windows and dropping the rows of epochs before the
  span as it goes.

Retention (or a recreated partition) may have deleted records an epoch read. Such a range is
never passed or failed silently: it is named and counted, and what depends on it is left out
of the comparison on both sides (``Span.excluded``):

- an epoch whose own records are gone is not auditable;
- in a windowed pipeline the replay restarts after the last such epoch ``D`` from the
  watermark its checkpoint records, and a window that may hold records of epoch ``D`` or
  earlier is not auditable: every such record's event time is at most ``wm(D)`` plus the
  allowed lateness, so a window starting later (for sessions, later than that plus the gap:
  a session that merged with an earlier one starts before) holds only records the audit read.
  Overflow rows of the quarantine (a window's, not a record's) are then left out too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from eos.core.config import PipelineConfig
from eos.core.kafka import topic_watermarks
from eos.core.plan import Plan
from eos.tools.audit.checks import as_ms

#: Records read from Kafka before the reference consumes them: the audit's memory bound.
BATCH_RECORDS = 100_000
NEG_INF = -(2**63)


@dataclass(frozen=True)
class DeletedRange:
    """Offsets ``[start, until)`` an epoch committed that the log no longer holds from
    ``start`` (its log start is ``log_start``): part or all of the range is gone."""

    epoch: int
    topic: str
    partition: int
    start: int
    until: int
    log_start: int

    @property
    def records(self) -> int:
        return min(self.until, self.log_start) - self.start

    def describe(self) -> str:
        return (f"epoch {self.epoch}: topic '{self.topic}' partition {self.partition} offsets "
                f"{self.start}..{self.until - 1}, of which {self.records} were deleted (the log "
                f"starts at {self.log_start})")


@dataclass
class Span:
    """The epochs an audit compares and what it leaves out of them, and why."""

    first: int  # the first epoch compared
    committed: int  # the last
    replay_from: int  # the first epoch whose records the reference reads
    deleted: list[DeletedRange] = field(default_factory=list)  # ranges that matter here
    unreadable: frozenset[int] = frozenset()  # compared epochs whose records are gone
    # Windows starting at or before this may hold records the audit could not read.
    window_bound: int | None = None
    seed_watermark: int | None = None  # the replay's watermark before replay_from

    @property
    def restarted(self) -> bool:
        """The windowed replay began after deleted records (not from the first epoch)."""
        return self.replay_from > 0 and self.window_bound is not None

    def compared(self, epoch: int) -> bool:
        return epoch >= self.first and epoch not in self.unreadable

    def excluded(self, output: str) -> Callable[[dict[str, Any]], bool]:
        """Whether a row of ``output`` (expected or held) is left out of the comparison."""
        bound, restarted = self.window_bound, self.restarted

        def out(row: dict[str, Any]) -> bool:
            if not self.compared(int(row["epoch"])):
                return True
            if output == "windows" and bound is not None:
                return bool(as_ms(row["window_start"]) <= bound)
            return output == "quarantine" and restarted and row.get("offset") is None

        return out


def log_starts(settings: dict[str, Any], plans: list[Plan]) -> dict[tuple[str, int], int]:
    """Each committed partition's log start, asked of the broker now."""
    starts: dict[tuple[str, int], int] = {}
    for topic in dict.fromkeys(r.topic for plan in plans for r in plan.ranges):
        for partition, (low, _) in topic_watermarks(settings, topic).items():
            starts[(topic, partition)] = low
    return starts


def deleted_ranges(plans: list[Plan], starts: dict[tuple[str, int], int]) -> list[DeletedRange]:
    """The committed ranges whose first records the log no longer holds."""
    return [DeletedRange(plan.epoch, r.topic, r.partition, r.start, r.until,
                         starts[(r.topic, r.partition)])
            for plan in plans for r in plan.ranges
            if r.until > r.start and (r.topic, r.partition) in starts
            and r.start < starts[(r.topic, r.partition)]]


def span_for(config: PipelineConfig, plans: list[Plan], deleted: list[DeletedRange],
             watermarks: dict[int, int | None], first: int) -> Span:
    """The span ``first..`` of ``plans`` given the ranges retention deleted; ``watermarks``:
    each epoch's checkpointed watermark (a restarted replay begins from one)."""
    committed = plans[-1].epoch
    gone = {d.epoch for d in deleted}
    if config.stateless:
        return Span(first, committed, first, [d for d in deleted if d.epoch >= first],
                    frozenset(e for e in gone if e >= first))
    if not gone:
        return Span(first, committed, 0)
    last = max(gone)  # the windowed replay restarts after it
    seed = watermarks.get(last)
    seed = None if seed is None or seed == NEG_INF else seed
    window = config.windows
    reach = window.allowed_lateness + ((window.gap or 0) if window.type == "session" else 0)
    bound = None if seed is None else seed + reach
    return Span(first, committed, last + 1, deleted,
                frozenset(e for e in range(first, last + 1)), bound, seed)


def batches(plans: list[Plan], limit: int = BATCH_RECORDS) -> Iterator[list[Plan]]:
    """Consecutive plans of at most ``limit`` records together (an epoch larger than the limit
    on its own): what the audit reads from Kafka at once."""
    batch: list[Plan] = []
    size = 0
    for plan in plans:
        if batch and size + plan.records > limit:
            yield batch
            batch, size = [], 0
        batch.append(plan)
        size += plan.records
    if batch:
        yield batch
