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
