"""``eos verify``: an independent audit of every sink and of the checkpoints.

It re-reads every committed epoch's ranges from Kafka with a plain consumer, recomputes windows,
watermarks, late and quarantined records in plain Python (no Spark, no staging), and compares the
result with what each sink holds (Delta tables read back, Kafka topics read back with
``read_committed``), with each sink's commits (exactly one per epoch), and with the checkpoint
table. Everything it reads from Kafka and Delta is read a second time by readers that share no
library with the pipeline (``eos.tools.independent``: aiokafka, DuckDB's delta extension), and
any difference between the two readings is a problem of its own (``READERS_DISAGREE``): a bug
in confluent-kafka or delta-rs cannot show the audit the same wrong picture it showed the
pipeline. It shares only the parse rules (``eos.compute.parse.Parser``: they are the
specification of a valid event) with the pipeline; the filter runs on DuckDB (not Spark),
windows and aggregations are written out again here, and the HyperLogLog estimates are checked
against exact distinct counts within the sketch's error bound.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from fractions import Fraction
from typing import Any, NamedTuple

import pyarrow as pa

from eos.compute.parse import NEG_INF, Parsed, Parser
from eos.core import checkpoints
from eos.core.config import OUTPUTS, FieldType, PipelineConfig
from eos.core.errors import ConfigError
from eos.core.kafka import client_settings, read_partition
from eos.core.layout import Tables, tables_for
from eos.core.outcomes import NO_EPOCH
from eos.core.outputs import overflow_reason, overflow_type
from eos.core.plan import Plan, plan_and_move
from eos.core.schema import field_schema
from eos.core.sink import Sink, SupportsReadBack, sinks_for
from eos.tools import independent

READ_TIMEOUT_S = 30.0
# approx_count_distinct: HLL with lgConfigK 12 has a relative standard error of 1.04/sqrt(4096)
# (1.6%); the audit accepts three of them around the exact distinct count (and 1 for tiny counts).
HLL_TOLERANCE = 3 * 1.04 / math.sqrt(4096)
DOUBLE_TOLERANCE = 1e-9  # double sums depend on the order they are added in


class Record(NamedTuple):
    partition: int
    offset: int
    timestamp_ms: int
    value: bytes | None


class Event(NamedTuple):
    partition: int
    offset: int
    time: int
    fields: dict[str, Any]


@dataclass
class Expected:
    """Rows per output (as dicts with the columns the audit compares), and the watermark after
    every epoch (None: no event yet)."""

    rows: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {output: [] for output in OUTPUTS})
    watermarks: dict[int, int | None] = field(default_factory=dict)
    records: int = 0
    filtered: dict[int, int] = field(default_factory=dict)


def read_range(settings: dict[str, Any], topic: str, partition: int, start: int,
               until: int) -> list[Record]:
    """Every record in ``[start, until)`` of one partition, with a plain consumer."""
    return [Record(partition, m.offset(), m.timestamp()[1], m.value())
            for m in read_partition(settings, topic, partition, start, until, group="eos-audit",
                                    timeout_s=READ_TIMEOUT_S)]


def kept_by_filter(config: PipelineConfig, events: list[Event]) -> list[bool]:
    """The filter evaluated by DuckDB (the pipeline evaluates it with Spark): true keeps."""
    if config.event.filter is None or not events:
        return [True] * len(events)
    import duckdb

    from eos.core.filters import filter_for_duckdb

    table = pa.Table.from_pylist([e.fields for e in events], schema=field_schema(config.event))
    table = table.append_column("__i", pa.array(range(len(events)), pa.int64()))
    query = (f"SELECT coalesce(({filter_for_duckdb(config.event.filter)}), false) "
             "FROM events ORDER BY __i")
    with duckdb.connect() as con:
        con.register("events", table)
        return [bool(row[0]) for row in con.execute(query).fetchall()]


def _windows_of(config: PipelineConfig, t: int) -> list[tuple[int, int]]:
    """Fixed windows [k*slide, k*slide + size) holding t (tumbling: slide = size)."""
    size = config.window.size
    slide = config.window.slide or size
    first, last = (t - size) // slide + 1, t // slide
    return [(k * slide, k * slide + size) for k in range(first, last + 1)]


LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def _fits(total: Any, ftype: FieldType, of_avg: bool) -> bool:
    """Whether an exact sum fits the type it is kept in: a long sum a long (an average's
    decimal(38,0)), a decimal(p,s) sum decimal(38,s)."""
    if ftype.name == "long":
        return abs(total) < 10**38 if of_avg else LONG_MIN <= total <= LONG_MAX
    return abs(total) < Decimal(10) ** (38 - (ftype.scale or 0))


def _double_sum(values: list[float]) -> float:
    """The sum of doubles as IEEE 754 defines its limits: the exactly rounded sum, ±Infinity
    past the double range (the sign of the exact sum), NaN with infinities of both signs."""
    if not all(math.isfinite(v) for v in values):
        return sum(values)
    try:
        return math.fsum(values)
    except OverflowError:  # fsum's partial sums left the range: the exact sum decides
        exact = sum(map(Fraction, values))
        try:
            return float(exact)
        except OverflowError:
            return math.inf if exact > 0 else -math.inf


def aggregate(config: PipelineConfig, events: list[dict[str, Any]]
              ) -> tuple[dict[str, Any], list[str]]:
    """Every aggregation of one window over its events' fields, from the definitions; and the
    aggregations whose exact result did not fit its type (their value is None, and the README
    promises a quarantine row for each)."""
    out: dict[str, Any] = {}
    overflowed: list[str] = []
    fields = config.event.fields
    for name, spec in config.aggregations.items():
        values = ([1] * len(events) if spec.field is None
                  else [e[spec.field] for e in events if e[spec.field] is not None])
        fn = spec.function
        exact = spec.field is not None and fields[spec.field].type.name != "double"
        if fn == "count":
            out[name] = len(values)
        elif fn in ("count_distinct", "approx_count_distinct"):
            out[name] = len(set(values))
        elif not values:
            out[name] = None
        elif fn in ("sum", "avg") and exact:
            total = sum(values)
            if not _fits(total, fields[spec.field].type, of_avg=fn == "avg"):
                out[name] = None
                overflowed.append(name)
            else:
                out[name] = total if fn == "sum" else float(total) / len(values)
        elif fn == "sum":
            out[name] = _double_sum(values)
        elif fn == "min":
            out[name] = min(values)
        elif fn == "max":
            out[name] = max(values)
        elif fn == "avg":
            out[name] = _double_sum(values) / len(values)
        else:
            raise AssertionError(f"the audit has no definition of {fn}")
    return out, overflowed


def _audit_decoder(event_format: str) -> Any:
    """The audit's own decoder class for a Schema Registry format (not the pipeline's)."""
    from eos.tools.audit_avro import AuditAvroDecoder
    from eos.tools.audit_json_schema import AuditJsonSchemaDecoder
    from eos.tools.audit_protobuf import AuditProtobufDecoder

    decoders = {"avro": AuditAvroDecoder, "protobuf": AuditProtobufDecoder,
                "json_schema": AuditJsonSchemaDecoder}
    if event_format not in decoders:
        raise ConfigError(f"the audit cannot read event.format {event_format}")
    return decoders[event_format]


class _Reference:
    """The pipeline's semantics (DESIGN §3), replayed record by record, epoch by epoch."""

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        self.parser: Any = Parser(config.event)
        if config.event.format != "json":  # its own decoding; the field rules are shared
            from eos.compute.formats.records import RecordParser

            assert config.event.schema_registry is not None
            self.parser = RecordParser(config.event,
                                       _audit_decoder(config.event.format)(
                                           config.event.schema_registry))
        self.names = list(config.event.fields)
        self.expected = Expected()
        self.open: dict[tuple, list[dict[str, Any]]] = {}  # (group, start, end) -> events
        self.watermark: int | None = None  # None: minus infinity
        self.max_event: int | None = None

    def epoch(self, plan: Plan, records: list[Record]) -> None:
        previous, events = self.watermark, []
        for r in records:
            self.expected.records += 1
            parsed = self.parser.parse(r.value, r.timestamp_ms)
            if not isinstance(parsed, Parsed):
                self.expected.rows["quarantine"].append({
                    "partition": r.partition, "offset": r.offset, "reason": parsed.reason,
                    "epoch": plan.epoch})
                continue
            self.max_event = parsed.event_ms if self.max_event is None else max(
                self.max_event, parsed.event_ms)
            events.append(Event(r.partition, r.offset, parsed.event_ms,
                                dict(zip(self.names, parsed.values, strict=True))))
        keep = kept_by_filter(self.config, events)
        self.expected.filtered[plan.epoch] = keep.count(False)
        for event, kept in zip(events, keep, strict=True):
            if kept:
                self._add(event, previous, plan.epoch)
        self._advance(plan)
        self._emit(plan.epoch)

    def _late(self, event: Event, start: int, end: int, epoch: int) -> None:
        self.expected.rows["late"].append({"partition": event.partition, "offset": event.offset,
                                           "window_start": start, "window_end": end,
                                           "epoch": epoch})

    def _add(self, event: Event, previous: int | None, epoch: int) -> None:
        group = tuple(event.fields[g] for g in self.config.group_by)
        if self.config.window.type == "session":
            start, end = event.time, event.time + self.config.window.gap
            if previous is not None and end <= previous:
                self._late(event, start, end, epoch)
                return
            members = [event.fields]
            for key in [k for k in self.open if k[0] == group and k[1] < end and start < k[2]]:
                members.extend(self.open.pop(key))
                start, end = min(start, key[1]), max(end, key[2])
            self.open[(group, start, end)] = members
            return
        for start, end in _windows_of(self.config, event.time):
            if previous is not None and end <= previous:
                self._late(event, start, end, epoch)
            else:
                self.open.setdefault((group, start, end), []).append(event.fields)

    def _advance(self, plan: Plan) -> None:
        window = self.config.window
        if self.max_event is not None:
            candidate = self.max_event - window.allowed_lateness
            self.watermark = candidate if self.watermark is None else max(self.watermark,
                                                                          candidate)
        if plan.records == 0 and plan.clock_ms is not None and window.idle_timeout is not None:
            candidate = plan.clock_ms - window.idle_timeout
            self.watermark = candidate if self.watermark is None else max(self.watermark,
                                                                          candidate)
        self.expected.watermarks[plan.epoch] = self.watermark

    def _emit(self, epoch: int) -> None:
        if self.watermark is None:
            return
        for key in [k for k in self.open if k[2] <= self.watermark]:
            group, start, end = key
            row = dict(zip(self.config.group_by, group, strict=True))
            row.update(window_start=start, window_end=end, epoch=epoch)
            values, overflowed = aggregate(self.config, self.open.pop(key))
            row.update(values)
            self.expected.rows["windows"].append(row)
            for name in overflowed:
                self.expected.rows["quarantine"].append({
                    "partition": None, "offset": None, "epoch": epoch,
                    "reason": self._overflow_reason(name, start, end)})

    def _overflow_reason(self, name: str, start: int, end: int) -> str:
        """What the README says an overflowed window's quarantine row reads."""
        spec = self.config.aggregations[name]
        assert spec.field is not None
        ftype = self.config.event.fields[spec.field].type
        return overflow_reason(name, spec.function, spec.field,
                               overflow_type(spec.function, ftype), start, end)


