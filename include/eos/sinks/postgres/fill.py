"""A ``postgres`` sink filled with the epochs committed before it joined (``SupportsFill``).

A filled epoch is committed as the pipeline's are: its marker row and its rows in one
transaction, the marker inserted first, so of two fills at once the second's INSERT waits on
the first's key and fails when the first commits (``ALREADY_COMMITTED``, raced). Its marker is
of its own: the marker table's ``sink`` column holds the sink's name with ``FILL_SUFFIX``
(``postgres:s.t#fill``), beside the pipeline's markers of the sink, so ``committed_epoch``,
``commits`` and the check for other writers (markers of the same sink from another pipeline)
keep reading the pipeline's alone. The fill's markers say which epochs it holds: the first is
where it started. A rewind to N deletes the rows after N and the fill's markers after N with
the pipeline's, in one transaction (``PostgresSink.rewind``).

An upserting sink (``upsert_keys``) is refused (``FillRefused``, nothing written): it keeps each
key's row of the latest epoch that wrote it, and a fill writes earlier epochs after later
ones, so an old row would replace a newer one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eos.core.delta import FILL_SUFFIX
from eos.core.errors import FillRefused
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.sink import SinkCommit, check_fill_order

if TYPE_CHECKING:
    import pyarrow as pa

    from eos.sinks.postgres.sink import PostgresSink


def fill_name(sink: PostgresSink) -> str:
    """The ``sink`` column of the fill's markers."""
    return sink.name + FILL_SUFFIX


def filled(sink: PostgresSink) -> tuple[int, int] | None:
    from eos.sinks.postgres import sql as q
    with sink._connected() as conn:
        epochs = q.marker_epochs(conn, sink.options.marker(), sink.config.name, fill_name(sink))
    return (epochs[0], epochs[-1]) if epochs else None


def refuse_upserts(sink: PostgresSink) -> None:
    if sink.options.upsert_keys:
        raise FillRefused(
            f"sink {sink.name} upserts on {list(sink.options.upsert_keys)}: it keeps each "
            "key's row of the latest epoch, and a fill writes earlier epochs after later ones, "
            "so an old row would replace a newer one. Nothing was written; rewind the pipeline "
            "to -1 to give it every epoch in order instead")


def fill(sink: PostgresSink, epoch: int, rows: pa.Table, first: int) -> SinkCommit:
    """``epoch``'s marker and rows in one transaction, once (see the module). The sink's
    ``check`` first: the rows fit the table, which this pipeline may write."""
    refuse_upserts(sink)
    sink.check(epoch, rows)
    with sink._connected() as conn:
        return _write(sink, conn, epoch, rows, first)


def _write(sink: PostgresSink, conn: Any, epoch: int, rows: pa.Table,
           first: int) -> SinkCommit:
    import psycopg

    from eos.sinks.postgres import sql as q
    marker = sink.options.marker()
    held = q.marker_epochs(conn, marker, sink.config.name, fill_name(sink))
    if epoch in held:
        return SinkCommit(sink.name, Outcome.ALREADY_COMMITTED, rows.num_rows)
    last = held[-1] if held else NO_EPOCH
    check_fill_order(sink.name, last, epoch, first)
    try:
        q.insert_marker(conn, marker, sink.config.name, fill_name(sink), epoch,
                        f"fill from epoch {first}")
    except psycopg.errors.UniqueViolation:  # a concurrent fill committed it
        conn.rollback()
        return SinkCommit(sink.name, Outcome.ALREADY_COMMITTED, rows.num_rows, raced=True)
    q.write_rows(conn, sink.table, rows, ())
    return SinkCommit(sink.name, Outcome.COMMITTED, rows.num_rows)


def drop_after(sink: PostgresSink, conn: Any, epoch: int) -> None:
    """Delete, in the rewind's transaction, the fill's markers after ``epoch`` (the rows after
    it the rewind deletes already)."""
    from eos.sinks.postgres import sql as q
    q.delete_after(conn, sink.table, sink.options.marker(), sink.config.name, fill_name(sink),
                   epoch)
