"""The event-time watermark: wm(N) = max(wm(N-1), max event time in epochs <= N - allowed
lateness), or with an idle timeout the planned clock when an epoch has no events. A window
whose end is at or before wm(N) is emitted; an event whose window was emitted before is late.
The rule lives here once: precommit computes it, the audit recomputes it.
"""

from __future__ import annotations

from typing import Protocol

from eos.core.config import PipelineConfig
from eos.core.plan import Plan


class Resumed(Protocol):
    """What an epoch resumes from, as far as its watermark goes (``resume.ResumePoint``; a
    protocol here so that this module needs nothing of the state's)."""

    @property
    def watermark_ms(self) -> int: ...

    @property
    def max_event_ms(self) -> int | None: ...


NEG_INF = -(2**63)  # the watermark before the first event
# wm(N-1), a column of every input row from the second epoch on (``frames.epoch_frames``), not a
# literal of the plan: Spark compiles a long literal into the generated code of the stage that
# filters on it, so a new watermark each epoch would compile the windows' and the side rows'
# stages again; a one-row broadcast join instead costs about as much.
PREVIOUS_WATERMARK = "__previous_watermark_ms"


def advance_watermark(previous_ms: int, max_event_ms: int | None, lateness_ms: int) -> int:
    """wm(N) = max(wm(N-1), max event time in epochs <= N - allowed lateness)."""
    if max_event_ms is None:
        return previous_ms
    return max(previous_ms, max_event_ms - lateness_ms)


def idle_watermark(previous_ms: int, clock_ms: int | None, idle_timeout_ms: int | None) -> int:
    """With an idle timeout, an epoch with no events lets the watermark follow the planned clock."""
    if clock_ms is None or idle_timeout_ms is None:
        return previous_ms
    return max(previous_ms, clock_ms - idle_timeout_ms)


def epoch_watermark(config: PipelineConfig, plan: Plan, state: Resumed,
                    max_event_ms: int | None) -> tuple[int, int | None]:
    """wm(N) and the max event time over epochs <= N: the watermark rule lives here, once."""
    candidates = [m for m in (state.max_event_ms, max_event_ms) if m is not None]
    max_event = max(candidates) if candidates else None
    watermark = advance_watermark(state.watermark_ms, max_event, config.windows.allowed_lateness)
    if plan.records == 0:
        watermark = idle_watermark(watermark, plan.clock_ms, config.windows.idle_timeout)
    return watermark, max_event


def previous_watermark(state: Resumed) -> dict[str, int]:
    """wm(N-1) as the input's constant column (``PREVIOUS_WATERMARK``); none before any
    watermark: then nothing is late, and the input is as an at-least-once job reads it."""
    return {} if state.watermark_ms == NEG_INF else {PREVIOUS_WATERMARK: state.watermark_ms}
