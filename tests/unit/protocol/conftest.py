"""Fixtures of the fast tier: a pipeline on in-process sinks, its source and stager, fault
points armed in this process, and the outcome each phase logged.

Nothing here may reach a broker: every Kafka client constructor fails the test that calls it."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import pytest

from eos.core import kafka
from eos.core.config import PipelineConfig

from support.memory import REWINDABLE_SINKS, STORES, MemorySource, MemoryStager
from support.pipelines import IN_MEMORY, make_pipeline


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A Kafka client created by any code under test fails the test, naming what was tried."""
    def refuse(what: str) -> Callable[..., None]:
        def create(*args: object, **kwargs: object) -> None:
            raise AssertionError(f"the fast tier must not reach a broker ({what} created)")
        return create

    for module, name in ((confluent_kafka, "Consumer"), (confluent_kafka, "Producer"),
                         (confluent_kafka.admin, "AdminClient"), (kafka, "consumer")):
        monkeypatch.setattr(module, name, refuse(f"{module.__name__}.{name}"))
    yield
    STORES.clear()


@pytest.fixture
def source() -> MemorySource:
    """Two partitions holding 25 and 15 records."""
    return MemorySource()


@pytest.fixture
def stager() -> MemoryStager:
    return MemoryStager()


@pytest.fixture
def pipeline(tmp_path: Path) -> PipelineConfig:
    """A pipeline whose sinks are memory sinks: windows -> a, late -> b, quarantine -> c."""
    return make_pipeline(tmp_path, base=IN_MEMORY)


@pytest.fixture
def rewindable(tmp_path: Path) -> PipelineConfig:
    """The same pipeline, its sinks able to rewind (``SupportsRewind``)."""
    return make_pipeline(tmp_path, base=IN_MEMORY, sinks=REWINDABLE_SINKS)


class Phases:
    """The phase lines the protocol logged (``eos.core.phaselog``) during a test."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog

    def lines(self, phase: str) -> list[str]:
        return [r.getMessage() for r in self.caplog.records
                if r.name == "eos" and r.getMessage().startswith(f"phase={phase} ")]

    def outcomes(self, phase: str) -> list[str]:
        """Every ``outcome`` the phase logged, oldest first (values may contain spaces)."""
        found = (re.search(r" outcome=(.+?)(?= \w+=|$)", line) for line in self.lines(phase))
        return [m.group(1) for m in found if m]

    def outcome(self, phase: str) -> str:
        return self.outcomes(phase)[-1]


@pytest.fixture
def phases(caplog: pytest.LogCaptureFixture) -> Phases:
    caplog.set_level(logging.INFO, logger="eos")
    return Phases(caplog)
