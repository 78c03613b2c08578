"""Delta primitives the checkpoint authority, the protocol's own tables and the Delta sink share.

Every transactional step goes through delta-rs. The fence (docs/guarantees.md): delta-rs refuses a
commit whose ``txn`` check and write did not go through one snapshot only if they *did* go
through one: ``dt = DeltaTable(path)``, read ``dt.transaction_version(app)``, then
``write_deltalake(dt, ...)``. A concurrent attempt that committed after our snapshot makes our
commit fail with ``CommitFailedError``; we re-read and report "already committed". Writing to the
*path* instead re-opens the table at its latest version and the check protects nothing: two
racing attempts appended one epoch twice (the bug ``fenced_append`` exists to prevent).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from eos.core import faults
from eos.core.errors import CommitConflict, ProtocolViolation, SinkUnavailable, TableUnwritable
from eos.core.outcomes import NO_EPOCH, Outcome


def local_path(path: str) -> str | None:
    """The filesystem path of a local table (a plain path or a ``file://`` URI); None for a
    table on an object store."""
    if "://" in path and not path.startswith("file://"):
        return None
    return path.removeprefix("file://")


# Every how many commits a table eos creates gets a Delta checkpoint (Delta Spark's default;
# delta-rs' is 100). delta-rs 1.6 replays a table's log from its last checkpoint twice on every
# open and once on every ``transaction_version`` call (``held_version`` asks once per snapshot):
# with 100, the tables an epoch commits to several times each read up to a hundred commit files
# per replay (on an object store, one GET each: ``python -m bench.storage --requests``).
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
CHECKPOINT_EVERY = "10"


# Every commit the protocol makes carries these in its commit info (``eos.core.timetravel``
# reads them back to find the version of a table that held an epoch).
APP, EPOCH, OP, PLAN_HASH, REWIND = "eos.app", "eos.epoch", "eos.op", "eos.plan_hash", "eos.rewind"
# The application id of a sink's fill (``eos fill``: epochs from before the sink joined) is
# the pipeline's with this suffix: its own ``txn`` marker beside the pipeline's.
FILL_SUFFIX = "#fill"


def commit_properties(app_id: str, epoch: int, op: str, *, txn: bool = True,
                      extra: dict[str, str] | None = None,
                      also: list[Transaction] | None = None) -> CommitProperties:
    """The commit properties of a protocol commit: ``txn(app_id, epoch)`` (unless ``txn`` is
    False: a staged epoch is not a marker) and the commit info a rewind reads back (``extra``
    adds to it: a staged epoch's plan hash, a rewind's id). ``also``: more ``txn`` actions in
    the same commit (the staging fence, ``eos.core.staging_fence.Fence``)."""
    metadata = {APP: app_id, EPOCH: str(int(epoch)), OP: op, **(extra or {})}
    transactions = ([Transaction(app_id, int(epoch))] if txn else []) + list(also or [])
    return CommitProperties(custom_metadata=metadata,
                            app_transactions=transactions or None)


WRITE_ATTEMPTS = 3  # fenced appends re-checked after conflicts that were not a racing epoch


@dataclass(frozen=True)
class FencedWrite:
    outcome: Outcome
    version: int | None
    raced: bool = False


# delta-rs 1.6 answers ``transaction_version`` by replaying the table's log from its last
# checkpoint, on every call: one GET per commit file on an object store, and a phase asks a
# table several times (the checkpoint authority, the staging fence's seal and rewind counts).
# What one snapshot holds never changes, so each handle's answers are kept for its version:
# handle id -> (version, app id -> txn version). An entry goes when its handle is collected.
_held: dict[int, tuple[int, dict[str, int | None]]] = {}


def held_version(table: DeltaTable, app_id: str) -> int | None:
    """``table.transaction_version(app_id)``: read once per snapshot (handle and version)."""
    key, version = id(table), table.version()
    found = _held.get(key)
    if found is None:
        weakref.finalize(table, _held.pop, key, None)
    if found is None or found[0] != version:
        found = (version, {})
        _held[key] = found
    answers = found[1]
    if app_id not in answers:
        answers[app_id] = table.transaction_version(app_id)
    return answers[app_id]


def txn_version(path: str, app_id: str, table: DeltaTable | None = None) -> int:
    """The last epoch a Delta table holds for ``app_id`` (its ``txn`` version); -1 if none.

    Read from ``table`` (an open snapshot of ``path``) when given, else from a fresh open."""
    table = table if table is not None else open_table(path)
    version = None if table is None else held_version(table, app_id)
    return NO_EPOCH if version is None else int(version)


def fenced_append(path: str, data: pa.Table, app_id: str, epoch: int,
                  fault_point: str = "sink.before_write", snapshot: DeltaTable | None = None,
                  in_order: bool = True, op: str = "commit",
                  merge_schema: bool = False,
                  check: Callable[[DeltaTable], None] | None = None,
                  first_epoch: int = 0) -> FencedWrite:
    """Append ``data`` with ``txn(app_id, epoch)`` exactly once, however many attempts race.

    Scenarios, decided here:
    - the table already holds ``epoch`` (an earlier attempt, or a concurrent one that finished
      before our snapshot): nothing is written, ``ALREADY_COMMITTED``;
    - the table holds ``epoch - 1``: append; if a concurrent attempt commits first, delta-rs
      refuses ours (``CommitFailedError``) and the re-read finds ``epoch``: ``ALREADY_COMMITTED``
      with ``raced=True``;
    - the conflict came from something else and ``epoch`` is still missing (seen: a second
      ``CREATE TABLE`` commit from two processes creating the table at once, "Metadata changed
      since last commit"): check and write again through the refreshed snapshot, up to
      ``WRITE_ATTEMPTS`` times, then ``CommitConflict`` (transient: the task's retry starts
      from a fresh snapshot);
    - the table holds less than ``epoch - 1``: epochs were skipped, ``ProtocolViolation``
      (unless ``in_order`` is False: the epoch log's plan markers may start anywhere), but
      an empty table may take ``first_epoch`` (a sink that joined a running pipeline).

    ``snapshot`` is an already open handle of ``path`` (the phase's,
    ``eos.core.tables.OpenTables``):
    the check and the write go through it, however old it is; a write that lands moves it to
    the version written. Without one, the table is opened here. The commit info names the app,
    the epoch and ``op`` (``eos.core.timetravel``: what a rewind finds its versions by).
    ``merge_schema``: columns ``data`` has and the table lacks are added in the same commit (a
    sink table created before an output gained a column; no metadata is written otherwise).
    ``check`` refuses the write (raises) from the snapshot it goes through, on every attempt: a
    table property (its writers, ``eos.core.ownership``) changed concurrently makes the append
    conflict and be checked again.
    """
    snapshot = snapshot if snapshot is not None else DeltaTable(path)
    conflict: CommitFailedError | None = None
    for attempt in range(WRITE_ATTEMPTS):
        held = txn_version(path, app_id, snapshot)
        if held >= epoch:
            return FencedWrite(Outcome.ALREADY_COMMITTED, None, raced=attempt > 0)
        joins = held == NO_EPOCH and epoch == first_epoch
        _check_next(path, app_id, epoch, held, in_order and not joins)
        if check is not None:
            check(snapshot)
        if attempt == 0:
            faults.hit(fault_point)
        conflict = _append(path, snapshot, data, app_id, epoch, op, merge_schema)
        if conflict is None:
            return FencedWrite(Outcome.COMMITTED, snapshot.version())
    if txn_version(path, app_id, snapshot) >= epoch:
        return FencedWrite(Outcome.ALREADY_COMMITTED, None, raced=True)
    raise CommitConflict(
        f"commit of epoch {epoch} to {path} conflicted with concurrent writes "
        f"{WRITE_ATTEMPTS} times and the epoch is still not there ({conflict}); retrying is safe"
    )


def _check_next(path: str, app_id: str, epoch: int, held: int, in_order: bool) -> None:
    """Epochs are appended in order: the table must hold ``epoch - 1`` (unless ``in_order`` is
    False)."""
    if in_order and held != epoch - 1:
        raise ProtocolViolation(
            f"Delta table {path} holds epoch {held} of {app_id}; it cannot receive epoch "
            f"{epoch} (epochs are committed in order, one at a time)"
        )


def _append(path: str, snapshot: DeltaTable, data: pa.Table, app_id: str, epoch: int, op: str,
            merge_schema: bool) -> CommitFailedError | None:
    """One append of ``data`` with ``txn(app_id, epoch)`` through ``snapshot``: None when it
    landed (``snapshot`` is then at the version written), else the conflict that refused it."""
    try:
        write_deltalake(snapshot, data, mode="append",
                        schema_mode="merge" if merge_schema else None,
                        commit_properties=commit_properties(app_id, epoch, op))
        return None
    except CommitFailedError as error:
        # The handle must not keep answering from before the race: the next check (a
        # concurrent attempt's epoch, or not) reads the commits that beat ours.
        snapshot.update_incremental()
        return error
    except OSError as error:
        raise SinkUnavailable(f"cannot write epoch {epoch} to Delta table {path}: "
                              f"{error}") from None


def create_table(path: str, schema: pa.Schema, partition_by: list[str] | None = None,
                 configuration: dict[str, str] | None = None) -> None:
    """Create a Delta table unless it exists; two processes creating it at once is fine.

    delta-rs 1.6.6 may then record two ``CREATE TABLE`` commits (versions 0 and 1, the same
    schema, seen in CI): a writer whose snapshot is version 0 gets "Metadata changed since last
    commit", which ``fenced_append`` re-checks and writes through."""
    if DeltaTable.is_deltatable(path):
        return
    try:
        # raise_if_key_not_exists=False: eos's own properties (``eos.core.ownership``) too.
        DeltaTable.create(path, schema=schema, partition_by=partition_by, mode="ignore",
                          configuration=configuration, raise_if_key_not_exists=False)
    except Exception as error:  # lost a creation race, or really cannot create
        if not DeltaTable.is_deltatable(path):
            raise TableUnwritable(f"cannot create Delta table at {path}: {error}") from None


def open_table(path: str) -> DeltaTable | None:
    try:
        return DeltaTable(path)
    except TableNotFoundError:
        return None


def replace_epoch(path: str, data: pa.Table, epoch: int) -> int:
    """Replace exactly epoch ``epoch`` of a table partitioned by epoch, in one Delta commit."""
    write_deltalake(
        path, data, mode="overwrite", predicate=f"epoch = {int(epoch)}", partition_by=["epoch"]
    )
    return DeltaTable(path).version()


def read_table(path: str, columns: list[str] | None = None, filters: list | None = None,
               version: int | None = None) -> pa.Table:
    """Every row of a Delta table matching ``filters`` (``[(column, op, value), ...]``, ANDed),
    read by delta-rs' own engine (``scan``): it skips files by their statistics before opening
    them, so a filtered read of the uncompacted epoch log costs ~5 ms instead of ~22 ms.

    Never through delta-rs' default Python filesystem: with it, pyarrow's readahead threads
    release buffers after the read returns; when that happens during interpreter shutdown the
    process aborts ("terminate called without an active exception", delta-rs#2184) *after* its
    work succeeded, and a phase whose commit landed reports failure (measured: 50 of 60 ``eos
    begin`` processes exited 134).
    """
    return scan(DeltaTable(path, version=version), columns, filters)


def read_existing(path: str, columns: list[str] | None = None,
                  filters: list | None = None) -> pa.Table | None:
    """``read_table`` of a table that may not exist yet (None then), opening it once."""
    table = open_table(path)
    return None if table is None else scan(table, columns, filters)


def scan(table: DeltaTable, columns: list[str] | None = None,
         filters: list | None = None) -> pa.Table:
    """Rows of an opened table matching ``filters``, in the table's own Arrow types.

    Row order is not guaranteed: callers that need one sort."""
    reader = table.scan(columns=columns, predicate=predicate(filters) if filters else None)
    data = pa.table(reader)
    return data.cast(_plain(data.schema))


def _plain(schema: pa.Schema) -> pa.Schema:
    """delta-rs' engine returns string and binary *views* (nested ones too); the library works
    in plain types."""
    return pa.schema([f.with_type(_plain_type(f.type)) for f in schema])


def _plain_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_field
        return pa.list_(item.with_type(_plain_type(item.type)))
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_plain_type(t.field(i).type))
                          for i in range(t.num_fields)])
    return t


_OPS = {"=", "!=", "<", "<=", ">", ">="}


def predicate(filters: list) -> str:
    """A SQL predicate for delta-rs' engine from pyarrow-style filters: ``[(column, op, value),
    ...]`` (ANDed), or a list of such lists (ORed). Values are ints or strings (quoted, quotes
    doubled), so no caller builds SQL from text itself."""
    if filters and isinstance(filters[0], list):
        return " OR ".join(f"({predicate(group)})" for group in filters)
    terms = []
    for column, op, value in filters:
        if op not in _OPS or not column.isidentifier():
            raise ValueError(f"unsupported filter {(column, op, value)!r}")
        terms.append(f'"{column}" {op} {_literal(value)}')
    return " AND ".join(terms)


def _literal(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"unsupported filter value {value!r}")
    if isinstance(value, int):
        return str(int(value))
    return "'" + value.replace("'", "''") + "'"


