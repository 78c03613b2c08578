"""Tasks ``commit`` and ``abort``: promote a pre-committed epoch, or discard it.

Commit is idempotent per sink: each sink's append carries ``txn(app id, N)`` in the same Delta
commit, so a retry after any crash skips the sinks that already hold epoch N. The target goes
last: its ``txn`` version is what marks the whole epoch committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from eos import epochlog, faults
from eos.config import PipelineConfig
from eos.errors import ProtocolViolation
from eos.phaselog import log_phase, timed
from eos.plan import plan_of
from eos.stage import staged_epoch
from eos.tables import (
    LATE_SCHEMA,
    QUARANTINE_SCHEMA,
    Tables,
    append_with_txn,
    ensure_tables,
    target_schema,
    txn_version,
)
from eos.tables import open_table as _open

VACUUM_RETENTION_HOURS = 24

MS_TO_US = 1000


@dataclass
class CommitResult:
    epoch: int
    plan_hash: str
    outcome: str  # committed | already committed
    versions: dict[str, int | None] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    pruned_before: int | None = None
    maintenance: dict[str, Any] | None = None
    duration_ms: float = 0.0


def _ts(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.multiply(column, MS_TO_US).cast(pa.timestamp("us", tz="UTC"))


def exact_double(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Decimal -> nearest double. Arrow's direct cast scales in floating point and can be off by
    one ulp (291.14 -> 291.14000000000004); going through the decimal text rounds correctly."""
    return column.cast(pa.string()).cast(pa.float64())


def target_rows(config: PipelineConfig, staged: pa.Table, epoch: int) -> pa.Table:
    rows = staged.filter(pc.equal(staged["kind"], "output"))
    start = rows["window_start_ms"]
    end = pc.add(start, config.window.size)
    cols = {
        "key": rows["key"],
        "window_start": _ts(start),
        "window_end": _ts(end),
        "count": rows["count"],
        "sum": rows["sum"],
        "min": rows["min"],
        "max": rows["max"],
        "avg": pc.divide(exact_double(rows["sum"]), rows["count"].cast(pa.float64())),
        "epoch": pa.array([epoch] * rows.num_rows, pa.int64()),
    }
    schema = target_schema(config)
    return pa.Table.from_arrays([cols[n] for n in schema.names], schema=schema)


def late_rows(config: PipelineConfig, staged: pa.Table, epoch: int, watermark: int) -> pa.Table:
    rows = staged.filter(pc.equal(staged["kind"], "late"))
    start = rows["window_start_ms"]
    n = rows.num_rows
    cols = {
        "key": rows["key"],
        "event_time": _ts(rows["event_ms"]),
        "value": rows["value"],
        "window_start": _ts(start),
        "window_end": _ts(pc.add(start, config.window.size)),
        "watermark": _ts(pa.chunked_array([pa.array([watermark] * n, pa.int64())])),
        "partition": rows["partition"],
        "offset": rows["offset"],
        "kafka_timestamp": _ts(rows["kafka_timestamp_ms"]),
        "epoch": pa.array([epoch] * n, pa.int64()),
    }
    return pa.Table.from_arrays([cols[n] for n in LATE_SCHEMA.names], schema=LATE_SCHEMA)


def quarantine_rows(staged: pa.Table, epoch: int) -> pa.Table:
    rows = staged.filter(pc.equal(staged["kind"], "quarantine"))
    cols = {
        "reason": rows["reason"],
        "raw_key": rows["raw_key"],
        "raw_value": rows["raw_value"],
        "partition": rows["partition"],
        "offset": rows["offset"],
        "kafka_timestamp": _ts(rows["kafka_timestamp_ms"]),
        "epoch": pa.array([epoch] * rows.num_rows, pa.int64()),
    }
    names = QUARANTINE_SCHEMA.names
    return pa.Table.from_arrays([cols[n] for n in names], schema=QUARANTINE_SCHEMA)


def previous_watermark(tables: Tables, epoch: int) -> int | None:
    """The watermark an event of epoch N was judged late against (epoch N-1's)."""
    if epoch == 0:
        return None
    staged = staged_epoch(tables, epoch - 1, plan_of(tables, epoch - 1).hash)
    if staged is None:
        return None
    marks = staged.filter(pc.and_(pc.equal(staged["kind"], "state"), pc.is_null(staged["key"])))
    return marks["watermark_ms"][0].as_py()


