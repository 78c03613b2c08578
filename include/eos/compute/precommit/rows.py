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
    keep_condition,
    side_rows,
    topic_column,
    with_metadata,
)
from eos.compute.precommit.quarantine_paths import with_path_rules
from eos.compute.precommit.read import read_parsed
from eos.compute.precommit.resume import ResumePoint
from eos.compute.precommit.watermark import NEG_INF
from eos.core.config import PipelineConfig
from eos.core.config.rows import carries_headers
from eos.core.errors import ConfigError
from eos.core.metadata import KAFKA_HEADERS
from eos.core.plan import Plan
from eos.core.schema import KAFKA_TS, OFFSET, PARTITION, RAW_KEY, RAW_VALUE, REASON
from eos.core.staging import FILTERED
from eos.core.tables import ROW_HEADERS, ROW_TOPIC, row_column
from eos.core.window_state import EMPTY

# Where a stateless epoch resumes from: nowhere (no state, no watermark).
NOTHING = ResumePoint(EMPTY, NEG_INF, None, None, True)


def selected(F: Any, config: PipelineConfig, accepted: Any) -> list[Any]:
    """The row columns: each select expression cast to the type the config gave its column
    (every declared field as it is, without a select); then the sinks' record columns (a key
    or header given as an expression), computed with the row."""
    return [value.alias(name) for name, value in _row_values(F, config)]


def _row_values(F: Any, config: PipelineConfig) -> list[tuple[str, Any]]:
    """(staged name, value) of every row column and record column (``selected``)."""
    records = [(row_column(name), F.expr(column.expression).cast(column.type.sql.lower()))
               for name, column in config.record_columns.items()]
    if not config.select:
        return [*[(row_column(name), F.col(name)) for name in config.row_columns], *records]
    return [*[(row_column(name), F.expr(config.select[name]).cast(ftype.sql.lower()))
              for name, ftype in config.row_columns.items()], *records]


def _path_values(F: Any, config: PipelineConfig, topic: str) -> dict[str, Any]:
    """The row's string columns a sink may name paths with, by name (``with_path_rules``):
    each selected column as ``selected`` computes it, and the record's topic."""
    if config.select:
        values = {name: F.expr(config.select[name]).cast(ftype.sql.lower())
                  for name, ftype in config.row_columns.items()}
    else:
        values = {name: F.col(name) for name in config.row_columns}
    return {**values, "kafka_topic": topic_column(F, topic)}


def one_pass(config: PipelineConfig, plan: Plan) -> bool:
    """Whether epoch N is staged in one pass over its records: when its executors write it
    anyway (it reads more records than ``spark.collect_rows``, ``write.collects``). The rows
    and the quarantined records are then one projection of the read, and the filter's drops
    are counted by the write itself: no cached input, no counting job before it."""
    from eos.compute.precommit.write import COLLECT_MAX_ROWS

    collect = config.spark.collect_rows
    return not (collect > 0 and plan.records <= min(collect, COLLECT_MAX_ROWS))


@contextmanager
def row_frames(spark: Any, config: PipelineConfig, plan: Plan,
               timings: dict[str, float]) -> Iterator[Frames]:
    """Spark part: read the plan's ranges, parse, filter, select. The parsed input is cached
    while the ``with`` lasts (one read of Kafka for the rows and the quarantined records)."""
    from pyspark import StorageLevel
    from pyspark.errors import AnalysisException, ParseException
    from pyspark.sql import functions as F

    if one_pass(config, plan):
        yield _one_pass(spark, F, config, plan, timings)
        return
    parsed = read_parsed(spark, config, plan, {}).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        events = with_metadata(F, config, parsed, plan.topic)
        keep, stats = input_stats(F, config, events, timings)
        events = with_path_rules(F, config, events, keep, _path_values(F, config, plan.topic))
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
        side = side_rows(F, config, events, None, plan.topic)
        yield Frames(rows, side, None, stats["filtered"], stats["bad_bytes"] or 0, NEG_INF,
                     None, 0)
    finally:
        parsed.unpersist()


def _one_pass(spark: Any, F: Any, config: PipelineConfig, plan: Plan,
              timings: dict[str, float]) -> Frames:
    """Epoch N's staged rows as one projection of its read (``one_pass``): each record's
    kind (``output``: parsed and kept; ``quarantine``: not parsed; ``filtered``: dropped),
    its coordinates, the row's columns only on an output row and the raw bytes and reason only
    on a quarantined one. CASE WHEN evaluates only the branch it takes, so a select never runs
    on a record that did not parse, as in the two-pass path. The filter's drops stay in the
    frame as bare ``FILTERED`` rows, which the write counts and does not stage; the rows
    staged are those ``row_frames``' two passes stage."""
    from pyspark.errors import AnalysisException, ParseException

    events = with_metadata(F, config, read_parsed(spark, config, plan, {}), plan.topic)
    keep = keep_condition(F, config)
    events = with_path_rules(F, config, events, keep, _path_values(F, config, plan.topic))
    marked = events.withColumn("kind", F.when(F.col(REASON).isNotNull(), F.lit("quarantine"))
                               .when(keep, F.lit("output")).otherwise(F.lit(FILTERED)))
    output, bad = F.col("kind") == "output", F.col("kind") == "quarantine"
    projected = marked.select(
        "kind", F.col(PARTITION).alias("partition"), F.col(OFFSET).alias("offset"),
        F.col(KAFKA_TS).alias("kafka_timestamp_ms"),
        F.when(output, topic_column(F, plan.topic)).alias(ROW_TOPIC),
        *[F.when(output, value).alias(name) for name, value in _row_values(F, config)],
        *([F.when(output, F.col(KAFKA_HEADERS)).alias(ROW_HEADERS)]
          if carries_headers(config) else []),
        F.when(bad, topic_column(F, plan.topic)).alias("topic"),
        F.when(bad, F.col(RAW_KEY)).alias("raw_key"),
        F.when(bad, F.col(RAW_VALUE)).alias("raw_value"), F.col(REASON).alias("reason"))
    try:
        projected.schema  # noqa: B018 - analysed now: a filter or select Spark refuses
    except (AnalysisException, ParseException) as error:
        raise ConfigError(f"the filter {config.event.filter!r} or select "
                          f"{dict(config.select)} does not run on Spark: "
                          f"{str(error).splitlines()[0]}") from None
    timings["read_parse"] = 0.0  # read, parsed and written in the staging write's one job
    return Frames(projected, None, None, 0, 0, NEG_INF, None, 0, one_pass=True)
