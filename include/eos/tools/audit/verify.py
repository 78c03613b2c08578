"""``eos verify``: an independent audit of every sink and of the checkpoints.

It re-reads every committed epoch's ranges from Kafka with a plain consumer, recomputes windows,
watermarks, late and quarantined records in plain Python (no Spark, no staging), and compares the
result with what each sink holds (Delta tables read back, Kafka topics read back with
``read_committed``), with each sink's commits (exactly one per epoch), and with the checkpoint
table. Everything it reads from Kafka, Delta and PostgreSQL is read a second time by readers
that share no library with the pipeline (``eos.tools.audit.independent.compare``: aiokafka,
DuckDB's delta
extension; ``eos.tools.audit.independent.postgres``: DuckDB's postgres extension), and any
difference between the two readings is a problem of its own (``READERS_DISAGREE``): a bug in
confluent-kafka, delta-rs or psycopg cannot show the audit the same wrong picture it showed the
pipeline. It shares only the parse rules (``eos.compute.formats.json.Parser``: they are the
specification of a valid event) with the pipeline; the filter runs on DuckDB (not Spark),
windows and aggregations are written out again (``eos.tools.audit.reference``), and the
HyperLogLog estimates are checked against exact distinct counts within the sketch's error bound
(``eos.tools.audit.checks``).
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from tqdm import tqdm

from eos.core import checkpoints
from eos.core.config import PipelineConfig
from eos.core.kafka import client_settings, read_partition
from eos.core.layout import tables_for
from eos.core.loss import acknowledged_losses
from eos.core.outcomes import NO_EPOCH
from eos.core.plan import Plan, plan_and_move
from eos.core.protocol import join_sinks
from eos.core.sink import Sink, SupportsFill, SupportsReadBack, sinks_for
from eos.tools.audit.checks import (
    check_checkpoints,
    check_offsets,
    compare_rows,
    compare_window_values,
    latest_rows,
    row_identity,
    with_topics,
)
from eos.tools.audit.kafka_records import compare_kafka_records
from eos.tools.audit.reference import Expected, Record, Replay
from eos.tools.audit.report import AuditReport, Problem, ProblemKind
from eos.tools.audit.rows import compare_row_values, row_reference
from eos.tools.audit.second_reading import read_back_with_version, reread_sink, reread_source
from eos.tools.audit.span import Span, batches, deleted_ranges, log_starts, span_for

READ_TIMEOUT_S = 30.0
# confluent-kafka's timestamp type codes, as Kafka names the types (the audit's own table).
_TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}


def read_range(settings: dict[str, Any], topic: str, partition: int, start: int,
               until: int) -> list[Record]:
    """Every record in ``[start, until)`` of one partition, with a plain consumer."""
    return [Record(partition, m.offset(), m.timestamp()[1], m.value(), m.key(),
                   _TIMESTAMP_TYPES.get(m.timestamp()[0]), tuple(m.headers() or ()), topic)
            for m in read_partition(settings, topic, partition, start, until, group="eos-audit",
                                    timeout_s=READ_TIMEOUT_S)]


def verify(config: PipelineConfig, since: int | None = None,
           last: int | None = None) -> AuditReport:
    """``eos verify``: audit (epochs ``since``.. or the ``last`` N; every one by default), and
    record the verdict beside the pipeline's tables (``eos.core.verdicts``) for ``eos status``
    and the epochs view."""
    from eos.core import verdicts as audits

    started = time.monotonic()
    report = audit(config, since=since, last=last)
    audits.record(tables_for(config), audits.AuditVerdict(
        at=datetime.now(UTC), ok=report.ok, committed_epoch=report.committed_epoch,
        records=report.records,
        problems=len(report.problems), duration_ms=round((time.monotonic() - started) * 1000, 1),
        report=report.render()))
    return report


def first_epoch(committed: int, since: int | None, last: int | None) -> int:
    """The first epoch an audit compares: ``since``, or the last ``last`` epochs', or 0."""
    if last is not None:
        return max(0, committed - max(last, 1) + 1)
    return min(max(since or 0, 0), committed)


