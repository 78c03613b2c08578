"""A Delta sink filled with the epochs committed before it joined (``SupportsFill``).

The filled epochs carry ``txn(<app id>#fill, N)``, a Delta application id of their own beside
the pipeline's ``txn(<app id>, N)``: the pipeline's marker keeps saying which epochs the sink
took as it ran (its ``committed_epoch``, what ``begin`` and ``commit`` check), the fill's says
how far the fill got, and each append is exactly once by the same ``fenced_append`` (a retried
or racing fill writes an epoch once). The first filled epoch is recorded in the table's
``eos.fill.first`` property with the first write, so the audit knows where the filled run
starts. A rewind restores a table version with its markers, fill's included: what it drops is
no longer claimed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from eos.core.delta import FILL_SUFFIX
from eos.core.errors import ProtocolViolation
from eos.core.outcomes import NO_EPOCH
from eos.core.sink import SinkCommit

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable, Transaction

    from eos.core.config import PipelineConfig
    from eos.core.ownership import Writer

FILL_FIRST = "eos.fill.first"  # the table property naming the first filled epoch


class SharedOption(Protocol):
    @property
    def shared(self) -> bool: ...


class FilledSink(Protocol):
    """What a fill reads of the Delta sink it fills (``eos.sinks.delta.sink.DeltaSink``, which calls
    this module: a protocol, not that class, so the two modules do not import each other)."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> PipelineConfig: ...

    @property
    def path(self) -> str: ...

    @property
    def options(self) -> SharedOption: ...

    def writer(self) -> Writer: ...


def fill_app(sink: FilledSink) -> str:
    return sink.config.app_id + FILL_SUFFIX


def filled(sink: FilledSink) -> tuple[int, int] | None:
    """``(first, last)`` epochs filled into the sink's table, from its fill marker."""
    from eos.core.delta import txn_version
    from eos.core.pool import lent

    with lent(sink.path) as table:
        if table is None:
            return None
        last = txn_version(sink.path, fill_app(sink), table)
        if last == NO_EPOCH:
            return None
        first = table.metadata().configuration.get(FILL_FIRST)
        return (int(first) if first is not None else last), last


def fill_markers_at(sink: FilledSink, table: DeltaTable, version: int) -> list[Transaction]:
    """The fill's marker as it was at ``version``, for a restore to it (Delta ``RESTORE``
    brings back the files and the properties, not the ``txn`` markers): what the restored
    table holds of the fill is what its marker then says (-1: nothing). Empty when the marker
    is unchanged since."""
    from deltalake import DeltaTable as Table
    from deltalake import Transaction

    from eos.core.delta import txn_version

    app = fill_app(sink)
    now = txn_version(sink.path, app, table)
    then = txn_version(sink.path, app, Table(sink.path, version=version)) if version >= 0 \
        else NO_EPOCH
    return [] if now == then else [Transaction(app, then)]


def fill(sink: FilledSink, epoch: int, rows: pa.Table, first: int) -> SinkCommit:
    """One fenced append of ``epoch``'s rows under the fill's marker (see the module)."""
    from eos.core.delta import fenced_append
    from eos.core.ownership import check_writer
    from eos.core.pool import lent

    with lent(sink.path) as snapshot:
        if snapshot is None:  # it joined and committed, so its table exists: unless deleted
            raise ProtocolViolation(f"sink {sink.name}: its table {sink.path} does not exist")
        if epoch == first and snapshot.metadata().configuration.get(FILL_FIRST) != str(first):
            # Not a property delta-kernel knows: set without its check (as eos.writers is).
            snapshot.alter.set_table_properties({FILL_FIRST: str(first)},
                                                raise_if_not_exists=False)
        me, shared = sink.writer(), sink.options.shared
        done = fenced_append(sink.path, rows, fill_app(sink), epoch, snapshot=snapshot,
                             merge_schema=True, first_epoch=first, op="fill",
                             check=lambda t: check_writer(t, sink.path, me, shared))
    return SinkCommit(sink.name, done.outcome, rows.num_rows, done.version, done.raced)
