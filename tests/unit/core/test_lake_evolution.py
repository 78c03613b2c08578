"""A select that gains a column while an epoch is in flight (real Delta staging, in-memory sinks):
the epoch precommitted before the change commits as it was staged, without the column, and
its checkpoint records that; the next epoch carries the column."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eos.core import checkpoints
from eos.core.layout import tables_for
from eos.core.protocol import begin, commit, precommit

from support.memory import STORES, MemorySource, run_epoch, store
from support.memory_rows import STATELESS_IN_MEMORY, RowStager
from support.pipelines import make_pipeline

SELECT = STATELESS_IN_MEMORY["select"]


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    yield
    STORES.clear()


def test_an_epoch_staged_before_a_column_was_added_commits_without_it(tmp_path: Path) -> None:
    config = make_pipeline(tmp_path, name="grows", base=STATELESS_IN_MEMORY)
    source = MemorySource()
    source.produce(0, 6)
    run_epoch(config, source, RowStager())
    source.produce(0, 6)
    plan = begin(config, source=source)
    precommit(config, plan.epoch, RowStager(), expected_hash=plan.hash)

    grown = make_pipeline(tmp_path, name="grows", base=STATELESS_IN_MEMORY,
                          select={**SELECT, "shout": "CAST(upper(key) AS string)"})
    assert commit(grown, plan.epoch).outcome.name == "COMMITTED"
    source.produce(0, 6)
    run_epoch(grown, source, RowStager())

    held = store(grown, "memory:a").rows
    assert "shout" not in held[1].column_names and "shout" in held[2].column_names
    views = {c.epoch: c.config["select"] for c in checkpoints.read_all(tables_for(grown))}
    assert views == {0: SELECT, 1: SELECT, 2: {**SELECT, "shout": "CAST(upper(key) AS string)"}}
