"""The audit's reference: what every output of a pipeline should hold, recomputed from the
committed input records in plain Python (no Spark, no staging).

It shares only the parse rules (``eos.compute.formats.json.Parser``: they are the specification of a
valid event) with the pipeline; the filter runs on DuckDB (not Spark), and windows, watermarks and
aggregations are written out again here, so that a bug in the pipeline's own code cannot make the
reference agree with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Context, Decimal, localcontext
from fractions import Fraction
from typing import Any, NamedTuple

import pyarrow as pa

from eos.compute.formats import Parsed
from eos.compute.formats.json import Parser
from eos.core.config import FieldType, PipelineConfig
from eos.core.errors import ConfigError
from eos.core.outputs import overflow_reason, overflow_type
from eos.core.path_rules import path_problem_of, rules_of_view
from eos.core.plan import Plan
from eos.core.schema import field_schema
from eos.tools.audit.checks import RECORD_TIMESTAMP


class Record(NamedTuple):
    partition: int
    offset: int
    timestamp_ms: int
    value: bytes | None
    key: bytes | None = None
    timestamp_type: str | None = None  # CreateTime, LogAppendTime; None: the record has none
    headers: tuple[tuple[str, bytes | None], ...] = ()  # in record order, names may repeat
    topic: str = ""  # the record's topic ("": the plan's one topic)


class Event(NamedTuple):
    partition: int
    offset: int
    time: int
    fields: dict[str, Any]
    metadata: dict[str, Any] = {}  # noqa: RUF012 - read only: the record's Kafka metadata


# The Kafka metadata a filter or select may read (docs/pipelines.md), as the audit builds it.
_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
METADATA_SCHEMA = pa.schema([("kafka_topic", pa.string()), ("kafka_partition", pa.int32()),
                             ("kafka_offset", pa.int64()), ("kafka_timestamp", pa.int64()),
                             ("kafka_timestamp_type", pa.string()),
                             ("kafka_key", pa.string()), ("kafka_key_bytes", pa.binary()),
                             ("kafka_headers", pa.list_(_HEADER))])


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")


def record_metadata(topic: str, record: Record) -> dict[str, Any]:
    """A record's Kafka metadata columns, from the record as the audit read it; the key
    decoded here (UTF-8, a bad sequence as U+FFFD), not by the pipeline's code."""
    return {"kafka_topic": record.topic or topic, "kafka_partition": record.partition,
            "kafka_offset": record.offset, "kafka_timestamp": record.timestamp_ms,
            "kafka_timestamp_type": record.timestamp_type, "kafka_key": _text(record.key),
            "kafka_key_bytes": record.key,
            "kafka_headers": [{"key": k, "value": v} for k, v in record.headers]}


def parts_schema(config: PipelineConfig) -> list[pa.Field]:
    """The struct columns ``key`` (the parsed key's fields) and ``header`` (the headers the
    pipeline reads as text) the audit's DuckDB evaluates ``key.f`` and ``header.h`` on."""
    from eos.core.config.rows import headers_read
    from eos.core.schema import arrow_type

    out = []
    if config.event.key is not None:
        out.append(pa.field("key", pa.struct([(n, arrow_type(s.type))
                                              for n, s in config.event.key.fields.items()])))
    names = headers_read(config)
    if names:
        out.append(pa.field("header", pa.struct([(n, pa.string()) for n in names])))
    return out


def record_parts(config: PipelineConfig, record: Record, key: tuple) -> dict[str, Any]:
    """A record's ``key`` and ``header`` struct values (``parts_schema``): the key's parsed
    fields, and each header read the last of its name, as text (decoded here)."""
    from eos.core.config.rows import headers_read

    out: dict[str, Any] = {}
    if config.event.key is not None:
        out["key"] = dict(zip(config.event.key.fields, key, strict=True))
    names = headers_read(config)
    if names:
        last = {k: v for k, v in record.headers}
        out["header"] = {n: _text(last.get(n)) for n in names}
    return out


def key_values(config: PipelineConfig, parser: Any, record: Record) -> tuple | str:
    """The record's parsed key fields (none without ``event.key``), or why it is refused."""
    if parser is None:
        return ()
    parsed = parser.parse(record.key)
    return parsed.values if isinstance(parsed, Parsed) else parsed.reason


def key_parser(config: PipelineConfig) -> Any:
    """``event.key``'s parser (the JSON parse rules, shared), or None."""
    if config.event.key is None:
        return None
    from eos.compute.formats.keys import KeyParser

    return KeyParser(config.event)


@dataclass
class Expected:
    """Rows per output (as dicts with the columns the audit compares), and the watermark after
    every epoch (None: no event yet)."""

    rows: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {output: [] for output in ("windows", "late", "rows",
                                                           "quarantine")})
    watermarks: dict[int, int | None] = field(default_factory=dict)
    records: int = 0
    filtered: dict[int, int] = field(default_factory=dict)



