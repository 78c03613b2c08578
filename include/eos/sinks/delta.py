"""Delta Lake sink: an epoch is one append carrying ``txn(app id, N)``, fenced through one snapshot.

delta-rs fences concurrent commits of the same app id only when the check and the write use the
same snapshot (DESIGN §2): ``dt = DeltaTable(path)``, read ``dt.transaction_version(app)``, then
``write_deltalake(dt, ...)``. A concurrent attempt that committed after our snapshot makes our
commit fail with ``CommitFailedError``; we re-read and report "already committed". Writing to the
*path* instead re-opens the table at its latest version and the check protects nothing: two
racing attempts appended one epoch twice (the bug this module exists to prevent).

The checkpoint table (``eos.checkpoints``) appends through the same ``fenced_append``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from eos import faults
from eos.config import DurationMs
from eos.errors import CommitConflict, ProtocolViolation, SinkUnavailable
from eos.outcomes import Outcome
from eos.sinks.base import NO_EPOCH, Sink, SinkCommit, validated_options

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable


WRITE_ATTEMPTS = 3  # fenced appends re-checked after conflicts that were not a racing epoch


@dataclass(frozen=True)
class FencedWrite:
    outcome: Outcome
    version: int | None
    raced: bool = False


def txn_version(path: str, app_id: str, table: DeltaTable | None = None) -> int:
    """The last epoch a Delta table holds for ``app_id`` (its ``txn`` version); -1 if none.

    Read from ``table`` (an open snapshot of ``path``) when given, else from a fresh open."""
    from eos.tables import open_table

    table = table if table is not None else open_table(path)
    version = None if table is None else table.transaction_version(app_id)
    return NO_EPOCH if version is None else int(version)


def fenced_append(path: str, data: pa.Table, app_id: str, epoch: int,
                  fault_point: str = "sink.before_write", snapshot: DeltaTable | None = None,
                  in_order: bool = True, op: str = "commit") -> FencedWrite:
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
      (unless ``in_order`` is False: the epoch log's plan markers may start anywhere).

    ``snapshot`` is an already open handle of ``path`` (the phase's, ``eos.tables.OpenTables``):
    the check and the write go through it, however old it is; a write that lands moves it to
    the version written. Without one, the table is opened here. The commit info names the app,
    the epoch and ``op`` (``eos.restore``: what a rewind finds its versions by).
    """
    from deltalake import DeltaTable, write_deltalake
    from deltalake.exceptions import CommitFailedError

    from eos.restore import commit_properties

    snapshot = snapshot if snapshot is not None else DeltaTable(path)
    for attempt in range(WRITE_ATTEMPTS):
        held = txn_version(path, app_id, snapshot)
        if held >= epoch:
            return FencedWrite(Outcome.ALREADY_COMMITTED, None, raced=attempt > 0)
        if in_order and held != epoch - 1:
            raise ProtocolViolation(
                f"Delta table {path} holds epoch {held} of {app_id}; it cannot receive epoch "
                f"{epoch} (epochs are committed in order, one at a time)"
            )
        if attempt == 0:
            faults.hit(fault_point)
        try:
            write_deltalake(snapshot, data, mode="append",
                            commit_properties=commit_properties(app_id, epoch, op))
            return FencedWrite(Outcome.COMMITTED, snapshot.version())
        except CommitFailedError as error:
            # The handle must not keep answering from before the race: the next check (a
            # concurrent attempt's epoch, or not) reads the commits that beat ours.
            snapshot.update_incremental()
            conflict = error
        except OSError as error:
            raise SinkUnavailable(f"cannot write epoch {epoch} to Delta table {path}: "
                                  f"{error}") from None
    if txn_version(path, app_id, snapshot) >= epoch:
        return FencedWrite(Outcome.ALREADY_COMMITTED, None, raced=True)
    raise CommitConflict(
        f"commit of epoch {epoch} to {path} conflicted with concurrent writes "
        f"{WRITE_ATTEMPTS} times and the epoch is still not there ({conflict}); retrying is safe"
    )


class DeltaSinkOptions(BaseModel):
    """``{delta: NAME}`` or ``{delta: {table: NAME, log_retention: 7d}}``.

    ``log_retention`` (at least 1 h, as ``epoch.log_retention`` and for the same reason: a
    writer whose snapshot predates a log cleanup could commit under a freed version number)
    becomes the table's ``delta.logRetentionDuration``. delta-rs checkpoints a table every 100
    commits and then deletes the commit files older than that, so the log of a table written
    once per epoch stays bounded instead of keeping 30 days of commits (Delta's default), which
    every append lists (docs/benchmarks.md, session 10). Time travel, and a rewind, reach back
    as far as the retention. Unset: the table keeps Delta's default, or what its owner set."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    table: str = Field(min_length=1)
    log_retention: DurationMs | None = Field(default=None, ge=3_600_000)


def create_table(path: str, schema: pa.Schema, partition_by: list[str] | None = None,
                 configuration: dict[str, str] | None = None) -> None:
    """Create a Delta table unless it exists; two processes creating it at once is fine.

    delta-rs 1.6.6 may then record two ``CREATE TABLE`` commits (versions 0 and 1, the same
    schema, seen in CI): a writer whose snapshot is version 0 gets "Metadata changed since last
    commit", which ``fenced_append`` re-checks and writes through."""
    from deltalake import DeltaTable

    from eos.errors import EosError
    from eos.tables import pooled

    # A table this process holds a handle of exists; asking costs a listing of its log.
    if pooled(path) or DeltaTable.is_deltatable(path):
        return
    try:
        DeltaTable.create(path, schema=schema, partition_by=partition_by, mode="ignore",
                          configuration=configuration)
    except Exception as error:  # lost a creation race, or really cannot create
        if not DeltaTable.is_deltatable(path):
            raise EosError(f"cannot create Delta table at {path}: {error}") from None


