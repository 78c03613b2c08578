"""The staging table: what a pre-committed epoch is, whoever computed it.

Epoch N is pre-committed when staging holds, in **one** Delta commit, every row of N for N's
plan hash: output windows, open windows (``state``), late and quarantined records, the offsets,
and last the ``watermark`` row. A compute (``Stager``: Spark in ``eos.compute.precommit``, or any
other implementation) writes N's rows as Parquet files under a directory of its own
(``epoch=N/attempt-<uuid>/``); ``commit`` makes exactly those files partition ``epoch=N`` in
one transaction, dropping any earlier attempt's. Files no commit names are invisible to every
reader (a killed attempt leaves only those; a vacuum deletes them).

Every commit that changes which epochs staging holds goes through the **staging fence**
(``eos.core.staging_fence``), ``commit`` included.

Each file's add action carries its row count and the ``kind`` it holds as min/max statistics,
so a read of "everything but the open windows" (``staged_epoch(state=False)``) or of "the
watermark row" skips the state files without opening them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from eos.core.delta import PLAN_HASH, commit_properties, scan
from eos.core.layout import Tables
from eos.core.staging_fence import Fence
from eos.core.tables import read_epoch

if TYPE_CHECKING:
    from eos.core.checkpoints import Checkpoint
    from eos.core.config import PipelineConfig
    from eos.core.plan import Plan
    from eos.core.tables import OpenTables

WATERMARK = "watermark"  # the kind of the row holding wm(N); written last, in the same commit
# Open windows: a snapshot, or changes (``eos.core.window_state``).
STATE, CHANGE = "state", "change"
# The kind of the one row naming who staged N and how (its ``details``: ``epochlog.facts``),
# written by ``precommit`` in the staging commit itself: no epoch-log append of its own. The
# commit copies it into N's checkpoint (``eos.core.checkpoints.PRECOMMIT_FACTS``).
PRECOMMIT = "precommit"
BASE = "state_base"  # the watermark row's column naming the base of the epoch's state
# A record the filter dropped, in a one-pass write: counted by the writer, never staged.
FILTERED = "filtered"


KIND_DIR = "part_kind"  # the directory level of the files of one kind (not a Delta partition)


@dataclass(frozen=True)
class StagedFile:
    """One Parquet file of epoch N, written and not yet committed."""

    path: str  # relative to the staging table's root
    size: int
    modified_ms: int
    rows: int
    kind_min: str
    kind_max: str
    # The window bounds' ranges in a file of open windows (None elsewhere): what lets an epoch
    # read only the files that may hold a window it closes (``eos.core.window_state``).
    start_min: int | None = None
    start_max: int | None = None
    end_min: int | None = None
    end_max: int | None = None


@dataclass(frozen=True)
class StagedFiles:
    """Epoch N written as files and not yet committed: what ``precommit`` commits in one go."""

    files: list[StagedFile]
    counts: dict[str, int]
    watermark_ms: int
    written_by: str = "executors"  # or "driver": who wrote the files (``spark.collect_rows``)


class Stager(Protocol):
    """What computes an epoch's staging files (the compute half of precommit).

    ``stage`` must be a pure function of the plan and epoch N-1's state (``previous``, and the
    state rows staged with it): no clock, no randomness, so a rerun or a zombie writes the same
    rows. It writes files only (never commits them: the protocol decides whether the one
    staging commit may happen) and records what it timed in ``timings`` (milliseconds)."""

    def stage(self, config: PipelineConfig, tables: OpenTables, plan: Plan,
              previous: Checkpoint | None, timings: dict[str, float]) -> StagedFiles: ...


def staged_epoch(tables: Tables, epoch: int, plan_hash: str,
                 state: bool = True) -> pa.Table | None:
    """Epoch N's staged rows if a complete attempt for this plan is there, else None; without
    its open windows unless ``state`` (commit needs only what it promotes).

    One Delta commit holds the whole epoch, so the watermark row being present means every row is.
    """
    rows = read_epoch(tables, tables.staging, epoch, filters=None if state else [
        ("kind", "!=", STATE), ("kind", "!=", CHANGE)])
    if rows is None:
        return None
    complete = pc.and_(pc.equal(rows["kind"], WATERMARK), pc.equal(rows["plan_hash"], plan_hash))
    if not pc.any(complete).as_py():
        return None
    return rows.filter(pc.equal(rows["plan_hash"], plan_hash))


ATTEMPT_PREFIX = "attempt-"


def attempt_dir(epoch: int) -> str:
    """A directory (relative to the staging table) no other attempt writes to: two attempts
    of N never mix their files."""
    import uuid

    return f"epoch={int(epoch)}/{ATTEMPT_PREFIX}{uuid.uuid4().hex}"


def _attempt_of(files: list[StagedFile], epoch: int) -> str:
    """The attempt directory ``files`` were written in (``attempt_dir``), else a new one."""
    parts = files[0].path.split("/") if files else []
    if len(parts) > 2 and parts[1].startswith(ATTEMPT_PREFIX):
        return "/".join(parts[:2])
    return attempt_dir(epoch)


def facts_file(staging: str, epoch: int, plan_hash: str, schema: pa.Schema,
               facts: dict[str, Any], beside: list[StagedFile]) -> StagedFile:
    """Write N's precommit row (``PRECOMMIT``, ``facts`` as its details) as a Parquet file of
    its own in the attempt's directory (that of ``beside``, N's other files), to commit with
    them: one small write instead of a Delta commit on the epoch log."""
    import uuid

    import pyarrow.fs as pa_fs
    import pyarrow.parquet as pq

    from eos.core.storage import filesystem

    fields = pa.schema([f for f in schema if f.name != "epoch"])  # the partition column
    row = {"kind": PRECOMMIT, "plan_hash": plan_hash, "details": json.dumps(facts, default=str)}
    data = pa.Table.from_pylist([row], schema=fields)
    relative = f"{_attempt_of(beside, epoch)}/{PRECOMMIT}-{uuid.uuid4().hex[:8]}.parquet"
    store, root = filesystem(staging)
    path = f"{root}/{relative}"
    if isinstance(store, pa_fs.LocalFileSystem):  # object stores have no directories
        store.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with store.open_output_stream(path) as stream:
        pq.write_table(data, stream)
        size = stream.tell()
    return StagedFile(path=relative, size=size, modified_ms=int(time.time() * 1000), rows=1,
                      kind_min=PRECOMMIT, kind_max=PRECOMMIT)


def precommit_facts(staged: pa.Table) -> dict[str, Any] | None:
    """The facts of N's precommit row among N's staged rows (None when it was staged without
    one, by an earlier version)."""
    if "details" not in staged.column_names:
        return None
    found = staged.filter(pc.equal(staged["kind"], PRECOMMIT))["details"].to_pylist()
    return json.loads(found[0]) if found and found[0] else None


def staged_facts(staging: DeltaTable, after: int) -> list[tuple[int, str, dict[str, Any]]]:
    """(epoch, plan hash, facts) of every precommit row staged for an epoch after ``after``
    (the last committed one: those not checkpointed yet), through ``staging``'s snapshot."""
    if "details" not in {f.name for f in staging.schema().fields}:
        return []
    rows = scan(staging, ["epoch", "plan_hash", "details"],
                [("epoch", ">", int(after)), ("kind", "=", PRECOMMIT)]).to_pylist()
    return [(r["epoch"], r["plan_hash"], json.loads(r["details"])) for r in rows if r["details"]]


