"""An Iceberg sink filled with the epochs committed before it joined (``SupportsFill``).

Each filled epoch is one snapshot whose summary carries the fill's mark: the pipeline's app id
with ``FILL_SUFFIX`` (``Mark.fill``), the sink's name, the epoch and ``eos.fill.first``, the
fill's first epoch. The pipeline's marker line is untouched: ``committed_epoch`` and
``commits`` read only the pipeline's mark, and step over the fill's snapshots as they step over
any other. The rewind and the audit do not: a fill snapshot is the sink's own writing, which a
rollback may go back over (it takes the filled rows back with their marker) and whose rows
``unreadable`` does not call another writer's (``eos.sinks.iceberg.history``).

Exactly once as the sink's commit is: the fill's marker is read from the metadata the append
is planned on, and the catalog swaps the metadata only if the branch still points where it did
(pyiceberg's own retries off); a retried or racing fill that loses the swap loads the table,
finds the epoch filled and writes nothing.

Where the fill got is read from the current line: the newest fill snapshot on it, unless an
emptying of the table (a rewind to -1) is newer. Expiry can remove every fill snapshot from the
line while the pipeline's later snapshots keep their rows there, so each fill commit also sets
the table property ``eos.epoch.<app id>#fill.<sink>`` (epoch, snapshot, sequence number and
first epoch), believed as the pipeline's own property is (``Mark.held``): only when its
snapshot is gone from the line's past, not rolled back.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from eos.core.errors import CommitConflict, ProtocolViolation
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.sink import SinkCommit, check_fill_order
from eos.sinks.iceberg.catalog import without_retries
from eos.sinks.iceberg.history import Kept, Mark, line

if TYPE_CHECKING:
    import pyarrow as pa

    from eos.sinks.iceberg.sink import IcebergSink

FIRST = "eos.fill.first"  # in a fill snapshot's summary: the fill's first epoch
ATTEMPTS = 5  # conflicts with other writers absorbed before the caller retries


def filled(sink: IcebergSink) -> tuple[int, int] | None:
    """``(first, last)`` epochs filled into the sink's table (see the module)."""
    with sink._guarded("reading its history"):
        table = sink._load()
        return None if table is None else filled_in(sink.mark, table.metadata)


def filled_in(mark: Mark, metadata: Any) -> tuple[int, int] | None:
    """What ``metadata`` says the fill holds: from the newest fill snapshot on the current
    line, else (expired) from the fill's property; None after an emptying, or nothing."""
    if metadata.current_snapshot() is None:
        return None
    fill = mark.fill
    for snapshot in line(metadata):
        if mark.epoch_of(snapshot) == NO_EPOCH:
            return None  # a rewind to -1 emptied the table after any fill
        epoch = fill.epoch_of(snapshot)
        if epoch is not None:
            first = snapshot.summary[FIRST]
            return (int(first) if first is not None else epoch), epoch
    return _kept(fill, metadata)


def _kept(fill: Mark, metadata: Any) -> tuple[int, int] | None:
    """The fill's property, when its snapshot expired from the line's past (not rolled back:
    a rolled-back snapshot is kept off the line, or the line reaches back before it)."""
    text = metadata.properties.get(fill.property_name)
    kept = Kept.parse(text)
    if kept is None or metadata.snapshot_by_id(kept.snapshot) is not None:
        return None
    if any((s.sequence_number or 0) < kept.sequence for s in line(metadata)):
        return None
    first = json.loads(str(text)).get("first", kept.epoch)
    return int(first), kept.epoch


def fill(sink: IcebergSink, epoch: int, rows: pa.Table, first: int) -> SinkCommit:
    """One snapshot of ``epoch``'s rows under the fill's mark, exactly once (the module).
    ``SinkCannotTake`` or ``TableOwned`` first, as before a commit, for rows the table cannot
    take or a table this pipeline may not write."""
    sink.check(epoch, rows)
    with sink._guarded(f"filling epoch {epoch}"):
        table = sink._load()
        if table is None:  # it joined and committed, so its table exists: unless dropped
            raise ProtocolViolation(f"sink {sink.name}: its table {sink.options.table} does "
                                    "not exist")
        return _append(sink, table, epoch, rows, first)


def _append(sink: IcebergSink, table: Any, epoch: int, rows: pa.Table,
            first: int) -> SinkCommit:
    """Check the fill's marker and append through the metadata checked; after a conflict,
    load and check again."""
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(ATTEMPTS):
        held = filled_in(sink.mark, table.metadata)
        last = NO_EPOCH if held is None else held[1]
        if last >= epoch:
            return SinkCommit(sink.name, Outcome.ALREADY_COMMITTED, rows.num_rows,
                              raced=attempt > 0)
        check_fill_order(sink.name, last, epoch, first)
        sink._admitted(table)  # through the metadata the append is planned on
        try:
            _write(sink, table, epoch, rows, first)
            return SinkCommit(sink.name, Outcome.COMMITTED, rows.num_rows)
        except CommitFailedException:
            table = sink.catalog.load_table(sink.options.identifier)
    held = filled_in(sink.mark, table.metadata)
    if held is not None and held[1] >= epoch:
        return SinkCommit(sink.name, Outcome.ALREADY_COMMITTED, rows.num_rows, raced=True)
    raise CommitConflict(f"sink {sink.name}: filling epoch {epoch} conflicted with other "
                         f"writers {ATTEMPTS} times and the epoch is still not there; "
                         "retrying is safe")


def _write(sink: IcebergSink, table: Any, epoch: int, rows: pa.Table, first: int) -> None:
    """One catalog commit: the columns the rows add, the rows in one snapshot marked as the
    fill's, and the fill's property (the module)."""
    from eos.sinks.iceberg.schema import added_columns

    fill_mark = sink.mark.fill
    transaction = without_retries(table).transaction()
    if added_columns(table.schema(), rows.schema):
        with transaction.update_schema() as update:
            update.union_by_name(rows.schema)
    transaction.append(rows, snapshot_properties={**fill_mark.summary(epoch),
                                                  FIRST: str(first)})
    staged = transaction.table_metadata.current_snapshot()
    kept = json.loads(Kept.of(staged, epoch).text())
    transaction.set_properties({fill_mark.property_name: json.dumps({**kept, "first": first})})
    transaction.commit_transaction()
