"""A Kafka sink filled with the epochs committed before it joined (``SupportsFill``).

A filled epoch is one Kafka transaction, as a committed one is: the epoch's records (the
commit's encoding, key and headers: ``eos-pipeline``, ``eos-epoch`` of the filled epoch,
``eos-plan-hash`` of its checkpoint) and a fill marker, under a transactional id of its own,
the sink's with ``#fill`` (``fill_id``): a fill never fences the pipeline's producer (the
pipeline keeps committing meanwhile), and two fills fence each other. The fill's marker lives in
the sink's marker partition beside the pipeline's, keyed ``<pipeline>/<sink>#fill``
(``MarkerLog.fill_key``): ``committed_epoch`` and ``commits`` keep reading the pipeline's
alone. Each fill marker names the epoch it filled, the first filled epoch (``first``) and the
rewinds the sink's line had then (``rewinds``), so the last one says what was filled even after
the marker topic's compaction kept only it.

Exactly once: after ``init_transactions`` under the fill's id, the last fill marker is read with
``read_committed`` (exact: nothing of the id is open, another open transaction on the partition
is waited for); an epoch it covers is ``ALREADY_COMMITTED``. Of two fills at once the later
``init_transactions`` fences the earlier, whose transaction aborts; it then finds the epoch
filled (``raced``) or runs it again.

Order: Kafka is an append log, so a filled epoch's records land **after** the records of the
epochs committed since the sink joined. A consumer that needs the epochs in order orders by the
``eos-epoch`` header.

Rewinds (``eos.sinks.kafka.lineage``): a filled record carries the ``eos-lineage`` of the line
that owns its epoch (``owner``: none before any rewind reached below it), so it is on the sink's
current line like the epoch's original records would be, and the audit's ``read_back`` reads it.
A rewind to K below a filled epoch supersedes that epoch's records as it supersedes committed
ones (the replay republishes it under the rewind's lineage): ``filled`` then ends at K (None
below the first), and a fill after it carries the line current then.

Refused (``FillRefused``, nothing written): a sink whose key or headers are expressions (Spark
computes them with the rows; a fill has the rows only), and a sink that holds no epoch of the
pipeline yet (no marker of its own: it cannot say which line the fill is on).
"""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING, Any

from eos.core.errors import FillRefused, ProtocolViolation, SinkUnavailable
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.sink import SinkCommit
from eos.sinks.kafka import lineage as kafka_lineage
from eos.sinks.kafka.markers import FILL_SUFFIX, MarkerLog
from eos.sinks.kafka.producer import (
    after_failed_transaction,
    commit_transaction,
    fenced_producer,
    produce_rows,
)
from eos.sinks.records import eos_headers

if TYPE_CHECKING:
    import pyarrow as pa

    from eos.sinks.kafka.sink import KafkaSink

log = logging.getLogger(__name__)

ATTEMPTS = 8  # transactions of one filled epoch before its transient failure is raised
NO_PLAN = "fill"  # the plan-hash header of an epoch whose checkpoint is gone (not hexadecimal)


def fill_id(sink: KafkaSink) -> str:
    """The fill's transactional id: never the pipeline's, one per sink."""
    return sink.transactional_id + FILL_SUFFIX


def filled(sink: KafkaSink) -> tuple[int, int] | None:
    """``(first, last)`` of the filled epochs on the sink's current line (unfenced look)."""
    markers = sink.markers()
    return on_line(markers.last_fill(fenced=False), markers.last(fenced=False))


def on_line(mark: dict[str, Any] | None,
            last: dict[str, Any] | None) -> tuple[int, int] | None:
    """The run of epochs the fill marker ``mark`` says were filled, as far as they are on the
    line the sink's marker ``last`` ends: a rewind after the fill supersedes its epochs from
    the first one the rewind's replay republishes."""
    if mark is None or last is None:
        return None
    current = kafka_lineage.current_line(last)
    written = mark.get("rewinds", [])
    first, held = int(mark["first"]), None
    for epoch in range(first, int(mark["epoch"]) + 1):
        if not current(epoch, kafka_lineage.owner(written, epoch)):
            break
        held = epoch
    return None if held is None else (first, held)


