"""The ``files`` sink: an output as Parquet or JSON-lines files under a local directory or an
object-store prefix, optionally partitioned Hive-style, one commit per epoch.

``{files: {path: DIR_OR_URI, format: parquet|jsonl, partition_by: [cols]}}``: a relative
``path`` is a directory under the pipeline's tables root (as a Delta sink's table name is), so
it moves with the root, onto an object store too.

**The commit.** Epoch N's files are written first, each whole (locally: a temporary file made
durable, then renamed into place; on a store: one PUT), under names derived from N and its plan
hash (``eos.sinks.files.layout``). Then N's manifest, ``_eos/manifests/<N:012d>.json`` (its
files, row counts, plan hash, schema), is *created*: a link that refuses an existing name
locally, a PUT with ``If-None-Match: *`` on S3 (``eos.sinks.files.store``). The manifest's
existence is the commit marker: ``committed_epoch`` is the highest manifest. Of two attempts
at once exactly one creates it; the other reports already committed (raced). Both wrote the
same names holding the same rows, so the loser has nothing of its own to remove. Last,
``_eos/committed.json`` is replaced by the list of every committed file (a convenience for
readers, rewritten by each commit; the manifests are the truth).

**What readers see.** A reader that takes the files the manifests list (or
``_eos/committed.json``) sees exactly the committed epochs, each whole. A plain listing of the
prefix may also see the files of an attempt that crashed before its manifest: they are removed
by ``abort`` and by the epoch's next commit, which writes the same names anyway. Locally a
crashed attempt may also leave hidden temporary files (``.epoch-*.tmp``), removed the same way.

**Partition values.** Any value of a nameable type (text, integers, booleans, dates,
timestamps, decimals) gets a directory whose name the file system or store can hold, escaped
and, when still too long, shortened (``eos.sinks.files.layout``); every file holds its
partition columns too, which the read-back reads. A type no name can hold (a double, bytes) is
refused when the pipeline loads, where the config says the column's type.

**One writer.** The directory belongs to the first pipeline that begins on it: ``prepare``
creates ``_eos/writers.json`` (``eos.core.ownership``'s record: that pipeline and sink) if it
is absent, with the manifest's create-if-absent, and ``prepare`` and ``check`` refuse any other
pipeline with ``TableOwned`` naming the owner, before anything of its is sealed or written. A
directory cannot be shared: its manifests number one pipeline's epochs. A directory written
before writers were recorded is adopted when its manifests name no other pipeline.

**Fill.** ``eos fill`` commits the epochs from before the sink joined the same way, under
manifests of its own in ``_eos/fill`` (``eos.sinks.files.fill``), which the read-back and a
rewind take with the pipeline's.

**Guarantee on a store without conditional writes.** Should a store accept the conditional
PUT without enforcing it, two racing attempts would both report COMMITTED, but what they make
visible is the same: the same names and rows, one manifest. Stores known to enforce it:
AWS S3, SeaweedFS, recent MinIO (``eos.core.storage.probe_fence`` checks a root's store).
"""

from __future__ import annotations

import json
import posixpath
from typing import TYPE_CHECKING, Any

from eos.core.errors import (
    ConfigError,
    ProtocolViolation,
    RewindRefused,
    SinkUnavailable,
    TableOwned,
)
from eos.core.layout import KEY_MAX, NAME_MAX, PATH_MAX, PathLimits, table_resource
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.ownership import Place as Owned
from eos.core.ownership import Record, Writer, admit
from eos.core.sink import (
    PIPELINE_ROOT,
    SinkCommit,
    SupportsAssets,
    SupportsFill,
    SupportsReadBack,
    SupportsRewind,
    validated_options,
)
from eos.core.storage import is_remote, resolve
from eos.sinks.files.layout import (
    COMMITTED,
    MANIFEST,
    MANIFESTS,
    UNNAMEABLE_TYPES,
    WRITERS,
    Manifest,
    cap_problem,
    encode,
    epoch_of,
    file_names,
    manifest_name,
    name_cap,
    partitions,
    refuse_partitions,
    schema_text,
)
from eos.sinks.files.options import FilesOptions
from eos.sinks.files.options import column_types as _column_types
from eos.sinks.files.options import misplaced as _misplaced
from eos.sinks.files.options import relative as _relative
from eos.sinks.files.store import Place, supported

if TYPE_CHECKING:
    import pyarrow as pa