def _evaluate(config: PipelineConfig, events: list[Event], columns: list[str]) -> list[tuple]:
    """DuckDB's value of each of ``columns`` (SQL in its dialect) for every event, in order:
    the pipeline evaluates the same expressions with Spark."""
    import duckdb

    schema = pa.schema([*field_schema(config.event), *METADATA_SCHEMA, *parts_schema(config)])
    table = pa.Table.from_pylist([{**e.fields, **e.metadata} for e in events], schema=schema)
    table = table.append_column("__i", pa.array(range(len(events)), pa.int64()))
    from eos.core.filters import DUCKDB_TIME_ZONE

    with duckdb.connect() as con:
        con.execute(DUCKDB_TIME_ZONE)
        con.register("events", table)
        return con.execute(f"SELECT {', '.join(columns)} FROM events ORDER BY __i").fetchall()


def epoch_expressions(config: PipelineConfig, view: dict[str, Any] | None
                      ) -> tuple[str | None, dict[str, str]]:
    """The filter and select an epoch was computed with: its checkpoint's view (``view``), or
    the config's for an epoch committed before views recorded them. Both may change between
    epochs (``eos.core.evolution``); the audit recomputes each epoch with its own."""
    if not view:
        return config.event.filter, dict(config.select)
    return (view.get("event") or {}).get("filter"), dict(view.get("select") or {})


def kept_by_filter(config: PipelineConfig, events: list[Event],
                   text: str | None) -> list[bool]:
    """The filter ``text`` evaluated by DuckDB (the pipeline evaluates it with Spark): true
    keeps."""
    if text is None or not events:
        return [True] * len(events)
    from eos.core.filters import filter_for_duckdb

    keep = f"coalesce(({filter_for_duckdb(text)}), false)"
    return [bool(row[0]) for row in _evaluate(config, events, [keep])]


def with_derived(config: PipelineConfig, events: list[Event],
                 select: dict[str, str]) -> list[Event]:
    """The events with their derived fields (an aggregating pipeline's ``select``: the epoch's
    expressions, ``select``), each evaluated by DuckDB and cast to its type as the pipeline
    casts Spark's value (a field's type never changes between epochs)."""
    names = [name for name in config.derived if name in select]
    if not names or not events:
        return events
    from eos.core.filters import expression_for_duckdb

    values = _evaluate(config, events, [
        expression_for_duckdb(select[name], config.derived[name].sql) for name in names])
    return [e._replace(fields={**e.fields, **dict(zip(names, row, strict=True))})
            for e, row in zip(events, values, strict=True)]


def _windows_of(config: PipelineConfig, t: int) -> list[tuple[int, int]]:
    """Fixed windows [k*slide, k*slide + size) holding t (tumbling: slide = size)."""
    size = config.windows.size
    slide = config.windows.slide or size
    first, last = (t - size) // slide + 1, t // slide
    return [(k * slide, k * slide + size) for k in range(first, last + 1)]


LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def _fits(total: Any, ftype: FieldType, of_avg: bool) -> bool:
    """Whether an exact sum fits the type it is kept in: a long sum a long (an average's
    decimal(38,0)), a decimal(p,s) sum decimal(38,s)."""
    if ftype.name == "long":
        return abs(total) < 10**38 if of_avg else LONG_MIN <= total <= LONG_MAX
    return abs(total) < Decimal(10) ** (38 - (ftype.scale or 0))


# Wide enough for any sum of decimal(38,s) values without rounding: Python's default context
# keeps 28 digits, and a decimal(38,9) sum has up to 38 (more before its overflow is decided).
_EXACT = Context(prec=100)


def _exact_sum(values: list[Any]) -> Any:
    """The exact sum of longs or decimals, as Spark keeps it: every digit, no rounding."""
    with localcontext(_EXACT):
        return sum(values)


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
    aggregations whose exact result did not fit its type (their value is None, and docs/pipelines.md
    promises a quarantine row for each)."""
    out: dict[str, Any] = {}
    overflowed: list[str] = []
    types = config.field_types
    for name, spec in config.aggregations.items():
        values = ([1] * len(events) if spec.field is None
                  else [e[spec.field] for e in events if e[spec.field] is not None])
        fn = spec.function
        exact = spec.field is not None and types[spec.field].name != "double"
        if fn == "count":
            out[name] = len(values)
        elif fn in ("count_distinct", "approx_count_distinct"):
            out[name] = len(set(values))
        elif not values:
            out[name] = None
        elif fn in ("sum", "avg") and exact:
            total = _exact_sum(values)
            if not _fits(total, types[spec.field], of_avg=fn == "avg"):
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
    from eos.core.extras import require_format

    require_format(event_format)
    from eos.tools.audit.avro import AuditAvroDecoder
    from eos.tools.audit.json_schema import AuditJsonSchemaDecoder
    from eos.tools.audit.protobuf import AuditProtobufDecoder

    decoders = {"avro": AuditAvroDecoder, "protobuf": AuditProtobufDecoder,
                "json_schema": AuditJsonSchemaDecoder}
    if event_format not in decoders:
        raise ConfigError(f"the audit cannot read event.format {event_format}")
    return decoders[event_format]


def event_parser(config: PipelineConfig) -> Any:
    """The parse rules (shared: they specify a valid event) over the audit's own decoding."""
    if config.event.format == "json":
        return Parser(config.event)
    from eos.compute.formats.records import RecordParser

    assert config.event.schema_registry is not None
    return RecordParser(config.event,
                        _audit_decoder(config.event.format)(config.event.schema_registry))


