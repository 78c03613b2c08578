"""``eos.core.window_state``: the state of epoch N as a snapshot plus the changes since, as the
protocol keeps it: bases named by the watermark rows, the chain resolved from committed rows,
the prune keeping every epoch back to the base, a rewind into the middle of a chain, and when
a snapshot is due. No Spark: a stager that stages the fast tier's running total as changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eos.core import checkpoints
from eos.core.aggregations import state_column
from eos.core.checkpoints import Checkpoint
from eos.core.config import PipelineConfig
from eos.core.delta import read_table
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.plan import Plan
from eos.core.protocol import checkpointed_epoch
from eos.core.rewind import rewind
from eos.core.staging import CHANGE, STATE, WATERMARK, base_of
from eos.core.tables import OpenTables, ensure_tables, scan
from eos.core.window_state import (
    EMPTY,
    SNAPSHOT_MIN_ROWS,
    Chain,
    StateFile,
    WindowRead,
    chain_of,
    open_rows,
    snapshot_due,
)

from support.memory import (
    NEVER_ENDS,
    REWINDABLE_SINKS,
    MemorySource,
    MemoryStager,
    at_once,
    record,
    run_epoch,
)
from support.pipelines import IN_MEMORY, make_pipeline

N = state_column("n", "n")


class ChainStager(MemoryStager):
    """The running total as incremental state: each epoch stages its own count as a change,
    and the total as a snapshot when ``snapshot_due`` says so; the total N-1 ended with is the
    sum over N-1's chain (``open_rows``), the way Spark merges it."""

    def open_row(self, config: PipelineConfig, tables: OpenTables, plan: Plan,
                 previous: Checkpoint | None, counted: int) -> tuple[str, int, int]:
        if previous is None:
            return STATE, counted, plan.epoch
        staging = tables.handle(tables.staging)
        mark = scan(staging, filters=[("epoch", "=", previous.epoch),
                                      ("kind", "=", WATERMARK)]).to_pylist()[0]
        chain = chain_of(tables, previous, base_of(mark))
        if snapshot_due(plan.epoch, chain, config.epoch.state_snapshot_every):
            return STATE, total(tables, previous) + counted, plan.epoch
        return CHANGE, counted, chain.base


def total(tables: Any, checkpoint: Checkpoint) -> int:
    rows = open_rows(tables, checkpoint, [N])
    return int(pc.sum(rows[N]).as_py() or 0) if rows.num_rows else 0


def counted_through(plans: list[Plan]) -> int:
    return sum(record(r.partition, o) == "counted"
               for p in plans for r in p.ranges for o in range(r.start, r.until))


def staged(config: PipelineConfig) -> dict[int, tuple[set[str], int | None]]:
    """Per staged epoch: the open-window kinds it holds and the base its watermark names."""
    rows = read_table(tables_for(config).staging).to_pylist()
    found: dict[int, tuple[set[str], int | None]] = {}
    for row in rows:
        kinds, base = found.get(row["epoch"], (set(), None))
        if row["kind"] in (STATE, CHANGE):
            kinds.add(row["kind"])
        if row["kind"] == WATERMARK:
            base = row["state_base"]
        found[row["epoch"]] = (kinds, base)
    return found


def every(tmp_path: Path, snapshot_every: int, **overrides: Any) -> PipelineConfig:
    return make_pipeline(tmp_path, base=IN_MEMORY,
                         epoch={"max_records": 1000, "staging_retention": 1,
                                          "state_snapshot_every": snapshot_every}, **overrides)


def run(config: PipelineConfig, source: MemorySource, epochs: int, tag: str) -> list[Plan]:
    plans = []
    for i in range(epochs):
        source.produce(i % 2, 7)
        plans.append(run_epoch(config, source, ChainStager(), run_id=f"{tag}-{i}"))
    return plans


def test_the_state_is_the_base_snapshot_plus_the_changes_since(tmp_path: Path,
                                                               source: MemorySource) -> None:
    """Snapshots at epochs 0, 3 and 6 (every 3): between them each epoch stages only its
    change; the total read back from every epoch's chain is the count through it, and after
    each checkpoint staging still holds every epoch back to the base (retention 1)."""
    config = every(tmp_path, 3)
    plans: list[Plan] = []
    for i in range(7):
        plans += run(config, source, 1, f"r{i}")
        held = staged(config)
        want_base = i - i % 3
        assert held[i] == ({STATE if i == want_base else CHANGE}, want_base), held
        assert sorted(held) == list(range(want_base, i + 1)), held  # pruned down to the base
        with ensure_tables(config) as tables:
            assert total(tables, checkpoints.read(tables, i)) == counted_through(plans)
            # Every file of the chain carries its windows' bounds: what lets an epoch skip it.
            files = chain_of(tables, checkpoints.read(tables, i), want_base).files
            assert {(f.epoch, f.start_min, f.end_min) for f in files if f.rows == 1} == {
                (e, 0, NEVER_ENDS) for e in range(want_base, i + 1)}, files