class DeltaSink(Sink):
    """``{delta: NAME}`` (a table under the pipeline's root) or ``{delta: /abs/path | uri}``;
    ``{delta: {table: NAME, log_retention: 7d}}`` bounds the table's Delta log."""

    kind = "delta"
    options: DeltaSinkOptions

    @classmethod
    def parse_options(cls, options: Any) -> DeltaSinkOptions:
        data = {"table": options} if isinstance(options, str) else options
        if isinstance(data, dict) and isinstance(data.get("table"), str):
            data = {**data, "table": data["table"].strip()}
        return validated_options(DeltaSinkOptions, data, "a delta sink names a table or a path")

    @classmethod
    def describe(cls, options: DeltaSinkOptions) -> str:
        return options.table

    @property
    def path(self) -> str:
        """Relative names live under the pipeline's table root; paths and URIs are used as is."""
        table = self.options.table
        if "://" in table or Path(table).is_absolute():
            return table
        return str(self.config.root / table)

    def _properties(self) -> dict[str, str]:
        """The table properties the options ask for (none unless ``log_retention``)."""
        from eos.maintenance import LOG_RETENTION, log_retention_property

        if self.options.log_retention is None:
            return {}
        return {LOG_RETENTION: log_retention_property(self.options.log_retention)}

    def prepare(self, schema: pa.Schema) -> None:
        create_table(self.path, schema, configuration=self._properties() or None)

    def committed_epoch(self, fence: bool = True) -> int:
        """The table's ``txn`` version for the pipeline (Delta has no writer to fence: every
        commit is checked against the snapshot it was planned on)."""
        from eos.tables import lent

        with lent(self.path) as table:
            return txn_version(self.path, self.config.app_id, table)

    def commit(self, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        """One Delta commit: the rows and ``txn(app id, epoch)``; see ``fenced_append``. The
        table is opened once (or a pooled handle brought up to date: ``eos.tables.lent``): the
        open is the existence check and the fencing snapshot."""
        from eos.maintenance import ensure_properties
        from eos.tables import lent

        with lent(self.path) as snapshot:
            if snapshot is None:
                self.prepare(rows.schema)
            else:
                # A table created before the option was set gets it now (one metadata commit;
                # a concurrent append re-checks through ``fenced_append``'s retry).
                ensure_properties(snapshot, self._properties())
            done = fenced_append(self.path, rows, self.config.app_id, epoch, snapshot=snapshot)
        return SinkCommit(self.name, done.outcome, rows.num_rows, done.version, done.raced)

    def abort(self, epoch: int) -> None:
        """Nothing to do: a failed Delta commit leaves only files no version names."""

    def rewind_target(self, epoch: int) -> int | None:
        """The version at which the table held ``epoch`` (its history says which); None for a
        table not created yet when going back to before the first epoch (nothing to undo)."""
        from eos.errors import RewindRefused
        from eos.restore import target_version
        from eos.tables import open_table

        if open_table(self.path) is None:
            if epoch == NO_EPOCH:
                return None
            raise RewindRefused(f"sink {self.name}: {self.path} does not exist, so it holds no "
                                f"epoch {epoch}; rewind to -1 to fill it from the start")
        return target_version(self.path, self.config.app_id, epoch)

    def rewind(self, epoch: int, target: int | None, rewind_id: str,
               schema: pa.Schema) -> int | None:
        """A Delta ``RESTORE`` to ``target`` carrying ``txn(app, epoch)`` (``eos.restore``); on a
        full rewind, the emptied table takes the output's current schema."""
        from eos.restore import replace_schema, restore

        if target is None:  # the table did not exist when the rewind was planned
            return None
        version = restore(self.path, target, self.config.app_id, epoch, rewind_id)
        if epoch == NO_EPOCH:
            version = replace_schema(self.path, schema, self.config.app_id, epoch,
                                     rewind_id) or version
        return version

    def read_back(self) -> list[dict[str, Any]]:
        from eos.tables import read_table

        return read_table(self.path).to_pylist()

    def commits(self) -> list[int]:
        """The epochs of the table's commits on its current line, from its history."""
        from deltalake import DeltaTable

        from eos.restore import line

        return line(DeltaTable(self.path), self.config.app_id)

    def asset_uri(self) -> str:
        path = self.path
        return path if "://" in path else f"file://{Path(path).resolve()}"
