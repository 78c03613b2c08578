"""Epoch N of a pipeline without windows, on Spark: every accepted record (parsed, kept by the
filter) becomes one row of the selected columns, beside its coordinates; a record that does not
parse is quarantined as in any pipeline. No watermark, no state: a row depends on its record
alone, so an epoch depends on its plan alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from eos.compute.precommit.frames import (
    Frames,
    input_stats,
    side_rows,
    topic_column,
    with_metadata,
)
from eos.compute.precommit.read import read_parsed
from eos.compute.precommit.resume import ResumePoint
from eos.compute.precommit.watermark import NEG_INF
from eos.core.config import PipelineConfig
from eos.core.config.rows import carries_headers
from eos.core.errors import ConfigError
from eos.core.metadata import KAFKA_HEADERS
from eos.core.plan import Plan
from eos.core.schema import KAFKA_TS, OFFSET, PARTITION, REASON
from eos.core.tables import ROW_HEADERS, ROW_TOPIC, row_column
from eos.core.window_state import EMPTY

# Where a stateless epoch resumes from: nowhere (no state, no watermark).
NOTHING = ResumePoint(EMPTY, NEG_INF, None, None, True)


def selected(F: Any, config: PipelineConfig, accepted: Any) -> list[Any]:
    """The row columns: each select expression cast to the type the config gave its column
    (every declared field as it is, without a select); then the sinks' record columns (a key
    or header given as an expression), computed with the row."""
    records = [F.expr(column.expression).cast(column.type.sql.lower()).alias(row_column(name))
               for name, column in config.record_columns.items()]
    if not config.select:
        return [*[F.col(name).alias(row_column(name)) for name in config.row_columns], *records]
    return [*[F.expr(config.select[name]).cast(ftype.sql.lower()).alias(row_column(name))
              for name, ftype in config.row_columns.items()], *records]


@contextmanager
def row_frames(spark: Any, config: PipelineConfig, plan: Plan,
               timings: dict[str, float]) -> Iterator[Frames]:
    """Spark part: read the plan's ranges, parse, filter, select. The parsed input is cached
    while the ``with`` lasts (one read of Kafka for the rows and the quarantined records)."""
    from pyspark import StorageLevel
    from pyspark.errors import AnalysisException, ParseException
    from pyspark.sql import functions as F

    parsed = read_parsed(spark, config, plan, {}).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        events = with_metadata(F, config, parsed, plan.topic)
        keep, stats = input_stats(F, config, events, timings)
        accepted = events.where(F.col(REASON).isNull()).where(keep)
        rows = accepted.select(
            F.lit("output").alias("kind"), F.col(PARTITION).alias("partition"),
            F.col(OFFSET).alias("offset"), F.col(KAFKA_TS).alias("kafka_timestamp_ms"),
            topic_column(F, plan.topic).alias(ROW_TOPIC), *selected(F, config, accepted),
            *([F.col(KAFKA_HEADERS).alias(ROW_HEADERS)] if carries_headers(config) else []))
        try:
            rows.schema  # noqa: B018 - analysed now: a select Spark refuses is named here
        except (AnalysisException, ParseException) as error:
            raise ConfigError(f"select {dict(config.select)} does not run on Spark: "
                              f"{str(error).splitlines()[0]}") from None
        side = side_rows(F, config, parsed, None, plan.topic)
        yield Frames(rows, side, None, stats["filtered"], stats["bad_bytes"] or 0, NEG_INF,
                     None, 0)
    finally:
        parsed.unpersist()