class Replay:
    """The pipeline's semantics (docs/pipelines.md), replayed record by record, epoch by epoch.

    Fed one epoch at a time (``epoch``), it holds only the windows still open and the rows of
    epochs from ``keep_from`` on: an audit of the last epochs replays the earlier ones for
    their open windows without keeping their rows. ``watermark``: where a replay that does not
    begin at the first epoch starts (``eos.tools.audit.span``)."""

    def __init__(self, config: PipelineConfig,
                 views: dict[int, dict[str, Any]] | None = None, *, keep_from: int = 0,
                 watermark: int | None = None) -> None:
        self.config = config
        self.views = views or {}  # each epoch's checkpointed schema view
        self.parser = event_parser(config)
        self.keys = key_parser(config)
        self.names = list(config.event.fields)
        self.expected = Expected()
        self.keep_from = keep_from
        self.open: dict[tuple, list[dict[str, Any]]] = {}  # (group, start, end) -> events
        self.watermark: int | None = watermark  # None: minus infinity
        self.max_event: int | None = None

    def epoch(self, plan: Plan, records: list[Record]) -> None:
        """Replay one epoch; its rows are kept only from ``keep_from`` on."""
        kept = {output: len(rows) for output, rows in self.expected.rows.items()}
        self._replay(plan, records)
        if plan.epoch < self.keep_from:
            for output, n in kept.items():
                del self.expected.rows[output][n:]

    def _replay(self, plan: Plan, records: list[Record]) -> None:
        previous, events = self.watermark, []
        for r in records:
            self.expected.records += 1
            parsed = self.parser.parse(r.value, r.timestamp_ms)
            key = key_values(self.config, self.keys, r)
            if not isinstance(parsed, Parsed) or isinstance(key, str):
                reason = parsed.reason if not isinstance(parsed, Parsed) else key
                self.expected.rows["quarantine"].append({
                    "kafka_topic": r.topic or plan.topic, "partition": r.partition,
                    "offset": r.offset, "reason": reason, "epoch": plan.epoch,
                    RECORD_TIMESTAMP: r.timestamp_ms})
                continue
            self.max_event = parsed.event_ms if self.max_event is None else max(
                self.max_event, parsed.event_ms)
            events.append(Event(r.partition, r.offset, parsed.event_ms,
                                dict(zip(self.names, parsed.values, strict=True)),
                                {**record_metadata(plan.topic, r),
                                 **record_parts(self.config, r, key)}))
        text, select = epoch_expressions(self.config, self.views.get(plan.epoch))
        keep = kept_by_filter(self.config, events, text)
        self.expected.filtered[plan.epoch] = keep.count(False)
        kept = with_derived(self.config, [e for e, k in zip(events, keep, strict=True) if k],
                            select)
        rules = rules_of_view(self.views.get(plan.epoch), self.config, ("windows",))
        for event in kept:
            problem = path_problem_of(rules, event.fields)
            if problem is not None:  # a group value a sink cannot name a path with
                self.expected.rows["quarantine"].append({
                    "kafka_topic": event.metadata.get("kafka_topic"),
                    "partition": event.partition, "offset": event.offset, "reason": problem,
                    "epoch": plan.epoch,
                    RECORD_TIMESTAMP: event.metadata.get("kafka_timestamp")})
                continue
            self._add(event, previous, plan.epoch)
        self._advance(plan)
        self._emit(plan.epoch)

    def _late(self, event: Event, start: int, end: int, epoch: int) -> None:
        self.expected.rows["late"].append({"kafka_topic": event.metadata.get("kafka_topic"),
                                           "partition": event.partition, "offset": event.offset,
                                           "window_start": start, "window_end": end,
                                           "epoch": epoch,
                                           RECORD_TIMESTAMP: event.metadata.get(
                                               "kafka_timestamp")})

    def _add(self, event: Event, previous: int | None, epoch: int) -> None:
        group = tuple(event.fields[g] for g in self.config.group_by)
        if self.config.windows.type == "session":
            start, end = event.time, event.time + self.config.windows.gap
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
        window = self.config.windows
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
                    "kafka_topic": None, "partition": None, "offset": None, "epoch": epoch,
                    "reason": self._overflow_reason(name, start, end)})

    def _overflow_reason(self, name: str, start: int, end: int) -> str:
        """What docs/pipelines.md says an overflowed window's quarantine row reads."""
        spec = self.config.aggregations[name]
        assert spec.field is not None
        ftype = self.config.field_types[spec.field]
        return overflow_reason(name, spec.function, spec.field,
                               overflow_type(spec.function, ftype), start, end)
