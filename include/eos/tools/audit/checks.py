"""The audit's comparisons: a sink's rows against the reference's, a window's aggregates
against the recomputed ones, the committed ranges against each other and the checkpoint table
against the plans and the recomputed watermarks."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

from eos.compute.precommit.watermark import NEG_INF
from eos.core import checkpoints
from eos.core.config import PipelineConfig
from eos.core.layout import Tables
from eos.core.plan import Plan
from eos.core.topics import TopicPartition
from eos.tools.audit.report import AuditReport, Problem, ProblemKind

# approx_count_distinct: HLL with lgConfigK 12 has a relative standard error of 1.04/sqrt(4096)
# (1.6%); the audit accepts three of them around the exact distinct count (and 1 for tiny counts).
HLL_TOLERANCE = 3 * 1.04 / math.sqrt(4096)
DOUBLE_TOLERANCE = 1e-9  # double sums depend on the order they are added in


def as_ms(value: Any) -> Any:
    """A time column's value as epoch milliseconds (a timestamp read back as a datetime)."""
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else value


def row_identity(config: PipelineConfig, output: str) -> Callable[[dict[str, Any]], tuple]:
    """What identifies a committed row of ``output``: a window's group, bounds and epoch (its
    values are compared by ``value_differences``), the record (topic, partition, offset) and
    window of a late row, the record and reason of a quarantined one: two topics' records at
    one partition and offset are two rows."""
    if output == "windows":
        names = [*config.group_by, "window_start", "window_end", "epoch"]
        return lambda row: tuple(as_ms(row[n]) for n in names)
    if output == "rows":  # a record's row: its coordinates (a duplicate is one held twice)
        return lambda row: (row["kafka_topic"], row["kafka_partition"], row["kafka_offset"])
    if output == "late":
        return lambda row: (row.get("kafka_topic"), row["partition"], row["offset"],
                            as_ms(row["window_start"]), as_ms(row["window_end"]), row["epoch"])
    return lambda row: (row.get("kafka_topic"), row["partition"], row["offset"], row["reason"],
                        row["epoch"])


def with_topics(rows: list[dict[str, Any]], plans: list[Plan]) -> list[dict[str, Any]]:
    """Late and quarantine rows as their identity reads them: a row of a record without a
    ``kafka_topic`` (committed before those outputs had the column) is of its epoch's plan's
    one topic; a window's overflow row (no record) stays without one."""
    topics = {plan.epoch: plan.topic for plan in plans}
    return [row if row.get("kafka_topic") is not None or row.get("partition") is None
            else {**row, "kafka_topic": topics.get(row["epoch"]) or None} for row in rows]


def value_differences(config: PipelineConfig, want: dict[str, Any],
                      got: dict[str, Any]) -> list[str]:
    """The aggregations of one window that disagree: exact for counts, long and decimal sums,
    min, max and exact distinct counts; a double sum or an average within 1e-9 relative (the
    order of additions differs); an approximate distinct count within the sketch's bound."""
    wrong = []
    types = config.field_types
    for name, spec in config.aggregations.items():
        a, b = want[name], got.get(name)
        double = spec.function == "avg" or (
            spec.function == "sum" and types[spec.field].name == "double")
        if a is None or b is None:
            same = a is None and b is None
        elif spec.function == "approx_count_distinct":
            same = abs(b - a) <= max(1.0, HLL_TOLERANCE * a)
        elif double and not (math.isfinite(a) and math.isfinite(b)):
            same = a == b or (math.isnan(a) and math.isnan(b))  # ±Infinity, NaN: exactly
        elif double:
            same = math.isclose(a, b, rel_tol=DOUBLE_TOLERANCE, abs_tol=DOUBLE_TOLERANCE)
        else:
            same = a == b
        if not same:
            wrong.append(f"{name}={b!r}, expected {a!r}")
    return wrong


# The reference's rows carry their record's Kafka timestamp under this name (milliseconds):
# what orders an upsert's rows across partitions; no row's column (it is never compared).
RECORD_TIMESTAMP = "__kafka_timestamp"
# Where a row of each output says its record is: topic, partition, offset.
_RECORD = {"rows": ("kafka_topic", "kafka_partition", "kafka_offset"),
           "late": ("kafka_topic", "partition", "offset"),
           "quarantine": ("kafka_topic", "partition", "offset")}
_WINDOW = ("window_end", "window_start")


def latest_rows(rows: list[dict[str, Any]], keys: tuple[str, ...],
                output: str = "rows") -> list[dict[str, Any]]:
    """What a sink that upserts on ``keys`` holds of ``rows`` (``SupportsReadBack.kept_by``):
    per key, a row of its highest epoch, and of that epoch's rows the last a changelog would
    apply, written out here again (the pipeline's rule is ``eos.core.upserts``): within a
    partition the higher offset; across partitions the later Kafka timestamp (none first),
    then topic, partition, offset; then the later window; then the other values."""
    by_key: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        by_key.setdefault(tuple(as_ms(row[k]) for k in keys), []).append(row)
    kept = []
    for group in by_key.values():
        newest = max(row["epoch"] for row in group)
        kept.append(_last(output, [row for row in group if row["epoch"] == newest]))
    return kept