def commit(config: PipelineConfig, epoch: int) -> CommitResult:
    """Promote pre-committed epoch N into every sink exactly once."""
    with timed() as took:
        tables = ensure_tables(config)
        plan = plan_of(tables, epoch)
        result = CommitResult(epoch, plan.hash, "committed")
        if txn_version(tables.target, config.app_id) >= epoch:
            result.outcome = "already committed"
        else:
            _promote(config, tables, epoch, plan.hash, result)
    result.duration_ms = took["ms"]
    log_phase(
        "commit", epoch=epoch, plan_hash=plan.hash, outcome=result.outcome, rows=result.rows,
        delta_versions=result.versions, skipped_sinks=result.skipped,
        pruned_staging_before=result.pruned_before, maintenance=result.maintenance,
        duration_ms=result.duration_ms,
    )
    return result


def _promote(config: PipelineConfig, tables: Tables, epoch: int, plan_hash: str,
             result: CommitResult) -> None:
    committed = txn_version(tables.target, config.app_id)
    if committed != epoch - 1:
        raise ProtocolViolation(
            f"cannot commit epoch {epoch}: the last committed epoch is {committed}; "
            "epochs commit in order"
        )
    staged = staged_epoch(tables, epoch, plan_hash)
    if staged is None:
        raise ProtocolViolation(
            f"epoch {epoch} is not pre-committed for plan {plan_hash}; run precommit first"
        )
    watermark = previous_watermark(tables, epoch)
    rows_by_sink = {
        "late": late_rows(config, staged, epoch, watermark if watermark is not None else 0),
        "quarantine": quarantine_rows(staged, epoch),
        "target": target_rows(config, staged, epoch),
    }
    for name, path in tables.sinks():
        data = rows_by_sink[name]
        result.rows[name] = data.num_rows
        if txn_version(path, config.app_id) >= epoch:
            # Idempotence: this sink already holds epoch N from an earlier attempt.
            result.skipped.append(name)
            continue
        result.versions[name] = append_with_txn(path, data, config.app_id, epoch)
        faults.hit("commit.after_target" if name == "target" else "commit.between_sinks")
    epochlog.append(
        tables, epoch, epochlog.COMMITTED, plan_hash=plan_hash,
        details={"rows": result.rows, "delta_versions": result.versions,
                 "skipped_sinks": result.skipped},
    )
    result.pruned_before = prune_staging(tables, epoch, config.epoch.staging_retention)
    every = config.epoch.maintenance_every
    if every and epoch > 0 and epoch % every == 0:
        result.maintenance = maintain(tables)


def maintain(tables: Tables, retention_hours: int = VACUUM_RETENTION_HOURS) -> dict[str, Any]:
    """Keep the per-epoch bookkeeping from growing without bound: compact the epoch log, and
    delete files that pruned staging epochs and compactions left behind.

    Runs after the epoch's commit is durable, so a failure here is reported and never fails the
    commit (a retry would find the epoch committed and skip it anyway). Files are deleted only
    once older than ``retention_hours``, so a phase still reading an older table version finds
    its files.
    """
    done: dict[str, Any] = {}
    try:
        done["epoch_log"] = epochlog.compact(tables)
        for name, path in (("epoch_log", tables.epochs), ("staging", tables.staging)):
            removed = DeltaTable(path).vacuum(retention_hours=retention_hours, dry_run=False,
                                              enforce_retention_duration=False)
            done[f"{name}_files_deleted"] = len(removed)
    except Exception as error:  # maintenance only: the next maintenance epoch tries again
        done["error"] = f"{type(error).__name__}: {str(error)[:300]}"
    return done


def prune_staging(tables: Tables, committed: int, retention: int) -> int | None:
    """Drop staged epochs older than the retention; the last committed one always stays."""
    keep_from = committed - max(retention, 1) + 1
    if keep_from <= 0:
        return None
    staging = _open(tables.staging)
    if staging is not None:
        staging.delete(f"epoch < {keep_from}")
    return keep_from


def abort(config: PipelineConfig, epoch: int, reason: str = "") -> str:
    """Discard epoch N's staged rows so a rerun starts clean; never touches a committed epoch."""
    with timed() as took:
        tables = ensure_tables(config)
        if txn_version(tables.target, config.app_id) >= epoch:
            outcome = "already committed: nothing to abort"
        else:
            staging = _open(tables.staging)
            if staging is not None:
                staging.delete(f"epoch = {int(epoch)}")
            epochlog.append(tables, epoch, epochlog.ABORTED, details={"reason": reason[:500]})
            outcome = "aborted"
    log_phase("abort", epoch=epoch, outcome=outcome, reason=reason[:200], duration_ms=took["ms"])
    return outcome
