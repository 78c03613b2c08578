"""The filter and the derived fields may change between epochs of an aggregating pipeline:
each checkpoint records the view its epoch was staged with (an epoch staged before an edit and
committed after it records the old one), and what the open windows depend on stays refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eos.core import checkpoints
from eos.core.config import PipelineConfig
from eos.core.errors import ConfigError
from eos.core.layout import tables_for
from eos.core.protocol import begin, commit, precommit

from support.memory import IN_MEMORY, MemorySource, MemoryStager, run_epoch
from support.pipelines import make_pipeline

EVENT = {**IN_MEMORY["event"], "fields": {"key": "string", "n": "long"}}


def edited(tmp_path: Path, name: str, **sections: Any) -> PipelineConfig:
    return make_pipeline(tmp_path, name=name, base={**IN_MEMORY, "event": EVENT}, **sections)


def event(filter_text: str) -> dict[str, Any]:
    return {**EVENT, "filter": filter_text}


def recorded(config: PipelineConfig) -> dict[int, dict[str, Any]]:
    return {c.epoch: c.config for c in checkpoints.read_all(tables_for(config))}


def more(source: MemorySource) -> None:
    source.produce(0, 10)
    source.produce(1, 10)


def test_the_filter_changes_between_epochs_and_each_checkpoint_records_its_own(
        tmp_path: Path, source: MemorySource) -> None:
    strict = edited(tmp_path, "p", event=event("CAST(key AS bigint) >= 0"))
    run_epoch(strict, source)
    lenient = edited(tmp_path, "p", event=event("TRY_CAST(key AS bigint) >= 0"))
    more(source)
    run_epoch(lenient, source)  # was ConfigError: "changed: event.filter"
    views = recorded(lenient)
    assert views[0]["event"]["filter"] == "CAST(key AS bigint) >= 0"
    assert views[1]["event"]["filter"] == "TRY_CAST(key AS bigint) >= 0"


def test_an_epoch_staged_before_an_edit_records_the_view_it_was_staged_with(
        tmp_path: Path, source: MemorySource) -> None:
    first = edited(tmp_path, "p", event=event("n > 0"))
    plan = begin(first, source=source)
    precommit(first, plan.epoch, MemoryStager())
    second = edited(tmp_path, "p", event=event("n > 1"))
    commit(second, plan.epoch)
    assert recorded(second)[0]["event"]["filter"] == "n > 0"
    assert "view" not in (checkpoints.read(tables_for(second), 0).details or {})["precommit"]


def test_a_derived_field_may_change_its_expression_not_its_type(
        tmp_path: Path, source: MemorySource) -> None:
    lower = edited(tmp_path, "p", select={"k": "CAST(lower(key) AS string)"}, group_by=["k"])
    run_epoch(lower, source)
    upper = edited(tmp_path, "p", select={"k": "CAST(upper(key) AS string)"}, group_by=["k"])
    more(source)
    run_epoch(upper, source)
    assert recorded(upper)[1]["select"] == {"k": "CAST(upper(key) AS string)"}
    retyped = edited(tmp_path, "p", select={"k": "CAST(length(key) AS bigint)"}, group_by=["k"])
    with pytest.raises(ConfigError, match=r"changed: select\.k"):
        begin(retyped, source=source)


@pytest.mark.parametrize(("section", "changed"), [
    ({"group_by": []}, "group_by"),
    ({"window": {"type": "tumbling", "size": "20s"}}, "window.size"),
    ({"aggregations": {"n": "count(*)", "total": "sum(n)"}}, "aggregations.total"),
    ({"event": {**EVENT, "fields": {"key": "string", "n": "double"}}}, "event.fields.n"),
], ids=["group_by", "window", "aggregations", "a field's type"])
def test_what_the_open_windows_depend_on_stays_refused(
        tmp_path: Path, source: MemorySource, section: dict[str, Any], changed: str) -> None:
    run_epoch(edited(tmp_path, "p"), source)
    more(source)
    with pytest.raises(ConfigError, match=f"changed: .*{changed}"):
        begin(edited(tmp_path, "p", **section), source=source)
