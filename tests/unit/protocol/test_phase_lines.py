"""The phase lines an operator reads in a task's log (docs/operating.md, "Task logs"): every
epoch phase (begin, precommit, commit, abort) starts with the same documented keys, in the same
order, ``-`` where a key does not apply, so one parser reads any of them."""

from __future__ import annotations

import json
from pathlib import Path

from eos.core.phaselog import PHASE_KEYS
from eos.core.protocol import abort, begin, commit, precommit

from support.memory import MemorySource, MemoryStager
from support.pipelines import IN_MEMORY, make_pipeline

SINKS = {"windows": [{"delta": "target"}], "late": [{"memory": "b"}],
         "quarantine": [{"memory": "c"}]}


def fields(line: str) -> dict[str, str]:
    """``k=v`` tokens of a phase line, in order (as tests/support/airflow_standalone.phase_line)."""
    found: dict[str, str] = {}
    for token in line.split(" "):
        key, sep, value = token.partition("=")
        if sep and key not in found:
            found[key] = value
    return found


def test_every_epoch_phase_line_starts_with_the_documented_keys(
        tmp_path: Path, source: MemorySource, phases) -> None:
    config = make_pipeline(tmp_path, base=IN_MEMORY, sinks=SINKS)
    plan = begin(config, "run-0", source=source)
    precommit(config, 0, MemoryStager())
    commit(config, 0)
    source.produce(0, 10)
    begin(config, "run-1", source=source)
    abort(config, 1, reason="precommit failed")

    lines = {phase: phases.lines(phase) for phase in ("begin", "precommit", "commit", "abort")}
    assert [len(found) for found in lines.values()] == [2, 1, 1, 1], lines
    for phase, found in lines.items():
        for line in found:
            keys = list(fields(line))
            assert keys[:len(PHASE_KEYS) + 1] == ["phase", *PHASE_KEYS], (phase, line)
            assert "duration_ms" in keys and float(fields(line)["duration_ms"]) >= 0

    begun, committed = fields(lines["begin"][0]), fields(lines["commit"][0])
    staged, aborted = fields(lines["precommit"][0]), fields(lines["abort"][0])
    ranges = ",".join(f"p{r.partition}:[{r.start},{r.until})" for r in plan.ranges)
    for line in (begun, staged, committed):
        assert (line["epoch"], line["plan_hash"]) == ("0", plan.hash), line
        assert (line["ranges"], line["records"]) == (ranges, str(plan.records)), line
    # begin writes none of the listed tables and no rows; precommit stages, commit commits.
    assert (begun["rows"], begun["delta_versions"]) == ("-", "{}")
    staged_rows, committed_rows = json.loads(staged["rows"]), json.loads(committed["rows"])
    assert staged_rows["late"] == committed_rows["late"] == 3  # staged by kind, committed by output
    assert committed_rows["windows"] > 0
    assert set(json.loads(staged["delta_versions"])) == {"staging"}
    assert set(json.loads(committed["delta_versions"])) == {"delta:target", "checkpoints"}
    # abort names the epoch it dropped and the staging version it wrote.
    assert (aborted["epoch"], aborted["outcome"], aborted["rows"]) == ("1", "aborted", "-")
    assert aborted["plan_hash"] != "-" and set(json.loads(aborted["delta_versions"])) == {
        "staging"}
