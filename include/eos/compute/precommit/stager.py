"""``SparkStager``: precommit's compute on Spark, the steps in order (resume, read and parse,
watermark, windows, late split, state merge, side rows, staging write; without windows: read
and parse, filter, select, staging write).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from eos.compute.precommit.frames import epoch_frames
from eos.compute.precommit.resume import resume_state
from eos.compute.precommit.rows import NOTHING, row_frames
from eos.compute.precommit.write import write_epoch
from eos.core.checkpoints import Checkpoint
from eos.core.config import PipelineConfig
from eos.core.errors import ExpressionFailed
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
        try:
            with compute as frames:
                return write_epoch(config, tables, plan, state, frames, timings)
        except Exception as error:
            failed = expression_failed(error, plan)
            if failed is None:
                raise
            raise failed from None


# Spark's ANSI errors of a value, not of the job: a record the expression cannot take. Every
# attempt of the epoch reads the same records, so each would fail the same way.
DATA_ERRORS = frozenset({
    "CAST_INVALID_INPUT", "CAST_OVERFLOW", "CAST_OVERFLOW_IN_TABLE_INSERT",
    "NUMERIC_VALUE_OUT_OF_RANGE", "ARITHMETIC_OVERFLOW", "DIVIDE_BY_ZERO",
    "INTERVAL_DIVIDED_BY_ZERO",
    "INVALID_ARRAY_INDEX", "INVALID_ARRAY_INDEX_IN_ELEMENT_AT", "INVALID_INDEX_OF_ZERO",
    "DATETIME_OVERFLOW", "DATETIME_FIELD_OUT_OF_BOUNDS", "INVALID_FRACTION_OF_SECOND",
    "CANNOT_PARSE_TIMESTAMP", "NUMERIC_OUT_OF_SUPPORTED_RANGE", "BINARY_ARITHMETIC_OVERFLOW",
})
_CONDITION = re.compile(r"\[([A-Z_]+)(?:\.[A-Z_]+)?\]")


def expression_failed(error: BaseException, plan: Plan) -> ExpressionFailed | None:
    """``error`` as the epoch's ``ExpressionFailed`` when Spark says a value broke an
    expression (its condition, or the first ``[CONDITION]`` in its message), else None."""
    condition = getattr(error, "getCondition", lambda: None)() or ""
    if not condition:
        found = _CONDITION.search(str(error))
        condition = found.group(1) if found else ""
    if condition.split(".")[0] not in DATA_ERRORS:
        return None
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    return ExpressionFailed(
        f"epoch {plan.epoch}: an expression of the pipeline's select, filter or derived fields "
        f"fails on a record of {plan.describe_ranges()}: {first}. Every attempt reads the same "
        "records: change the expression so that it takes them (TRY_CAST instead of CAST, a "
        "CASE that guards the operation); the filter may change between epochs, and a select "
        "column or derived field may change its expression while its type stays the same")


def _local_session(config: PipelineConfig) -> Any:
    """An in-process Spark session (a JVM): imported only when a stager has none, so importing
    this module starts nothing and loads no Spark."""
    from eos.compute.session import local_session

    return local_session(config)