def audit(config: PipelineConfig, since: int | None = None,
          last: int | None = None) -> AuditReport:
    """Recompute the committed epochs ``since``.. (or the ``last`` N; all by default) from
    Kafka and compare every sink and the checkpoints (``eos.tools.audit.span``: what is read,
    held and left out)."""
    from eos.core.extras import require

    require("audit", "eos verify")
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
    # Ranges an operator acknowledged as lost (``eos acknowledge-loss``): reported, never OK
    # silently; the ranges of the epochs around them are audited as any other.
    report.acknowledged_lost = [f"before epoch {p.epoch}: {r.describe()}"
                                for p, move in logged for r in acknowledged_losses(move)]
    checkpointed = checkpoints.read_all(tables)
    views = {c.epoch: c.config for c in checkpointed}
    span = span_for(config, plans, deleted_ranges(plans, log_starts(settings, plans)),
                    {c.epoch: c.watermark_ms for c in checkpointed},
                    first_epoch(committed, since, last))
    report.first_epoch = span.first
    report.not_auditable = [d.describe() for d in span.deleted]
    expected = _recompute(config, report, settings, plans[span.replay_from:], views, span)
    report.records = expected.records
    report.problems.extend(check_checkpoints(tables, plans, expected.watermarks))
    if not any(span.compared(e) for e in range(span.first, committed + 1)):
        report.problems.append(Problem(
            ProblemKind.NOT_AUDITABLE, config.name,
            f"epochs {span.first}..{committed}: the source no longer holds their records"))
    # Each sink's first epoch, from the last checkpoint (read above with the others; a missing
    # one is a problem check_checkpoints reports).
    last_checkpoint = next((c for c in checkpointed if c.epoch == committed), None)
    for sink in join_sinks(sinks_for(config), last_checkpoint):
        _audit_sink(report, config, sink, plans, expected, span)
    return report


def _recompute(config: PipelineConfig, report: AuditReport, settings: dict[str, Any],
               plans: list[Plan], views: dict[int, dict[str, Any]], span: Span) -> Expected:
    """The reference of ``plans``' epochs, read from Kafka a batch at a time (each batch read
    twice: ``reread_source``); an epoch whose records the log no longer holds is not read."""
    replay = None if config.stateless else Replay(config, views, keep_from=span.first,
                                                 watermark=span.seed_watermark)
    expected = Expected() if replay is None else replay.expected
    readable = [p for p in plans if p.epoch not in span.unreadable]
    with tqdm(total=len(readable), desc=f"verify {config.name}", unit="epoch", leave=False,
              disable=None) as progress:
        for batch in batches(readable):
            epochs = [(plan, [rec for r in plan.ranges
                              for rec in read_range(settings, r.topic, r.partition, r.start,
                                                    r.until)])
                      for plan in batch]
            report.problems.extend(reread_source(report, settings, epochs))
            if replay is None:
                row_reference(config, epochs, views, expected)
            else:
                for plan, records in epochs:
                    replay.epoch(plan, records)
            progress.update(len(batch))
    return expected


def _audit_sink(report: AuditReport, config: PipelineConfig, sink: Sink, plans: list[Plan],
                expected: Expected, span: Span) -> None:
    """One sink's rows of the span compared with the reference, and its commits."""
    committed = span.committed
    if not isinstance(sink, SupportsReadBack):
        report.unaudited[sink.name] = "its type cannot be read back (no SupportsReadBack)"
        return
    if (why := sink.unreadable()) is not None:
        report.unaudited[sink.name] = why
        return
    identity = row_identity(config, sink.output)
    # A sink added to a running pipeline holds the epochs from the one it joined at, and those
    # ``eos fill`` gave it (``SupportsFill``).
    filled = sink.filled() if isinstance(sink, SupportsFill) else None
    if filled is not None:
        report.filled[sink.name] = filled
    since = max(span.first, sink.joined_at if filled is None else min(filled[0], sink.joined_at))

    def holds(epoch: int) -> bool:
        return epoch >= sink.joined_at or (filled is not None
                                           and filled[0] <= epoch <= filled[1])

    held, version = read_back_with_version(sink, since)
    report.problems.extend(reread_sink(report, config, sink, held, version, since))
    if sink.output in ("late", "quarantine"):
        held = with_topics(held, plans)
    out = span.excluded(sink.output)
    left_out = sum(1 for row in held if out(row))
    if left_out:
        report.left_out[sink.name] = left_out
    held = [row for row in held if not out(row)]
    expected_rows = [row for row in expected.rows[sink.output]
                     if holds(row["epoch"]) and not out(row)]
    if keys := sink.kept_by():  # an upserting sink holds each key's latest row
        expected_rows = latest_rows(expected_rows, keys, sink.output)
    want = Counter(identity(row) for row in expected_rows)
    got = Counter(identity(row) for row in held)
    compare_rows(report, sink.name, want, got)
    if sink.output == "windows":
        compare_window_values(report, config, sink.name, expected_rows, held)
    elif sink.output == "rows":
        compare_row_values(report, config, sink.name, expected_rows, held)
        if sink.kind == "kafka":
            compare_kafka_records(report, config, sink, expected_rows)
    commits = sink.commits()
    # A sink may forget old commits (a Kafka sink's marker topic is compacted to the last
    # marker), never hold one twice or miss the last: a contiguous run ending at N.
    if not commits or commits != list(range(committed - len(commits) + 1, committed + 1)):
        report.problems.append(Problem(
            ProblemKind.COMMITS, sink.name,
            f"holds commits of epochs {commits[:20]}{'...' if len(commits) > 20 else ''}; "
            f"expected each of ..{committed} once, up to {committed}"))
