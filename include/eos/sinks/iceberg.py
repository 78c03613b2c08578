"""The ``iceberg`` sink: one output of a pipeline as an Apache Iceberg table, through pyiceberg.

Exactly once the way Flink's Iceberg committer is: each epoch is **one snapshot** whose
summary carries the pipeline's app id, the sink's name and the epoch (``eos.sinks.
iceberg_history``). ``committed_epoch`` is the newest such epoch on the table's current line
(the current snapshot and its ancestors), read from the catalog's current metadata. The rows
and the marker are one commit, so an epoch's rows are visible exactly when its marker is.

Two attempts at once are separated by Iceberg's optimistic commit: each plans its snapshot on
the metadata it loaded and asks the catalog to swap the table's metadata only if the branch
still points where it did (pyiceberg's ``AssertRefSnapshotId``; a SQL catalog's conditional
``UPDATE``, a REST catalog's requirement). One swap wins; the other gets
``CommitFailedException``, loads the table again and reads the summary: the epoch is there
(``ALREADY_COMMITTED``, raced) or, when the conflict came from another writer, it tries again.
A failure before the swap leaves data files no metadata names (nothing visible: ``abort`` has
nothing to do); after it, the retry finds the marker.

Windows and rows are appended alike, as the Delta sink appends them: a window is emitted once,
when the watermark closes it, and a stateless pipeline's rows once each. A column the output
gains is added to the table in the epoch's own commit (one snapshot still).

A rewind to epoch K rolls the table back to the snapshot that committed K, only when every
snapshot after it is this sink's (another writer's rows would go too): otherwise
``RewindRefused`` names the other writer's snapshot. The check is made on the metadata the
rollback commits on, so a commit landing in between makes the rollback conflict and be checked
again. A rewind to -1 empties the table in one snapshot of ours.

``eos verify`` reads the table through pyiceberg (``read_back``) and a second time through
DuckDB's iceberg extension (``eos.tools.independent_iceberg``), both at one metadata file.

The catalog: ``eos.sinks.iceberg_catalog`` (pyiceberg's configuration plus the sink's
``catalog_properties``, secrets from the environment and kept out of every message).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from eos.core import faults
from eos.core.errors import CommitConflict, ProtocolViolation, RewindRefused
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.sink import SinkCommit, SupportsReadBack, SupportsRewind, validated_options
from eos.core.storage import is_remote
from eos.sinks.iceberg_catalog import CatalogSettings, guarded, open_catalog, settings_for
from eos.sinks.iceberg_history import Mark, described
from eos.sinks.iceberg_options import SQLITE_RELATIVE, IcebergOptions

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["NO_SNAPSHOT", "IcebergOptions", "IcebergSink"]

NO_SNAPSHOT = -1  # snapshot ids are never negative (pyiceberg draws them from a UUID)
WRITE_ATTEMPTS = 5  # conflicts with other writers absorbed here before the task retries


def _without_retries(table: Any) -> Any:
    """``table`` with pyiceberg's own commit retries off, in this process only.

    After a conflict pyiceberg re-plans the snapshot on the new metadata and commits it again
    (``commit.retry.num-retries``, 4 by default): it would append an epoch a second time after
    another attempt committed it, or empty a table a commit just wrote to. The sink retries
    itself, reading the marker first. The setting is read from the table's metadata as this
    process loaded it; the catalog applies the commit's updates to its own copy, so the table
    itself keeps its properties."""
    from pyiceberg.table import TableProperties

    metadata = table.metadata
    properties = {**metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    table.metadata = metadata.model_copy(update={"properties": properties})
    return table


class IcebergSink(SupportsRewind, SupportsReadBack):
    """One output of a pipeline as an Iceberg table, one snapshot per epoch."""

    kind = "iceberg"
    options: IcebergOptions

    # -- what runs when the pipeline loads: no I/O, no client library --------------------------

    @classmethod
    def parse_options(cls, options: Any) -> IcebergOptions:
        return validated_options(IcebergOptions, options, "an iceberg sink")

    @classmethod
    def describe(cls, options: IcebergOptions) -> str:
        return f"{options.catalog}.{options.table}"

    @classmethod
    def resources(cls, options: IcebergOptions, pipeline_name: str) -> frozenset[str]:
        return frozenset({f"iceberg-table:{options.catalog}.{options.table}"})

    @classmethod
    def check_pipeline(cls, options: IcebergOptions, config: Any, output: str) -> None:
        """A SQLite catalog named relatively lives under the tables root, which must then be a
        local directory."""
        uri = options.catalog_properties.get("uri", "")
        if SQLITE_RELATIVE.match(uri) and is_remote(config.root):
            raise ValueError(f"an iceberg sink: catalog_properties.uri {uri!r} is relative to "
                             f"the tables root {config.root}, which is not a local directory")

    # -- the catalog and the table --------------------------------------------------------------

    @cached_property
    def settings(self) -> CatalogSettings:
        return settings_for(self.options, self.config.root)

    @cached_property
    def catalog(self) -> Any:
        return open_catalog(self.settings, self.name)

    @property
    def mark(self) -> Mark:
        return Mark(self.config.app_id, self.name)

    def _guarded(self, doing: str) -> Any:
        return guarded(self.settings, self.name, doing)

    def _load(self) -> Any | None:
        """The table as the catalog has it now, None when it does not exist."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.options.identifier)
        except NoSuchTableError:
            return None

    def _create(self, schema: pa.Schema) -> Any:
        """The table, created from the output's schema unless it exists (two creators at once:
        the loser loads the winner's)."""
        from pyiceberg.exceptions import TableAlreadyExistsError

        from eos.sinks.iceberg_schema import iceberg_schema

        converted = iceberg_schema(schema, f"sink {self.name}")
        self.catalog.create_namespace_if_not_exists(self.options.identifier[:-1])
        try:
            return self.catalog.create_table(self.options.identifier, schema=converted)
        except TableAlreadyExistsError:
            return self.catalog.load_table(self.options.identifier)

    # -- the two-phase commit -------------------------------------------------------------------

    def prepare(self, schema: pa.Schema) -> None:
        """Create the table (and its namespace) unless it exists; refuse an existing table
        that cannot take the output, or is partitioned by a transform this runtime cannot
        apply (``SinkCannotTake``), before any epoch."""
        from eos.sinks.iceberg_schema import refuse_conflicts, refuse_partitioning

        with self._guarded("creating its table"):
            table = self._load() or self._create(schema)
            refuse_conflicts(table.schema(), schema, f"sink {self.name}")
            refuse_partitioning(table, f"sink {self.name}")

    def committed_epoch(self, fence: bool = True) -> int:
        """Nothing to fence: an attempt still in flight can only swap in the sealed epoch's
        snapshot, and only on the metadata it planned on, which a commit since has replaced."""
        with self._guarded("reading its history"):
            table = self._load()
            return NO_EPOCH if table is None else self.mark.held(table.metadata)

    def check(self, epoch: int, rows: pa.Table) -> None:
        """The table can take the rows' columns, and its partition transforms can be applied
        here (``eos.sinks.iceberg_schema``): what would otherwise fail every commit."""
        from eos.sinks.iceberg_schema import refuse_conflicts, refuse_partitioning

        with self._guarded("checking its schema"):
            table = self._load()
            refuse_conflicts(None if table is None else table.schema(), rows.schema,
                             f"sink {self.name}")
            refuse_partitioning(table, f"sink {self.name}")

    def commit(self, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        with self._guarded(f"committing epoch {epoch}"):
            table = self._load() or self._create(rows.schema)
            return self._append(table, epoch, rows, plan_hash)

    def _append(self, table: Any, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        """Check the marker and append through the metadata checked; after a conflict, load
        and check again."""
        from pyiceberg.exceptions import CommitFailedException

        for attempt in range(WRITE_ATTEMPTS):
            held = self.mark.held(table.metadata)
            if held >= epoch:
                return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows.num_rows,
                                  raced=attempt > 0)
            if not self.follows(held, epoch):
                raise ProtocolViolation(f"sink {self.name} holds epoch {held}; it cannot "
                                        f"receive epoch {epoch}")
            if attempt == 0:
                faults.hit("sink.before_write")
            try:
                self._write(table, epoch, rows, plan_hash)
                return SinkCommit(self.name, Outcome.COMMITTED, rows.num_rows)
            except CommitFailedException:
                table = self.catalog.load_table(self.options.identifier)
        if self.mark.held(table.metadata) >= epoch:
            return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows.num_rows, raced=True)
        raise CommitConflict(f"sink {self.name}: the commit of epoch {epoch} conflicted with "
                             f"other writers {WRITE_ATTEMPTS} times and the epoch is still not "
                             "there; retrying is safe")

    def _write(self, table: Any, epoch: int, rows: pa.Table, plan_hash: str) -> None:
        """One catalog commit: the columns the rows add, then the rows in one snapshot whose
        summary is the epoch's marker."""
        from eos.sinks.iceberg_schema import added_columns

        transaction = _without_retries(table).transaction()
        if added_columns(table.schema(), rows.schema):
            with transaction.update_schema() as update:
                update.union_by_name(rows.schema)
        transaction.append(rows, snapshot_properties=self.mark.summary(epoch, plan_hash))
        transaction.commit_transaction()

    def abort(self, epoch: int) -> None:
        """Nothing to do: before the catalog's swap nothing of the epoch is visible; its data
        files, named by no metadata, are what Iceberg's orphan-file cleanup removes."""

    # -- rewind ---------------------------------------------------------------------------------

    def rewind_target(self, epoch: int) -> int | None:
        """The snapshot that committed ``epoch`` (for -1: the current one, which the rewind
        empties; None: nothing to undo)."""
        with self._guarded("reading its history"):
            table = self._load()
            if table is None:
                if epoch == NO_EPOCH:
                    return None
                raise RewindRefused(f"sink {self.name}: the table does not exist, so it holds "
                                    f"no epoch {epoch}; rewind to -1 to fill it from the start")
            return self.mark.rewind_point(table.metadata, epoch, f"sink {self.name}")

    def rewind(self, epoch: int, target: int | None, rewind_id: str,
               schema: pa.Schema) -> int | None:
        """Roll back to ``target`` (or empty the table for -1), checked and committed through
        one metadata: a conflict loads it again and checks again. Idempotent: a table already
        there is left as it is. Returns the table's current snapshot id after a change."""
        from pyiceberg.exceptions import CommitFailedException

        if target is None:
            return None
        with self._guarded(f"rewinding to epoch {epoch}"):
            for _ in range(WRITE_ATTEMPTS):
                table = self.catalog.load_table(self.options.identifier)
                try:
                    return self._rewind_once(table, epoch, rewind_id)
                except CommitFailedException:
                    continue
        raise CommitConflict(f"sink {self.name}: the rewind to epoch {epoch} conflicted with "
                             f"other writers {WRITE_ATTEMPTS} times; retrying is safe")

    def _rewind_once(self, table: Any, epoch: int, rewind_id: str) -> int | None:
        point = self.mark.rewind_point(table.metadata, epoch, f"sink {self.name}")
        current = table.metadata.current_snapshot()
        if epoch != NO_EPOCH:
            if current is None or current.snapshot_id == point:
                return None
            with table.manage_snapshots() as manage:
                manage.set_current_snapshot(snapshot_id=point)
            return point
        if current is None or self.mark.held(table.metadata) == NO_EPOCH:
            return None
        self._empty(table, rewind_id)
        return table.metadata.current_snapshot().snapshot_id

    def _empty(self, table: Any, rewind_id: str) -> None:
        """One snapshot of ours with epoch -1 and no rows: a delete of every row, or (when the
        table holds none, and a delete would commit nothing) an empty append."""
        from pyiceberg.expressions import AlwaysTrue

        summary = self.mark.summary(NO_EPOCH, rewind=rewind_id)
        current = table.metadata.current_snapshot()
        transaction = _without_retries(table).transaction()
        if current.summary is not None and current.summary["total-records"] not in (None, "0"):
            transaction.delete(AlwaysTrue(), snapshot_properties=summary)
        else:
            transaction.append(table.schema().as_arrow().empty_table(),
                               snapshot_properties=summary)
        transaction.commit_transaction()

    # -- the audit ------------------------------------------------------------------------------

    def unreadable(self) -> str | None:
        """Another writer's rows on the table's line cannot be told apart from this
        pipeline's: a row does not say who wrote it."""
        with self._guarded("reading its history"):
            table = self._load()
            others = [] if table is None else self.mark.foreign(table.metadata)
        if others:
            return (f"the table holds rows of other writers ({described(others[0])}): its rows "
                    "do not say which pipeline wrote them")
        return None

    def pinned(self) -> tuple[list[dict[str, Any]], int]:
        """The rows and the id of the snapshot they are of (``NO_SNAPSHOT``: the table does
        not exist or was never written), in one reading: the independent reader reads that
        same snapshot."""
        with self._guarded("reading its rows"):
            table = self._load()
            current = None if table is None else table.metadata.current_snapshot()
            if table is None or current is None:
                return [], NO_SNAPSHOT
            return table.scan(snapshot_id=current.snapshot_id).to_arrow().to_pylist(), \
                current.snapshot_id

    def metadata_location(self) -> str | None:
        """The table's current metadata file (None: no table), which holds every snapshot
        the table keeps: where another reader finds one."""
        with self._guarded("reading its metadata"):
            table = self._load()
            return None if table is None else table.metadata_location

    def read_back(self) -> list[dict[str, Any]]:
        return self.pinned()[0]

    def commits(self) -> list[int]:
        with self._guarded("reading its history"):
            table = self._load()
            return [] if table is None else self.mark.epochs(table.metadata)