def reference(config: PipelineConfig, epochs: list[tuple[Plan, list[Record]]]) -> Expected:
    """The committed result the protocol promises, recomputed record by record."""
    model = _Reference(config)
    for plan, records in epochs:
        model.epoch(plan, records)
    return model.expected


def _ms(value: Any) -> Any:
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else value


class ProblemKind(StrEnum):
    MISSING = "missing row"  # a record's effect the sink does not hold: lost
    DUPLICATED = "duplicated row"  # an expected row held more than once: doubled
    UNEXPECTED = "unexpected row"  # a row no record explains
    WRONG_VALUES = "wrong values"  # a window whose aggregates disagree with its records
    COMMITS = "commits"  # a sink's commits are not exactly one per epoch
    CHECKPOINT = "checkpoint"  # the checkpoint table disagrees with the recomputation
    OFFSETS = "offsets"  # committed ranges are not contiguous
    NOTHING = "nothing committed"
    # The independent reader (eos.tools.independent) read something else than the pipeline's
    # own library did: one of them is wrong, so nothing the audit concluded can be trusted.
    READERS_DISAGREE = "readers disagree"
    SECOND_READER = "independent reader failed"  # it could not read what the audit read


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
    """What identifies a committed row of ``output``: a window's group, bounds and epoch (its
    values are compared by ``value_differences``), the record and window of a late row, the
    record and reason of a quarantined one."""
    if output == "windows":
        names = [*config.group_by, "window_start", "window_end", "epoch"]
        return lambda row: tuple(_ms(row[n]) for n in names)
    if output == "late":
        return lambda row: (row["partition"], row["offset"], _ms(row["window_start"]),
                            _ms(row["window_end"]), row["epoch"])
    return lambda row: (row["partition"], row["offset"], row["reason"], row["epoch"])