def watermark_row(staged: pa.Table) -> dict[str, Any]:
    return staged.filter(pc.equal(staged["kind"], WATERMARK)).to_pylist()[0]


def count_kinds(rows: pa.Table) -> dict[str, int]:
    """Rows per kind of a staged epoch (``change`` only when it staged changes), and the
    events its filter dropped."""
    counts = {k: 0 for k in ("output", STATE, "late", "quarantine", "offsets")}
    for item in pc.value_counts(rows["kind"]).to_pylist():
        if item["values"] in counts or item["values"] == CHANGE:
            counts[item["values"]] = item["counts"]
    counts["filtered"] = watermark_row(rows)["filtered"] or 0
    return counts


def files_holding(staging: DeltaTable, epoch: int, kind: str) -> tuple[str, ...]:
    """The URIs of epoch N's committed files that may hold rows of ``kind``: delta-rs prunes
    by the partition and by the kind range each add action's statistics carry (a file without
    statistics is kept). Reading N-1's state needs only its state files, not the output, late
    and quarantine ones."""
    return tuple(staging.file_uris(file_pruning_predicate=[
        ("epoch", "=", str(int(epoch))), ("kind", "=", kind)]))


def rows_staged(staging: DeltaTable, epoch: int) -> int | None:
    """How many rows epoch N staged (every kind), from its add actions' row counts; None when
    a file carries none."""
    actions = pa.table(staging.get_add_actions(flatten=True))
    if "num_records" not in actions.column_names:
        return None
    partition = pc.cast(actions["partition.epoch"], pa.string())
    mine = actions.filter(pc.equal(partition, str(int(epoch))))
    if mine["num_records"].null_count:
        return None
    return pc.sum(mine["num_records"]).as_py() or 0


