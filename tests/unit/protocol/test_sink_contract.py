"""The in-process sink against the two-phase-commit contract, on its own: what the
protocol tests rely on it to do, as a Delta or Kafka sink does it."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from eos.core.config import PipelineConfig
from eos.core.errors import ProtocolViolation
from eos.core.outcomes import Outcome
from eos.core.sink import (
    Sink,
    SinkCommit,
    SupportsAssets,
    SupportsReadBack,
    SupportsRewind,
    sink_class,
    sinks_for,
)

from support.memory import MemorySink, RewindableMemorySink, at_once, store

ROWS = pa.table({"x": [1, 2]})


def windows_sink(config: PipelineConfig) -> MemorySink:
    sink = sinks_for(config)[0]
    assert isinstance(sink, MemorySink)
    return sink


def test_a_sink_written_from_scratch_implements_only_the_commit_methods() -> None:
    """Options, name and ``prepare`` are ``Sink``'s defaults; no capability is claimed. Its
    ``check`` (optional: the default takes every row) lets a test make it refuse an epoch."""
    own = {name for name, value in vars(MemorySink).items()
           if callable(value) and not name.startswith("__")}
    assert own == {"committed_epoch", "commit", "abort", "check"}
    assert Sink.__abstractmethods__ == {"committed_epoch", "commit", "abort"}
    assert MemorySink.kind == "memory" and sink_class("memory") is MemorySink
    assert not issubclass(MemorySink, SupportsRewind | SupportsReadBack | SupportsAssets)
    assert issubclass(RewindableMemorySink, SupportsRewind) and issubclass(MemorySink, Sink)


def test_the_configured_sinks_are_memory_sinks_in_commit_order(pipeline: PipelineConfig) -> None:
    assert [(s.name, s.output) for s in sinks_for(pipeline)] == [
        ("memory:a", "windows"), ("memory:b", "late"), ("memory:c", "quarantine")]


def test_a_commit_is_idempotent_and_in_order(pipeline: PipelineConfig) -> None:
    sink, other = windows_sink(pipeline), windows_sink(pipeline)  # two clients, one store
    assert sink.committed_epoch() == -1
    done = sink.commit(0, ROWS, "h0")
    assert done == SinkCommit("memory:a", Outcome.COMMITTED, 2, 1)
    assert other.committed_epoch() == 0
    again = other.commit(0, ROWS, "h0")
    assert again.outcome is Outcome.ALREADY_COMMITTED and not again.raced
    with pytest.raises(ProtocolViolation, match="holds epoch 0; it cannot receive epoch 2"):
        other.commit(2, ROWS, "h2")
    assert store(pipeline, "memory:a").written == [0]


def test_two_racing_commits_write_once(pipeline: PipelineConfig) -> None:
    barrier = threading.Barrier(2, timeout=30)
    store(pipeline, "memory:a").before_write = lambda _: barrier.wait()
    results: list[SinkCommit] = at_once(lambda: windows_sink(pipeline).commit(0, ROWS, "h0"),
                                        lambda: windows_sink(pipeline).commit(0, ROWS, "h0"))
    assert sorted((r.outcome, r.raced) for r in results) == sorted(
        [(Outcome.COMMITTED, False), (Outcome.ALREADY_COMMITTED, True)])
    assert store(pipeline, "memory:a").written == [0]


def test_abort_never_touches_a_committed_epoch(pipeline: PipelineConfig) -> None:
    sink = windows_sink(pipeline)
    sink.commit(0, ROWS, "h0")
    sink.abort(0)
    sink.abort(1)
    held = store(pipeline, "memory:a")
    assert held.marker == 0 and held.rows[0] == ROWS and held.aborted == [0, 1]


def test_a_rewind_is_idempotent_per_rewind_id(rewindable: PipelineConfig) -> None:
    sink = sinks_for(rewindable)[0]
    assert isinstance(sink, RewindableMemorySink)
    for epoch in range(3):
        sink.commit(epoch, ROWS, f"h{epoch}")
    target = sink.rewind_target(0)
    version = sink.rewind(0, target, "r1", ROWS.schema)
    assert version is not None and sink.committed_epoch() == 0
    assert sink.rewind(0, target, "r1", ROWS.schema) is None
    assert sorted(store(rewindable, sink.name).rows) == [0]
