"""The ``iceberg`` sink: one output of a pipeline as an Apache Iceberg table, through pyiceberg.

Exactly once the way Flink's Iceberg committer is: each epoch is **one snapshot** whose
summary carries the pipeline's app id, the sink's name and the epoch (``eos.sinks.
iceberg_history``). ``committed_epoch`` is the newest such epoch on the table's current line
(the current snapshot and its ancestors), read from the catalog's current metadata. The rows
and the marker are one commit, so an epoch's rows are visible exactly when its marker is.

The same commit sets the table property ``eos.epoch.<app id>.<sink>`` (the epoch, its
snapshot's id and sequence number): snapshot expiry can remove every snapshot of ours from the
line (another writer appended after our last epoch, then everything older expired), never a
property. With no marker of ours left on the line, the property says the epoch held, provided
its snapshot is gone from the line's past (``Mark.held``); ``commits`` then lists that epoch
alone. A table written before the property is read from its summaries alone.

Two attempts at once are separated by Iceberg's optimistic commit: each plans its snapshot on
the metadata it loaded and asks the catalog to swap the table's metadata only if the branch
still points where it did (pyiceberg's ``AssertRefSnapshotId``; a SQL catalog's conditional
``UPDATE``, a REST catalog's requirement). One swap wins; the other gets
``CommitFailedException``, loads the table again and reads the epoch held: it is there
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
again. A rewind to -1 empties the table in one snapshot of ours. Either sets the property to
the epoch it goes back to, in the same catalog commit.

**One writer.** The table records who writes it in its properties ``eos.writers`` and
``eos.shared`` (``eos.core.ownership``): set when the sink creates the table, added by
``prepare`` to a table that has none (adopted when no other pipeline's snapshot is on it).
``prepare``, ``check`` (before the seal) and the commit (through the metadata it appends on)
refuse another pipeline with ``TableOwned`` naming the owner, unless every writer declares
the table ``shared: true``. Another pipeline's snapshots would otherwise sit on the line:
a rewind of either would be refused, and the audit cannot tell their rows apart.

A partitioned table's partition values must fit a path: ``check`` refuses, before the seal, a
value whose data file's path or key would be too long, and a partition column the output
lacks (``eos.sinks.iceberg.schema.refuse_partition_values``).

``eos verify`` reads the table through pyiceberg (``read_back``) and a second time through
DuckDB's iceberg extension (``eos.tools.audit.independent.iceberg``), both at one metadata file.

The catalog: ``eos.sinks.iceberg.catalog`` (pyiceberg's configuration plus the sink's
``catalog_properties``, secrets from the environment and kept out of every message).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from eos.core import faults
from eos.core.errors import CommitConflict, ProtocolViolation, RewindRefused
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.ownership import Place, Record, Writer, admit
from eos.core.sink import (
    SinkCommit,
    SupportsFill,
    SupportsPathRules,
    SupportsReadBack,
    SupportsRewind,
    validated_options,
)
from eos.core.storage import is_remote
from eos.sinks.iceberg.catalog import (
    CatalogSettings,
    guarded,
    open_catalog,
    settings_for,
    without_retries,
)
from eos.sinks.iceberg.history import PIPELINE, Mark, described
from eos.sinks.iceberg.options import SQLITE_RELATIVE, IcebergOptions

if TYPE_CHECKING:
    import pyarrow as pa

    from eos.core.path_rules import PathRule

__all__ = ["NO_SNAPSHOT", "IcebergOptions", "IcebergSink"]

NO_SNAPSHOT = -1  # snapshot ids are never negative (pyiceberg draws them from a UUID)
WRITE_ATTEMPTS = 5  # conflicts with other writers absorbed here before the task retries


def _pipelines(metadata: Any) -> set[str]:
    """The app ids of the pipelines whose snapshots ``metadata`` keeps (a table from before
    writers were recorded)."""
    return {str(s.summary[PIPELINE]) for s in metadata.snapshots
            if s.summary is not None and s.summary[PIPELINE]}


class IcebergSink(SupportsRewind, SupportsReadBack, SupportsFill, SupportsPathRules):
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
        """The table, created from the output's schema and recording this pipeline as its
        writer, unless it exists (two creators at once: the loser loads the winner's)."""
        from pyiceberg.exceptions import TableAlreadyExistsError

        from eos.sinks.iceberg.schema import iceberg_schema

        converted = iceberg_schema(schema, f"sink {self.name}")
        self.catalog.create_namespace_if_not_exists(self.options.identifier[:-1])
        owner = Record((self._writer(),), self.options.shared).properties()
        try:
            return self.catalog.create_table(self.options.identifier, schema=converted,
                                             properties=owner)
        except TableAlreadyExistsError:
            return self.catalog.load_table(self.options.identifier)

    # -- who writes the table -------------------------------------------------------------------

    def _writer(self) -> Writer:
        return Writer(self.config.app_id, self.config.name, self.output, self.name)

    def _owned(self) -> Place:
        return Place("iceberg", "Iceberg table", f"{self.options.catalog}.{self.options.table}",
                     "Each would find the other's snapshots on the table's line: a rewind of "
                     "either would be refused, and the audit cannot tell their rows apart.",
                     "{iceberg: {catalog: ..., table: ..., shared: true}}",
                     "hand the table over: set its property eos.writers to '[]' (ALTER TABLE "
                     "... SET TBLPROPERTIES ('eos.writers' = '[]'))")

    def _admitted(self, table: Any) -> tuple[Record | None, Record]:
        """The table's record and the one once this pipeline writes it (``TableOwned`` when
        it may not). A table without a record is judged by the pipelines whose snapshots it
        keeps."""
        before = Record.of(table.metadata.properties)
        return before, admit(before, self._writer(), self.options.shared, self._owned(),
                             lambda: _pipelines(table.metadata))

    def _claim(self, table: Any) -> None:
        """Record this pipeline as a writer of ``table`` unless it is: one catalog commit of
        the two properties. Two pipelines claiming a table without a record at once: the
        catalog takes both commits, the later one's record stands, and the other pipeline is
        refused by its next ``check``."""
        from pyiceberg.exceptions import CommitFailedException

        for _ in range(WRITE_ATTEMPTS):
            before, after = self._admitted(table)
            if after == before:
                return
            try:
                transaction = without_retries(table).transaction()
                transaction.set_properties(after.properties())
                transaction.commit_transaction()
                return
            except CommitFailedException:
                table = self.catalog.load_table(self.options.identifier)
        raise CommitConflict(f"sink {self.name}: recording its writer conflicted with other "
                             f"writers {WRITE_ATTEMPTS} times; retrying is safe")

    # -- the two-phase commit -------------------------------------------------------------------

    def prepare(self, schema: pa.Schema) -> None:
        """Create the table (and its namespace) unless it exists, and record this pipeline as
        its writer (``TableOwned`` when another pipeline owns it); refuse an existing table
        that cannot take the output, or is partitioned by a transform this runtime cannot
        apply (``SinkCannotTake``), before any epoch."""
        from eos.sinks.iceberg.schema import refuse_conflicts, refuse_partitioning

        with self._guarded("creating its table"):
            table = self._load() or self._create(schema)
            self._claim(table)
            refuse_conflicts(table.schema(), schema, f"sink {self.name}")
            refuse_partitioning(table, f"sink {self.name}")

    def committed_epoch(self, fence: bool = True) -> int:
        """Nothing to fence: an attempt still in flight can only swap in the sealed epoch's
        snapshot, and only on the metadata it planned on, which a commit since has replaced."""
        with self._guarded("reading its history"):
            table = self._load()
            return NO_EPOCH if table is None else self.mark.held(table.metadata)

    def path_rules(self) -> list[PathRule]:
        """The current spec's identity partitions of string columns, bounded so that their
        paths fit (``eos.sinks.iceberg.schema.sink_path_rules``)."""
        from eos.sinks.delta.sink import partition_types
        from eos.sinks.iceberg.schema import sink_path_rules

        def load() -> Any | None:
            with self._guarded("reading its partition spec"):
                return self._load()

        return sink_path_rules(self.name, partition_types(self.config, self.output), load)

    def check(self, epoch: int, rows: pa.Table) -> None:
        """This pipeline may write the table (``TableOwned``), the table can take the rows'
        columns, its partition transforms can be applied here and every partition value can
        be written (``eos.sinks.iceberg.schema``): what would otherwise fail every commit."""
        from eos.sinks.iceberg.schema import (
            refuse_conflicts,
            refuse_partition_values,
            refuse_partitioning,
        )

        with self._guarded("checking its schema"):
            table = self._load()
            if table is not None:
                self._admitted(table)
            refuse_conflicts(None if table is None else table.schema(), rows.schema,
                             f"sink {self.name}")
            refuse_partitioning(table, f"sink {self.name}")
            refuse_partition_values(table, rows, f"sink {self.name}")

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
            self._admitted(table)  # through the metadata the append is planned on
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
        summary is the epoch's marker, and the table property that keeps the epoch."""
        from eos.sinks.iceberg.schema import added_columns

        transaction = without_retries(table).transaction()
        if added_columns(table.schema(), rows.schema):
            with transaction.update_schema() as update:
                update.union_by_name(rows.schema)
        transaction.append(rows, snapshot_properties=self.mark.summary(epoch, plan_hash))
        self._keep(transaction, epoch)
        transaction.commit_transaction()

    def _keep(self, transaction: Any, epoch: int) -> None:
        """Stage, in ``transaction``, the table property saying its current snapshot (as
        staged: the commit's own, or the rollback's target) holds ``epoch``: it lands in the
        same catalog commit, or not at all (``eos.sinks.iceberg.history``)."""
        staged = transaction.table_metadata.current_snapshot()
        transaction.set_properties(self.mark.kept_property(staged, epoch))

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
            if current is None or point is None or current.snapshot_id == point:
                return None
            self._roll_back(table, point, epoch)
            return point
        if current is None or self.mark.held(table.metadata) == NO_EPOCH:
            return None
        self._empty(table, rewind_id)
        return table.metadata.current_snapshot().snapshot_id

    def _roll_back(self, table: Any, point: int, epoch: int) -> None:
        """One catalog commit: the branch set back to ``point`` (only if it still points where
        it did when checked) and the property to ``epoch``, which ``point`` committed."""
        from pyiceberg.table.update.snapshot import ManageSnapshots

        transaction = without_retries(table).transaction()
        ManageSnapshots(transaction).set_current_snapshot(snapshot_id=point)
        self._keep(transaction, epoch)
        transaction.commit_transaction()

    def _empty(self, table: Any, rewind_id: str) -> None:
        """One snapshot of ours with epoch -1 and no rows: a delete of every row, or (when the
        table holds none, and a delete would commit nothing) an empty append."""
        from pyiceberg.expressions import AlwaysTrue

        summary = self.mark.summary(NO_EPOCH, rewind=rewind_id)
        current = table.metadata.current_snapshot()
        transaction = without_retries(table).transaction()
        if current.summary is not None and current.summary["total-records"] not in (None, "0"):
            transaction.delete(AlwaysTrue(), snapshot_properties=summary)
        else:
            transaction.append(table.schema().as_arrow().empty_table(),
                               snapshot_properties=summary)
        self._keep(transaction, NO_EPOCH)
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

    def pinned(self, since: int = 0) -> tuple[list[dict[str, Any]], int]:
        """The rows of epoch ``since`` or later and the id of the snapshot they are of
        (``NO_SNAPSHOT``: the table does not exist or was never written), in one reading: the
        independent reader reads that same snapshot."""
        with self._guarded("reading its rows"):
            table = self._load()
            current = None if table is None else table.metadata.current_snapshot()
            if table is None or current is None:
                return [], NO_SNAPSHOT
            wanted = f"epoch >= {int(since)}" if since else "true"  # pyiceberg's parser
            return table.scan(row_filter=wanted, snapshot_id=current.snapshot_id
                              ).to_arrow().to_pylist(), current.snapshot_id

    def metadata_location(self) -> str | None:
        """The table's current metadata file (None: no table), which holds every snapshot
        the table keeps: where another reader finds one."""
        with self._guarded("reading its metadata"):
            table = self._load()
            return None if table is None else table.metadata_location

    def read_back(self, since: int = 0) -> list[dict[str, Any]]:
        return self.pinned(since)[0]

    def commits(self) -> list[int]:
        with self._guarded("reading its history"):
            table = self._load()
            return [] if table is None else self.mark.epochs(table.metadata)

    # -- eos fill -------------------------------------------------------------------------------

    def filled(self) -> tuple[int, int] | None:
        from eos.sinks.iceberg.fill import filled

        return filled(self)

    def fill(self, epoch: int, rows: pa.Table, first: int) -> SinkCommit:
        from eos.sinks.iceberg.fill import fill

        return fill(self, epoch, rows, first)