def commit(staging: DeltaTable, files: list[StagedFile], epoch: int, schema: pa.Schema,
           app_id: str, plan_hash: str) -> int | None:
    """One Delta commit through ``staging``'s snapshot: partition ``epoch=N`` becomes exactly
    ``files`` (any earlier attempt's files are removed in the same commit). Returns the staging
    version written, or None when another fenced step committed after the snapshot (nothing
    written: the caller re-reads and decides again). The commit info names the epoch and its
    plan hash: a rewind to N restores staging to this version.

    Never over a complete N of this plan, and never once a commit has sealed N (None too):
    the first attempt staged is the one committed. A commit may have read those rows already
    (it reads before it seals) and its retry must promote the same ones; an attempt that found
    N unstaged, then read staging after another attempt staged (or a commit sealed) N, would
    otherwise replace them. Attempts are identical by design, but a record two attempts read
    differently (a schema id registered in between) would reach some sinks as one read it,
    and the next epoch's state as the other did."""
    fence = Fence.of(staging, app_id)
    if fence.sealed >= epoch or _complete(staging, epoch, plan_hash):
        return None
    partition = {"epoch": str(int(epoch))}
    actions: list[AddAction | RemoveAction] = [
        AddAction(f.path, f.size, partition, f.modified_ms, True, _stats(f)) for f in files]
    try:
        staging.create_write_transaction(actions, mode="overwrite", schema=schema,
                                         partition_by=["epoch"],
                                         partition_filters=[("epoch", "=", str(int(epoch)))],
                                         commit_properties=commit_properties(
                                             app_id, epoch, "stage", txn=False,
                                             extra={PLAN_HASH: plan_hash},
                                             also=fence.advance(epoch)))
    except CommitFailedError:
        staging.update_incremental()
        return None
    staging.update_incremental()
    return staging.version()


def _complete(staging: DeltaTable, epoch: int, plan_hash: str) -> bool:
    """Whether ``staging``'s snapshot holds a complete N of this plan (its watermark row)."""
    return scan(staging, ["plan_hash"], [("epoch", "=", int(epoch)), ("kind", "=", WATERMARK),
                                         ("plan_hash", "=", plan_hash)]).num_rows > 0


def epoch_files(staging: DeltaTable, epoch: int) -> frozenset[str]:
    """The files staging holds for epoch N and the epochs back to the base of its state
    (``eos.core.window_state``): the identity of the state N + 1 computes from."""
    if epoch < 0:
        return frozenset()
    base = state_base(staging, epoch)
    return frozenset(staging.file_uris(file_pruning_predicate=[
        ("epoch", ">=", str(int(epoch if base is None else base))),
        ("epoch", "<=", str(int(epoch)))]))


def state_base(staging: DeltaTable, epoch: int) -> int | None:
    """The base of epoch N's state, as N's staged watermark row names it (N itself if it names
    none: staged before changes existed); None when N is not staged."""
    rows = scan(staging, filters=[("epoch", "=", int(epoch)), ("kind", "=", WATERMARK)])
    return base_of(rows.to_pylist()[0]) if rows.num_rows else None


def base_of(watermark_row: dict[str, Any]) -> int:
    """The base named by an epoch's watermark row (the epoch itself when it names none)."""
    base = watermark_row.get(BASE)
    return int(watermark_row["epoch"] if base is None else base)


def _stats(f: StagedFile) -> str:
    low: dict[str, Any] = {"kind": f.kind_min}
    high: dict[str, Any] = {"kind": f.kind_max}
    if f.start_min is not None and f.end_min is not None:
        low.update({"window_start_ms": f.start_min, "window_end_ms": f.end_min})
        high.update({"window_start_ms": f.start_max, "window_end_ms": f.end_max})
    return json.dumps({"numRecords": f.rows, "minValues": low, "maxValues": high,
                       "nullCount": {"kind": 0}})


