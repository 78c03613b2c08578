"""``SparkStager``: precommit's compute on Spark, the steps in order (resume, read and parse,
watermark, windows, late split, state merge, side rows, staging write; without windows: read
and parse, filter, select, staging write).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eos.compute.precommit.frames import epoch_frames
from eos.compute.precommit.resume import resume_state
from eos.compute.precommit.rows import NOTHING, row_frames
from eos.compute.precommit.write import write_epoch
from eos.core.checkpoints import Checkpoint
from eos.core.config import PipelineConfig
from eos.core.layout import Tables
from eos.core.phaselog import timed
from eos.core.plan import Plan
from eos.core.staging import StagedFiles


@dataclass(frozen=True)
class SparkStager:
    """The Spark implementation of ``eos.core.staging.Stager``: epoch N computed on ``spark``
    (a Spark Connect session, or a local one created on first use when None)."""

    spark: Any = None

    def stage(self, config: PipelineConfig, tables: Tables, plan: Plan,
              previous: Checkpoint | None, timings: dict[str, float]) -> StagedFiles:
        """Epoch N written as staging files: a pure function of the plan and epoch N-1's state
        (no clock, no randomness), so every attempt writes the same rows."""
        state = NOTHING if config.stateless else resume_state(config, tables, previous)
        with timed() as took:
            session = self.spark if self.spark is not None else _local_session(config)
        timings["spark_start"] = took["ms"]
        compute = row_frames(session, config, plan, timings) if config.stateless else \
            epoch_frames(session, config, plan, state, timings)
        with compute as frames:
            return write_epoch(config, tables, plan, state, frames, timings)


def _local_session(config: PipelineConfig) -> Any:
    """An in-process Spark session (a JVM): imported only when a stager has none, so importing
    this module starts nothing and loads no Spark."""
    from eos.compute.session import local_session

    return local_session(config)
