"""The stall decision (``alerts.stall_after``, ``eos.core.pipeline_status.check_stall``): the
checkpoint's
age and the lag behind it, read from the pipeline's real checkpoint table and its source's
watermarks. The Airflow half (the deadline that asks, the callback that alerts) is in
tests/integration/airflow/test_alerts.py."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from eos.core.config import PipelineConfig
from eos.core.errors import ConfigError, KafkaUnavailable
from eos.core.pipeline_status import StallVerdict, check_stall, stall_verdict
from eos.core.topics import Marks

from support.memory import MemorySource, run_epoch
from support.pipelines import IN_MEMORY, make_pipeline

FIFTEEN_MIN_S = 900.0


@pytest.mark.parametrize(("age_s", "lag", "verdict"), [
    (None, 40, StallVerdict.STALLED),  # nothing ever committed while records wait
    (None, 0, StallVerdict.CAUGHT_UP),  # a new pipeline on an empty topic
    (FIFTEEN_MIN_S + 1, 1, StallVerdict.STALLED),
    (FIFTEEN_MIN_S, 1, StallVerdict.STALLED),  # exactly stall_after: the deadline has passed
    (FIFTEEN_MIN_S - 1, 10**6, StallVerdict.ADVANCING),
    (10 * FIFTEEN_MIN_S, 0, StallVerdict.CAUGHT_UP),  # a quiet topic is no stall
    (FIFTEEN_MIN_S + 1, None, StallVerdict.STALLED),  # lag unknown cannot prove caught up
    (1.0, None, StallVerdict.ADVANCING),
])
def test_the_verdict(age_s: float | None, lag: int | None, verdict: StallVerdict) -> None:
    assert stall_verdict(age_s, lag, FIFTEEN_MIN_S) is verdict


@pytest.fixture
def alerting(tmp_path: Path) -> PipelineConfig:
    return make_pipeline(tmp_path, base=IN_MEMORY, alerts={"stall_after": "15m"})


def test_a_pipeline_with_a_backlog_and_no_checkpoint_is_stalled(
        alerting: PipelineConfig, source: MemorySource) -> None:
    check = check_stall(alerting, source=source)
    assert check.verdict is StallVerdict.STALLED
    assert (check.committed_epoch, check.committed_at, check.age_s) == (-1, None, None)
    assert check.lag == 40 and check.stall_after_s == FIFTEEN_MIN_S
    assert check.message() == (f"pipeline {alerting.name} is stalled: no epoch committed yet, "
                               "40 records waiting")


def test_the_checkpoint_age_and_the_lag_behind_it_decide(
        alerting: PipelineConfig, source: MemorySource) -> None:
    run_epoch(alerting, source)  # epoch 0 reads all 40 records
    check = check_stall(alerting, source=source)
    assert check.verdict is StallVerdict.CAUGHT_UP and check.lag == 0
    assert check.committed_epoch == 0 and check.committed_at is not None
    committed_at = check.committed_at

    source.produce(0, 7)
    source.produce(1, 5)
    soon = check_stall(alerting, source=source, now=committed_at + timedelta(minutes=14))
    assert soon.verdict is StallVerdict.ADVANCING and soon.lag == 12
    assert soon.age_s == pytest.approx(14 * 60)
    late = check_stall(alerting, source=source, now=committed_at + timedelta(minutes=16))
    assert late.verdict is StallVerdict.STALLED and late.lag == 12
    assert late.fields() == {
        "pipeline": alerting.name, "verdict": "stalled", "committed_epoch": 0,
        "committed_at": committed_at.isoformat(), "checkpoint_age_s": 960.0, "lag": 12,
        "stall_after_s": FIFTEEN_MIN_S, "lag_error": None}

    run_epoch(alerting, source)  # the checkpoint moves: the stall is over
    after = check_stall(alerting, source=source, now=committed_at + timedelta(minutes=16))
    assert after.committed_epoch == 1 and after.verdict is StallVerdict.CAUGHT_UP


@dataclass
class DownSource(MemorySource):
    """A source whose broker does not answer."""

    def watermarks(self, config: PipelineConfig) -> Marks:
        raise KafkaUnavailable("no broker answered within 10 s")


def test_a_broker_that_does_not_answer_leaves_the_lag_unknown_not_the_pipeline_healthy(
        alerting: PipelineConfig, source: MemorySource) -> None:
    run_epoch(alerting, source)
    down = DownSource()
    committed_at = check_stall(alerting, source=source).committed_at
    assert committed_at is not None
    recent = check_stall(alerting, source=down, now=committed_at + timedelta(minutes=1))
    assert recent.verdict is StallVerdict.ADVANCING and recent.lag is None
    old = check_stall(alerting, source=down, now=committed_at + timedelta(hours=1))
    assert old.verdict is StallVerdict.STALLED
    assert old.lag_error == "no broker answered within 10 s"
    assert "lag unknown (no broker answered within 10 s)" in old.message()


def test_alerts_config(tmp_path: Path) -> None:
    config = make_pipeline(tmp_path, base=IN_MEMORY,
                           alerts={"stall_after": "15m", "notifier": "pkg.mod.Notify",
                                             "notifier_kwargs": {"channel": "#data"}})
    assert config.alerts.stall_after == 900_000
    assert config.alerts.notifier == "pkg.mod.Notify"
    assert make_pipeline(tmp_path / "b", base=IN_MEMORY).alerts.stall_after is None
    with pytest.raises(ConfigError, match=r"set alerts\.stall_after too"):
        make_pipeline(tmp_path / "c", base=IN_MEMORY, alerts={"notifier": "pkg.mod.Notify"})
    with pytest.raises(ConfigError, match="dotted path"):
        make_pipeline(tmp_path / "d", base=IN_MEMORY,
                      alerts={"stall_after": "1m", "notifier": "not a path"})
    with pytest.raises(ConfigError, match=r"alerts\.stall_after"):
        make_pipeline(tmp_path / "e", base=IN_MEMORY, alerts={"stall_after": "500ms"})
    with pytest.raises(ConfigError, match=r"sets no alerts\.stall_after"):
        check_stall(make_pipeline(tmp_path / "f", base=IN_MEMORY), source=MemorySource())