def refuse_unfillable(sink: KafkaSink) -> None:
    """``FillRefused`` for a sink whose records need what the rows read back do not hold."""
    computed = sorted(c.role for c in sink.config.record_columns.values()
                      if c.sink == sink.name)
    if computed:
        raise FillRefused(
            f"sink {sink.name} computes its record {', '.join(computed)} from an expression "
            "(Spark evaluates it with each epoch's rows), and a fill has only the rows read "
            "back from another sink: its records could not be the pipeline's. Nothing was "
            "written; name columns of the rows instead, or rewind to -1 to give the sink every "
            "epoch in order")


def fill(sink: KafkaSink, epoch: int, rows: pa.Table, first: int) -> SinkCommit:
    """``epoch``'s records and its fill marker in one transaction, once (see the module);
    a transient failure runs the transaction again with a new producer, a few times."""
    refuse_unfillable(sink)
    if epoch >= sink.joined_at:
        raise ProtocolViolation(f"sink {sink.name} joined at epoch {sink.joined_at}; epoch "
                                f"{epoch} is the pipeline's to commit, not the fill's")
    sink._ensure_topics()
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _fill_once(sink, epoch, rows, first)
        except SinkUnavailable as error:  # TransactionAborted too: a fenced or held-back try
            if attempt == ATTEMPTS:
                raise
            log.warning("Kafka sink %s: filling epoch %d did not finish (%s); trying again",
                        sink.name, epoch, error.message)
            time.sleep(random.uniform(0.2, 0.6) * attempt)  # two fills: out of step
    raise AssertionError("unreachable")


def _fill_once(sink: KafkaSink, epoch: int, rows: pa.Table, first: int) -> SinkCommit:
    producer = fenced_producer(sink._settings(), fill_id(sink), sink.name)
    markers = sink.markers()
    last = markers.last()  # exact: which line the sink is on
    if last is None:
        raise FillRefused(f"sink {sink.name} holds no epoch of the pipeline yet (no marker in "
                          f"'{sink.marker_topic}'): let the pipeline commit epoch "
                          f"{sink.joined_at} to it, then fill it. Nothing was written")
    sink._refuse_foreign_writer(last)
    held = on_line(markers.last_fill(), last)
    if held is not None and held[0] <= epoch <= held[1]:
        return SinkCommit(sink.name, Outcome.ALREADY_COMMITTED, rows.num_rows)
    if not (held is None and epoch == first) and not (held is not None
                                                     and epoch == held[1] + 1):
        raise ProtocolViolation(
            f"sink {sink.name} is filled with epochs {held or 'none'}; it cannot be filled with "
            f"epoch {epoch} (a fill goes in order from epoch {first})")
    rewinds = kafka_lineage.line_of(last).get("rewinds", [])
    plan_hash = _plan_hash(sink, epoch)
    headers = eos_headers(sink.config.name, epoch, plan_hash,
                          kafka_lineage.owner(rewinds, epoch))
    keys, values, own = sink._records(epoch, rows)
    fields = {"epoch": epoch, "first": held[0] if held else first, "plan_hash": plan_hash,
              "rows": rows.num_rows, "rewinds": rewinds}
    try:
        producer.begin_transaction()
        produce_rows(producer, sink.options.topic, sink.name, headers, keys, values, own)
        markers.write(producer, fields, headers, fill=fill_id(sink))
        commit_transaction(producer)
    except Exception as error:
        return after_failed_transaction(producer, error, sink.name, epoch, rows.num_rows,
                                        lambda: _filled_up_to(markers))
    return SinkCommit(sink.name, Outcome.COMMITTED, rows.num_rows)


def _filled_up_to(markers: MarkerLog) -> int:
    """The last filled epoch on the sink's line, read exactly (a raced fill's answer)."""
    held = on_line(markers.last_fill(), markers.last())
    return NO_EPOCH if held is None else held[1]


def _plan_hash(sink: KafkaSink, epoch: int) -> str:
    """The plan hash ``epoch`` was checkpointed with, as its commit's records carry it."""
    from eos.core import checkpoints
    from eos.core.layout import tables_for

    checkpoint = checkpoints.read(tables_for(sink.config), epoch)
    return NO_PLAN if checkpoint is None else checkpoint.plan_hash