def value_differences(config: PipelineConfig, want: dict[str, Any],
                      got: dict[str, Any]) -> list[str]:
    """The aggregations of one window that disagree: exact for counts, long and decimal sums,
    min, max and exact distinct counts; a double sum or an average within 1e-9 relative (the
    order of additions differs); an approximate distinct count within the sketch's bound."""
    wrong = []
    fields = config.event.fields
    for name, spec in config.aggregations.items():
        a, b = want[name], got.get(name)
        double = spec.function == "avg" or (
            spec.function == "sum" and fields[spec.field].type.name == "double")
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


@dataclass
class AuditReport:
    pipeline: str
    committed_epoch: int
    records: int = 0
    problems: list[Problem] = field(default_factory=list)
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # sink -> (expected, got)
    # sink -> why it was not audited (its type cannot be read back, a shared table)
    unaudited: dict[str, str] = field(default_factory=dict)
    # What was read twice (the source, a sink) -> the independent reader and rows it read;
    # what was read once only -> why (no independent reader for it here).
    second_readings: dict[str, tuple[str, int]] = field(default_factory=dict)
    single_reader: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def count(self, *kinds: ProblemKind) -> int:
        return sum(p.count for p in self.problems if p.kind in kinds)

    @property
    def disagreeing(self) -> int:
        """Rows (or records) the two readers of one sink or of the source do not agree on."""
        return self.count(ProblemKind.READERS_DISAGREE)

    @property
    def lost(self) -> int:
        return self.count(ProblemKind.MISSING, ProblemKind.WRONG_VALUES)

    @property
    def doubled(self) -> int:
        return self.count(ProblemKind.DUPLICATED, ProblemKind.UNEXPECTED)

    def render(self) -> str:
        lines = [f"audit of pipeline '{self.pipeline}': epochs 0..{self.committed_epoch}, "
                 f"{self.records} records re-read from Kafka"]
        for sink, (want, got) in self.counts.items():
            lines.append(f"  {sink:<28} expected {want:>8}  committed {got:>8}")
        for sink, why in self.unaudited.items():
            lines.append(f"  {sink:<28} not audited: {why}")
        for what, (reader, rows) in self.second_readings.items():
            lines.append(f"  {what:<28} read again by {reader}: {rows} rows")
        for what, why in self.single_reader.items():
            lines.append(f"  {what:<28} read by one reader only: {why}")
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


