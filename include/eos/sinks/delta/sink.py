"""Delta Lake sink: an epoch is one append carrying ``txn(app id, N)``, fenced through one snapshot
(``eos.core.delta.fenced_append``, the same append the checkpoint authority makes).

The DAG file imports this module to parse sink options: deltalake and pyarrow are imported only
inside the methods that write or read.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator

from eos.core.config import DurationMs
from eos.core.errors import ConfigError, SinkCannotTake
from eos.core.layout import PROTOCOL_TABLES, table_resource
from eos.core.outcomes import NO_EPOCH
from eos.core.ownership import Record, Writer
from eos.core.path_rules import PathRule
from eos.core.sink import (
    PIPELINE_ROOT,
    SinkCommit,
    SupportsAssets,
    SupportsFill,
    SupportsPathRules,
    SupportsReadBack,
    SupportsRewind,
    validated_options,
)
from eos.core.storage import join, refuse_unsafe_settings, resolve

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable


class DeltaSinkOptions(BaseModel):
    """``{delta: NAME}`` or ``{delta: {table: NAME, log_retention: 7d, shared: true}}``.

    ``log_retention`` (at least 1 h, as ``epoch.log_retention`` and for the same reason: a
    writer whose snapshot predates a log cleanup could commit under a freed version number)
    becomes the table's ``delta.logRetentionDuration``. delta-rs checkpoints a table every 100
    commits and then deletes the commit files older than that, so the log of a table written
    once per epoch stays bounded instead of keeping 30 days of commits (Delta's default), which
    every append lists. Time travel, and a rewind, reach back as far as the retention. Unset:
    the table keeps Delta's default, or what its owner set.

    ``shared``: other pipelines may write this table too, if each of them declares it shared
    (``eos.core.ownership``; the table records its writers). Unset, the first pipeline to
    begin on the table owns it and any other is refused before its first commit. A rewind
    never removes another writer's rows: it is refused when another writer committed after
    the epoch it goes back to.

    ``partition_by``: the table is created partitioned by these output columns (checked at
    load: ``partition_problem``). Partitioning is fixed when a table is created, so a table
    partitioned otherwise is refused before the seal (``SinkCannotTake``), never at commit; a
    rewind to -1 gives the emptied table the partitioning asked for. A record whose partition
    value delta-rs could not write (a directory's name over 255 bytes, an object key over
    1024) or that readers would take for a null (an empty string) is quarantined at precommit
    with the reason (``path_rules``); ``check`` before the seal stays the last guard
    (``partition_value_problems``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    table: str = Field(
        min_length=1,
        description="The table: a name under the pipeline's tables root, an absolute path or "
                    "a URI. Never one of the pipeline's own tables, never outside the root "
                    "by a relative name.")
    log_retention: DurationMs | None = Field(
        default=None, ge=3_600_000,
        description="The table's delta.logRetentionDuration (at least 1h), set when the sink "
                    "creates the table or on its next commit; unset: left as it is.")
    shared: bool = Field(
        default=False,
        description="Other pipelines may write this table too, if each declares it shared.")
    partition_by: tuple[str, ...] = Field(
        default=(),
        description="Output columns the table is partitioned by (Hive-style directories, "
                    "e.g. [event_date]): a rows output's string, long, boolean, date, "
                    "timestamp or decimal columns, a windows output's group fields and window "
                    "bounds. Set when the sink creates the table; an existing table partitioned "
                    "otherwise is refused before the seal.")

    @field_validator("partition_by", mode="before")
    @classmethod
    def _columns(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list | tuple) and len(set(value)) != len(value):
            raise ValueError(f"a column is named twice in {list(value)}")
        return value


def _is_uri(table: str) -> bool:
    return "://" in table


def _misplaced(table: str) -> str | None:
    """Why a relative table name may not be a sink (None when it may): it must stay under the
    pipeline's root and must not be, or be inside, one of the protocol tables. Absolute paths and
    URIs are the user's explicit choice; the config checks them against the protocol tables once
    the root is known (``PipelineConfig._sinks_apart``)."""
    if _is_uri(table) or Path(table).is_absolute():
        return None
    name = posixpath.normpath(table)
    if name == ".":
        return ("is the pipeline's root itself, which holds its protocol tables; name a table "
                "under it")
    if name == ".." or name.startswith("../"):
        return ("leaves the pipeline's root; a table elsewhere is given as an absolute path or a "
                "URI")
    first = name.split("/", 1)[0]
    if first.lower() in PROTOCOL_TABLES:
        return (f"is the pipeline's {first.lower()} protocol table or inside it (protocol tables: "
                f"{', '.join(PROTOCOL_TABLES)}); name another table")
    return None


def _unsupported(table: str) -> str | None:
    """Why a table URI cannot hold a sink table (a scheme nothing here writes, a storage
    setting that would break the commit fence: ``eos.core.storage``), or None."""
    if not _is_uri(table):
        return None
    try:
        refuse_unsafe_settings(resolve(table, Path("/")))
    except ConfigError as error:
        return str(error)
    return None


def _location(table: str) -> str:
    """Where a table option points, normalized: relative names from ``PIPELINE_ROOT``,
    ``file://`` URIs as their path, other URIs as given."""
    if _is_uri(table):
        parsed = urlparse(table)
        return (posixpath.normpath(parsed.path) if parsed.scheme == "file"
                else resolve(table, Path("/")))
    if Path(table).is_absolute():
        return posixpath.normpath(table)
    return f"{PIPELINE_ROOT}/{posixpath.normpath(table)}"


def _plain(dtype: pa.DataType) -> pa.DataType:
    """A type without how Arrow lays it out: Delta reads strings and binaries back in the
    large or view layouts, which hold the same values."""
    import pyarrow as pa

    if pa.types.is_large_string(dtype) or pa.types.is_string_view(dtype):
        return pa.string()
    if pa.types.is_large_binary(dtype) or pa.types.is_binary_view(dtype):
        return pa.binary()
    return dtype


#: The characters delta-rs writes as they are in a partition directory's name (RFC 3986's
#: unreserved ones); every other one as ``%XX`` per UTF-8 byte (measured on delta-rs 1.6.6).
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
#: The name delta-rs gives a data file (``part-<n>-<uuid>-c000.<codec>.parquet``).
DATA_FILE_NAME = "part-00000-00000000-0000-0000-0000-000000000000-c000.snappy.parquet"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _encoded(text: str) -> str:
    return "".join(c if c in _UNRESERVED else "".join(f"%{b:02X}" for b in c.encode())
                   for c in text)


def _partition_text(value: Any) -> str:
    """A partition value as delta-rs serializes it into a path (before encoding)."""
    from datetime import date, datetime

    if value is None:
        return NULL_PARTITION
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def partition_value_problems(location: str, columns: list[str], rows: pa.Table) -> list[str]:
    """Why delta-rs could not write ``rows`` into the table at ``location`` partitioned by
    ``columns`` (empty: it can): a partition whose directory's name or whole path (locally) or
    object key (on a store) would outgrow its limit (``eos.core.layout.path_limits``), and an
    empty string, which readers take for a null. One reason per column and kind, naming the
    value's start."""
    from eos.core.layout import path_limits, path_problem

    present = [c for c in columns if c in rows.schema.names]
    if not present or not rows.num_rows:
        return []
    limits = path_limits(location)
    found: dict[tuple[str, str], str] = {}
    for key in rows.select(present).group_by(present).aggregate([]).to_pylist():
        for column in present:
            if key[column] == "" and (column, "empty") not in found:
                found[column, "empty"] = (
                    f"partition column {column!r} holds an empty string, which readers of a "
                    "Delta table take for a null (delta-rs logs it as \"\" and reads it back "
                    "so, its dataset as a null)")
        dirs = "/".join(f"{_encoded(c)}={_encoded(_partition_text(key[c]))}" for c in present)
        problem = path_problem(join(location, dirs, DATA_FILE_NAME), limits)
        if problem:
            longest = max(present, key=lambda c: len(_encoded(_partition_text(key[c]))))
            value = _partition_text(key[longest])
            shown = value if len(value) <= 40 else f"{value[:40]}... ({len(value)} characters)"
            found.setdefault((longest, "long"), (
                f"partition column {longest!r} holds {shown!r}, which delta-rs would write "
                f"under a path it cannot create: {problem}"))
    return list(found.values())


#: The widest text of a partition value of each type that is not a string, escaped: a long's
#: 20 characters, a timestamp's ``2024-01-01 00:00:00.000000`` with its space and colons
#: escaped, a decimal's 38 digits with a sign and a point; a null's ``NULL_PARTITION``.
_WIDEST = {"long": 20, "boolean": 5, "date": 12, "timestamp": 32, "decimal": 40}


def path_rules(location: str, sink: str, columns: list[str],
               types: dict[str, str]) -> list[PathRule]:
    """The rules of a table at ``location`` partitioned by ``columns`` (of ``types``): each
    string column's escaped value at most what its directory's name may hold and its share of
    the path left once every other column takes its widest value; an empty string is a null
    to the table's readers (``eos.core.path_rules``)."""
    from eos.core.layout import path_bytes, path_limits

    limits = path_limits(location)
    strings = [c for c in columns if types.get(c) == "string"]
    if not strings:
        return []
    # The path: <location>/<col>=<value>/.../<data file>; each directory adds its name and "/".
    fixed = path_bytes(join(location, DATA_FILE_NAME), limits) + sum(
        len(_encoded(c)) + 2 + max(_WIDEST.get(types.get(c, ""), 0), len(NULL_PARTITION))
        for c in columns if c not in strings)
    rules = []
    for column in strings:
        head = len(_encoded(column)) + 2  # "<col>=" and the "/" after the directory
        most = (limits.whole - fixed) // len(strings) - head
        if limits.name is not None:
            most = min(most, limits.name - head + 1)
        rules.append(PathRule(sink, column, most, _UNRESERVED, empty_is_null=True))
    return rules


# Types a partition column may have: a partition's value is its directory's name, exact for
# these (a double's text is not: NaN, -0.0, digits), and binary names no directory.
PARTITIONABLE = ("string", "long", "boolean", "date", "timestamp", "decimal")


def partition_types(config: Any, output: str) -> dict[str, str]:
    """The columns of ``output`` a table may be partitioned by, with their types (the
    grammar's names): a rows output's selected columns and coordinates, a windows output's
    group fields and window bounds. Read from the config alone (no pyarrow: it runs at load)."""
    if output == "rows":
        return {**{name: t.name for name, t in config.row_columns.items()},
                "kafka_topic": "string", "kafka_partition": "long", "kafka_offset": "long",
                "epoch": "long"}
    if output == "windows":
        types = config.field_types
        return {**{g: types[g].name for g in config.group_by},
                "window_start": "timestamp", "window_end": "timestamp", "epoch": "long"}
    return {}


def partition_problem(columns: tuple[str, ...], config: Any, output: str) -> str | None:
    """Why ``columns`` cannot partition a table of ``output`` (None: they can)."""
    types = partition_types(config, output)
    if not types:
        return f"only a rows or windows output's table may be partitioned, not {output}'s"
    for column in columns:
        if column not in types:
            return (f"partition column {column!r} is not a column of the {output} output "
                    f"that can partition it (those are {', '.join(types)})")
        if types[column] not in PARTITIONABLE:
            return (f"partition column {column!r} is a {types[column]}; a partition column is "
                    f"one of {', '.join(PARTITIONABLE)}")
    return None


def schema_conflicts(table: pa.Schema, rows: pa.Schema) -> list[str]:
    """Why a table of schema ``table`` cannot take rows of schema ``rows`` (empty: it can).
    A column the rows add is no conflict: the commit adds it (``merge_schema``)."""
    conflicts = []
    for field in table:
        if field.name not in rows.names:
            if not field.nullable:
                conflicts.append(f"column '{field.name}' is required and the output has no "
                                 "such column")
            continue
        given = rows.field(field.name).type
        if _plain(given) != _plain(field.type):
            conflicts.append(f"column '{field.name}' is {field.type} in the table, "
                             f"{given} in the output")
    return conflicts


class DeltaSink(SupportsRewind, SupportsReadBack, SupportsFill, SupportsAssets,
                SupportsPathRules):
    """``{delta: NAME}`` (a table under the pipeline's root) or ``{delta: /abs/path | uri}``;
    ``{delta: {table: NAME, log_retention: 7d}}`` bounds the table's Delta log."""

    kind = "delta"
    versions_tables = True
    options: DeltaSinkOptions

    @classmethod
    def parse_options(cls, options: Any) -> DeltaSinkOptions:
        data = {"table": options} if isinstance(options, str) else options
        if isinstance(data, dict) and isinstance(data.get("table"), str):
            data = {**data, "table": data["table"].strip()}
        parsed = validated_options(DeltaSinkOptions, data, "a delta sink names a table or a path")
        problem = _misplaced(parsed.table) or _unsupported(parsed.table)
        if problem:
            raise ValueError(f"delta sink {parsed.table!r}: {problem}")
        return parsed

    @classmethod
    def describe(cls, options: DeltaSinkOptions) -> str:
        return options.table

    @classmethod
    def check_pipeline(cls, options: DeltaSinkOptions, config: Any, output: str) -> None:
        """``partition_by`` names columns of the output that can partition a table."""
        if options.partition_by:
            problem = partition_problem(options.partition_by, config, output)
            if problem:
                raise ValueError(f"delta sink {options.table!r}: partition_by: {problem}")

    @classmethod
    def resources(cls, options: DeltaSinkOptions, pipeline_name: str) -> frozenset[str]:
        """The table's resolved location: ``target``, ``./target`` and the absolute path of
        ``<root>/target`` are one table, claimed once per pipeline (and never a protocol
        table's location, which the config checks for absolute paths too)."""
        return frozenset({table_resource(_location(options.table))})

    @property
    def path(self) -> str:
        """Relative names live under the pipeline's table root; paths and URIs are used as is."""
        table = self.options.table
        if _is_uri(table) and not table.startswith("file://"):
            return resolve(table, Path("/"))
        if "://" in table or Path(table).is_absolute():
            return table
        return join(self.config.root, posixpath.normpath(table))

    def _properties(self) -> dict[str, str]:
        """The table properties the options ask for (none unless ``log_retention``)."""
        from eos.core.maintenance import LOG_RETENTION, log_retention_property

        if self.options.log_retention is None:
            return {}
        return {LOG_RETENTION: log_retention_property(self.options.log_retention)}

    def writer(self) -> Writer:
        """This pipeline as a writer of the table (``eos.core.ownership``)."""
        return Writer(self.config.app_id, self.config.name, self.output, self.name)

    def prepare(self, schema: pa.Schema) -> None:
        """Create the table (recording this pipeline as its writer) unless it exists; then make
        sure this pipeline may write it (``eos.core.ownership.claim``: ``TableOwned`` before
        any epoch when another pipeline owns it) and that its schema takes the output's
        (``SinkCannotTake``)."""
        from eos.core.delta import CHECKPOINT_EVERY, CHECKPOINT_INTERVAL, create_table
        from eos.core.ownership import claim
        from eos.core.pool import lent, pooled

        # A table this process holds a handle of exists; asking costs a listing of its log.
        if not pooled(self.path):
            owner = Record((self.writer(),), self.options.shared).properties()
            # A table it creates is checkpointed every 10 commits, as Delta Spark's are
            # (``eos.core.delta.CHECKPOINT_EVERY``); an existing table keeps its owner's setting.
            create_table(self.path, schema, partition_by=list(self.options.partition_by),
                         configuration={CHECKPOINT_INTERVAL: CHECKPOINT_EVERY,
                                        **self._properties(), **owner})
        with lent(self.path) as table:
            if table is not None:
                claim(table, self.path, self.writer(), self.options.shared)
                self._refuse_conflicts(table, schema, "its epochs")

    def path_rules(self) -> list[PathRule]:
        """A partitioned table's string columns, each bounded so that every directory and the
        whole path fit (``path_rules``): a record over them is quarantined at precommit."""
        if not self.options.partition_by:
            return []
        return path_rules(self.path, self.name, list(self.options.partition_by),
                          partition_types(self.config, self.output))

    def check(self, epoch: int, rows: pa.Table) -> None:
        """Before the seal: this pipeline may write the table (its recorded writers admit it:
        ``TableOwned``), the table's schema takes the rows (same types where both have a
        column, no required column the rows lack; new columns are added by the commit) and
        every partition value can be written (``partition_value_problems``)."""
        from eos.core.ownership import check_writer
        from eos.core.pool import lent

        with lent(self.path) as table:
            if table is not None:
                check_writer(table, self.path, self.writer(), self.options.shared)
            self._refuse_conflicts(table, rows.schema, f"epoch {epoch}")
        problems = partition_value_problems(self.path, list(self.options.partition_by), rows)
        if problems:
            raise SinkCannotTake(
                f"Delta sink {self.name}: epoch {epoch} cannot be written to {self.path}: "
                f"{'; '.join(problems)}. Nothing was sealed or written: partition the table by "
                "another column (a rewind to -1 replays into it partitioned anew), keep such "
                "values out of the output (a filter), or write it to a files sink, which names "
                "any value; then run again")

    def _refuse_conflicts(self, table: Any, schema: pa.Schema, what: str) -> None:
        if table is None:  # the commit creates it with the rows' schema
            return
        import pyarrow as pa

        conflicts = schema_conflicts(pa.schema(table.schema().to_arrow()), schema)
        partitioned = list(table.metadata().partition_columns)
        if partitioned != list(self.options.partition_by):
            conflicts.append(f"the table is partitioned by {partitioned or 'nothing'}, the "
                             f"sink's partition_by says {list(self.options.partition_by)} (a "
                             "table is partitioned when it is created: set partition_by back, "
                             "or rewind to -1 to replay into it partitioned anew)")
        if conflicts:
            raise SinkCannotTake(
                f"Delta sink {self.name}: the table at {self.path} cannot take {what}: "
                f"{'; '.join(conflicts)}. Nothing was sealed or written: give the sink "
                "another table, or change the table to the output's schema, then run again")

    def committed_epoch(self, fence: bool = True) -> int:
        """The table's ``txn`` version for the pipeline (Delta has no writer to fence: every
        commit is checked against the snapshot it was planned on)."""
        from eos.core.delta import txn_version
        from eos.core.pool import lent

        with lent(self.path) as table:
            return txn_version(self.path, self.config.app_id, table)

    def commit(self, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        """One Delta commit: the rows and ``txn(app id, epoch)``; see ``fenced_append``. The
        table is opened once (or a pooled handle brought up to date: ``eos.core.tables.lent``): the
        open is the existence check and the fencing snapshot."""
        from eos.core.delta import fenced_append
        from eos.core.maintenance import ensure_properties
        from eos.core.ownership import check_writer
        from eos.core.pool import lent

        with lent(self.path) as snapshot:
            if snapshot is None:
                self.prepare(rows.schema)
            else:
                # A table created before the option was set gets it now (one metadata commit;
                # a concurrent append re-checks through ``fenced_append``'s retry).
                ensure_properties(snapshot, self._properties())
            # merge_schema: a table created before its output gained columns (the bounded
            # quarantine row's lengths and digest) takes them in the same commit.
            # A table whose writers would not admit this pipeline is refused, checked through
            # the snapshot the append goes through (a concurrent change of them conflicts).
            me, shared = self.writer(), self.options.shared
            done = fenced_append(self.path, rows, self.config.app_id, epoch, snapshot=snapshot,
                                 merge_schema=True, first_epoch=self.joined_at,
                                 check=lambda t: check_writer(t, self.path, me, shared))
        return SinkCommit(self.name, done.outcome, rows.num_rows, done.version, done.raced)

    def abort(self, epoch: int) -> None:
        """Nothing to do: a failed Delta commit leaves only files no version names."""

    def rewind_target(self, epoch: int) -> int | None:
        """The version at which the table held ``epoch`` (its history says which); None for a
        table not created yet when going back to before the first epoch (nothing to undo).
        ``RewindRefused`` when another writer committed after it (a shared table, or one
        written before tables recorded their writers): the restore would remove its rows."""
        from eos.core.delta import open_table
        from eos.core.errors import RewindRefused
        from eos.core.timetravel import refuse_other_writers, target_version

        table = open_table(self.path)
        if table is None:
            if epoch == NO_EPOCH:
                return None
            raise RewindRefused(f"sink {self.name}: {self.path} does not exist, so it holds no "
                                f"epoch {epoch}; rewind to -1 to fill it from the start")
        version = target_version(self.path, self.config.app_id, epoch)
        refuse_other_writers(table, self.path, self.config.app_id, epoch, version)
        return version

    def rewind(self, epoch: int, target: int | None, rewind_id: str,
               schema: pa.Schema) -> int | None:
        """A Delta ``RESTORE`` to ``target`` carrying ``txn(app, epoch)``
        (``eos.core.timetravel``); on a
        full rewind, the emptied table takes the output's current schema. Refused when another
        writer committed after ``target`` (since the plan too): checked through the snapshot
        the restore commits on, so a commit landing in between makes it conflict."""
        from eos.core.timetravel import refuse_other_writers, replace_schema, restore
        from eos.sinks.delta.fill import fill_markers_at

        if target is None:  # the table did not exist when the rewind was planned
            return None
        app = self.config.app_id
        writers: list[Record | None] = []  # the table's writers before the restore

        def check(table: DeltaTable) -> None:
            refuse_other_writers(table, self.path, app, epoch, target)
            writers.append(Record.of(table.metadata().configuration))

        version = restore(self.path, target, app, epoch, rewind_id, check=check,
                          markers=lambda table: fill_markers_at(self, table, target))
        if version is not None and writers and writers[0] is not None:
            version = self._keep_writers(writers[0]) or version
        if epoch == NO_EPOCH:
            version = replace_schema(self.path, schema, self.config.app_id, epoch,
                                     rewind_id, list(self.options.partition_by)) or version
        return version

    def _keep_writers(self, before: Record) -> int | None:
        """Put back the writers the table listed before a restore: Delta ``RESTORE`` restores
        table properties too, and would forget a writer that joined after the restored version
        (one metadata commit, none when nothing was forgotten; the version written).
        Best effort: if it loses a race, the forgotten writer's next ``begin`` records it again
        and its commits are admitted meanwhile (``eos.core.ownership.check_writer``)."""
        from deltalake.exceptions import CommitFailedError

        from eos.core.delta import open_table

        table = open_table(self.path)
        now = None if table is None else Record.of(table.metadata().configuration)
        if table is None or now == before:
            return None
        kept = Record((*before.writers, *(w for w in (now.writers if now else ())
                                          if not before.holds(w.app))), before.shared)
        try:
            table.alter.set_table_properties(kept.properties(), raise_if_not_exists=False)
        except CommitFailedError:
            return None
        return table.version()

    def unreadable(self) -> str | None:
        """A shared table holds every writer's rows, and a row does not say which pipeline
        wrote it."""
        if self.options.shared:
            return "a shared table: its rows do not say which pipeline wrote them"
        return None

    def read_back(self, since: int = 0) -> list[dict[str, Any]]:
        from eos.core.delta import read_table

        # Skips the files of earlier epochs by their statistics, unopened.
        return read_table(self.path, filters=[("epoch", ">=", since)] if since else None
                          ).to_pylist()

    def commits(self) -> list[int]:
        """The epochs of the table's commits on its current line, from its history."""
        from deltalake import DeltaTable

        from eos.core.timetravel import line

        return line(DeltaTable(self.path), self.config.app_id)

    def filled(self) -> tuple[int, int] | None:
        from eos.sinks.delta.fill import filled

        return filled(self)

    def fill(self, epoch: int, rows: pa.Table, first: int) -> SinkCommit:
        from eos.sinks.delta.fill import fill

        return fill(self, epoch, rows, first)

    def asset_uri(self) -> str:
        """The table's location: ``file:///abs/path``, or its store URI (``s3://bucket/path``)."""
        from eos.core.lineage import table_uri

        return table_uri(self.path)
