"""The process's pool of open Delta handles (``eos.core.pool.checkout``/``checkin``): real delta-rs
tables on disk, no Spark. A pooled handle must behave as a fresh open would: at the latest
version, lent to one user at a time, and never reused for a different table under the same
path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

import eos.core.pool
from eos.core.pool import checkin, checkout

ROWS = pa.table({"n": pa.array([1, 2], pa.int64())})


def test_a_pooled_handle_comes_back_at_the_latest_version(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, ROWS)
    first = checkout(path)
    assert first is not None and first.version() == 0
    checkin(path, first)
    write_deltalake(path, ROWS, mode="append")  # another writer moves the table on
    again = checkout(path)
    assert again is first, "the handle was not reused"
    assert again.version() == 1 and again.to_pyarrow_table().num_rows == 4
    checkin(path, again)


def test_a_borrow_that_moved_nothing_asks_the_store_once(tmp_path: Path,
                                                          monkeypatch) -> None:
    """A pooled handle's commit file is checked when it is lent (was the table recreated?);
    given back at the version it was lent at, the mark checked then is kept (on an object
    store, one HEAD fewer per borrow). Moved by a write through it, it is asked again, and
    the next borrow checks that new mark."""
    path = str(tmp_path / "t")
    write_deltalake(path, ROWS)
    checkin(path, checkout(path))  # pooled
    asked: list[int] = []
    real = eos.core.pool._commit_mark
    monkeypatch.setattr(eos.core.pool, "_commit_mark",
                        lambda p, v: asked.append(v) or real(p, v))
    table = checkout(path)
    checkin(path, table)
    assert asked == [0]
    table = checkout(path)
    assert table is not None
    write_deltalake(table, ROWS, mode="append")
    checkin(path, table)
    assert asked == [0, 0, 1]
    shutil.rmtree(path)  # recreated under the same path: the kept mark no longer matches
    write_deltalake(path, ROWS)
    write_deltalake(path, ROWS, mode="append")
    again = checkout(path)
    assert again is not table and again is not None and again.version() == 1
    checkin(path, again)


def test_a_handle_is_lent_to_one_user_at_a_time(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, ROWS)
    one, two = checkout(path), checkout(path)
    assert one is not None and two is not None and one is not two
    checkin(path, one)
    checkin(path, one)  # given back twice: still lent once
    assert checkout(path) is one
    assert checkout(path) is not one


def test_the_pool_keeps_at_most_its_size_and_drops_the_oldest(tmp_path: Path,
                                                                monkeypatch) -> None:
    """More handles given back than the pool holds, some paths emptied by a checkout in
    between: giving back never fails (it runs after a sink's commit), the oldest go first."""
    monkeypatch.setattr(eos.core.pool, "POOL_SIZE", 3)
    monkeypatch.setattr(eos.core.pool, "_pool", {})
    paths = [str(tmp_path / f"t{i}") for i in range(5)]
    for path in paths:
        write_deltalake(path, ROWS)
    lent = [(path, checkout(path)) for path in paths]
    for path, table in lent[:2]:
        checkin(path, table)
    assert checkout(paths[0]) is lent[0][1]  # paths[0] is empty in the pool now
    for path, table in lent[2:]:
        checkin(path, table)
    held = {path: [t for t, _ in tables] for path, tables in eos.core.pool._pool.items()}
    assert sum(len(v) for v in held.values()) == 3
    assert paths[1] not in held, "the oldest handle was kept"
    assert all(held[path] == [table] for path, table in lent[2:])


def test_a_table_created_again_under_the_same_path_is_opened_afresh(tmp_path: Path) -> None:
    """Patching the old snapshot with the new table's commits would answer wrong ``txn``
    versions: the pool must notice the new first commit and open the new table."""
    path = str(tmp_path / "t")
    write_deltalake(path, ROWS)
    write_deltalake(path, ROWS, mode="append")
    old = checkout(path)
    assert old is not None and old.version() == 1
    checkin(path, old)
    shutil.rmtree(path)
    write_deltalake(path, pa.table({"n": pa.array([7], pa.int64())}))
    write_deltalake(path, pa.table({"n": pa.array([8], pa.int64())}), mode="append")
    fresh = checkout(path)
    assert fresh is not None and fresh is not old
    assert sorted(fresh.to_pyarrow_table()["n"].to_pylist()) == [7, 8]


