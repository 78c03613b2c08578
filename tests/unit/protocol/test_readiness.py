"""Data-driven schedules: the ``schedule`` grammar, and when the data asks for an epoch
(``eos.core.readiness``: an observation of the real checkpoint table and a source's watermarks,
and the pure decision on it). The trigger that runs this in Airflow's triggerer, against a real
broker, scheduler and triggerer: tests/integration/airflow/test_data_driven_epochs.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from eos.core.config import PipelineConfig, ScheduleConfig
from eos.core.errors import ConfigError
from eos.core.pipeline_status import PartitionLag
from eos.core.readiness import Decision, Fired, Observation, Reason, decide, observe
from eos.core.topics import TopicPartition

from support.memory import MemorySource, run_epoch
from support.pipelines import IN_MEMORY, make_pipeline, same_pipeline

NOW = 1_800_000_000_000


# -- the grammar --------------------------------------------------------------------------------

def test_a_cron_string_stays_a_cron_passed_as_written(tmp_path: Path) -> None:
    for text in ("*/5 * * * *", "@once", "@continuous", "@daily"):
        schedule = make_pipeline(tmp_path, base=IN_MEMORY, schedule=text).schedule
        assert schedule is not None
        assert (schedule.cron, schedule.data_driven) == (text, False)


def test_the_mapping_form_reads_thresholds_and_durations(tmp_path: Path) -> None:
    schedule = make_pipeline(tmp_path, base=IN_MEMORY,
                             schedule={"cron": "*/5 * * * *", "lag_records": 50_000,
                                                 "max_delay": "2m", "poll": "10s"}).schedule
    assert schedule == ScheduleConfig(cron="*/5 * * * *", lag_records=50_000,
                                      max_delay=120_000, poll=10_000)
    assert schedule.data_driven
    alone = make_pipeline(tmp_path, base=IN_MEMORY, schedule={"max_delay": "30s"}).schedule
    assert alone == ScheduleConfig(max_delay=30_000)  # poll defaults to 5 s, no cron
    assert make_pipeline(tmp_path, base=IN_MEMORY).schedule is None  # no schedule: manual runs only


@pytest.mark.parametrize(("schedule", "message"), [
    ({}, "schedule needs cron, lag_records or max_delay (at least one)"),
    ({"poll": "5s"}, "schedule needs cron, lag_records or max_delay (at least one)"),
    ({"lag_records": 0}, "field 'schedule.lag_records': Input should be greater than 0"),
    ({"lag_records": "many"}, "field 'schedule.lag_records'"),
    ({"max_delay": "0s"}, "field 'schedule.max_delay': max_delay must be positive"),
    ({"max_delay": "soon"}, "field 'schedule.max_delay': expected a duration like 60s"),
    ({"max_delay": "2m", "poll": "200ms"}, "field 'schedule.poll': poll must be at least 1s"),
    ({"cron": "every minute", "lag_records": 5}, "field 'schedule.cron': cron 'every minute': "
                                                 "expected five valid fields"),
    ({"cron": "@once", "lag_records": 5}, "field 'schedule.cron'"),
    ({"lag": 5}, "field 'schedule.lag': Extra inputs are not permitted"),
    ("", "schedule: an empty string"),
    (["*/5 * * * *"], "schedule is a cron string or a mapping"),
])
def test_a_bad_schedule_fails_at_load_naming_the_field(tmp_path: Path, schedule: object,
                                                       message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        make_pipeline(tmp_path, base=IN_MEMORY, schedule=schedule)
    assert message in str(raised.value)


# -- the decision (pure) ------------------------------------------------------------------------

def seen(lag: int, committed: int = 4, oldest_ms: int | None = None,
         data_loss: str | None = None) -> Observation:
    """An observation of two partitions sharing ``lag``."""
    first = lag // 2
    return Observation(committed, (PartitionLag(0, 100, 100 + first, first, 0),
                                   PartitionLag(1, 50, 50 + lag - first, lag - first, 0)),
                       oldest_ms, data_loss)


LAG = ScheduleConfig(lag_records=1000)
DELAY = ScheduleConfig(max_delay=60_000)
BOTH = ScheduleConfig(lag_records=1000, max_delay=60_000)


@pytest.mark.parametrize(("schedule", "observed", "fire", "reason"), [
    (LAG, seen(999), False, Reason.NOT_DUE),
    (LAG, seen(1000), True, Reason.LAG),
    (LAG, seen(0), False, Reason.NOT_DUE),
    (DELAY, seen(5, oldest_ms=NOW - 59_999), False, Reason.NOT_DUE),
    (DELAY, seen(5, oldest_ms=NOW - 60_000), True, Reason.DELAY),
    (DELAY, seen(0), False, Reason.NOT_DUE),  # a quiet topic: nothing to be old
    (DELAY, seen(5, oldest_ms=NOW + 5_000), False, Reason.NOT_DUE),  # a clock ahead: wait
    (DELAY, seen(2000, oldest_ms=NOW), False, Reason.NOT_DUE),  # lag alone never counts here
    (BOTH, seen(10, oldest_ms=NOW - 61_000), True, Reason.DELAY),
    (BOTH, seen(5000, oldest_ms=NOW), True, Reason.LAG),
    (LAG, seen(1, data_loss="gone"), True, Reason.DATA_LOSS),  # begin must say so, loudly
])
def test_an_epoch_is_due_when_a_threshold_is_reached(schedule: ScheduleConfig,
                                                     observed: Observation, fire: bool,
                                                     reason: Reason) -> None:
    decision = decide(schedule, observed, NOW)
    assert (decision.fire, decision.reason) == (fire, reason)
    assert decision.lag == observed.lag
    assert decision.committed_epoch == observed.committed_epoch


def test_one_request_per_checkpoint_until_it_moves_or_the_request_looks_lost() -> None:
    """A run in progress reads from the same checkpoint: no second request piles up behind
    it; its commit (the checkpoint moves) re-arms; a request unanswered for refire_ms (the DAG
    was paused, the run failed) is made again."""
    asked = Fired(committed_epoch=4, at_ms=NOW - 1_000)
    waiting = decide(LAG, seen(5000, committed=4), NOW, asked, refire_ms=60_000)
    assert (waiting.fire, waiting.reason) == (False, Reason.ASKED)
    moved = decide(LAG, seen(5000, committed=5), NOW, asked, refire_ms=60_000)
    assert (moved.fire, moved.reason) == (True, Reason.LAG)
    lost = decide(LAG, seen(5000, committed=4), NOW + 59_000, asked, refire_ms=60_000)
    assert (lost.fire, lost.reason) == (True, Reason.LAG)
    drained = decide(LAG, seen(10, committed=5), NOW, asked, refire_ms=60_000)
    assert (drained.fire, drained.reason) == (False, Reason.NOT_DUE)


def test_the_event_payload_says_why() -> None:
    decision = Decision(True, Reason.DELAY, 7, 42, 61_000)
    assert decision.payload("clicks") == {"pipeline": "clicks", "reason": "max_delay",
                                          "committed_epoch": 7, "lag": 42,
                                          "oldest_age_ms": 61_000}


# -- the observation: the real checkpoint table, a source's watermarks --------------------------

@dataclass
class Stamps:
    """``RecordStamps`` whose records are stamped ``base + offset`` (ms); counts the reads."""

    base: int = NOW - 600_000
    reads: list[tuple[int, int]] = field(default_factory=list)

    def first_timestamp(self, config: PipelineConfig, partition: TopicPartition,
                        offset: int) -> int:
        self.reads.append((partition.partition, offset))
        return self.base + 10 * partition.partition + offset


def test_before_the_first_epoch_the_backlog_is_the_lag(tmp_path: Path) -> None:
    config = make_pipeline(tmp_path, base=IN_MEMORY, schedule={"lag_records": 30})
    source, stamps = MemorySource(), Stamps()  # 25 + 15 records
    observed = observe(config, source=source, stamps=stamps)
    assert (observed.committed_epoch, observed.lag) == (-1, 40)
    assert stamps.reads == [(0, 0), (1, 0)]  # the first record of each partition
    assert observed.oldest_ms == stamps.base
    assert decide(config.schedule, observed, NOW).fire
    assert not (tmp_path / config.name).exists()  # looking creates no table


def test_the_lag_counts_from_the_last_checkpoint(tmp_path: Path) -> None:
    config = make_pipeline(tmp_path, base=IN_MEMORY, schedule={"lag_records": 30},
                           epoch={"max_records": 1000, "staging_retention": 2})
    source = MemorySource()
    run_epoch(config, source)  # epoch 0 reads all 40
    source.produce(0, 12)
    source.produce(1, 3)
    stamps = Stamps()
    observed = observe(config, source=source, stamps=stamps)
    assert (observed.committed_epoch, observed.lag) == (0, 15)
    assert sorted(stamps.reads) == [(0, 25), (1, 15)]  # where epoch 1 starts
    assert observed.oldest_ms == stamps.base + 25
    assert not decide(config.schedule, observed, NOW).fire
    source.produce(1, 15)
    assert decide(config.schedule, observe(config, source=source, stamps=stamps), NOW).fire
    without = observe(config, source=source, stamps=Stamps(), with_oldest=False)
    assert (without.lag, without.oldest_ms) == (30, None)


def test_a_drained_topic_reads_no_record(tmp_path: Path) -> None:
    config = make_pipeline(tmp_path, base=IN_MEMORY, schedule={"max_delay": "1s"})
    source = MemorySource()
    run_epoch(config, source)
    stamps = Stamps()
    observed = observe(config, source=source, stamps=stamps)
    assert (observed.lag, observed.oldest_ms, stamps.reads) == (0, None, [])
    assert not decide(config.schedule, observed, NOW).fire


def test_records_gone_after_the_checkpoint_are_due_so_begin_reports_them(tmp_path: Path
                                                                         ) -> None:
    config = make_pipeline(tmp_path, base=IN_MEMORY, schedule={"max_delay": "10m"})
    source = MemorySource()
    run_epoch(config, source)
    source.produce(0, 10)
    source.truncate(0, 30)  # offsets 25..29 expired before any epoch read them
    observed = observe(config, source=source, stamps=Stamps())
    assert observed.data_loss is not None and "partition 0 from 25" in observed.data_loss
    decision = decide(config.schedule, observed, NOW)
    assert (decision.fire, decision.reason) == (True, Reason.DATA_LOSS)


def test_kafka_start_latest_counts_nothing_before_the_first_epoch(tmp_path: Path) -> None:
    """The plan's start rule, reused: a new pipeline starting at ``latest`` has no backlog."""
    config = make_pipeline(tmp_path, base=IN_MEMORY, schedule={"lag_records": 1})
    config = same_pipeline(config, kafka={"topic": "in-memory", "start": "latest"},
                           schedule={"lag_records": 1})
    observed = observe(config, source=MemorySource(), stamps=Stamps())
    assert observed.lag == 0
    assert not decide(config.schedule, observed, NOW).fire


# -- the trigger's serialization (what the triggerer re-instantiates) ----------------------------

def test_the_trigger_serializes_to_its_classpath_and_kwargs(tmp_path: Path) -> None:
    from airflow.sdk.module_loading import import_string

    from eos.airflow.triggers import EpochDueTrigger, epoch_schedule, lag_asset_uri

    config = make_pipeline(tmp_path, base=IN_MEMORY,
                           schedule={"lag_records": 500, "max_delay": "2m",
                                               "poll": "3s"})
    (asset,) = epoch_schedule(config)
    assert asset.uri == lag_asset_uri(config) == f"x-eos-lag://{config.name}"
    (watcher,) = asset.watchers
    classpath, kwargs = watcher.trigger.serialize()
    assert import_string(classpath) is EpochDueTrigger
    assert kwargs == {"pipeline": config.name, "config_path": config.source_path,
                      "lag_records": 500, "max_delay_ms": 120_000, "poll_ms": 3000,
                      "refire_ms": None}
    again = EpochDueTrigger(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    assert again.schedule() == ScheduleConfig(lag_records=500, max_delay=120_000, poll=3000)
