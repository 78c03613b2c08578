"""A pipeline of several topics (``kafka.topics``, ``kafka.pattern``; ``eos.core.topics``):
plans and checkpoints keyed by topic-partition, topics that join later start at their log
start, a vanished topic and a dropped one are refused, and a checkpoint written when offsets
were keyed by partition only continues exactly where it ended."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from eos.core import checkpoints
from eos.core.checkpoints import Checkpoint
from eos.core.config import PipelineConfig, parse_config
from eos.core.errors import ConfigError, MoveRefused, SourceChanged, TopicMissing, TopicVanished
from eos.core.layout import tables_for
from eos.core.move import StartPosition, move_source
from eos.core.pipeline_status import partition_lags, pipeline_status, render
from eos.core.plan import PartitionRange
from eos.core.protocol import begin
from eos.core.topics import TopicPartition, offsets_from_json

from support.memory import MemorySource, log_rows, run_epoch
from support.pipelines import IN_MEMORY, make_pipeline, same_pipeline


def ranges(plan: Any) -> list[tuple[str, int, int, int]]:
    return [(r.topic, r.partition, r.start, r.until) for r in plan.ranges]


def last_until(config: PipelineConfig) -> dict[TopicPartition, int]:
    tables = tables_for(config)
    last = checkpoints.last(tables, checkpoints.last_checkpointed(tables, config.app_id))
    assert last is not None
    return last.until


def several(tmp_path: Path, kafka: dict[str, Any], **sections: Any) -> PipelineConfig:
    return make_pipeline(tmp_path, base=IN_MEMORY, kafka=kafka, **sections)


def test_a_list_of_topics_is_planned_per_topic_partition_and_shares_max_records_fairly(
        tmp_path: Path) -> None:
    config = several(tmp_path, {"topics": ["a", "b"]}, max_records=30)
    source = MemorySource({0: (0, 25), 1: (0, 15)}, others={"b": {0: (5, 40)}})
    plan = run_epoch(config, source)
    assert plan.topic == "" and plan.topics == ("a", "b")
    assert ranges(plan) == [("a", 0, 0, 10), ("a", 1, 0, 10), ("b", 0, 5, 15)]
    assert last_until(config) == {TopicPartition("a", 0): 10, TopicPartition("a", 1): 10,
                                  TopicPartition("b", 0): 15}
    assert "a/p0:[0,10)" in plan.describe_ranges()
    second = run_epoch(config, source)  # each continues where the checkpoint ended
    assert [r.start for r in second.ranges] == [10, 10, 15] and second.records == 30


def test_a_pattern_reads_every_matching_topic_and_one_created_later_from_its_log_start(
        tmp_path: Path) -> None:
    """``kafka.start: latest`` places the topics of the first epoch; a topic matched later
    starts at its log start (its records were all produced after the pipeline started)."""
    config = several(tmp_path, {"pattern": "^t-", "start": "latest"})
    source = MemorySource({0: (0, 25)}, topic="t-a",
                          others={"t-b": {0: (0, 4)}, "other": {0: (0, 9)},
                                  "__consumer_offsets": {0: (0, 3)}})
    first = run_epoch(config, source)
    assert ranges(first) == [("t-a", 0, 25, 25), ("t-b", 0, 4, 4)]
    source.others["t-c"] = {0: (2, 7), 1: (0, 1)}  # created (and retention-trimmed) since
    source.produce(0, 3, topic="t-b")
    second = run_epoch(config, source)
    assert ranges(second) == [("t-a", 0, 25, 25), ("t-b", 0, 4, 7), ("t-c", 0, 2, 7),
                              ("t-c", 1, 0, 1)]
    assert second.source.topics == ("t-a", "t-b", "t-c")


def test_a_pattern_that_matched_nothing_yet_reads_its_first_topic_from_the_log_start(
        tmp_path: Path) -> None:
    """``kafka.start`` places a brand-new pipeline's first epoch; one that committed an empty
    epoch (no topic matched) is not new: a topic created since starts at its log start."""
    config = several(tmp_path, {"pattern": "^t-", "start": "latest"})
    source = MemorySource({}, topic="unmatched")
    assert run_epoch(config, source).ranges == ()
    source.others["t-a"] = {0: (0, 6)}
    assert ranges(run_epoch(config, source)) == [("t-a", 0, 0, 6)]


def test_a_matched_topic_that_vanishes_is_refused_and_nothing_is_planned(
        tmp_path: Path) -> None:
    config = several(tmp_path, {"pattern": "^t-"})
    source = MemorySource({0: (0, 5)}, topic="t-a", others={"t-b": {0: (0, 4)}})
    run_epoch(config, source)
    del source.others["t-b"]
    with pytest.raises(TopicVanished, match="t-b"):
        begin(config, "run-1", source=source)
    assert log_rows(config, 1) == []


def test_adding_topics_keeps_the_committed_offsets_and_one_leaves_without_moving_the_others(
        tmp_path: Path) -> None:
    """``topic: a`` -> ``topics: [a, b]``: a continues, b starts at its log start (whatever
    ``kafka.start`` says: it placed the first epoch only). Taking b out of the list again: a
    goes on from its committed offset, b's offsets are carried by every checkpoint after, and
    b put back resumes where it stopped (its log start would read 3..8 twice)."""
    config = several(tmp_path, {"topic": "a", "start": "latest"})
    source = MemorySource({0: (0, 25)}, others={"b": {0: (3, 8)}})
    assert ranges(run_epoch(config, source)) == [("a", 0, 25, 25)]
    source.produce(0, 2)
    both = same_pipeline(config, kafka={"topics": ["a", "b"], "start": "latest"})
    assert ranges(run_epoch(both, source)) == [("a", 0, 25, 27), ("b", 0, 3, 8)]
    source.produce(0, 1)
    source.produce(0, 4, topic="b")
    left = run_epoch(config, source)  # was SourceChanged: b left, a goes on
    assert ranges(left) == [("a", 0, 27, 28)] and left.source.topics == ("a",)
    assert last_until(config) == {TopicPartition("a", 0): 28, TopicPartition("b", 0): 8}
    lags = partition_lags(config, last_until(config), source.watermarks(config))
    assert [(lag.topic, lag.lag) for lag in lags] == [("a", 0)]
    back = run_epoch(both, source)
    assert ranges(back) == [("a", 0, 28, 28), ("b", 0, 8, 12)]


def test_a_topic_left_on_purpose_is_not_a_vanished_one_nor_a_replaced_source(
        tmp_path: Path) -> None:
    """A topic still named (or still matched) that the broker no longer has stays refused, and
    so does replacing every topic: offsets of other topics mean nothing there."""
    config = several(tmp_path, {"topics": ["a", "b"]})
    source = MemorySource({0: (0, 5)}, others={"b": {0: (0, 9)}, "c": {0: (0, 2)}})
    run_epoch(config, source)
    del source.others["b"]
    with pytest.raises(TopicMissing, match="topic 'b'"):
        begin(config, "run-1", source=source)  # b is named and gone: never skipped silently
    replaced = same_pipeline(config, kafka={"topics": ["c"]})
    with pytest.raises(SourceChanged):
        begin(replaced, "run-1", source=source)


def test_a_move_of_several_topics_places_every_one_and_offsets_name_one_topic(
        tmp_path: Path) -> None:
    config = several(tmp_path, {"topic": "a"})
    source = MemorySource({0: (0, 5)}, others={"b": {0: (2, 9)}})
    run_epoch(config, source)
    moved = same_pipeline(config, kafka={"topics": ["b"]})  # a dropped: a move
    with pytest.raises(SourceChanged):
        begin(moved, "run-1", source=source)
    both = same_pipeline(config, kafka={"topics": ["a", "b"]})
    with pytest.raises(MoveRefused, match="names partitions of one topic"):
        move_source(both, StartPosition.parse("offsets:0=1"), source=source)
    done = move_source(moved, StartPosition.parse("latest"), source=source)
    assert ranges(done.plan) == [("b", 0, 9, 9)] and done.move["start"] == {"0": 9}
    run_epoch(moved, source, run_id="operator")
    wide = move_source(both, StartPosition.parse("earliest"), source=source)
    assert ranges(wide.plan) == [("a", 0, 0, 5), ("b", 0, 2, 9)]
    assert wide.move["start"] == {"a": {"0": 0}, "b": {"0": 2}}


def test_status_shows_ranges_and_lags_per_topic(tmp_path: Path) -> None:
    config = several(tmp_path, {"topics": ["a", "b"]}, max_records=20)
    source = MemorySource({0: (0, 25)}, others={"b": {0: (0, 5)}})
    run_epoch(config, source)
    status = pipeline_status(config, with_lag=False)
    status = replace(status, partitions=partition_lags(config, last_until(config),
                                                       source.watermarks(config)))
    shown = render(status)
    assert "pipeline " + config.name + ": topics 'a', 'b'" in shown
    assert "a/p0:[0,15) b/p0:[0,5)" in shown
    assert [(p.topic, p.partition, p.lag) for p in status.partitions] == [("a", 0, 10),
                                                                        ("b", 0, 0)]
    assert any(line.startswith("a ") and line.split()[-1] == "10" for line in shown.splitlines())


def _main_row(self: Checkpoint) -> dict[str, Any]:
    """A checkpoint row as eos wrote it when offsets were keyed by partition only."""
    return {**ROW(self), "until": json.dumps({str(tp.partition): u
                                              for tp, u in sorted(self.until.items())})}


ROW = Checkpoint.to_row


@pytest.mark.parametrize("recorded", [True, False], ids=["with-source", "before-identities"])
def test_a_checkpoint_keyed_by_partition_continues_where_it_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded: bool) -> None:
    """Epoch 0 checkpointed in the earlier form (``{"0": 25, "1": 15}``; without a source for
    the rows written before identities were); epoch 1 reads exactly what was produced since:
    no record replayed, none skipped."""
    config = make_pipeline(tmp_path, base=IN_MEMORY)
    source = MemorySource()
    monkeypatch.setattr(Checkpoint, "to_row", lambda self: {
        **_main_row(self), **({} if recorded else {"source": None})})
    run_epoch(config, source)
    monkeypatch.undo()
    row = checkpoints.read_table(tables_for(config).checkpoints).to_pylist()[0]
    assert json.loads(row["until"]) == {"0": 25, "1": 15}
    source.produce(0, 4)
    source.produce(1, 1)
    plan = run_epoch(config, source)
    assert plan.ranges == (PartitionRange(0, 25, 29, "in-memory"),
                           PartitionRange(1, 15, 16, "in-memory"))
    rows = sorted(checkpoints.read_table(tables_for(config).checkpoints).to_pylist(),
                  key=lambda r: r["epoch"])
    assert json.loads(rows[1]["until"]) == {"in-memory": {"0": 29, "1": 16}}
    # ... and a later move to a list keeps them too.
    source.others["b"] = {0: (0, 2)}
    more = same_pipeline(config, kafka={"topics": ["in-memory", "b"]})
    assert ranges(run_epoch(more, source)) == [("b", 0, 0, 2), ("in-memory", 0, 29, 29),
                                               ("in-memory", 1, 16, 16)]


def test_offsets_of_the_earlier_form_need_their_topic() -> None:
    assert offsets_from_json('{"0": 5}', "t") == {TopicPartition("t", 0): 5}
    assert offsets_from_json('{"t": {"0": 5}}', None) == {TopicPartition("t", 0): 5}
    with pytest.raises(ValueError, match="name no topic"):
        offsets_from_json('{"0": 5}', None)


BASE: dict[str, Any] = {"name": "p", "event": {"fields": {"page": "string"}}}


@pytest.mark.parametrize("kafka, message", [
    ({}, "give exactly one of kafka.topic, kafka.topics and kafka.pattern"),
    ({"topic": "a", "topics": ["b"]}, r"exactly one of .* \(got topic, topics\)"),
    ({"topics": ["a"], "pattern": "^b"}, r"\(got topics, pattern\)"),
    ({"pattern": "b.*"}, "kafka.pattern 'b.*' must start with '\\^'"),
    ({"pattern": "^b("}, "kafka.pattern '\\^b\\(' is not a regular expression"),
    ({"topics": ["a", "a"]}, "kafka.topics names a topic twice"),
    ({"topics": []}, "kafka.topics"),
])
def test_the_source_keys_are_checked_at_load(kafka: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({**BASE, "kafka": kafka})


def test_a_tool_that_produces_to_the_source_needs_one_topic() -> None:
    config = parse_config({**BASE, "kafka": {"pattern": "^b"}})
    with pytest.raises(ConfigError, match="topics matching '\\^b'"):
        config.kafka.sole_topic  # noqa: B018
    assert parse_config({**BASE, "kafka": {"topics": ["x"]}}).kafka.sole_topic == "x"
