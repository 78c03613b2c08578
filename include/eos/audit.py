"""``eos verify``: an independent audit of the committed tables.

It re-reads every committed epoch's ranges from Kafka with a plain consumer, recomputes windows,
watermarks, late and quarantined records in plain Python (no Spark, no staging), and compares the
result with the target, late and quarantine tables. It shares only the parsing rules
(``eos.events.parse_event``) with the pipeline: they are the specification of a valid event.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

import confluent_kafka as ck
from deltalake import DeltaTable

from eos.config import PipelineConfig
from eos.events import Event, parse_event
from eos.kafka import client_settings, consumer
from eos.plan import Plan, plan_of
from eos.tables import NO_EPOCH, read_table, tables_for, txn_version

READ_TIMEOUT_S = 30.0


class Record(NamedTuple):
    partition: int
    offset: int
    timestamp_ms: int
    value: bytes | None


@dataclass
class Expected:
    target: Counter = field(default_factory=Counter)  # (key, start_ms, end_ms, count, sum, ...)
    late: Counter = field(default_factory=Counter)  # (partition, offset, epoch)
    quarantine: Counter = field(default_factory=Counter)  # (partition, offset, reason, epoch)
    records: int = 0


def read_range(settings: dict[str, Any], topic: str, partition: int, start: int,
               until: int) -> list[Record]:
    """Every record in ``[start, until)`` of one partition, one poll at a time."""
    if until <= start:
        return []
    c = consumer(settings, group="eos-audit", **{"enable.partition.eof": True})
    out: list[Record] = []
    try:
        c.assign([ck.TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == ck.KafkaError._PARTITION_EOF:
                    if m.offset() >= until:
                        return out
                    continue
                raise RuntimeError(f"audit read of {topic}[{partition}] failed: {m.error()}")
            if m.offset() >= until:
                return out
            out.append(Record(partition, m.offset(), m.timestamp()[1], m.value()))
            if m.offset() == until - 1:
                return out
        raise RuntimeError(f"audit read of {topic}[{partition}] [{start},{until}) timed out")
    finally:
        c.close()


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
                expected.quarantine[(r.partition, r.offset, parsed.reason, plan.epoch)] += 1
                continue
            start = parsed.ts_ms - parsed.ts_ms % size
            max_event = parsed.ts_ms if max_event is None else max(max_event, parsed.ts_ms)
            if previous is not None and start + size <= previous:
                expected.late[(r.partition, r.offset, plan.epoch)] += 1
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
        if watermark is None:
            continue
        for (key, start), (count, total, lo, hi) in sorted(open_windows.items()):
            if start + size <= watermark:
                expected.target[_window_row(key, start, size, count, total, lo, hi,
                                            plan.epoch)] += 1
                del open_windows[(key, start)]
    return expected


def _window_row(key: str, start: int, size: int, count: int, total: Decimal, lo: Decimal,
                hi: Decimal, epoch: int) -> tuple:
    return (key, start, start + size, count, total, lo, hi, float(total) / count, epoch)


def _ms(ts: Any) -> int:
    return int(ts.timestamp() * 1000)


def committed_rows(config: PipelineConfig) -> tuple[Counter, Counter, Counter]:
    tables = tables_for(config)
    target = Counter()
    for r in read_table(tables.target).to_pylist():
        target[(r["key"], _ms(r["window_start"]), _ms(r["window_end"]), r.get("count"),
                r.get("sum"), r.get("min"), r.get("max"), r.get("avg"), r["epoch"])] += 1
    late = Counter((r["partition"], r["offset"], r["epoch"])
                   for r in read_table(tables.late).to_pylist())
    quarantine = Counter((r["partition"], r["offset"], r["reason"], r["epoch"])
                         for r in read_table(tables.quarantine).to_pylist())
    return target, late, quarantine


@dataclass
class AuditReport:
    pipeline: str
    committed_epoch: int
    records: int = 0
    problems: list[str] = field(default_factory=list)
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # sink -> (expected, got)

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self) -> str:
        lines = [f"audit of pipeline '{self.pipeline}': epochs 0..{self.committed_epoch}, "
                 f"{self.records} records re-read from Kafka"]
        for sink, (want, got) in self.counts.items():
            lines.append(f"  {sink:<11} expected {want:>8}  committed {got:>8}")
        if self.ok:
            lines.append("verdict: OK - every record counted exactly once")
        else:
            lines.append(f"verdict: FAILED - {len(self.problems)} problem(s)")
            lines.extend(f"  - {p}" for p in self.problems[:50])
        return "\n".join(lines)


def _compare(report: AuditReport, sink: str, want: Counter, got: Counter) -> None:
    report.counts[sink] = (sum(want.values()), sum(got.values()))
    for row, n in (got - want).items():
        dup = n if row in want else None
        kind = "duplicated" if dup else "unexpected"
        report.problems.append(f"{sink}: {kind} row {row} (x{n})")
    for row, n in (want - got).items():
        report.problems.append(f"{sink}: missing row {row} (x{n})")


def check_offsets(plans: list[Plan]) -> list[str]:
    """Committed ranges must be contiguous per partition: no gap, no overlap."""
    problems = []
    until: dict[int, int] = {}
    for plan in plans:
        for r in plan.ranges:
            if r.partition in until and r.start != until[r.partition]:
                problems.append(
                    f"offsets: epoch {plan.epoch} partition {r.partition} starts at {r.start} "
                    f"but the previous epoch ended at {until[r.partition]}"
                )
            until[r.partition] = r.until
    return problems


def audit(config: PipelineConfig) -> AuditReport:
    tables = tables_for(config)
    committed = txn_version(tables.target, config.app_id)
    report = AuditReport(config.name, committed)
    if committed == NO_EPOCH:
        report.problems.append("nothing is committed yet")
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
    target, late, quarantine = committed_rows(config)
    _compare(report, "target", expected.target, target)
    _compare(report, "late", expected.late, late)
    _compare(report, "quarantine", expected.quarantine, quarantine)
    for name, path in tables.sinks():
        writes = [h for h in DeltaTable(path).history() if h.get("operation") == "WRITE"]
        if len(writes) != committed + 1:
            report.problems.append(
                f"{name}: {len(writes)} write commits for {committed + 1} epochs "
                "(expected exactly one each)"
            )
    return report
