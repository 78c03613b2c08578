"""A pipeline without windows through the protocol: its rows and quarantined records reach
their sinks once each, with their coordinates, through the same begin, precommit, fenced
commits and checkpoint as an aggregating pipeline's outputs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eos.airflow.epochs_html import Links, pipeline_page
from eos.core import checkpoints, epochlog
from eos.core.config import PipelineConfig
from eos.core.errors import InjectedFault
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.pipeline_status import EpochState, epoch_rows, pipeline_status, render
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.rewind import rewind

from support.memory import MemorySource, run_epoch, store
from support.memory_rows import NEG_INF, STATELESS_IN_MEMORY, RowStager
from support.pipelines import make_pipeline


@pytest.fixture
def stateless(tmp_path: Path) -> PipelineConfig:
    return make_pipeline(tmp_path, base=STATELESS_IN_MEMORY)


def run(config: PipelineConfig, source: MemorySource) -> int:
    plan = begin(config, source=source)
    precommit(config, plan.epoch, RowStager())
    return plan.epoch


def held(config: PipelineConfig, sink: str) -> list[dict]:
    return [row for table in store(config, sink).rows.values() for row in table.to_pylist()]


def test_every_accepted_record_is_one_row_with_its_coordinates(
        stateless: PipelineConfig, source: MemorySource) -> None:
    first = commit(stateless, run(stateless, source))
    source.produce(0, 12)
    second = commit(stateless, run(stateless, source))
    assert [s.sink for s in first.sinks] == ["memory:a", "memory:c"]
    assert first.rows == {"rows": 37, "quarantine": 3} and second.rows == {"rows": 11,
                                                                           "quarantine": 1}
    rows = held(stateless, "memory:a")
    assert list(rows[0]) == ["key", "at", "kafka_topic", "kafka_partition", "kafka_offset",
                             "epoch"]
    coordinates = [(r["kafka_partition"], r["kafka_offset"]) for r in rows]
    assert sorted(coordinates) == sorted(
        (p, o) for p, high in ((0, 37), (1, 15)) for o in range(high) if o % 10 != 9)
    assert all(r["kafka_topic"] == "in-memory" and r["at"] == r["kafka_offset"] * 1000
               for r in rows)
    assert {r["epoch"] for r in rows if r["kafka_offset"] >= 25} == {1}
    assert sorted(r["offset"] for r in held(stateless, "memory:c")) == [9, 9, 19, 29]
    last = checkpoints.last(tables_for(stateless), 1)
    assert last is not None and last.watermark_ms == NEG_INF
    assert last.config == {"event": last.config["event"], "select": dict(stateless.select)}


def test_a_retry_after_a_crash_between_sinks_completes_the_epoch_once(
        stateless: PipelineConfig, source: MemorySource, arm) -> None:
    epoch = run(stateless, source)
    arm("commit.between_sinks:fail")
    with pytest.raises(InjectedFault):
        commit(stateless, epoch)
    assert store(stateless, "memory:a").written == [0] and checkpointed_epoch(stateless) == -1
    retry = commit(stateless, epoch)
    assert retry.outcome is Outcome.COMMITTED and retry.skipped == ["memory:a"]
    assert commit(stateless, epoch).outcome is Outcome.ALREADY_COMMITTED
    assert [store(stateless, s).written for s in ("memory:a", "memory:c")] == [[0], [0]]
    assert len(held(stateless, "memory:a")) == 37


def test_the_status_and_the_epochs_view_show_no_watermark(
        stateless: PipelineConfig, source: MemorySource) -> None:
    """Minus infinity is no date: the view shows "-" (it failed on one before)."""
    commit(stateless, run(stateless, source))
    status = pipeline_status(stateless, limit=10, with_lag=False)
    assert render(status)
    page = pipeline_page(status, Links(airflow=""), took_ms=1.0)
    assert re.search(r'<td class="watermark">-</td>', page)


def test_a_rewind_and_replay_leaves_every_row_once(tmp_path: Path,
                                                   source: MemorySource) -> None:
    config = make_pipeline(tmp_path, base=STATELESS_IN_MEMORY, sinks={
        "rows": [{"memory_rewind": "a"}], "quarantine": [{"memory_rewind": "c"}]})
    for _ in range(3):
        run_epoch(config, source, RowStager())
        source.produce(1, 5)
    assert rewind(config, 0).outcome is Outcome.REWOUND
    assert sorted(store(config, "memory_rewind:a").rows) == [0]
    while run_epoch(config, source, RowStager()).records:
        pass
    rows = held(config, "memory_rewind:a")
    coordinates = sorted((r["kafka_partition"], r["kafka_offset"]) for r in rows)
    assert coordinates == sorted(
        (p, o) for p, high in ((0, 25), (1, 30)) for o in range(high) if o % 10 != 9)


def test_the_checkpoint_carries_the_commits_row_and_a_rewind_marks_what_it_took_back(
        tmp_path: Path, source: MemorySource) -> None:
    """Neither precommit nor commit appends an epoch-log row: the staging commit and the
    checkpoint they write anyway name the try, its duration and what it did, and the epochs
    view reads them there. Epochs a rewind
    took back (their checkpoints gone with it) show as rewound until replayed, found by the
    range the rewind logged when it began."""
    config = make_pipeline(tmp_path, base=STATELESS_IN_MEMORY, sinks={
        "rows": [{"memory_rewind": "a"}], "quarantine": [{"memory_rewind": "c"}]})
    for _ in range(3):
        run_epoch(config, source, RowStager())
        source.produce(1, 5)
    tables = tables_for(config)
    assert [r["phase"] for r in epochlog.rows(tables)] == [epochlog.PLANNED] * 3
    for phase in (epochlog.PRECOMMITTED, epochlog.COMMITTED):
        carried = [r for r in epoch_rows(tables) if r["phase"] == phase]
        assert [r["epoch"] for r in carried] == [0, 1, 2], phase
        assert all(r["duration_ms"] > 0 for r in carried), phase
    status = pipeline_status(config, with_lag=False)
    shown = {e.epoch: e for e in status.epochs}
    assert {e: s.state for e, s in shown.items()} == {e: EpochState.COMMITTED for e in range(3)}
    assert all(s.durations_ms["precommit"] and s.durations_ms["commit"] for s in shown.values())
    assert all(s.checkpoint_version is not None and s.staging_version is not None
               for s in shown.values())
    assert [shown[e].checkpoint_version for e in range(3)] == sorted(
        shown[e].checkpoint_version for e in range(3))
    assert rewind(config, 0).outcome is Outcome.REWOUND
    states = {e.epoch: e.state for e in pipeline_status(config, with_lag=False).epochs}
    assert states == {0: EpochState.COMMITTED, 1: EpochState.REWOUND, 2: EpochState.REWOUND}
    run_epoch(config, source, RowStager())  # replays epoch 1
    states = {e.epoch: e.state for e in pipeline_status(config, with_lag=False).epochs}
    assert states == {0: EpochState.COMMITTED, 1: EpochState.COMMITTED, 2: EpochState.REWOUND}


def test_an_epoch_makes_four_commits_on_the_pipelines_own_tables(
        stateless: PipelineConfig, source: MemorySource) -> None:
    """Plan, stage (with the precommit's row), seal (pruning what the retention lets go),
    checkpoint (with the commit's row): each sink's commit comes on top. A step that adds a
    commit to every epoch shows here."""
    from deltalake import DeltaTable

    tables = tables_for(stateless)
    own = (tables.epochs, tables.staging, tables.checkpoints)

    def versions() -> list[int]:
        return [DeltaTable(path).version() for path in own]

    for _ in range(3):  # past the first epochs (tables created, nothing to prune yet)
        commit(stateless, run(stateless, source))
        source.produce(1, 5)
    before = versions()
    commit(stateless, run(stateless, source))
    after = versions()
    assert [b - a for a, b in zip(before, after, strict=True)] == [1, 2, 1]
