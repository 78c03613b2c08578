"""Table ownership on real Delta tables: a Delta sink table records the pipelines
that write it; a second pipeline is refused before its first commit unless every writer declares
the table shared, and a rewind never removes rows another writer committed.

The defect these tests hold down: two pipelines whose ``windows`` sink is one absolute Delta
table. ``eos rewind`` of one restored the whole table to an older version, removing rows the
other had committed while the other's ``txn`` still said committed: those rows never came back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from eos.core import epochlog
from eos.core.config import PipelineConfig
from eos.core.delta import create_table, fenced_append, read_table, txn_version
from eos.core.errors import InjectedFault, RewindRefused, TableOwned
from eos.core.outcomes import Outcome
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.rewind import rewind
from eos.core.sink import sinks_for

from support.memory import MemorySource, MemoryStager, log_rows, run_epoch
from support.pipelines import IN_MEMORY, make_pipeline


def pipeline(tmp_path: Path, name: str, table: Path, shared: bool | None = None
             ) -> PipelineConfig:
    """Pipeline ``name`` whose windows go to the absolute Delta table ``table`` (``shared``:
    the sink's declaration, omitted when None), its other outputs to rewindable memory sinks."""
    windows: Any = str(table) if shared is None else {"table": str(table), "shared": shared}
    sinks = {"windows": [{"delta": windows}], "late": [{"memory_rewind": "late"}],
             "quarantine": [{"memory_rewind": "quarantine"}]}
    return make_pipeline(tmp_path, base=IN_MEMORY, name=name,
                         sinks=sinks)  # roots: tmp_path/a, tmp_path/b


def sources() -> tuple[MemorySource, MemorySource]:
    """Two sources of different sizes: the two pipelines' window rows differ (``n``)."""
    return MemorySource(), MemorySource(marks={0: (0, 7)})


def epochs(config: PipelineConfig, source: MemorySource, count: int) -> None:
    for _ in range(count):
        run_epoch(config, source)
        source.produce(0, 6)


def rows(table: Path) -> list[tuple[int, int]]:
    """The table's window rows as (epoch, n), sorted."""
    data = read_table(str(table)).to_pylist()
    return sorted((r["epoch"], r["n"]) for r in data)


def writers(table: Path) -> list[str]:
    return [w["pipeline"] for w in json.loads(DeltaTable(str(table)).metadata()
                                              .configuration["eos.writers"])]


def apps(table: Path) -> set[str]:
    return {h["eos.app"] for h in DeltaTable(str(table)).history() if "eos.app" in h}


# -- the defect ---------------------------------------------------------------------------------

def test_a_rewind_never_removes_rows_another_pipeline_committed_to_a_shared_table(
        tmp_path: Path) -> None:
    table = tmp_path / "shared-windows"
    a, b = pipeline(tmp_path, "a", table, shared=True), pipeline(tmp_path, "b", table, shared=True)
    source_a, source_b = sources()
    epochs(a, source_a, 2)
    epochs(b, source_b, 2)
    before = rows(table)
    assert checkpointed_epoch(b) == 1 and len(before) == 4

    with pytest.raises(RewindRefused, match=r"(?s)pipeline b .*committed to .*shared-windows"):
        rewind(a, 0)
    # Nothing moved: B's rows are there and its marker tells the truth; A is untouched too.
    assert rows(table) == before and log_rows(a, phase=epochlog.REWINDING) == []
    assert txn_version(str(table), b.app_id) == 1 and checkpointed_epoch(a) == 1
    epochs(b, source_b, 1)  # and B goes on
    assert checkpointed_epoch(b) == 2


def test_a_rewind_of_a_table_another_pipeline_wrote_before_ownership_keeps_its_rows(
        tmp_path: Path) -> None:
    """The defect as the original code had it: pipeline B (an eos without ownership) committed
    to A's table; A's rewind restored the table and B's rows were gone for good."""
    table = tmp_path / "windows"
    a, b = pipeline(tmp_path, "a", table), pipeline(tmp_path, "b", table)
    source_a, _ = sources()
    epochs(a, source_a, 2)
    schema = DeltaTable(str(table)).schema().to_arrow()
    theirs = pa.Table.from_pylist([{"key": "other", "window_start": None, "window_end": None,
                                    "n": 1000, "epoch": 0}], schema=pa.schema(schema))
    assert fenced_append(str(table), theirs, b.app_id, 0).outcome is Outcome.COMMITTED
    before = rows(table)

    with pytest.raises(RewindRefused, match=r"(?s)pipeline b .*committed to"):
        rewind(a, 0)
    assert rows(table) == before and (0, 1000) in before
    assert txn_version(str(table), b.app_id) == 0


def test_a_rewind_to_after_the_other_writers_last_commit_keeps_its_rows(tmp_path: Path) -> None:
    table = tmp_path / "shared-windows"
    a, b = pipeline(tmp_path, "a", table, shared=True), pipeline(tmp_path, "b", table, shared=True)
    source_a, source_b = sources()
    epochs(a, source_a, 1)
    epochs(b, source_b, 1)
    theirs = [r for r in rows(table) if r not in rows_of_a_before(table, a)]
    epochs(a, source_a, 2)

    assert rewind(a, 1).outcome is Outcome.REWOUND
    assert checkpointed_epoch(a) == 1 and all(r in rows(table) for r in theirs)
    assert [e for e, _ in rows(table)] == [0, 0, 1]  # A's 0 and 1, B's 0
    with pytest.raises(RewindRefused, match="pipeline b"):
        rewind(a, 0)  # B's epoch 0 came after A's epoch 0


def rows_of_a_before(table: Path, a: PipelineConfig) -> list[tuple[int, int]]:
    """A's rows: the table as of A's last commit before B wrote."""
    mine = max(int(h["version"]) for h in DeltaTable(str(table)).history()
               if h.get("eos.app") == a.app_id)
    data = DeltaTable(str(table), version=mine).to_pyarrow_table().to_pylist()
    return sorted((r["epoch"], r["n"]) for r in data)


def test_a_writer_that_commits_after_the_rewind_was_planned_stops_the_restore(
        tmp_path: Path, arm) -> None:
    """B commits between A's rewind plan and its restore: checked again before anything is
    restored (and by the restore, through the snapshot it restores), the rewind is refused and
    abandoned, so A goes on instead of meeting an unfinished rewind at every begin."""
    table = tmp_path / "shared-windows"
    a, b = pipeline(tmp_path, "a", table, shared=True), pipeline(tmp_path, "b", table, shared=True)
    source_a, source_b = sources()
    epochs(a, source_a, 2)
    arm("rewind.after_fence:fail")
    with pytest.raises(InjectedFault):
        rewind(a, 0)
    epochs(b, source_b, 1)
    before = rows(table)

    with pytest.raises(RewindRefused, match=r"(?s)abandoned before it restored anything.*"
                                            r"pipeline b"):
        rewind(a, 0)
    assert rows(table) == before and txn_version(str(table), b.app_id) == 0
    # Abandoned, not left unfinished: A goes on (before, every begin met RewindUnfinished).
    (abandoned,) = [r for r in log_rows(a, phase=epochlog.REWOUND)]
    assert "abandoned" in json.loads(abandoned["details"])
    epochs(a, source_a, 1)
    assert checkpointed_epoch(a) == 2


# -- who may write ------------------------------------------------------------------------------

def test_a_second_pipeline_is_refused_before_its_first_commit(tmp_path: Path) -> None:
    table = tmp_path / "windows"
    a, b = pipeline(tmp_path, "a", table), pipeline(tmp_path, "b", table)
    source_a, source_b = sources()
    epochs(a, source_a, 1)
    assert writers(table) == ["a"]

    with pytest.raises(TableOwned) as refused:
        begin(b, source=source_b)
    message = str(refused.value)
    assert str(table) in message and "pipeline a" in message and "shared: true" in message
    assert apps(table) == {a.app_id} and checkpointed_epoch(b) == -1 and writers(table) == ["a"]
    # Declaring it shared alone is not enough: the owner did not.
    with pytest.raises(TableOwned, match="pipeline a"):
        begin(pipeline(tmp_path, "b", table, shared=True), source=source_b)
    epochs(a, source_a, 1)  # the owner goes on
    assert checkpointed_epoch(a) == 1


def test_a_commit_is_refused_to_a_pipeline_the_table_does_not_list(tmp_path: Path) -> None:
    """``commit`` checks too, through the snapshot it appends with (a writer that never ran
    ``begin`` on this table, e.g. one that won a creation race)."""
    table = tmp_path / "windows"
    a, b = pipeline(tmp_path, "a", table), pipeline(tmp_path, "b", table)
    epochs(a, sources()[0], 1)
    sink = sinks_for(b)[0]
    data = read_table(str(table))
    with pytest.raises(TableOwned, match="pipeline a"):
        sink.commit(0, data, "h0")
    assert apps(table) == {a.app_id}


def test_a_table_declared_shared_by_both_pipelines_takes_both(tmp_path: Path) -> None:
    table = tmp_path / "shared-windows"
    a, b = pipeline(tmp_path, "a", table, shared=True), pipeline(tmp_path, "b", table, shared=True)
    source_a, source_b = sources()
    epochs(a, source_a, 1)
    epochs(b, source_b, 2)
    epochs(a, source_a, 1)
    assert writers(table) == ["a", "b"]
    assert (checkpointed_epoch(a), checkpointed_epoch(b)) == (1, 1)
    assert len(rows(table)) == 4 and apps(table) == {a.app_id, b.app_id}
    # A writer of a shared table that stops declaring it shared is refused: it is not alone.
    with pytest.raises(TableOwned, match="pipeline b"):
        begin(pipeline(tmp_path, "a", table), source=source_a)


def test_an_owner_alone_may_declare_its_table_shared_later(tmp_path: Path) -> None:
    table = tmp_path / "windows"
    source_a, source_b = sources()
    epochs(pipeline(tmp_path, "a", table), source_a, 1)
    epochs(pipeline(tmp_path, "a", table, shared=True), source_a, 1)
    epochs(pipeline(tmp_path, "b", table, shared=True), source_b, 1)
    assert writers(table) == ["a", "b"]


# -- tables from before ownership ---------------------------------------------------------------

def legacy_table(table: Path, config: PipelineConfig, *apps_: str) -> None:
    """A sink table as an eos without ownership left it: no record, commits of ``apps_``."""
    schema = pa.schema([("key", pa.string()), ("n", pa.int64()), ("epoch", pa.int64())])
    create_table(str(table), schema)
    for app in apps_:
        row = pa.Table.from_pylist([{"key": app, "n": 1, "epoch": 0}], schema=schema)
        fenced_append(str(table), row, app, 0)


def test_a_table_only_this_pipeline_wrote_is_adopted(tmp_path: Path) -> None:
    table = tmp_path / "windows"
    a = pipeline(tmp_path, "a", table)
    legacy_table(table, a)
    assert "eos.writers" not in DeltaTable(str(table)).metadata().configuration
    begin(a, source=sources()[0])
    assert writers(table) == ["a"]
    with pytest.raises(TableOwned, match="pipeline a"):
        begin(pipeline(tmp_path, "b", table), source=sources()[1])


def test_a_table_another_pipeline_wrote_is_refused_unless_declared_shared(tmp_path: Path) -> None:
    table = tmp_path / "windows"
    a = pipeline(tmp_path, "a", table)
    legacy_table(table, a, "eos:b")
    with pytest.raises(TableOwned, match="eos:b"):
        begin(a, source=sources()[0])
    assert "eos.writers" not in DeltaTable(str(table)).metadata().configuration
    begin(pipeline(tmp_path, "a", table, shared=True), source=sources()[0])
    assert sorted(writers(table)) == ["a", "b"]


def test_an_emptied_record_hands_the_table_over(tmp_path: Path) -> None:
    """The operator's way to give a retired pipeline's table to another: set ``eos.writers``
    to ``[]`` (the refusal says so); the next pipeline to begin owns it."""
    table = tmp_path / "windows"
    source_a, source_b = sources()
    epochs(pipeline(tmp_path, "a", table), source_a, 1)
    b = pipeline(tmp_path, "b", table)
    with pytest.raises(TableOwned, match=r"'eos.writers' = '\[\]'"):
        begin(b, source=source_b)
    DeltaTable(str(table)).alter.set_table_properties({"eos.writers": "[]"},
                                                      raise_if_not_exists=False)
    epochs(b, source_b, 1)
    assert writers(table) == ["b"] and checkpointed_epoch(b) == 0


def test_a_malformed_record_is_refused_naming_the_property(tmp_path: Path) -> None:
    table = tmp_path / "windows"
    a = pipeline(tmp_path, "a", table)
    epochs(a, sources()[0], 1)
    DeltaTable(str(table)).alter.set_table_properties({"eos.writers": "a"},
                                                      raise_if_not_exists=False)
    with pytest.raises(TableOwned, match=r"eos.writers is not a JSON list of writers"):
        begin(a, source=sources()[0])


def test_a_rewind_keeps_a_writer_that_joined_after_its_epoch(tmp_path: Path) -> None:
    """A Delta ``RESTORE`` takes table properties back too: B, which joined the shared table
    after A's epoch 0 and has staged its first epoch, would be forgotten and its commit
    refused. The rewind puts B back, and B's commit is admitted either way."""
    table = tmp_path / "shared-windows"
    a, b = pipeline(tmp_path, "a", table, shared=True), pipeline(tmp_path, "b", table, shared=True)
    source_a, source_b = sources()
    epochs(a, source_a, 2)
    begin(b, source=source_b)  # B joins (a commit of the table's properties, no rows)
    precommit(b, 0, MemoryStager())
    assert writers(table) == ["a", "b"]

    assert rewind(a, 0).outcome is Outcome.REWOUND
    assert writers(table) == ["a", "b"]
    assert commit(b, 0).outcome is Outcome.COMMITTED
    assert checkpointed_epoch(b) == 0 and [e for e, _ in rows(table)] == [0, 0]
