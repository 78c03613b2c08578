"""``eos fill``: a Delta sink added to a running pipeline takes the epochs committed before it
joined, from the sink of its output that holds them: each epoch once (a rerun or a second fill
writes nothing), in order, under a marker of its own, while the pipeline keeps committing to
it; the refusals name why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eos.core.config import PipelineConfig
from eos.core.delta import FILL_SUFFIX, open_table, read_table, txn_version
from eos.core.fill import FillRefused, fill_sink
from eos.core.protocol import check_sinks, checkpointed_epoch
from eos.core.rewind import rewind
from eos.core.storage import join

from support.memory import MemorySource, run_epoch
from support.pipelines import IN_MEMORY, make_pipeline

LATE = [{"memory_rewind": "late"}]
QUARANTINE = [{"memory_rewind": "quarantine"}]


def pipeline(tmp_path: Path, windows: list[dict]) -> PipelineConfig:
    """The same pipeline (name, tables) with these windows sinks."""
    return make_pipeline(tmp_path, base=IN_MEMORY, name="filled",
                         sinks={"windows": windows, "late": LATE, "quarantine": QUARANTINE})


def epochs(config: PipelineConfig, source: MemorySource, count: int) -> None:
    for _ in range(count):
        run_epoch(config, source)
        source.produce(0, 6)
        source.produce(1, 4)


def rows(config: PipelineConfig, table: str) -> list[tuple]:
    data = read_table(join(config.root, table)).to_pylist()
    return sorted(tuple(sorted((k, str(v)) for k, v in r.items())) for r in data)


def test_an_added_sink_is_filled_with_every_earlier_epoch_once(tmp_path: Path) -> None:
    source = MemorySource()
    before = pipeline(tmp_path, [{"delta": "target"}])
    epochs(before, source, 3)
    after = pipeline(tmp_path, [{"delta": "target"}, {"delta": "second"}])
    epochs(after, source, 2)  # second joins at epoch 3
    second = join(after.root, "second")
    assert {r["epoch"] for r in read_table(second).to_pylist()} == {3, 4}

    done = fill_sink(after, "delta:second")
    assert (done.source, done.first, done.until) == ("delta:target", 0, 3)
    assert done.written == [0, 1, 2] and done.already == [] and done.rows > 0
    assert rows(after, "second") == rows(after, "target")  # every epoch, every row, once
    assert txn_version(second, after.app_id + FILL_SUFFIX) == 2
    assert txn_version(second, after.app_id) == 4  # the pipeline's own marker is untouched
    assert open_table(second).metadata().configuration["eos.fill.first"] == "0"
    assert after_sink(after).filled() == (0, 2)

    again = fill_sink(after, "delta:second")  # a rerun (or a racing fill) writes nothing
    assert again.written == [] and again.already == [0, 1, 2]
    assert rows(after, "second") == rows(after, "target")
    epochs(after, source, 1)  # the pipeline goes on committing to it
    assert check_sinks(after, checkpointed_epoch(after))["delta:second"] == 5
    assert rows(after, "second") == rows(after, "target")


def after_sink(config: PipelineConfig) -> Any:
    """The pipeline's ``delta:second`` sink, joined (its ``joined_at`` set)."""
    from eos.core import checkpoints
    from eos.core.layout import tables_for
    from eos.core.protocol import join_sinks
    from eos.core.sink import sinks_for

    tables = tables_for(config)
    last = checkpoints.last(tables, checkpoints.last_checkpointed(tables, config.app_id))
    return next(s for s in join_sinks(sinks_for(config), last) if s.name == "delta:second")


def test_an_interrupted_fill_resumes_where_it_stopped(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from eos.sinks import delta_fill

    source = MemorySource()
    epochs(pipeline(tmp_path, [{"delta": "target"}]), source, 3)
    after = pipeline(tmp_path, [{"delta": "target"}, {"delta": "second"}])
    epochs(after, source, 1)
    real, calls = delta_fill.fill, []

    def dies_at_epoch_2(sink: Any, epoch: int, table: Any, first: int) -> Any:
        calls.append(epoch)
        if epoch == 2:
            raise RuntimeError("killed")
        return real(sink, epoch, table, first)

    monkeypatch.setattr(delta_fill, "fill", dies_at_epoch_2)
    with pytest.raises(RuntimeError):
        fill_sink(after, "delta:second")
    monkeypatch.setattr(delta_fill, "fill", real)
    done = fill_sink(after, "delta:second")
    assert calls == [0, 1, 2] and done.already == [0, 1] and done.written == [2]
    assert rows(after, "second") == rows(after, "target")


def test_a_rewind_takes_filled_epochs_back_with_their_marker(tmp_path: Path) -> None:
    """The fill's commits are the pipeline's own to a rewind (not another writer's): a rewind
    to before the fill restores the table with the fill's marker, so nothing is claimed that
    the table no longer holds."""
    source = MemorySource()
    epochs(pipeline(tmp_path, [{"delta": "target"}]), source, 2)
    after = pipeline(tmp_path, [{"delta": "target"}, {"delta": "second"}])
    epochs(after, source, 2)
    fill_sink(after, "delta:second")
    rewind(after, 2)
    assert after_sink(after).filled() is None
    assert {r["epoch"] for r in read_table(join(after.root, "second")).to_pylist()} == {2}


def test_what_cannot_be_filled_is_refused_naming_why(tmp_path: Path) -> None:
    source = MemorySource()
    epochs(pipeline(tmp_path, [{"delta": "target"}]), source, 2)
    after = pipeline(tmp_path, [{"delta": "target"}, {"delta": "second"}])
    epochs(after, source, 1)
    with pytest.raises(FillRefused, match="delta:target was there from the first epoch"):
        fill_sink(after, "delta:target")
    with pytest.raises(FillRefused, match="no sink delta:nowhere"):
        fill_sink(after, "delta:nowhere")
    with pytest.raises(FillRefused, match="a memory_rewind sink cannot be filled"):
        fill_sink(after, "memory_rewind:late")
    with pytest.raises(FillRefused, match="no sink memory_rewind:late writes the windows"):
        fill_sink(after, "delta:second", "memory_rewind:late")