def _compare_values(report: AuditReport, config: PipelineConfig, sink: str,
                    want: list[dict[str, Any]], got: list[dict[str, Any]]) -> None:
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
    """Committed ranges must be contiguous per partition: no gap, no overlap. A logged move
    (``moved``: the epochs whose plan is the first on a new source, ``eos.core.move``) starts
    afresh where it says; no other plan may read another source than the epoch before."""
    problems = []
    until: dict[int, int] = {}
    before: Plan | None = None
    for plan in plans:
        if plan.epoch in moved:
            until = {}
        elif before is not None and not before.source.same_as(plan.source):
            problems.append(Problem(
                ProblemKind.OFFSETS, f"epoch {plan.epoch}",
                f"reads {plan.source.describe()}, epoch {before.epoch} read "
                f"{before.source.describe()}, and no move is logged"))
            until = {}
        for r in plan.ranges:
            if r.partition in until and r.start != until[r.partition]:
                problems.append(Problem(
                    ProblemKind.OFFSETS, f"epoch {plan.epoch}",
                    f"partition {r.partition} starts at {r.start} but the previous epoch ended "
                    f"at {until[r.partition]}"))
            until[r.partition] = r.until
        before = plan
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


def verify(config: PipelineConfig) -> AuditReport:
    """``eos verify``: audit, and record the verdict beside the pipeline's tables
    (``eos.core.verdicts``) for ``eos status`` and the epochs view."""
    from eos.core import verdicts as audits

    started = time.monotonic()
    report = audit(config)
    audits.record(tables_for(config), audits.AuditVerdict(
        at=datetime.now(UTC), ok=report.ok, committed_epoch=report.committed_epoch,
        records=report.records,
        problems=len(report.problems), duration_ms=round((time.monotonic() - started) * 1000, 1),
        report=report.render()))
    return report