def _last(output: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One key's last row of one epoch (``latest_rows``)."""
    record = _RECORD.get(output)
    if record is None or any(row.get(record[2]) is None for row in rows):
        return max(rows, key=lambda row: _sortable(row, (*_WINDOW, *sorted(row))))
    topic, partition, offset = record
    per_partition: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        where = (row.get(topic), row[partition])
        if where not in per_partition or _after(row, per_partition[where], (offset,)):
            per_partition[where] = row
    return max(per_partition.values(), key=lambda row: _sortable(
        row, (RECORD_TIMESTAMP, topic, partition, offset, *_WINDOW, *sorted(row))))


def _after(row: dict[str, Any], other: dict[str, Any], first: tuple[str, ...]) -> bool:
    """Whether ``row`` comes after ``other`` by ``first``, then the window, then the rest."""
    names = (*first, *_WINDOW, *sorted(row))
    return _sortable(row, names) > _sortable(other, names)


def _sortable(row: dict[str, Any], names: tuple[str, ...]) -> tuple:
    """``row``'s values of ``names`` as a tuple Python orders, a missing value or None first
    (as the pipeline sorts nulls first), values of no order (lists, dicts) left out."""
    values: list[tuple[int, Any]] = []
    for name in names:
        value = as_ms(row.get(name))
        if isinstance(value, (list, dict, tuple)):
            continue
        values.append((0, 0) if value is None else (1, value))
    return tuple(values)


def compare_rows(report: AuditReport, sink: str, want: Counter, got: Counter) -> None:
    """A sink's row identities against the reference's: a row held more often than expected is
    doubled (or unexplained), one held less often is lost."""
    report.counts[sink] = (sum(want.values()), sum(got.values()))
    for row, n in (got - want).items():
        kind = ProblemKind.DUPLICATED if row in want else ProblemKind.UNEXPECTED
        report.problems.append(Problem(kind, sink, str(row), n))
    for row, n in (want - got).items():
        report.problems.append(Problem(ProblemKind.MISSING, sink, str(row), n))


def compare_window_values(report: AuditReport, config: PipelineConfig, sink: str,
                          want: list[dict[str, Any]], got: list[dict[str, Any]]) -> None:
    """The aggregates of every window the sink holds and the reference expects: a window present
    with wrong values is lost data that ``compare_rows`` (identities only) cannot see."""
    identity = row_identity(config, "windows")
    expected = {identity(row): row for row in want}
    for row in got:
        if (reference_row := expected.get(identity(row))) is not None:
            wrong = value_differences(config, reference_row, row)
            if wrong:
                report.problems.append(Problem(ProblemKind.WRONG_VALUES, sink,
                                               f"{identity(row)}: {'; '.join(wrong)}"))


def check_offsets(plans: list[Plan], moved: set[int] | frozenset[int] = frozenset()
                  ) -> list[Problem]:
    """Committed ranges must be contiguous per topic-partition: no gap, no overlap. A logged
    move (``moved``: the epochs whose plan is the first on a new source, ``eos.core.move``)
    starts afresh where it says; no other plan may read another source than the epoch before
    (topics may join it: ``SourceIdentity.continues``)."""
    problems = []
    until: dict[TopicPartition, int] = {}
    before: Plan | None = None
    for plan in plans:
        if plan.epoch in moved:
            until = {}
        elif before is not None and not plan.source.continues(before.source):
            problems.append(Problem(
                ProblemKind.OFFSETS, f"epoch {plan.epoch}",
                f"reads {plan.source.describe()}, epoch {before.epoch} read "
                f"{before.source.describe()}, and no move is logged"))
            until = {}
        for r in plan.ranges:
            if r.key in until and r.start != until[r.key]:
                problems.append(Problem(
                    ProblemKind.OFFSETS, f"epoch {plan.epoch}",
                    f"topic '{r.topic}' partition {r.partition} starts at {r.start} but the "
                    f"previous epoch ended at {until[r.key]}"))
            until[r.key] = r.until
        before = plan
    return problems


def check_checkpoints(tables: Tables, plans: list[Plan],
                      watermarks: dict[int, int | None]) -> list[Problem]:
    """One checkpoint row per committed epoch, agreeing with its plan and the recomputed
    watermark (of the epochs the audit replayed: those in ``watermarks``)."""
    problems = []
    rows = checkpoints.read_all(tables)
    epochs = [c.epoch for c in rows]
    if epochs != [p.epoch for p in plans]:
        problems.append(Problem(ProblemKind.CHECKPOINT, "checkpoints",
                                f"rows for epochs {epochs}, expected 0..{len(plans) - 1} once"))
    for checkpoint in rows:
        if checkpoint.epoch >= len(plans):
            continue
        plan = plans[checkpoint.epoch]
        want_until = plan.until
        if plan.epoch not in watermarks:  # not replayed: its watermark is not known here
            want_mark = checkpoint.watermark_ms
        else:
            want_mark = watermarks[plan.epoch]
            want_mark = NEG_INF if want_mark is None else want_mark
        if (checkpoint.plan_hash, checkpoint.until, checkpoint.watermark_ms) != (
                plan.hash, want_until, want_mark):
            problems.append(Problem(
                ProblemKind.CHECKPOINT, f"checkpoint {checkpoint.epoch}",
                f"holds plan {checkpoint.plan_hash}, until {checkpoint.until}, watermark "
                f"{checkpoint.watermark_ms}; expected {plan.hash}, {want_until}, {want_mark}"))
    return problems

