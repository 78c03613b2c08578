"""Staging an epoch in files: executors (or, for a small epoch, the driver) write Parquet, and the
driver commits the files in one Delta transaction.

Precommit used to collect every row of epoch N (its whole state of open windows included) to
the driver and write it with delta-rs, so the state was bounded by one process's memory. Now
Spark's executors write N's rows as Parquet files into a directory of its own under the
staging table (``epoch=N/attempt-<uuid>/``), one sub-directory per kind of row, and the driver
commits those files into staging in **one** Delta transaction that replaces partition
``epoch=N`` (``DeltaTable.create_write_transaction`` with add actions for files already
written; DESIGN §4: "one commit per epoch"). What the driver holds is a list of file names.

A small epoch (``eos.compute.stage.collects``: predicted small from the last epoch's row count, and
bounded before it runs) is collected to the driver as Arrow instead and written there, one
file per kind (``write_collected``): a Spark file write costs ~0.5 s per epoch however small (a
job, a task per partition, the Hadoop commit protocol), which was most of what exactly-once cost
over at-least-once on 200k-record epochs (docs/benchmarks-history.md, 2026-11-22: "small
epochs staged by the driver"). The directory, the files' statistics and the one commit are the
same either way.

Why this is still exactly once: files that no Delta commit names are invisible to every reader
(an attempt killed mid-write leaves only those, and a vacuum deletes them); the one commit makes
all of N's rows visible at once and drops any earlier attempt's; the protocol decides whether
that commit may happen at all (``eos.core.protocol``: not after N was checkpointed).

Each file's add action carries its row count and the ``kind`` it holds as min/max statistics,
so a read of "everything but the open windows" (``commit``) or of "the watermark row" skips the
state files without opening them.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pa_fs
import pyarrow.parquet as pq

from eos.core.staging import KIND_DIR, StagedFile

if TYPE_CHECKING:
    pass

def attempt_dir(staging_uri: str, epoch: int) -> str:
    """A directory no other attempt writes to: two attempts of N never mix their files."""
    return f"{staging_uri.rstrip('/')}/epoch={int(epoch)}/attempt-{uuid.uuid4().hex}"


def write_frame(frame: Any, directory: str, tasks: int) -> None:
    """Executors write ``frame``'s rows under ``directory``, one sub-directory per kind. The
    frame must carry a ``part_kind`` column equal to ``kind`` (Spark drops partition columns
    from the files; ``kind`` stays in them).

    The rows are a union of the windows (``shuffle_partitions`` partitions, after the merge
    with the state) and the side rows (one partition per Kafka split, twice: late and
    quarantined). Written as they come, every partition writes a file per kind it holds: ~10
    small files for a 200k-record epoch, each with its own task, writer and footer read. A
    ``coalesce`` (no shuffle) to ``tasks`` writes the same rows in ~6 files: ~0.2 s less per
    epoch here (docs/benchmarks-history.md, 2026-11-22: "the reader parses"), and fewer files
    for the next epoch and ``commit`` to open."""
    (frame.coalesce(max(1, tasks)).write.mode("error")
     .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
     .partitionBy(KIND_DIR).parquet(directory))


def write_collected(rows: pa.Table, directory: str, schema: pa.Schema) -> None:
    """The driver writes epoch N's collected rows under ``directory``: one file per kind, so
    each add action's kind statistics name one kind, as the executors' files do."""
    rows = rows.select(schema.names).cast(schema)
    for kind in sorted(pc.unique(rows["kind"]).to_pylist()):
        write_table(rows.filter(pc.equal(rows["kind"], kind)), directory, f"rows-{kind}")


def write_table(rows: pa.Table, directory: str, name: str) -> None:
    """Rows of N the driver writes itself as one more file under ``directory``: always the
    offsets and the watermark row; a small epoch's collected rows too (``write_collected``)."""
    filesystem, root = pa_fs.FileSystem.from_uri(_uri(directory))
    filesystem.create_dir(root, recursive=True)
    pq.write_table(rows, f"{root}/{name}.parquet", filesystem=filesystem)


def collect(staging_uri: str, directory: str) -> list[StagedFile]:
    """The Parquet files under ``directory`` with what their add actions need; what else Spark
    left there (``.crc`` checksums) is deleted, since vacuum never deletes hidden files."""
    filesystem, root = pa_fs.FileSystem.from_uri(_uri(directory))
    _, table_root = pa_fs.FileSystem.from_uri(_uri(staging_uri))
    files = []
    for info in filesystem.get_file_info(pa_fs.FileSelector(root, recursive=True)):
        if info.type != pa_fs.FileType.File:
            continue
        if not info.path.endswith(".parquet") or info.base_name.startswith((".", "_")):
            filesystem.delete_file(info.path)
            continue
        files.append(_described(filesystem, info, table_root.rstrip("/")))
    return sorted(files, key=lambda f: f.path)


def _described(filesystem: pa_fs.FileSystem, info: pa_fs.FileInfo, table_root: str) -> StagedFile:
    kind = next((part.split("=", 1)[1] for part in info.path.split("/")
                 if part.startswith(f"{KIND_DIR}=")), None)
    with filesystem.open_input_file(info.path) as handle:
        metadata = pq.read_metadata(handle)
    if kind is None:  # the driver's file: read the range of kinds it holds from its footer
        kind_min, kind_max = _kind_range(metadata)
    else:
        kind_min = kind_max = kind
    return StagedFile(path=info.path[len(table_root) + 1:], size=info.size,
                      modified_ms=int(info.mtime_ns // 1_000_000), rows=metadata.num_rows,
                      kind_min=kind_min, kind_max=kind_max)


def _kind_range(metadata: pq.FileMetaData) -> tuple[str, str]:
    column = metadata.schema.names.index("kind")
    stats = [metadata.row_group(i).column(column).statistics
             for i in range(metadata.num_row_groups)]
    lows = [s.min for s in stats if s is not None and s.has_min_max]
    highs = [s.max for s in stats if s is not None and s.has_min_max]
    return min(lows, default=""), max(highs, default="")


def counts_by_kind(files: list[StagedFile]) -> dict[str, int]:
    """Rows per kind, from the files Spark wrote one kind per directory."""
    counts: dict[str, int] = {}
    for f in files:
        if f.kind_min == f.kind_max:
            counts[f.kind_min] = counts.get(f.kind_min, 0) + f.rows
    return counts


def _uri(path: str) -> str:
    import os

    return path if "://" in path else os.path.abspath(path)
