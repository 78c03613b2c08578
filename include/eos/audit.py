"""``eos verify``: an independent audit of every sink and of the checkpoints.

It re-reads every committed epoch's ranges from Kafka with a plain consumer, recomputes windows,
watermarks, late and quarantined records in plain Python (no Spark, no staging), and compares the
result with what each sink holds (Delta tables read back, Kafka topics read back with
``read_committed``), with each sink's commits (exactly one per epoch), and with the checkpoint
table. It shares only the parsing rules (``eos.events.parse_event``) with the pipeline: they are
the specification of a valid event.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, NamedTuple

from eos import checkpoints
from eos.config import OUTPUTS, PipelineConfig
from eos.events import NEG_INF, Event, parse_event
from eos.kafka import client_settings, read_partition
from eos.layout import Tables, tables_for
from eos.outputs import windows_schema
from eos.plan import Plan, plan_of
from eos.sinks import sinks_for
from eos.sinks.base import NO_EPOCH

READ_TIMEOUT_S = 30.0


class Record(NamedTuple):
    partition: int
    offset: int
    timestamp_ms: int
    value: bytes | None


@dataclass
class Expected:
    """Rows per output (as dicts with the columns the audit compares), and the watermark after
    every epoch (None: no event yet)."""

    rows: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {output: [] for output in OUTPUTS})
    watermarks: dict[int, int | None] = field(default_factory=dict)
    records: int = 0


def read_range(settings: dict[str, Any], topic: str, partition: int, start: int,
               until: int) -> list[Record]:
    """Every record in ``[start, until)`` of one partition, with a plain consumer."""
    return [Record(partition, m.offset(), m.timestamp()[1], m.value())
            for m in read_partition(settings, topic, partition, start, until, group="eos-audit",
                                    timeout_s=READ_TIMEOUT_S)]


def reference(config: PipelineConfig, epochs: list[tuple[Plan, list[Record]]]) -> Expected:
    """The committed result the protocol promises, recomputed record by record."""
    size, lateness = config.window.size, config.window.allowed_lateness
    ev = config.event
    expected = Expected()
    open_windows: dict[tuple[str, int], list[Any]] = {}
    watermark: int | None = None  # None = minus infinity
    max_event: int | None = None
    for plan, records in epochs:
        previous = watermark
        for r in records:
            expected.records += 1
            parsed = parse_event(r.value, r.timestamp_ms, ev.key, ev.time, ev.value,
                                 ev.max_future)
            if not isinstance(parsed, Event):
                expected.rows["quarantine"].append({
                    "partition": r.partition, "offset": r.offset, "reason": parsed.reason,
                    "epoch": plan.epoch})
                continue
            start = parsed.ts_ms - parsed.ts_ms % size
            max_event = parsed.ts_ms if max_event is None else max(max_event, parsed.ts_ms)
            if previous is not None and start + size <= previous:
                expected.rows["late"].append(
                    {"partition": r.partition, "offset": r.offset, "epoch": plan.epoch})
                continue
            w = open_windows.setdefault((parsed.key, start), [0, Decimal(0), None, None])
            w[0] += 1
            w[1] += parsed.value
            w[2] = parsed.value if w[2] is None else min(w[2], parsed.value)
            w[3] = parsed.value if w[3] is None else max(w[3], parsed.value)
        if max_event is not None:
            candidate = max_event - lateness
            watermark = candidate if watermark is None else max(watermark, candidate)
        if plan.records == 0 and plan.clock_ms is not None and config.window.idle_timeout:
            candidate = plan.clock_ms - config.window.idle_timeout
            watermark = candidate if watermark is None else max(watermark, candidate)
        expected.watermarks[plan.epoch] = watermark
        if watermark is None:
            continue
        for (key, start), (count, total, lo, hi) in sorted(open_windows.items()):
            if start + size <= watermark:
                expected.rows["windows"].append(
                    _window_row(key, start, size, count, total, lo, hi, plan.epoch))
                del open_windows[(key, start)]
    return expected


def _window_row(key: str, start: int, size: int, count: int, total: Decimal, lo: Decimal,
                hi: Decimal, epoch: int) -> dict[str, Any]:
    return {"key": key, "window_start": start, "window_end": start + size, "count": count,
            "sum": total, "min": lo, "max": hi, "avg": float(total) / count, "epoch": epoch}


def _ms(value: Any) -> Any:
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else value


class ProblemKind(StrEnum):
    MISSING = "missing row"  # a record's effect the sink does not hold: lost
    DUPLICATED = "duplicated row"  # an expected row held more than once: doubled
    UNEXPECTED = "unexpected row"  # a row no record explains
    COMMITS = "commits"  # a sink's commits are not exactly one per epoch
    CHECKPOINT = "checkpoint"  # the checkpoint table disagrees with the recomputation
    OFFSETS = "offsets"  # committed ranges are not contiguous
    NOTHING = "nothing committed"


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    where: str
    detail: str
    count: int = 1

    def __str__(self) -> str:
        return f"{self.where}: {self.kind} {self.detail}" + (
            f" (x{self.count})" if self.count != 1 else "")


def row_identity(config: PipelineConfig, output: str) -> Callable[[dict[str, Any]], tuple]:
    """What identifies a committed row of ``output`` for the comparison: every column of a
    window (only the configured aggregations), the record (and reason) of a late/quarantine row."""
    if output == "windows":
        names = windows_schema(config).names
        return lambda row: tuple(_ms(row[n]) for n in names)
    if output == "late":
        return lambda row: (row["partition"], row["offset"], row["epoch"])
    return lambda row: (row["partition"], row["offset"], row["reason"], row["epoch"])


@dataclass
class AuditReport:
    pipeline: str
    committed_epoch: int
    records: int = 0
    problems: list[Problem] = field(default_factory=list)
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # sink -> (expected, got)

    @property
    def ok(self) -> bool:
        return not self.problems

    def count(self, *kinds: ProblemKind) -> int:
        return sum(p.count for p in self.problems if p.kind in kinds)

    @property
    def lost(self) -> int:
        return self.count(ProblemKind.MISSING)

    @property
    def doubled(self) -> int:
        return self.count(ProblemKind.DUPLICATED, ProblemKind.UNEXPECTED)

    def render(self) -> str:
        lines = [f"audit of pipeline '{self.pipeline}': epochs 0..{self.committed_epoch}, "
                 f"{self.records} records re-read from Kafka"]
        for sink, (want, got) in self.counts.items():
            lines.append(f"  {sink:<28} expected {want:>8}  committed {got:>8}")
        if self.ok:
            lines.append("verdict: OK - every record counted exactly once in every sink")
        else:
            lines.append(f"verdict: FAILED - {len(self.problems)} problem(s)")
            lines.extend(f"  - {p}" for p in self.problems[:50])
        return "\n".join(lines)


def _compare(report: AuditReport, sink: str, want: Counter, got: Counter) -> None:
    report.counts[sink] = (sum(want.values()), sum(got.values()))
    for row, n in (got - want).items():
        kind = ProblemKind.DUPLICATED if row in want else ProblemKind.UNEXPECTED
        report.problems.append(Problem(kind, sink, str(row), n))
    for row, n in (want - got).items():
        report.problems.append(Problem(ProblemKind.MISSING, sink, str(row), n))


def check_offsets(plans: list[Plan]) -> list[Problem]:
    """Committed ranges must be contiguous per partition: no gap, no overlap."""
    problems = []
    until: dict[int, int] = {}
    for plan in plans:
        for r in plan.ranges:
            if r.partition in until and r.start != until[r.partition]:
                problems.append(Problem(
                    ProblemKind.OFFSETS, f"epoch {plan.epoch}",
                    f"partition {r.partition} starts at {r.start} but the previous epoch ended "
                    f"at {until[r.partition]}"))
            until[r.partition] = r.until
    return problems


def check_checkpoints(tables: Tables, plans: list[Plan],
                      watermarks: dict[int, int | None]) -> list[Problem]:
    """One checkpoint row per committed epoch, agreeing with its plan and the recomputed
    watermark."""
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
        want_until = {r.partition: r.until for r in plan.ranges}
        want_mark = watermarks.get(plan.epoch)
        want_mark = NEG_INF if want_mark is None else want_mark
        if (checkpoint.plan_hash, checkpoint.until, checkpoint.watermark_ms) != (
                plan.hash, want_until, want_mark):
            problems.append(Problem(
                ProblemKind.CHECKPOINT, f"checkpoint {checkpoint.epoch}",
                f"holds plan {checkpoint.plan_hash}, until {checkpoint.until}, watermark "
                f"{checkpoint.watermark_ms}; expected {plan.hash}, {want_until}, {want_mark}"))
    return problems


def audit(config: PipelineConfig) -> AuditReport:
    """Recompute every committed epoch from Kafka and compare every sink and the checkpoints."""
    tables = tables_for(config)
    committed = checkpoints.committed_epoch(tables, config.app_id)
    report = AuditReport(config.name, committed)
    if committed == NO_EPOCH:
        report.problems.append(Problem(ProblemKind.NOTHING, config.name, "yet"))
        return report
    settings = client_settings(config.kafka.client)
    plans = [plan_of(tables, e) for e in range(committed + 1)]
    report.problems.extend(check_offsets(plans))
    epochs = [
        (plan, [rec for r in plan.ranges
                for rec in read_range(settings, plan.topic, r.partition, r.start, r.until)])
        for plan in plans
    ]
    expected = reference(config, epochs)
    report.records = expected.records
    report.problems.extend(check_checkpoints(tables, plans, expected.watermarks))
    for sink in sinks_for(config):
        identity = row_identity(config, sink.output)
        want = Counter(identity(row) for row in expected.rows[sink.output])
        got = Counter(identity(row) for row in sink.read_back())
        _compare(report, sink.name, want, got)
        commits = sink.commits()
        # A sink may forget old commits (a Kafka sink's marker topic is compacted to the last
        # marker), never hold one twice or miss the last: a contiguous run ending at N.
        if not commits or commits != list(range(committed - len(commits) + 1, committed + 1)):
            report.problems.append(Problem(
                ProblemKind.COMMITS, sink.name,
                f"holds commits of epochs {commits[:20]}{'...' if len(commits) > 20 else ''}; "
                f"expected each of ..{committed} once, up to {committed}"))
    return report
