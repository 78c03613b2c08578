"""Where a brand-new pipeline starts (``kafka.start``): the log start, the end, the first record
at or after a time, or given offsets; decided once, in the first plan; a partition added later
starts at its log start whatever ``start`` says."""

from __future__ import annotations

from pathlib import Path

import pytest

from eos.core.config import PipelineConfig
from eos.core.config.positions import StartPosition
from eos.core.errors import ConfigError, StartRefused
from eos.core.pipeline_status.reading import partition_lags
from eos.core.plan import PartitionRange
from eos.core.protocol import begin

from support.memory import MemorySource, log_rows, run_epoch
from support.pipelines import IN_MEMORY, make_pipeline

NOV_1 = 1_793_491_200_000  # 2026-11-01T00:00:00Z in ms


def starting(tmp_path: Path, start: str) -> PipelineConfig:
    return make_pipeline(tmp_path, base=IN_MEMORY, kafka={"topic": "in-memory", "start": start})


@pytest.mark.parametrize("start, ranges", [
    ("earliest", ((0, 25), (0, 15))),
    ("latest", ((25, 25), (15, 15))),
    ("timestamp:12000", ((12, 25), (12, 15))),  # record o is timestamped o s (MemorySource)
    ("timestamp:1970-01-01T00:00:20Z", ((20, 25), (15, 15))),  # nothing that late in 1: its end
    ("offsets:0=7,1=2", ((7, 25), (2, 15))),
])
def test_the_first_epoch_starts_where_start_says(tmp_path: Path, source: MemorySource,
                                                  start: str, ranges: tuple) -> None:
    plan = run_epoch(starting(tmp_path, start), source)
    assert plan.epoch == 0
    assert plan.ranges == tuple(PartitionRange(p, lo, hi, "in-memory")
                                for p, (lo, hi) in enumerate(ranges))


def test_start_is_decided_once_and_later_partitions_start_at_their_log_start(
        tmp_path: Path, source: MemorySource) -> None:
    """After the first checkpoint ``start`` no longer matters: epoch 1 continues from it, and a
    partition added to the topic is read from its log start, not from ``latest``."""
    config = starting(tmp_path, "latest")
    assert run_epoch(config, source).records == 0
    source.produce(0, 5)
    source.marks[2] = (0, 4)  # a partition added since the first epoch
    assert run_epoch(config, source).ranges == (
        PartitionRange(0, 25, 30, "in-memory"), PartitionRange(1, 15, 15, "in-memory"),
        PartitionRange(2, 0, 4, "in-memory"))


@pytest.mark.parametrize("start, why", [
    ("offsets:0=7", r"partitions \[0\].* has partitions \[0, 1\]"),
    ("offsets:0=7,1=16", r"partition 1: 16 not in \[0, 15\]"),
])
def test_offsets_the_topic_does_not_hold_plan_nothing(tmp_path: Path, source: MemorySource,
                                                      start: str, why: str) -> None:
    config = starting(tmp_path, start)
    with pytest.raises(StartRefused, match=why):
        begin(config, source=source)
    assert log_rows(config, 0) == []
    assert issubclass(StartRefused, ConfigError)  # permanent: retrying cannot help


@pytest.mark.parametrize("start, why", [
    ("first", "unknown start position 'first'"),
    ("timestamp:2026-11-01T00:00:00", "names its zone"),  # an instant needs its zone
    ("timestamp:", "timestamp:<ms or ISO-8601>"),
    ("offsets:0=1,0=2", "offsets:<p>=<o>"),
])
def test_an_unknown_start_is_refused_at_load_naming_the_forms(tmp_path: Path, start: str,
                                                              why: str) -> None:
    with pytest.raises(ConfigError, match=why) as caught:
        starting(tmp_path, start)
    assert "kafka.start" in str(caught.value)


def test_an_iso_time_is_kept_as_its_instant(tmp_path: Path) -> None:
    config = starting(tmp_path, "timestamp:2026-11-01T01:00:00+01:00")
    assert config.kafka.start == f"timestamp:{NOV_1}"
    assert config.kafka.start_position == StartPosition("timestamp", timestamp_ms=NOV_1)


def test_status_counts_the_backlog_from_where_the_first_epoch_will_start(
        tmp_path: Path, source: MemorySource) -> None:
    """Before the first epoch, ``eos status``'s lag is what that epoch will read: exact for
    offsets and latest, from the log start for a time (an upper bound; no broker lookup)."""
    def lags(start: str) -> list[int | None]:
        return [lag.lag for lag in partition_lags(starting(tmp_path, start), {},
                                                  source.watermarks(starting(tmp_path, start)))]

    assert lags("offsets:0=20,1=5") == [5, 10]
    assert lags("latest") == [0, 0]
    assert lags("timestamp:12000") == [25, 15]
