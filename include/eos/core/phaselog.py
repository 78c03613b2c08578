"""Structured per-phase logs: one line an operator can read in a task's log in the Airflow UI."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger("eos")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def log_phase(phase: str, **fields: Any) -> str:
    line = f"phase={phase} " + " ".join(f"{k}={_fmt(v)}" for k, v in fields.items())
    logger.info(line)
    return line


#: The keys every line of an epoch's phases (begin, precommit, commit, abort) starts with, in this
#: order, so one parser reads any task's log (docs/operating.md, "Task logs"); a value that does not
#: apply to a phase is ``-``. ``ranges``: the plan's offset ranges, ``p<partition>:[start,until)``
#: joined by commas; ``records``: the Kafka records in them; ``rows``: the rows this phase staged by
#: kind (precommit: ``output``, ``state``, ``late``, ``quarantine``, ``offsets``, ``filtered``) or
#: committed by output (commit: ``windows``, ``late``, ``quarantine``); ``delta_versions``: the
#: Delta version each table this attempt wrote got (``staging``, ``checkpoints``, each Delta sink by
#: name; ``{}`` when it wrote none of them; the epoch log is bookkeeping and not listed);
#: ``duration_ms``: the phase's wall time. Phase-specific keys follow them.
PHASE_KEYS = ("epoch", "plan_hash", "outcome", "ranges", "records", "rows", "delta_versions",
              "duration_ms")
NOT_APPLICABLE = "-"


def log_epoch_phase(phase: str, *, epoch: int, plan_hash: str | None, outcome: Any,
                    ranges: str | None, records: int | None, rows: dict[str, int] | None,
                    delta_versions: dict[str, int | None], duration_ms: float,
                    **details: Any) -> str:
    """One epoch phase's line: ``PHASE_KEYS`` first (every one, ``-`` when it does not apply),
    then ``details``."""
    common = {"epoch": epoch, "plan_hash": plan_hash, "outcome": outcome, "ranges": ranges,
              "records": records, "rows": rows,
              "delta_versions": {k: v for k, v in delta_versions.items() if v is not None},
              "duration_ms": duration_ms}
    fields = {k: NOT_APPLICABLE if v is None else v for k, v in common.items()}
    return log_phase(phase, **fields, **details)


@contextmanager
def timed() -> Iterator[dict[str, float]]:
    """Wall time of a block in ms; only ever logged, never an input to what an epoch computes."""
    box: dict[str, float] = {"start": time.monotonic()}
    try:
        yield box
    finally:
        box["ms"] = elapsed_ms(box)


def elapsed_ms(box: dict[str, float]) -> float:
    """The time so far inside a ``timed()`` block (for a log row written before it ends)."""
    return round((time.monotonic() - box["start"]) * 1000, 1)


def configure(level: int = logging.INFO) -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logger.setLevel(level)
