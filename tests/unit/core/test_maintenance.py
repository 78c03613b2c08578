"""Maintenance of the protocol tables on local Delta tables: pruning keeps the rows and deletes
unreferenced files; a cleanup of the Delta logs keeps every row, the checkpoint's ``txn``
authority and its fence."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from eos.core import checkpoints, epochlog
from eos.core.delta import read_table, replace_epoch
from eos.core.layout import tables_for
from eos.core.maintenance import maintain, prune_bound
from eos.core.outcomes import Outcome
from eos.core.staging_fence import Fence, drop, seal
from eos.core.tables import ensure_tables, staging_schema
from eos.core.topics import TopicPartition
from eos.tools.pipelines import write_pipeline


def test_maintenance_keeps_rows_and_deletes_unreferenced_files(tmp_path: Path) -> None:
    config = write_pipeline(tmp_path)
    tables = ensure_tables(config)
    for epoch in range(12):
        for phase in (epochlog.PLANNED, epochlog.PRECOMMITTED, epochlog.COMMITTED):
            epochlog.append(tables, epoch, phase, plan_hash=f"{epoch:016x}", plan="{}")
        row = {"epoch": epoch, "kind": "offsets", "plan_hash": f"{epoch:016x}", "partition": 0}
        replace_epoch(tables.staging, pa.Table.from_pylist([row], schema=staging_schema(config)),
                      epoch)
    log_rows = epochlog.rows(tables)
    bound = prune_bound(committed=11, retention=2)
    assert bound == 10 and prune_bound(committed=11, retention=2, state_base=7) == 7
    assert seal(DeltaTable(tables.staging), config.app_id, 11, prune_before=bound)
    staging_rows = read_table(tables.staging).sort_by("epoch")
    on_disk = sorted(Path(tables.staging).rglob("*.parquet"))

    done = maintain(tables, retention_hours=0)

    assert "error" not in done, done
    # A phase's handles are snapshots; files they name may be gone after a vacuum with no
    # retention (24 h in production): read as the next phase would, from fresh handles.
    tables = tables_for(config)
    assert epochlog.rows(tables) == log_rows
    assert len(DeltaTable(tables.epochs).file_uris()) == 1
    assert read_table(tables.staging).sort_by("epoch").equals(staging_rows)
    assert staging_rows.num_rows == 2 and len(on_disk) == 12
    data_files = [f for f in Path(tables.staging).rglob("*.parquet") if "_delta_log" not in f.parts]
    assert len(data_files) == 2
    assert epochlog.first_plan_row(tables, 11)["plan_hash"] == f"{11:016x}"


def test_a_seal_that_prunes_is_fenced_like_every_staging_write(tmp_path: Path) -> None:
    """The retention's prune rides on the seal: one Delta commit drops the epochs below the
    bound and seals N. Written through a snapshot another fenced step has moved past (here an
    abort of N), it is refused whole: nothing is dropped, nothing sealed; through the updated
    snapshot it lands, and N is sealed in the commit that pruned."""
    config = write_pipeline(tmp_path)
    tables = ensure_tables(config)
    for epoch in range(4):
        row = {"epoch": epoch, "kind": "offsets", "plan_hash": f"{epoch:016x}", "partition": 0}
        replace_epoch(tables.staging, pa.Table.from_pylist([row], schema=staging_schema(config)),
                      epoch)
    stale = DeltaTable(tables.staging)
    assert drop(DeltaTable(tables.staging), config.app_id, 3, "abort")

    assert not seal(stale, config.app_id, 3, prune_before=2)
    fresh = DeltaTable(tables.staging)
    assert sorted(set(read_table(tables.staging)["epoch"].to_pylist())) == [0, 1, 2]
    assert Fence.of(fresh, config.app_id).sealed == -1

    assert seal(stale, config.app_id, 3, prune_before=2)  # ``stale`` was brought up to date
    assert read_table(tables.staging)["epoch"].to_pylist() == [2]
    sealed = DeltaTable(tables.staging)
    assert Fence.of(sealed, config.app_id).sealed == 3
    assert sealed.history(1)[0]["operation"] == "DELETE"  # the prune and the seal: one commit


def test_log_cleanup_keeps_the_authority_rows_and_pooled_handles_right(tmp_path: Path) -> None:
    """A cleanup of the protocol tables' Delta logs keeps every row, the checkpoint ``txn``
    version (the authority, kept in the Delta checkpoint) and its fence; a handle pooled before
    the cleanup, whose commit file is gone, is opened afresh, not brought up to date."""
    config = write_pipeline(tmp_path)
    tables = ensure_tables(config)
    for epoch in range(6):
        epochlog.append(tables, epoch, epochlog.PLANNED, plan_hash=f"{epoch:016x}", plan="{}")
        mark = checkpoints.Checkpoint(epoch=epoch, plan_hash=f"{epoch:016x}",
                                      until={TopicPartition("t", 0): epoch},
                                      watermark_ms=epoch)
        assert checkpoints.append(tables, config.app_id, mark).outcome is Outcome.COMMITTED
        tables = ensure_tables(config)  # the next phase: pooled handles brought up to date
    log_rows = epochlog.rows(tables)
    del tables  # its handles go back to the pool, marked with the commit files they hold

    done = maintain(tables_for(config), log_retention_ms=0)

    assert "error" not in done, done
    assert done["epoch_log_log_files_deleted"] >= 6 and done["checkpoints_log_files_deleted"] >= 6
    tables = ensure_tables(config)
    assert epochlog.rows(tables) == log_rows
    assert checkpoints.last_checkpointed(tables, config.app_id) == 5
    again = checkpoints.Checkpoint(epoch=5, plan_hash=f"{5:016x}",
                                   until={TopicPartition("t", 0): 5}, watermark_ms=5)
    assert checkpoints.append(tables, config.app_id, again).outcome is Outcome.ALREADY_COMMITTED
    nxt = checkpoints.Checkpoint(epoch=6, plan_hash=f"{6:016x}",
                                 until={TopicPartition("t", 0): 6}, watermark_ms=6)
    assert checkpoints.append(ensure_tables(config), config.app_id, nxt).outcome \
        is Outcome.COMMITTED
    assert checkpoints.last_checkpointed(ensure_tables(config), config.app_id) == 6
    log = DeltaTable(tables_for(config).checkpoints).metadata().configuration
    assert log["delta.logRetentionDuration"] == "interval 0 seconds"

