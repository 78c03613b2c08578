"""The audit of a pipeline without windows: every accepted record is one row, held once by
every sink of ``rows`` at its coordinates, with the values the reference computes here.

The reference shares only the parse rules with the pipeline (they specify a valid event): the
filter and every ``select`` expression run on DuckDB over the re-read records (the pipeline
runs them on Spark), translated by sqlglot, each cast to its column's type as the pipeline
casts Spark's result; the Kafka metadata is taken from the records here, the key decoded again
here. Two engines agreeing on every value is the check.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import pyarrow as pa

from eos.compute.formats import Parsed
from eos.core.config import PipelineConfig
from eos.core.path_rules import path_problem_of, rules_of_view
from eos.core.plan import Plan
from eos.core.schema import field_schema
from eos.tools.audit.checks import RECORD_TIMESTAMP, row_identity
from eos.tools.audit.reference import (
    METADATA_SCHEMA,
    Expected,
    Record,
    epoch_expressions,
    event_parser,
    key_parser,
    key_values,
    parts_schema,
    record_metadata,
    record_parts,
)
from eos.tools.audit.report import AuditReport, Problem, ProblemKind

DOUBLE_TOLERANCE = 1e-12  # a function of doubles may differ in its last bits between engines


def row_reference(config: PipelineConfig, epochs: list[tuple[Plan, list[Record]]],
                  views: dict[int, dict[str, Any]] | None = None,
                  expected: Expected | None = None) -> Expected:
    """Every epoch's rows and quarantined records, recomputed from its records; ``views``:
    each epoch's checkpointed schema view, whose ``select`` columns the epoch has (a column
    added since is null in it: ``eos.core.evolution``). Added to ``expected`` when given: an
    audit reads the epochs in batches."""
    from eos.core.evolution import columns_of

    parser = event_parser(config)
    keys = key_parser(config)
    expected = expected if expected is not None else Expected()
    names = list(config.event.fields)
    for plan, records in epochs:
        accepted: list[dict[str, Any]] = []
        for r in records:
            expected.records += 1
            parsed = parser.parse(r.value, r.timestamp_ms)
            key = key_values(config, keys, r)
            if not isinstance(parsed, Parsed) or isinstance(key, str):
                expected.rows["quarantine"].append({
                    "kafka_topic": r.topic or plan.topic, "partition": r.partition,
                    "offset": r.offset,
                    "reason": parsed.reason if not isinstance(parsed, Parsed) else key,
                    "epoch": plan.epoch, RECORD_TIMESTAMP: r.timestamp_ms})
                continue
            accepted.append({**dict(zip(names, parsed.values, strict=True)),
                             **record_metadata(plan.topic, r), **record_parts(config, r, key)})
        view = (views or {}).get(plan.epoch)
        columns = [n for n in config.row_columns if not view or n in columns_of(view)]
        kept = _evaluated(config, accepted, columns, *epoch_expressions(config, view))
        expected.filtered[plan.epoch] = len(accepted) - len(kept)
        expected.watermarks[plan.epoch] = None  # no event-time rule: no watermark
        rules = rules_of_view(view, config, ("rows",))
        for row in kept:
            problem = path_problem_of(rules, row)
            if problem is None:
                expected.rows["rows"].append({**row, "epoch": plan.epoch})
            else:  # a value a sink cannot name a path with (``eos.core.path_rules``)
                expected.rows["quarantine"].append({
                    "kafka_topic": row["kafka_topic"], "partition": row["kafka_partition"],
                    "offset": row["kafka_offset"], "reason": problem, "epoch": plan.epoch,
                    RECORD_TIMESTAMP: row[RECORD_TIMESTAMP]})
    return expected


def _evaluated(config: PipelineConfig, events: list[dict[str, Any]], names: list[str],
               text: str | None, select: dict[str, str]) -> list[dict[str, Any]]:
    """The rows of the events the epoch's filter (``text``) keeps (DuckDB): their columns by
    the epoch's ``select`` (null but ``names``), then their coordinates."""
    if not events:
        return []
    import duckdb

    from eos.core.filters import DUCKDB_TIME_ZONE, expression_for_duckdb, filter_for_duckdb

    schema = pa.schema([*field_schema(config.event), *METADATA_SCHEMA, *parts_schema(config)])
    table = pa.Table.from_pylist(events, schema=schema)
    table = table.append_column("__i", pa.array(range(len(events)), pa.int64()))
    keep = f"coalesce(({filter_for_duckdb(text)}), false)" if text else "true"
    if config.select:
        columns = [f'{expression_for_duckdb(select[name], config.row_columns[name].sql)} '
                   f'AS "{name}"' if name in names and name in select else f'NULL AS "{name}"'
                   for name in config.select]
    else:
        columns = [f'"{name}"' for name in config.event.fields]
    columns += [f'{expression_for_duckdb(c.expression, c.type.sql)} AS "{name}"'
                for name, c in config.record_columns.items()]  # a key or header's value
    from eos.core.config.rows import carries_headers

    # The record's Kafka timestamp orders an upserting sink's rows (``latest_rows``).
    coordinates = ["kafka_topic", "kafka_partition", "kafka_offset",
                   *(["kafka_headers"] if carries_headers(config) else []),
                   f'kafka_timestamp AS "{RECORD_TIMESTAMP}"']
    query = (f"SELECT {', '.join([*columns, *coordinates])} FROM events "
             f"WHERE {keep} ORDER BY __i")
    with duckdb.connect() as con:
        con.execute(DUCKDB_TIME_ZONE)
        con.register("events", table)
        result = con.execute(query)
        labels = [d[0] for d in result.description]
        return [dict(zip(labels, row, strict=True)) for row in result.fetchall()]


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
        if not (math.isfinite(a) and math.isfinite(b)):
            return a == b or (math.isnan(a) and math.isnan(b))
        return math.isclose(a, b, rel_tol=DOUBLE_TOLERANCE, abs_tol=DOUBLE_TOLERANCE)
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return Decimal(a) == Decimal(b)
    return bool(a == b)


def compare_row_values(report: AuditReport, config: PipelineConfig, sink: str,
                       want: Iterable[dict[str, Any]], got: Iterable[dict[str, Any]]) -> None:
    """Every column of every row the sink holds against the reference's row of the same
    record (its epoch too): a row present with a wrong value is lost data that the identities
    alone cannot show."""
    identity = row_identity(config, "rows")
    expected = {identity(row): row for row in want}
    columns = [*config.row_columns, "epoch"]
    for row in got:
        reference_row = expected.get(identity(row))
        if reference_row is None:
            continue
        wrong = [f"{name}={row.get(name)!r}, expected {reference_row[name]!r}"
                 for name in columns if not _same(reference_row[name], row.get(name))]
        if wrong:
            report.problems.append(Problem(ProblemKind.WRONG_VALUES, sink,
                                           f"{identity(row)}: {'; '.join(wrong)}"))
