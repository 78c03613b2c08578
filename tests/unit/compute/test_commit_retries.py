"""The in-process epoch loop retries a commit that failed transiently, as the DAG's commit task
is retried, and raises it when asked for no retry (what a test of that failure wants)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eos.compute import epochs
from eos.compute.epochs import run_epoch
from eos.core.config import PipelineConfig
from eos.core.errors import InjectedFault
from eos.core.outcomes import Outcome

from support.memory import STORES, MemorySource, MemoryStager
from support.pipelines import IN_MEMORY, make_pipeline


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[PipelineConfig]:
    """A pipeline on in-process sinks (the fast tier's), their stores emptied after."""
    yield make_pipeline(tmp_path, base=IN_MEMORY)
    STORES.clear()


@pytest.fixture
def source() -> MemorySource:
    return MemorySource()


def test_a_transient_commit_failure_is_retried_and_the_epoch_commits(
        pipeline: PipelineConfig, source: MemorySource, arm: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(epochs, "RETRY_PAUSE_S", 0.0)
    arm("commit.between_sinks:fail")
    run = run_epoch(pipeline, "r0", stager=MemoryStager(), source=source, commit_retries=1)
    assert run.committed.outcome is Outcome.COMMITTED
    assert run.committed.epoch == 0


def test_without_retries_the_first_transient_failure_is_raised(
        pipeline: PipelineConfig, source: MemorySource, arm: Any) -> None:
    arm("commit.between_sinks:fail")
    with pytest.raises(InjectedFault):
        run_epoch(pipeline, "r0", stager=MemoryStager(), source=source)
    arm("")
    again = run_epoch(pipeline, "r1", stager=MemoryStager(), source=source)
    assert (again.plan.epoch, again.committed.outcome) == (0, Outcome.COMMITTED)