class FilesSink(SupportsRewind, SupportsReadBack, SupportsFill, SupportsAssets):
    """One output of a pipeline as files, one manifest per epoch."""

    kind = "files"
    options: FilesOptions

    # -- what runs when the pipeline loads: no I/O, no client library --------------------------

    @classmethod
    def parse_options(cls, options: Any) -> FilesOptions:
        parsed = validated_options(FilesOptions, options, "a files sink")
        if _relative(parsed.path):
            problem = _misplaced(parsed.path)
            if problem:
                raise ValueError(f"a files sink: path {parsed.path!r}: {problem}")
            return parsed
        problem = supported(parsed.path)
        if problem:
            raise ValueError(f"a files sink: path: {problem}")
        try:
            resolve(parsed.path, "/")
        except ConfigError as error:
            raise ValueError(f"a files sink: path: {error}") from None
        return parsed

    @classmethod
    def describe(cls, options: FilesOptions) -> str:
        return options.path

    @classmethod
    def resources(cls, options: FilesOptions, pipeline_name: str) -> frozenset[str]:
        """The directory, claimed as a table location is: a files sink inside another's
        directory, a Delta table's or a protocol table's (or holding one) is refused at load
        (each commit lists and cleans the whole directory)."""
        if _relative(options.path):
            return frozenset({table_resource(f"{PIPELINE_ROOT}/"
                                             f"{posixpath.normpath(options.path)}")})
        return frozenset({table_resource(resolve(options.path, "/"))})

    @classmethod
    def check_pipeline(cls, options: FilesOptions, config: Any, output: str) -> None:
        """``partition_by`` names columns of the output of a type a directory's name can hold,
        and the path leaves room for their directories (else every epoch would be refused
        before its seal); a relative path is on the root's store, which must be one the sink
        can write."""
        from eos.sinks.columns import refuse_unknown_columns, sink_path

        refuse_unknown_columns(config, output, cls.kind, options, "partition_by",
                               options.partition_by)
        types = _column_types(config, output)
        for column in options.partition_by:
            if types.get(column) in UNNAMEABLE_TYPES:
                raise ValueError(f"{sink_path(config, output, cls.kind, options)}.partition_by: "
                                 f"column {column!r} is a {types[column]}, whose values no "
                                 "directory's name holds exactly; partition by a string, long, "
                                 "boolean, date, timestamp or decimal column")
        root = resolve(options.path, config.root if _relative(options.path) else "/")
        if _relative(options.path):
            problem = supported(root)
            if problem:
                raise ValueError(f"a files sink: path {options.path!r} under the tables root "
                                 f"{config.root}: {problem}")
        if options.partition_by:
            limits = (PathLimits(None, KEY_MAX, True) if is_remote(root)
                      else PathLimits(NAME_MAX, PATH_MAX, False))
            problem = cap_problem(list(options.partition_by),
                                  name_cap(limits, root, len(options.partition_by),
                                           options.format))
            if problem:
                raise ValueError(f"{sink_path(config, output, cls.kind, options)}"
                                 f".partition_by: {problem}")

    @property
    def place(self) -> Place:
        return Place(resolve(self.options.path, self.config.root if _relative(self.options.path)
                             else "/"))

    # -- the two-phase commit -------------------------------------------------------------------

    def _cap(self) -> int:
        """Bytes each partition directory's name may take here (``name_cap``)."""
        from eos.core.layout import path_limits

        place = self.place
        return name_cap(path_limits(place.root), place.root,
                        len(self.options.partition_by), self.options.format)

    def prepare(self, schema: pa.Schema) -> None:
        """Create the directory and claim it for this pipeline (``TableOwned`` when another
        pipeline owns it)."""
        if not self.place.remote:
            import os

            os.makedirs(self.place.location(MANIFESTS), exist_ok=True)
        self._claim()

    # -- who writes the directory ---------------------------------------------------------------

    def _writer(self) -> Writer:
        return Writer(self.config.app_id, self.config.name, self.output, self.name)

    def _owned(self) -> Owned:
        return Owned("files", "files sink directory", self.place.root,
                     "Its manifests number the epochs of one pipeline: each would read the "
                     "other's as its own, and a rewind of one would remove the other's files.",
                     None, "empty the directory (its files and its _eos directory), then "
                     "begin again")

    def _record(self) -> Record | None:
        """The directory's writers, None when it records none (new, or from before)."""
        try:
            data = self.place.read(WRITERS)
        except OSError as error:
            raise SinkUnavailable(f"sink {self.name}: cannot read {WRITERS}: {error}") from None
        if data is None:
            return None
        try:
            found = json.loads(data)
        except ValueError:
            found = None
        if not isinstance(found, dict):
            raise TableOwned(f"sink {self.name}: {self.place.location(WRITERS)} is not a JSON "
                             "object of eos.writers and eos.shared; remove it to let the next "
                             "pipeline that begins on the directory claim it")
        return Record.of({k: v if isinstance(v, str) else json.dumps(v)
                          for k, v in found.items()})

    def _pipelines_of_manifests(self) -> set[str]:
        """The app ids the oldest and newest manifests name (a directory from before writers
        were recorded: one pipeline's, unless two wrote it)."""
        epochs = self._epochs()
        found = set()
        for epoch in dict.fromkeys([*epochs[:1], *epochs[-1:]]):
            data = self.place.read(manifest_name(epoch))
            if data is not None:
                pipeline = json.loads(data).get("pipeline")
                if pipeline:
                    found.add(f"eos:{pipeline}")
        return found

    def _admitted(self) -> tuple[Record | None, Record]:
        """The record now and once this pipeline writes (``TableOwned`` when it may not)."""
        before = self._record()
        return before, admit(before, self._writer(), False, self._owned(),
                             self._pipelines_of_manifests)

    def _claim(self) -> None:
        """Record this pipeline as the directory's writer unless it is: created if absent, so
        that of two pipelines beginning at once exactly one owns it (the other reads the
        winner's record and is refused)."""
        before, after = self._admitted()
        if after == before:
            return
        text = json.dumps(after.properties(), indent=1).encode()
        try:
            if before is not None:  # an emptied record: the directory was handed over
                self.place.write(WRITERS, text)
            elif not self.place.create(WRITERS, text):
                self._admitted()  # another pipeline created it first: refused, or it is ours
        except OSError as error:
            raise SinkUnavailable(f"sink {self.name}: cannot record its writer: {error}") \
                from None

    def _epochs(self) -> list[int]:
        try:
            names = self.place.names(MANIFESTS)
        except OSError as error:
            raise SinkUnavailable(f"sink {self.name}: cannot list its manifests: {error}") \
                from None
        found = (MANIFEST.match(name.rsplit("/", 1)[-1]) for name in names)
        return sorted(int(m.group(1)) for m in found if m)

    def committed_epoch(self, fence: bool = True) -> int:
        return max(self._epochs(), default=NO_EPOCH)

    def check(self, epoch: int, rows: pa.Table) -> None:
        """Before the seal: this pipeline owns the directory (``TableOwned``), every partition
        value has a directory (``refuse_partitions``: only a type no name holds, or a path too
        long for any name, is refused) and the rows encode."""
        self._admitted()
        if self.options.partition_by:
            refuse_partitions(rows, list(self.options.partition_by), self.name, self._cap())
        encode(rows.slice(0, 0) if self.options.format == "parquet" else rows,
               self.options.format)

    def commit(self, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        held = self.committed_epoch()
        if held >= epoch:
            return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows.num_rows)
        if not self.follows(held, epoch):
            raise ProtocolViolation(f"sink {self.name} holds epoch {held}; it cannot receive "
                                    f"epoch {epoch}")
        try:
            return self._publish(epoch, rows, plan_hash)
        except OSError as error:  # a full disk, a lost mount, a store error: retry
            if epoch in self._epochs():  # another attempt committed (and cleaned) meanwhile
                return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows.num_rows,
                                  raced=True)
            raise SinkUnavailable(f"sink {self.name}: {error}") from None

    def write_data(self, epoch: int, plan_hash: str, rows: pa.Table) -> Manifest:
        """``rows``' data files, each whole, named for ``epoch`` and ``plan_hash``; the
        manifest that would publish them (the commit's or a fill's), not yet written."""
        form = self.options.format
        columns = list(self.options.partition_by)
        files = file_names(epoch, plan_hash, form,
                           partitions(rows, columns, self._cap() if columns else NAME_MAX))
        for relative, part in files.items():
            self.place.write(relative, encode(part, form))
        return Manifest(epoch, plan_hash, {p: t.num_rows for p, t in files.items()},
                        schema_text(rows.schema))

    def _publish(self, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        """Data files first, each whole; then the manifest, created only if absent."""
        manifest = self.write_data(epoch, plan_hash, rows)
        text = manifest.to_json(self.config.name, self.output, self.options.format)
        if not self.place.create(manifest_name(epoch), text):
            return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows.num_rows, raced=True)
        self._clean(epoch, manifest)
        self._write_committed(manifest)
        return SinkCommit(self.name, Outcome.COMMITTED, rows.num_rows)

    def _write_committed(self, latest: Manifest | None = None) -> None:
        """``_eos/committed.json``: the last committed epoch and every file the manifests list.
        Written after the manifest, so it may lag behind the manifests (a crash in between;
        the next commit rewrites it) but never lists a file no manifest lists. Extended by
        ``latest`` when it held the epoch before; otherwise rebuilt from every manifest."""
        previous = self.place.read(COMMITTED)
        doc = json.loads(previous) if previous else None
        if latest is not None and doc is not None and doc.get("epoch") == latest.epoch - 1:
            doc = {"epoch": latest.epoch, "files": [*doc["files"], *latest.files]}
        else:  # the fill's epochs (``eos.sinks.files.fill``) come before the pipeline's
            from eos.sinks.files.fill import fill_manifests

            epochs = self._epochs()
            doc = {"epoch": max(epochs, default=NO_EPOCH),
                   "files": [*(path for m in fill_manifests(self) for path in m.files),
                             *(path for epoch in epochs for path in self._manifest(epoch).files)]}
        self.place.write(COMMITTED, json.dumps(doc).encode())

    def _manifest(self, epoch: int) -> Manifest:
        data = self.place.read(manifest_name(epoch))
        if data is None:
            raise SinkUnavailable(f"sink {self.name}: the manifest of epoch {epoch} vanished")
        return Manifest.from_json(data)

    def _clean(self, epoch: int, manifest: Manifest | None) -> None:
        """Remove the files of ``epoch`` no manifest lists: what a crashed attempt left, never
        a committed file (with ``manifest`` None: the epoch is not committed, all go)."""
        listed = set(manifest.files) if manifest else set()
        for relative in self.place.names(""):
            if epoch_of(relative) == epoch and relative not in listed:
                self.place.delete(relative)

    def abort(self, epoch: int) -> None:
        """Remove what an attempt at ``epoch`` left and no manifest lists."""
        held = epoch in self._epochs()
        self._clean(epoch, self._manifest(epoch) if held else None)

    # -- rewind ---------------------------------------------------------------------------------

    def rewind_target(self, epoch: int) -> int | None:
        """Files have no versions: a rewind removes the epochs after ``epoch``."""
        held = self._epochs()
        if epoch != NO_EPOCH and epoch not in held:
            raise RewindRefused(f"sink {self.name} has no manifest of epoch {epoch}; rewind "
                                "to -1 to fill it from the start")
        return None

    def rewind(self, epoch: int, target: int | None, rewind_id: str,
               schema: pa.Schema) -> int | None:
        """Remove the epochs after ``epoch``, newest first, each manifest before its files:
        at every moment the manifests name a run ``..M`` of whole epochs, ``M`` shrinking to
        ``epoch`` (a crash midway leaves a shorter run; the rewind's rerun goes on, and files
        whose manifest went are removed with it or by the epoch's next commit). The filled
        epochs after ``epoch`` go alike (``eos.sinks.files.fill``)."""
        from eos.sinks.files.fill import drop_after

        for later in sorted((e for e in self._epochs() if e > epoch), reverse=True):
            manifest = self._manifest(later)
            self.place.delete(manifest_name(later))
            for relative in manifest.files:
                self.place.delete(relative)
            self._clean(later, None)
        drop_after(self, epoch)
        self._write_committed()
        return None

    # -- the audit and lineage ------------------------------------------------------------------

    def commits(self) -> list[int]:
        return self._epochs()

    def read_back(self, since: int = 0) -> list[dict[str, Any]]:
        """Every committed row of epoch ``since`` or later, read by DuckDB (not the library
        that wrote them) from the files the manifests of those epochs list, typed as the
        output's schema."""
        from eos.sinks.files.fill import fill_manifests
        from eos.sinks.files.read import read_files

        manifests = [*fill_manifests(self, since),  # the filled epochs: before the others
                     *(self._manifest(epoch) for epoch in self._epochs() if epoch >= since)]
        if not manifests:
            return []
        return read_files(self.place, manifests, self.options.format)

    def filled(self) -> tuple[int, int] | None:
        from eos.sinks.files.fill import filled

        return filled(self)

    def fill(self, epoch: int, rows: pa.Table, first: int) -> SinkCommit:
        from eos.sinks.files.fill import fill

        return fill(self, epoch, rows, first)

    def asset_uri(self) -> str:
        root = self.place.root
        return root if self.place.remote else f"file://{root}"