def audit(config: PipelineConfig) -> AuditReport:
    """Recompute every committed epoch from Kafka and compare every sink and the checkpoints."""
    tables = tables_for(config)
    committed = checkpoints.last_checkpointed(tables, config.app_id)
    report = AuditReport(config.name, committed)
    if committed == NO_EPOCH:
        report.problems.append(Problem(ProblemKind.NOTHING, config.name, "yet"))
        return report
    settings = client_settings(config.kafka.client)
    logged = [plan_and_move(tables, e) for e in range(committed + 1)]
    plans = [plan for plan, _ in logged]
    report.problems.extend(check_offsets(plans, {p.epoch for p, move in logged if move}))
    epochs = [
        (plan, [rec for r in plan.ranges
                for rec in read_range(settings, plan.topic, r.partition, r.start, r.until)])
        for plan in plans
    ]
    report.problems.extend(reread_source(report, settings, epochs))
    expected = reference(config, epochs)
    report.records = expected.records
    report.problems.extend(check_checkpoints(tables, plans, expected.watermarks))
    for sink in sinks_for(config):
        if not isinstance(sink, SupportsReadBack):
            report.unaudited[sink.name] = "its type cannot be read back (no SupportsReadBack)"
            continue
        if (why := sink.unreadable()) is not None:
            report.unaudited[sink.name] = why
            continue
        identity = row_identity(config, sink.output)
        held, version = _read_back(sink)
        report.problems.extend(reread_sink(report, config, sink, held, version))
        want = Counter(identity(row) for row in expected.rows[sink.output])
        got = Counter(identity(row) for row in held)
        _compare(report, sink.name, want, got)
        if sink.output == "windows":
            _compare_values(report, config, sink.name, expected.rows["windows"], held)
        commits = sink.commits()
        # A sink may forget old commits (a Kafka sink's marker topic is compacted to the last
        # marker), never hold one twice or miss the last: a contiguous run ending at N.
        if not commits or commits != list(range(committed - len(commits) + 1, committed + 1)):
            report.problems.append(Problem(
                ProblemKind.COMMITS, sink.name,
                f"holds commits of epochs {commits[:20]}{'...' if len(commits) > 20 else ''}; "
                f"expected each of ..{committed} once, up to {committed}"))
    return report


# -- the second readings (eos.tools.independent) ----------------------------------------------

LIBRARY_KAFKA = "confluent-kafka"
LIBRARY_DELTA = "delta-rs"
READ_BACK_ATTEMPTS = 3


def _source_row(partition: int, offset: int, timestamp_ms: int, value: bytes | None) -> dict:
    return {"partition": partition, "offset": offset, "timestamp_ms": timestamp_ms,
            "value": value}


def reread_source(report: AuditReport, settings: dict[str, Any],
                  epochs: list[tuple[Plan, list[Record]]]) -> list[Problem]:
    """The committed ranges read again with aiokafka: the same records (offset, timestamp,
    value) as confluent-kafka read, or a ``READERS_DISAGREE`` problem per record that differs.
    A record is compared once even when ranges overlap (``check_offsets`` reports overlaps)."""
    problems: list[Problem] = []
    for topic in dict.fromkeys(plan.topic for plan, _ in epochs):
        ranges = [(r.partition, r.start, r.until) for plan, _ in epochs if plan.topic == topic
                  for r in plan.ranges]
        ours = {(r.partition, r.offset): _source_row(*r) for plan, records in epochs
                if plan.topic == topic for r in records}
        theirs = {(r.partition, r.offset): _source_row(r.partition, r.offset, r.timestamp_ms,
                                                      r.value)
                  for r in independent.read_ranges(settings, topic, ranges)}
        where = f"source {topic}"
        report.second_readings[where] = (independent.KAFKA_READER, len(theirs))
        problems += _disagreements(where, (LIBRARY_KAFKA, ours.values()),
                                   (independent.KAFKA_READER, theirs.values()))
    return problems


