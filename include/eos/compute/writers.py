"""Staging an epoch in files: executors (or, for a small epoch, the driver) write Parquet, and the
driver commits the files in one Delta transaction.

Spark's executors write N's rows as Parquet files into a directory of its own under the
staging table (``epoch=N/attempt-<uuid>/``), one sub-directory per kind of row, so the state is
not bounded by one process's memory; the driver commits those files into staging in **one**
Delta transaction that replaces partition ``epoch=N``
(``DeltaTable.create_write_transaction`` with add actions for files already written;
one commit per epoch). What the driver holds is a list of file names.

A small epoch (``eos.compute.precommit.write.collects``: predicted small from the last epoch's
row count, and bounded before it runs) is collected to the driver as Arrow instead and written
there, one file per kind (``write_collected``): a Spark file write costs a job, a task per
partition and the Hadoop commit protocol however small the epoch. The directory, the files'
statistics and the one commit are the same either way.

The files are written with pyarrow's filesystems, by the executors' Python workers and by the
driver alike, never by Spark's Hadoop writers: the pyspark wheel has no S3A (or GCS, ABFS)
connector, and a staging table on an object store must be written without one
(``eos.core.storage``). Each executor task writes one file per kind it holds and returns the
files' descriptions (path, size, rows, kind) as its rows: the driver learns what was written
from the tasks that succeeded, never from listing a directory (a failed or speculative task's
files are simply never named, like a killed attempt's).

Why this is still exactly once: files that no Delta commit names are invisible to every reader
(an attempt killed mid-write leaves only those, and a vacuum deletes them); the one commit makes
all of N's rows visible at once and drops any earlier attempt's; the protocol decides whether
that commit may happen at all (``eos.core.protocol``: not after N was checkpointed).

Each file's add action carries its row count and the ``kind`` it holds as min/max statistics,
so a read of "everything but the open windows" (``commit``) or of "the watermark row" skips the
state files without opening them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pa_fs
import pyarrow.parquet as pq

from eos.core.staging import KIND_DIR, StagedFile
from eos.core.storage import filesystem
from eos.core.window_state import END, START, read_state_file

#: What an executor task returns for each file it wrote (``StagedFile`` without the kind range),
#: and, without a path, the rows of a kind it counted and did not write (``write_frame``).
FILES = pa.schema([("path", pa.string()), ("size", pa.int64()), ("modified_ms", pa.int64()),
                   ("rows", pa.int64()), ("kind", pa.string()),
                   ("start_min", pa.int64()), ("start_max", pa.int64()),
                   ("end_min", pa.int64()), ("end_max", pa.int64())])



class _FileWriter:
    """One Parquet file of staging being written (``relative`` to the table at ``staging``)."""

    def __init__(self, staging: str, relative: str, schema: pa.Schema) -> None:
        store, root = filesystem(staging)
        path = f"{root}/{relative}"
        if isinstance(store, pa_fs.LocalFileSystem):  # object stores have no directories
            store.create_dir(path.rsplit("/", 1)[0], recursive=True)
        self.relative, self.rows = relative, 0
        self.kinds: tuple[str, str] | None = None
        # START/END: (min, max) over the rows; None once a row has no value (unknown).
        self.bounds: dict[str, tuple[int, int] | None] = {}
        self.stream = store.open_output_stream(path)
        self.writer = pq.ParquetWriter(self.stream, schema)

    def write(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        self.writer.write_table(rows)
        self.rows += rows.num_rows
        low, high = pc.min_max(rows["kind"]).values()
        found = (low.as_py() or "", high.as_py() or "")
        self.kinds = found if self.kinds is None else (min(self.kinds[0], found[0]),
                                                       max(self.kinds[1], found[1]))
        for column in (START, END):
            self.bounds[column] = _widened(self.bounds.get(column, (2**63 - 1, -(2**63))),
                                           rows, column)

    def close(self) -> StagedFile:
        """Finish the file (on an object store the upload completes here, or raises)."""
        self.writer.close()
        size = self.stream.tell()
        self.stream.close()
        low, high = self.kinds or ("", "")
        start = self.bounds.get(START) or (None, None)
        end = self.bounds.get(END) or (None, None)
        return StagedFile(path=self.relative, size=size, modified_ms=int(time.time() * 1000),
                          rows=self.rows, kind_min=low, kind_max=high,
                          start_min=start[0], start_max=start[1],
                          end_min=end[0], end_max=end[1])


def _widened(bounds: tuple[int, int] | None, rows: pa.Table,
             column: str) -> tuple[int, int] | None:
    """``bounds`` widened by ``rows[column]``; None (unknown) if a row has no value."""
    if bounds is None or column not in rows.column_names or rows[column].null_count:
        return None
    low, high = (v.as_py() for v in pc.min_max(rows[column]).values())
    return min(bounds[0], low), max(bounds[1], high)


def partition_writer(staging: str, directory: str, schema: pa.Schema,
                     counted: frozenset[str] = frozenset()) -> Callable[
                         [Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of an executor task: its rows, one file per kind, under
    ``directory``; yields one ``FILES`` row per file, and one without a path per kind of
    ``counted`` it held (those rows are counted, not written). The file names are random per
    task attempt, so a retried task never overwrites what its failed attempt may still
    write."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        files: dict[str, _FileWriter] = {}
        skipped: dict[str, int] = {}
        task = uuid.uuid4().hex
        for batch in batches:
            rows = pa.Table.from_batches([batch]).select(schema.names).cast(schema)
            kinds = pc.unique(rows["kind"]).to_pylist()
            for kind in kinds:
                # A filter copies every column of the rows it keeps: a batch of one kind is
                # written as it is, and counted rows are only counted.
                mask = None if len(kinds) == 1 else pc.equal(rows["kind"], kind)
                if kind in counted:
                    n = rows.num_rows if mask is None else pc.sum(mask).as_py() or 0
                    skipped[kind] = skipped.get(kind, 0) + n
                    continue
                if kind not in files:
                    files[kind] = _FileWriter(
                        staging, f"{directory}/{KIND_DIR}={kind}/part-{task}.parquet", schema)
                files[kind].write(rows if mask is None else rows.filter(mask))
        described = [{"path": f.path, "size": f.size, "modified_ms": f.modified_ms,
                      "rows": f.rows, "kind": f.kind_min, "start_min": f.start_min,
                      "start_max": f.start_max, "end_min": f.end_min, "end_max": f.end_max}
                     for f in (w.close() for w in files.values())]
        described += [{"path": None, "rows": n, "kind": kind} for kind, n in skipped.items()]
        if described:
            yield pa.RecordBatch.from_pylist(described, schema=FILES)

    return write


def write_frame(frame: Any, staging: str, directory: str, schema: pa.Schema, tasks: int,
                counted: frozenset[str] = frozenset()) -> tuple[list[StagedFile],
                                                                dict[str, int]]:
    """Executors write ``frame``'s rows under ``directory`` (relative to the ``staging`` table),
    one file per kind per task, and the driver collects only the files' descriptions; rows
    of a kind in ``counted`` are not written, only counted (the second value: rows per kind).
    One pass of a stateless epoch counts the filter's drops so, as it writes: an
    ``Observation`` would cost a JVM round trip per metric and an exception per read.

    The rows are a union of the windows (``shuffle_partitions`` partitions, after the merge
    with the state) and the side rows (one partition per Kafka split, twice: late and
    quarantined). Written as they come, every partition writes a file per kind it holds: ~10
    small files for a 200k-record epoch, each with its own task, writer and footer read. A
    ``coalesce`` (no shuffle) to ``tasks`` writes the same rows in ~6 files: fewer tasks and
    writers, and fewer files for the next epoch and ``commit`` to open."""
    from pyspark.sql.pandas.types import from_arrow_schema

    written = (frame.select(*schema.names).coalesce(max(1, tasks))
               .mapInArrow(partition_writer(staging, directory, schema, counted),
                           from_arrow_schema(FILES)))
    described = written.toArrow().to_pylist()
    skipped: dict[str, int] = {}
    for r in described:
        if r["path"] is None:
            skipped[r["kind"]] = skipped.get(r["kind"], 0) + r["rows"]
    files = sorted((StagedFile(path=r["path"], size=r["size"], modified_ms=r["modified_ms"],
                               rows=r["rows"], kind_min=r["kind"], kind_max=r["kind"],
                               start_min=r["start_min"], start_max=r["start_max"],
                               end_min=r["end_min"], end_max=r["end_max"])
                    for r in described if r["path"] is not None), key=lambda f: f.path)
    return files, skipped


def write_collected(rows: pa.Table, staging: str, directory: str,
                    schema: pa.Schema) -> list[StagedFile]:
    """The driver writes epoch N's collected rows under ``directory``: one file per kind, so
    each add action's kind statistics name one kind, as the executors' files do."""
    rows = rows.select(schema.names).cast(schema)
    return [write_table(rows.filter(pc.equal(rows["kind"], kind)), staging, directory,
                        f"rows-{kind}", schema)
            for kind in sorted(pc.unique(rows["kind"]).to_pylist())]


def write_table(rows: pa.Table, staging: str, directory: str, name: str,
                schema: pa.Schema) -> StagedFile:
    """Rows of N the driver writes itself as one more file under ``directory``: always the
    offsets and the watermark row; a small epoch's collected rows too (``write_collected``)."""
    file = _FileWriter(staging, f"{directory}/{name}.parquet", schema)
    file.write(rows.select(schema.names).cast(schema))
    return file.close()


def read_state(files: list[tuple[str, str]], columns: list[str],
               filters: list[tuple[str, str, Any]],
               schema: pa.Schema) -> Callable[[Iterator[pa.RecordBatch]],
                                              Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function reading the open windows an epoch needs on the executors:
    each input row is the index of one of ``files`` (a chain file's URI and its epoch's
    committed plan hash, ``eos.core.window_state``); its open-window rows of that plan hash that
    pass
    ``filters`` (alive, and what the window type reads) come out with ``columns``, in
    ``schema``."""

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                uri, plan_hash = files[index]
                rows = read_state_file(uri, plan_hash, columns, filters)
                yield from rows.cast(schema).to_batches()

    return read


def counts_by_kind(files: list[StagedFile]) -> dict[str, int]:
    """Rows per kind, from the files written one kind each."""
    counts: dict[str, int] = {}
    for f in files:
        if f.kind_min == f.kind_max:
            counts[f.kind_min] = counts.get(f.kind_min, 0) + f.rows
    return counts
