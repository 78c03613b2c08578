"""The JSON-lines sink of docs/sinks.md (``support.jsonl_sink``), run through the protocol: its
epochs are committed once each whatever fails between the steps, two racing commits publish
once, and the page shows the code that is tested here."""

from __future__ import annotations

import json
import os
import threading
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest

from eos.core import sink as sink_module
from eos.core.config import PipelineConfig
from eos.core.errors import ConfigError, InjectedFault, ProtocolViolation, SinkCannotTake
from eos.core.outcomes import Outcome
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.sink import register, sinks_for

from support.jsonl_sink import JsonLinesSink, encode
from support.memory import MemorySource, MemoryStager, at_once, run_epoch, store
from support.pipelines import IN_MEMORY, make_pipeline

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sink type known in this process for this module's tests only (what the entry point
    does for an installed sink): other tests see the installed types alone."""
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    register(JsonLinesSink.kind, JsonLinesSink)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "out"


@pytest.fixture
def jsonl(tmp_path: Path, out: Path) -> PipelineConfig:
    """The in-memory pipeline with its windows in JSON lines, then a memory sink."""
    sinks = {"windows": [{"jsonl": str(out)}, {"memory": "a"}], "late": [{"memory": "b"}],
             "quarantine": [{"memory": "c"}]}
    return make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)


def published(out: Path) -> dict[str, list[dict[str, object]]]:
    """Every published file's rows, by name; temporary files are not published."""
    return {path.name: [json.loads(line) for line in path.read_text().splitlines()]
            for path in sorted(out.glob("epoch-*.jsonl"))}


def test_each_epoch_is_one_file_holding_what_the_other_sinks_hold(
        jsonl: PipelineConfig, source: MemorySource, out: Path) -> None:
    for _ in range(3):
        run_epoch(jsonl, source)
        source.produce(0, 10)
    files = published(out)
    assert list(files) == [f"epoch-{n:012d}.jsonl" for n in range(3)]
    memory = store(jsonl, "memory:a").rows
    for epoch, rows in enumerate(files.values()):
        expected = memory[epoch].to_pylist()
        assert [(r["key"], r["n"], r["epoch"]) for r in rows] == [
            (r["key"], r["n"], r["epoch"]) for r in expected]
        assert rows[0]["window_start"].endswith("Z")
    assert checkpointed_epoch(jsonl) == 2
    assert not list(out.glob(".*"))  # no temporary file left


@pytest.mark.parametrize("point", ["commit.between_sinks", "commit.before_checkpoint"])
def test_a_commit_that_fails_after_the_file_is_published_is_not_published_twice(
        jsonl: PipelineConfig, source: MemorySource, out: Path, arm, point: str) -> None:
    plan = begin(jsonl, source=source)
    precommit(jsonl, plan.epoch, MemoryStager())
    arm(f"{point}:fail")
    with pytest.raises(InjectedFault):
        commit(jsonl, 0)
    assert list(published(out)) == ["epoch-000000000000.jsonl"]
    before = (out / "epoch-000000000000.jsonl").stat().st_mtime_ns
    result = commit(jsonl, 0)  # the retry
    assert result.outcome is Outcome.COMMITTED
    outcomes = {s.sink: s.outcome for s in result.sinks}
    assert outcomes[f"jsonl:{out}"] is Outcome.ALREADY_COMMITTED
    assert (out / "epoch-000000000000.jsonl").stat().st_mtime_ns == before
    assert checkpointed_epoch(jsonl) == 0


def test_two_racing_commits_publish_once(jsonl: PipelineConfig, out: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Both attempts check the directory (nothing held), write their file, and link at once."""
    out.mkdir()
    barrier, link = threading.Barrier(2, timeout=30), os.link

    def link_together(source: str, target: Path) -> None:
        barrier.wait()
        link(source, target)

    monkeypatch.setattr("support.jsonl_sink.os.link", link_together)
    rows = pa.table({"key": ["k"], "n": [1]})
    sinks = [sinks_for(jsonl)[0], sinks_for(jsonl)[0]]
    results = at_once(*(lambda s=s: s.commit(0, rows, "h0") for s in sinks))
    assert sorted((r.outcome, r.raced) for r in results) == sorted(
        [(Outcome.COMMITTED, False), (Outcome.ALREADY_COMMITTED, True)])
    assert published(out) == {"epoch-000000000000.jsonl": [{"key": "k", "n": 1}]}
    assert not list(out.glob(".*"))


def test_abort_removes_a_crashed_attempts_temporary_file_and_nothing_published(
        jsonl: PipelineConfig, source: MemorySource, out: Path) -> None:
    run_epoch(jsonl, source)
    crashed = out / ".epoch-000000000001.x1.tmp"  # a process killed before its link
    crashed.write_text('{"partial": ')
    sink = sinks_for(jsonl)[0]
    assert sink.committed_epoch() == 0
    sink.abort(1)
    sink.abort(0)
    assert not crashed.exists() and list(published(out)) == ["epoch-000000000000.jsonl"]


def test_an_epoch_out_of_order_and_a_row_json_cannot_hold_are_refused(
        jsonl: PipelineConfig, out: Path) -> None:
    sink = sinks_for(jsonl)[0]
    sink.prepare(pa.schema([]))
    with pytest.raises(ProtocolViolation, match="holds epoch -1; it cannot receive epoch 1"):
        sink.commit(1, pa.table({"n": [1]}), "h1")
    with pytest.raises(SinkCannotTake, match="JSON cannot hold"):
        sink.check(0, pa.table({"day": [date(2026, 1, 1)]}))  # a date: not written by this sink
    assert encode(pa.table({"x": [float("inf")], "b": [b"\x00"]})) == \
        b'{"x": "Infinity", "b": "AA=="}\n'


def test_a_relative_directory_is_refused_when_the_pipeline_loads(tmp_path: Path) -> None:
    sinks = {"windows": [{"jsonl": "out"}], "late": [], "quarantine": []}
    with pytest.raises(ConfigError, match="a jsonl sink's directory is an absolute path"):
        make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)


def test_the_guide_shows_this_sink_as_tested() -> None:
    """docs/sinks.md includes tests/support/jsonl_sink.py verbatim."""
    page = (ROOT / "docs" / "sinks.md").read_text()
    code = (ROOT / "tests" / "support" / "jsonl_sink.py").read_text()
    assert f"```python\n{code}```" in page, ("docs/sinks.md must show tests/support/"
                                            "jsonl_sink.py as it is: copy the file into the page")
