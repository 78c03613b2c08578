"""Epoch N's open windows as staged: a snapshot, plus the changes of the epochs since.

Staging all its open windows (kind ``state``) every epoch, for the next to read them all back,
would cost per open window per epoch, whatever the epoch's input. So an epoch stages one of two
things (Flink's incremental checkpoints, Spark's changelog state store):

- a **snapshot** (kind ``state``): every open window of N, merged; N is its own *base*;
- **changes** (kind ``change``): only the partial windows N's records made (and, for
  sessions, the fragments it had to carry, below); its base is N-1's base.

Epoch N's watermark row names its base (``state_base``); a watermark row without one was
staged before changes existed and is a snapshot. The **state of N** is then the rows of
kind ``state`` of the base B and of kind ``change`` of epochs B+1..N, each epoch's rows of its
*committed* plan hash, that are **alive**: ``window_end_ms > wm(N)``. A window is the merge
(``Aggregation.merge``) of its rows; the rows of one session are fragments whose union is
the session. No row is ever rewritten or deleted to remove a window: the watermark does it.

- Tumbling and hopping windows: a window is emitted once its end is at or before the
  watermark, and every row of it has that end, so all of them die at once.
- Sessions: a fragment can end at or before wm(N) while its session goes on (a later
  fragment overlaps it). The epoch that sees this *carries* the dying fragments into one new
  change row (their merged state, spanning up to the session's end), so the row that dies
  held nothing the session still needs (``eos.compute.windows.SessionWindows.advance``).

So epoch N reads only the rows that can matter to it (``WindowRead``): rows that close at
wm(N) (fixed windows: ``end <= wm(N)``; sessions: ``start < wm(N)``), pruned file by file by
the start/end statistics every state file's add action carries. What it writes is
proportional to what its records touched.

A **snapshot is due** (``snapshot_due``) every ``epoch.state_snapshot_every`` epochs, or when
the change rows since the base outnumber the base's rows (and ``SNAPSHOT_MIN_ROWS``): the
epoch then reads every alive row, merges, and stages the result as kind ``state``. That is
the compaction, inside the protocol: the state of every epoch is one unambiguous set of
committed rows whatever happens (a rerun, a zombie, a replay after rewind all resolve the
same chain, through the staging fence), and the prune a commit's seal carries keeps every
epoch from the base on (``eos.core.maintenance.prune_bound``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from eos.core.delta import scan
from eos.core.errors import ProtocolViolation
from eos.core.layout import Tables
from eos.core.staging import CHANGE, STATE
from eos.core.tables import handle

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from eos.core.checkpoints import Checkpoint

STATE_KINDS = (STATE, CHANGE)
START, END = "window_start_ms", "window_end_ms"
# A snapshot is not due on size until the changes since the base are at least this many rows:
# below it, a snapshot costs about what reading the changes does.
SNAPSHOT_MIN_ROWS = 50_000


@dataclass(frozen=True)
class StateFile:
    """One committed staging file of the chain that may hold open-window rows."""

    uri: str
    epoch: int
    plan_hash: str  # the epoch's committed plan hash: the only rows of the file that count
    rows: int | None  # every kind (the add action's row count), None if unknown
    start_min: int | None  # the file's statistics; None: unknown, the file is always read
    end_min: int | None


@dataclass(frozen=True)
class WindowRead:
    """Which open-window rows an epoch needs, beyond being alive (``end > wm(N-1)``): all of
    them (a snapshot), those that end by ``end_at_most``, or those that start before
    ``start_below``."""

    end_at_most: int | None = None
    start_below: int | None = None

    def may_hold(self, file: StateFile) -> bool:
        """Whether ``file`` may hold such a row, from its statistics alone."""
        if self.end_at_most is not None and file.end_min is not None:
            return file.end_min <= self.end_at_most
        if self.start_below is not None and file.start_min is not None:
            return file.start_min < self.start_below
        return True

    def row_filters(self, alive_after: int) -> list[tuple[str, str, int]]:
        """The same selection for a Parquet read (pyarrow's ``filters``), alive rows only."""
        filters = [(END, ">", int(alive_after))]
        if self.end_at_most is not None:
            filters.append((END, "<=", int(self.end_at_most)))
        if self.start_below is not None:
            filters.append((START, "<", int(self.start_below)))
        return filters


EVERY_ROW = WindowRead()


@dataclass(frozen=True)
class Chain:
    """Where the state of epoch ``last`` is: its base's snapshot files, then each later
    epoch's change files, with the plan hash each epoch was committed with."""

    last: int
    base: int
    files: tuple[StateFile, ...]

    @property
    def snapshot_rows(self) -> int:
        return sum(f.rows or 0 for f in self.files if f.epoch == self.base)

    @property
    def change_rows(self) -> int:
        return sum(f.rows or 0 for f in self.files if f.epoch != self.base)

    def select(self, read: WindowRead) -> tuple[StateFile, ...]:
        return tuple(f for f in self.files if read.may_hold(f))


EMPTY = Chain(-1, -1, ())


def chain_of(tables: Tables, previous: Checkpoint | None, base: int) -> Chain:
    """The chain of ``previous`` (N-1's checkpoint), whose watermark row named ``base``: the
    files of kind ``state`` of the base and ``change`` of the epochs after it, with their
    statistics, from the add actions alone (no file is opened)."""
    if previous is None:
        return EMPTY
    staging = handle(tables, tables.staging)
    if staging is None:
        raise ProtocolViolation("the staging table is missing: no state to resume from")
    hashes = _plan_hashes(tables, base, previous)
    return Chain(previous.epoch, base, tuple(_files(staging, base, previous.epoch, hashes)))


def _plan_hashes(tables: Tables, base: int, previous: Checkpoint) -> dict[int, str]:
    """Each chain epoch's committed plan hash (one read of the checkpoint table)."""
    if base == previous.epoch:
        return {previous.epoch: previous.plan_hash}
    table = handle(tables, tables.checkpoints)
    rows = [] if table is None else scan(
        table, ["epoch", "plan_hash"],
        [("epoch", ">=", int(base)), ("epoch", "<=", int(previous.epoch))]).to_pylist()
    hashes = {int(r["epoch"]): r["plan_hash"] for r in rows}
    missing = sorted(set(range(base, previous.epoch + 1)) - set(hashes))
    if missing:
        raise ProtocolViolation(f"epochs {missing} of the state chain of epoch {previous.epoch} "
                                "have no checkpoint")
    return hashes


def _files(staging: DeltaTable, base: int, last: int,
           hashes: dict[int, str]) -> list[StateFile]:
    actions = pa.table(staging.get_add_actions(flatten=True))
    epochs = pc.cast(actions["partition.epoch"], pa.int64())
    mine = actions.filter(pc.and_(pc.greater_equal(epochs, base), pc.less_equal(epochs, last)))
    uris = {_relative(u): u for u in staging.file_uris(
        file_pruning_predicate=[("epoch", ">=", str(base)), ("epoch", "<=", str(last))])}
    found = []
    for row in mine.to_pylist():
        epoch = int(row["partition.epoch"])
        kind = STATE if epoch == base else CHANGE
        low, high = row.get("min.kind"), row.get("max.kind")
        if low is not None and high is not None and not low <= kind <= high:
            continue  # the file holds no row of the kind this epoch contributes
        found.append(StateFile(
            uri=uris[_relative(row["path"])], epoch=epoch, plan_hash=hashes[epoch],
            rows=row.get("num_records"), start_min=row.get(f"min.{START}"),
            end_min=row.get(f"min.{END}")))
    return sorted(found, key=lambda f: (f.epoch, f.uri))


def _relative(path: str) -> str:
    """A staging file's path from its partition directory on (add actions hold it relative,
    ``file_uris`` absolute)."""
    return "epoch=" + path.split("epoch=", 1)[1]


def snapshot_due(epoch: int, chain: Chain, every: int) -> bool:
    """Whether epoch N stages a snapshot rather than changes: its first epoch, every
    ``every`` epochs after the base, or once the changes since the base are at least as many
    rows as the base (and ``SNAPSHOT_MIN_ROWS``). A function of N and the committed chain
    only, so every attempt of N decides the same."""
    if chain is EMPTY or every <= 1 or epoch - chain.base >= every:
        return True
    changes = chain.change_rows
    return changes >= SNAPSHOT_MIN_ROWS and changes >= chain.snapshot_rows


def read_state_file(uri: str, plan_hash: str, columns: list[str] | None,
                    filters: list[tuple[str, str, int]]) -> pa.Table:
    """The open-window rows of one chain file that belong to its epoch's committed plan hash
    and pass ``filters``: the one read of a state file, on Spark's executors
    (``eos.compute.writers.read_state``) and in this process (``open_rows``)."""
    import pyarrow.parquet as pq

    from eos.core.storage import filesystem

    store, path = filesystem(uri)
    return pq.read_table(path, filesystem=store, columns=columns, filters=[
        ("kind", "in", list(STATE_KINDS)), ("plan_hash", "=", plan_hash), *filters])


def open_rows(tables: Tables, checkpoint: Checkpoint, columns: list[str] | None = None
              ) -> pa.Table:
    """The rows of committed epoch N's state (see the module's docstring), unmerged, read in
    this process: for status views, tests and tools, never for an epoch's computation (Spark
    reads the chain on its executors). Summing a count over them counts the open windows'
    events."""
    from eos.core.staging import state_base

    staging = handle(tables, tables.staging)
    base = None if staging is None else state_base(staging, checkpoint.epoch)
    if staging is None or base is None:
        raise ProtocolViolation(f"committed epoch {checkpoint.epoch} is no longer staged")
    chain = chain_of(tables, checkpoint, base)
    watermark = -(2**63) if checkpoint.watermark_ms is None else int(checkpoint.watermark_ms)
    parts = [read_state_file(f.uri, f.plan_hash, columns, [(END, ">", watermark)])
             for f in chain.files]
    return pa.concat_tables(parts, promote_options="permissive") if parts else pa.table({})