def test_every_epoch_a_snapshot_with_state_snapshot_every_1(tmp_path: Path,
                                                            source: MemorySource) -> None:
    config = every(tmp_path, 1)
    run(config, source, 4, "r")
    assert staged(config) == {3: ({STATE}, 3)}


def test_a_rewind_into_a_chain_replays_the_same_state(tmp_path: Path,
                                                      source: MemorySource) -> None:
    """Rewind to epoch 4 (its state: epoch 3's snapshot and 4's change) and to epoch 1 (epoch
    0's snapshot and 1's change, before the snapshot at 3): the replayed epochs stage the same
    kinds and bases and end with the same total."""
    config = every(tmp_path, 3, sinks=REWINDABLE_SINKS)
    plans = run(config, source, 6, "first")
    with ensure_tables(config) as tables:
        want = total(tables, checkpoints.read(tables, 5))
    assert want == counted_through(plans)
    for to_epoch in (4, 1):
        assert rewind(config, to_epoch, run_id=f"back-{to_epoch}").outcome is Outcome.REWOUND
        assert checkpointed_epoch(config) == to_epoch
        assert staged(config)[to_epoch][1] == (3 if to_epoch == 4 else 0)
        for i in range(to_epoch + 1, 6):
            replayed = run_epoch(config, source, ChainStager(), run_id=f"replay-{to_epoch}-{i}")
            assert replayed.hash == plans[i].hash
        with ensure_tables(config) as tables:
            assert total(tables, checkpoints.read(tables, 5)) == want


# -- the rules, on their own --------------------------------------------------------------------

def chain(base_rows: int, change_rows: int, base: int = 10, last: int = 12) -> Chain:
    files = [StateFile("s", base, "h", base_rows, 0, 0),
             StateFile("c", last, "h", change_rows, 0, 0)]
    return Chain(last, base, tuple(files))


def test_a_snapshot_is_due_first_every_k_epochs_and_when_changes_outgrow_it() -> None:
    assert snapshot_due(0, EMPTY, 20)
    assert not snapshot_due(13, chain(10**6, 10_000), 20)
    assert snapshot_due(30, chain(10**6, 10_000), 20)  # 20 epochs after the base
    assert snapshot_due(13, chain(10**6, 10**6), 20)  # the changes outgrew the snapshot
    assert not snapshot_due(13, chain(10, SNAPSHOT_MIN_ROWS - 1), 20)  # but too few to matter
    assert snapshot_due(13, chain(10, SNAPSHOT_MIN_ROWS), 20)
    assert snapshot_due(13, chain(10**6, 0), 1)  # 1: every epoch


def test_a_read_keeps_every_file_that_may_hold_a_row_it_selects() -> None:
    early = StateFile("early", 3, "h", 10, start_min=0, end_min=1_000)
    late = StateFile("late", 4, "h", 10, start_min=5_000, end_min=9_000)
    unknown = StateFile("unknown", 5, "h", None, start_min=None, end_min=None)
    files = Chain(5, 3, (early, late, unknown))
    closing = WindowRead(end_at_most=2_000)  # fixed windows at wm(N) = 2,000
    assert [f.uri for f in files.select(closing)] == ["early", "unknown"]
    sessions = WindowRead(start_below=5_000)
    assert [f.uri for f in files.select(sessions)] == ["early", "unknown"]
    assert closing.row_filters(1_500) == [("window_end_ms", ">", 1_500),
                                          ("window_end_ms", "<=", 2_000)]
    assert sessions.row_filters(-1) == [("window_end_ms", ">", -1),
                                        ("window_start_ms", "<", 5_000)]


def test_an_older_staging_table_gains_the_base_column_on_open(tmp_path: Path) -> None:
    """A staging table created before ``state_base`` existed gets it when a phase opens it
    (one metadata commit), and its epochs read as snapshots (no base named)."""
    from eos.core.delta import create_table
    from eos.core.tables import staging_schema

    config = every(tmp_path, 3)
    old = pa.schema([f for f in staging_schema(config) if f.name != "state_base"])
    tables = tables_for(config)
    create_table(tables.staging, old, ["epoch"])
    assert "state_base" not in read_table(tables.staging).column_names

    def open_staging() -> None:
        with ensure_tables(config) as opened:
            opened.handle(opened.staging)

    at_once(open_staging, open_staging)  # two phases opening it at once: both go on
    assert "state_base" in read_table(tables.staging).column_names
    assert base_of({"epoch": 7, "state_base": None}) == 7
