"""Event-time window types (docs/pipelines.md): tumbling, hopping and session.

The contract (``WindowType``), for the Spark side of ``precommit``:
- ``assign``: one row per (event, window) pair, with ``window_start_ms``/``window_end_ms``
  (half-open ``[start, end)`` in UTC epoch milliseconds).
- ``is_late``: a pair is late iff its window ended at or before the previous watermark
  (sessions: iff ``t + gap <= wm(N-1)``). Late pairs never reach an aggregate.
- ``combine``: merge this epoch's partial windows with every open window of epoch N-1,
  giving every window's merged state (an epoch that stages a snapshot). Which windows are
  emitted (end <= wm(N)) is decided after, in ``eos.compute.precommit``, the same way for every
  type.
- ``reads`` and ``advance``, for an epoch that stages only its changes (``eos.core.window_state``):
  which of the open rows the epoch needs at wm(N), and from those and its partial windows,
  the windows it emits (merged, end <= wm(N)) and the change rows it stages (end > wm(N)).

The audit (``eos.tools.audit.verify``) implements the same rules separately in plain Python.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from eos.core.config import WindowConfig
from eos.core.window_state import END, START, WindowRead


def columns(F: Any, *names: str) -> list[Any]:
    """``names`` as unresolved columns, for ``groupBy``: Spark Connect's ``groupBy`` checks a
    name given as a string against the frame's schema, one round trip to the server each
    time."""
    return [F.col(name) for name in names]


class WindowType(ABC):
    def __init__(self, window: WindowConfig) -> None:
        self.window = window

    @abstractmethod
    def assign(self, F: Any, events: Any, time: str) -> Any:
        """``events`` with START and END added, one row per window an event belongs to."""

    def is_late(self, F: Any, watermark: Any) -> Any:
        """Whether a pair is late, given wm(N-1) as a column (``watermark``)."""
        return F.col(END) <= watermark

    @abstractmethod
    def windows_per_event(self) -> int:
        """The most rows ``assign`` gives one event: what bounds an epoch's new windows and late
        rows (``eos.compute.precommit.write`` sizes the staging write by it)."""

    @abstractmethod
    def combine(self, F: Any, partials: Any, group: list[str], merges: list[Any]) -> Any:
        """Partial windows (``group``, START, END, state columns) of this epoch unioned with the
        open windows of the last: one merged row per window, same columns. A window may have
        any number of partial rows (an event lifted to its state is one: ``Lifts``)."""

    @abstractmethod
    def reads(self, watermark_ms: int) -> WindowRead:
        """The open rows (besides being alive) an epoch that stages changes needs at wm(N)."""

    @abstractmethod
    def advance(self, F: Any, previous: Any, partials: Any, group: list[str],
                merges: list[Any], watermark_ms: int) -> Any:
        """From the open rows ``reads`` selected and this epoch's partial windows: the windows
        emitted at wm(N), merged (END <= wm(N)), and the change rows to stage (END > wm(N)):
        every open row not selected stays as it is, so nothing may be counted twice."""


class FixedWindows(WindowType):
    """Tumbling (``slide == size``) and hopping: every window ``[k*slide, k*slide + size)`` that
    contains t, so an event belongs to ``size / slide`` windows."""

    def __init__(self, window: WindowConfig) -> None:
        super().__init__(window)
        assert window.size is not None  # a tumbling or hopping window has one (WindowConfig)
        self.size = window.size
        self.slide = window.slide or window.size

    def assign(self, F: Any, events: Any, time: str) -> Any:
        last = F.col(time) - F.pmod(F.col(time), F.lit(self.slide))
        if self.slide == self.size:
            start = last
        else:  # the first window holding t starts size - slide before the last one
            start = F.explode(F.sequence(last - F.lit(self.size - self.slide), last,
                                         F.lit(self.slide)))
        return (events.withColumn(START, start)
                .withColumn(END, F.col(START) + F.lit(self.size)))

    def windows_per_event(self) -> int:
        return -(-self.size // self.slide)

    def combine(self, F: Any, partials: Any, group: list[str], merges: list[Any]) -> Any:
        return partials.groupBy(*columns(F, *group, START, END)).agg(*merges)

    def reads(self, watermark_ms: int) -> WindowRead:
        # Every row of a window has its end: the rows that close now are exactly these.
        return WindowRead(end_at_most=watermark_ms)

    def advance(self, F: Any, previous: Any, partials: Any, group: list[str],
                merges: list[Any], watermark_ms: int) -> Any:
        # ``previous`` holds only rows that close now (``reads``), so one merge of everything
        # gives both: a closing window merged with its earlier rows, and a window still open
        # as this epoch's partial alone (merging one row is the identity), staged as one more
        # row of it (merged when it closes). One aggregation reads the partial windows once:
        # splitting them by END first would compute them twice (two scans of the parsed input
        # and two shuffles).
        return self.combine(F, partials.unionByName(previous), group, merges)


class SessionWindows(WindowType):
    """Per group, the union of overlapping ``[t, t + gap)`` of events not yet emitted; an open
    session staged by the last epoch is one more interval, so it merges with this epoch's
    events. Emitted sessions are final: a later event starts a new session."""

    def __init__(self, window: WindowConfig) -> None:
        super().__init__(window)
        self.gap = window.gap

    def assign(self, F: Any, events: Any, time: str) -> Any:
        return (events.withColumn(START, F.col(time))
                .withColumn(END, F.col(time) + F.lit(self.gap)))

    def windows_per_event(self) -> int:
        return 1

    def combine(self, F: Any, partials: Any, group: list[str], merges: list[Any]) -> Any:
        return (self._numbered(F, partials, group).groupBy(*columns(F, *group, "__session"))
                .agg(F.min(START).alias(START), F.max(END).alias(END), *merges)
                .drop("__session"))

    @staticmethod
    def _numbered(F: Any, intervals: Any, group: list[str]) -> Any:
        """``intervals`` with ``__session``: which session of its group each one is in."""
        from pyspark.sql import Window

        # Sort each group's intervals by start; an interval opens a new session iff it starts at
        # or after the furthest end seen before it (half-open intervals that touch do not merge).
        order = Window.partitionBy(*group).orderBy(START, END)
        before = F.max(END).over(order.rowsBetween(Window.unboundedPreceding, -1))
        opens = F.when(before.isNull() | (F.col(START) >= before), 1).otherwise(0)
        session = F.sum("__opens").over(
            order.rowsBetween(Window.unboundedPreceding, Window.currentRow))
        return (intervals.withColumn("__opens", opens).withColumn("__session", session)
                .drop("__opens"))

    def reads(self, watermark_ms: int) -> WindowRead:
        # A session that closes now has every fragment starting before wm(N); a fragment that
        # starts later ends later, so any session it touches stays open.
        return WindowRead(start_below=watermark_ms)

    def advance(self, F: Any, previous: Any, partials: Any, group: list[str],
                merges: list[Any], watermark_ms: int) -> Any:
        from pyspark.sql import Window

        wm = F.lit(watermark_ms)
        # A fragment is carried when it is new, or dies now (ends by wm(N)) in a session that
        # goes on: its state moves into one change row spanning to the session's end. The
        # session's span is covered without gaps, so that row overlaps nothing the session
        # does not.
        rows = (previous.withColumn("__carry", F.col(END) <= wm)
                .unionByName(partials.withColumn("__carry", F.lit(True))))
        numbered = self._numbered(F, rows, group).withColumn(
            "__end", F.max(END).over(Window.partitionBy(*group, "__session")))
        closed = (numbered.where(F.col("__end") <= wm).groupBy(*columns(F, *group, "__session"))
                  .agg(F.min(START).alias(START), F.max(END).alias(END), *merges))
        carried = (numbered.where((F.col("__end") > wm) & F.col("__carry"))
                   .groupBy(*columns(F, *group, "__session"))
                   .agg(F.min(START).alias(START), F.max("__end").alias(END), *merges))
        return closed.unionByName(carried).drop("__session")


def window_type(window: WindowConfig) -> WindowType:
    return SessionWindows(window) if window.type == "session" else FixedWindows(window)