def _read_back(sink: SupportsReadBack) -> tuple[list[dict[str, Any]], int | None]:
    """The sink's rows as its own reader returns them and, for a Delta sink, the table version
    they are of (the independent reader reads that version): the version is taken before and
    after the read, and the read repeated while a commit lands in between. None: no stable
    version (the audit ran while the table kept changing)."""
    from eos.sinks.delta import DeltaSink

    if not isinstance(sink, DeltaSink):
        return sink.read_back(), None
    from deltalake import DeltaTable

    held: list[dict[str, Any]] = []
    for _ in range(READ_BACK_ATTEMPTS):
        before = DeltaTable(sink.path).version()
        held = sink.read_back()
        if DeltaTable(sink.path).version() == before:
            return held, before
    return held, None


def reread_sink(report: AuditReport, config: PipelineConfig, sink: Sink,
                held: list[dict[str, Any]], version: int | None) -> list[Problem]:
    """The sink read again by its independent reader and compared whole with ``held`` (what
    the sink's own reader returned): every row, every column."""
    from eos.sinks.delta import DeltaSink
    from eos.sinks.kafka import KafkaSink

    if isinstance(sink, DeltaSink):
        library, reader, rows = LIBRARY_DELTA, independent.DELTA_READER, _reread_delta(
            sink, version)
    elif isinstance(sink, KafkaSink):
        library, reader, rows = LIBRARY_KAFKA, independent.KAFKA_READER, _reread_kafka(
            config, sink)
    else:
        rows = _Unread(f"no independent reader for {sink.kind} sinks", fails=False)
    if isinstance(rows, _Unread):
        if rows.fails:
            return [Problem(ProblemKind.SECOND_READER, sink.name, rows.why)]
        report.single_reader[sink.name] = rows.why
        return []
    report.second_readings[sink.name] = (reader, len(rows))
    return _disagreements(sink.name, (library, held), (reader, rows))


class _Unread(NamedTuple):
    """Why a sink was not read a second time; ``fails``: the audit cannot vouch for the sink
    (else it is only noted in the report, as for a sink type nobody can read twice)."""

    why: str
    fails: bool


def _reread_delta(sink: Any, version: int | None) -> list[dict[str, Any]] | _Unread:
    """DuckDB's reading of the table at ``version``. Object storage is read by one reader only
    (noted); a table that would not hold still or a DuckDB error fails the audit."""
    import duckdb

    path = independent.readable_location(sink.path)
    if path is None:
        return _Unread(f"{independent.DELTA_READER} reads local and s3:// tables here (no "
                       "credentials for other stores in DuckDB)", fails=False)
    if version is None:
        return _Unread(f"the table changed during each of {READ_BACK_ATTEMPTS} readings: no "
                       "one version to read twice", fails=True)
    try:
        return independent.read_delta(path, version)
    except (duckdb.Error, OSError, ImportError) as error:
        return _Unread(f"{independent.DELTA_READER} could not read {path} at version "
                       f"{version}: {error}", fails=True)


def _reread_kafka(config: PipelineConfig, sink: Any) -> list[dict[str, Any]]:
    """The sink's output topic read with aiokafka, this pipeline's records on the sink's
    current line decoded by the independent JSON decoder."""
    from eos.core.outputs import output_schema

    settings = client_settings({**config.kafka.client, **sink.options.client})
    records = independent.read_topic(settings, sink.options.topic)
    decode = None
    if sink.options.format == "avro":  # urllib and fastavro, not the sink's codec
        from eos.tools.audit_avro import sink_decoder

        decode = sink_decoder(sink.options.schema_registry or config.event.schema_registry)
    return independent.sink_rows(records, config.name, output_schema(config, sink.output),
                                 independent.current_line(sink), decode)


def _disagreements(where: str, ours: tuple[str, Any], theirs: tuple[str, Any]) -> list[Problem]:
    return [Problem(ProblemKind.READERS_DISAGREE, where, str(d), d.count)
            for d in independent.disagreements(ours, theirs)]
