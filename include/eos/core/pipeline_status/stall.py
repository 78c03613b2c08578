"""The stall alert's decision (``alerts.stall_after``): has the checkpoint stopped moving while
records wait?"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from eos.core import checkpoints
from eos.core.config import PipelineConfig
from eos.core.errors import ConfigError, EosError
from eos.core.layout import tables_for
from eos.core.pipeline_status.model import total_lag
from eos.core.pipeline_status.reading import partition_lags

if TYPE_CHECKING:
    from eos.core.plan import Source


class StallVerdict(StrEnum):
    """Whether a pipeline is stalled: its checkpoint has not moved for ``stall_after`` while
    records wait. A quiet topic (nothing to read) is never stalled, however old its checkpoint."""

    STALLED = "stalled"
    ADVANCING = "advancing"  # the checkpoint moved within stall_after
    CAUGHT_UP = "caught up"  # nothing waits: no lag


@dataclass(frozen=True)
class StallCheck:
    """One look at a pipeline for the stall alert: the verdict and what it was decided on."""

    pipeline: str
    verdict: StallVerdict
    committed_epoch: int  # -1: none
    committed_at: datetime | None  # the last checkpoint's time (None: nothing committed)
    age_s: float | None  # how long the checkpoint has not moved (None: nothing committed)
    lag: int | None  # records waiting (None: unknown, e.g. the broker did not answer)
    stall_after_s: float
    lag_error: str | None = None

    @property
    def stalled(self) -> bool:
        return self.verdict is StallVerdict.STALLED

    def fields(self) -> dict[str, Any]:
        """The check as the alert's log line and its notifier's context carry it."""
        return {"pipeline": self.pipeline, "verdict": str(self.verdict),
                "committed_epoch": self.committed_epoch,
                "committed_at": self.committed_at.isoformat() if self.committed_at else None,
                "checkpoint_age_s": None if self.age_s is None else round(self.age_s, 1),
                "lag": self.lag, "stall_after_s": self.stall_after_s,
                "lag_error": self.lag_error}

    def message(self) -> str:
        """One sentence for a person (a chat message, a page)."""
        since = ("no epoch committed yet" if self.committed_at is None else
                 f"epoch {self.committed_epoch} committed {self.age_s:.0f} s ago")
        waiting = (f"lag unknown ({self.lag_error})" if self.lag is None
                   else f"{self.lag} records waiting")
        return f"pipeline {self.pipeline} is {self.verdict}: {since}, {waiting}"


def stall_verdict(age_s: float | None, lag: int | None, stall_after_s: float) -> StallVerdict:
    """The decision. Stalled: records wait (or how many is unknown: a broker that does not
    answer cannot prove the pipeline caught up) and the checkpoint has not moved for
    ``stall_after_s`` (or nothing was ever committed: the caller, the DAG run's deadline, has
    already waited that long)."""
    if lag == 0:
        return StallVerdict.CAUGHT_UP
    if age_s is not None and age_s < stall_after_s:
        return StallVerdict.ADVANCING
    return StallVerdict.STALLED


def check_stall(config: PipelineConfig, stall_after_ms: int | None = None,
                source: Source | None = None, now: datetime | None = None) -> StallCheck:
    """Look at ``config``'s pipeline now: the last checkpoint's age and the lag behind it (the
    watermarks of ``source``, the pipeline's Kafka topic by default, against the checkpoint's
    offsets, as ``eos status`` reads them). Reads only; a broker that does not answer makes the
    lag unknown, not an error."""
    from eos.core.plan import KafkaSource

    stall_after_ms = stall_after_ms or config.alerts.stall_after
    if stall_after_ms is None:
        raise ConfigError(f"pipeline {config.name} sets no alerts.stall_after")
    tables = tables_for(config)
    committed = checkpoints.last_checkpointed(tables, config.app_id)
    last = checkpoints.last(tables, committed)
    try:
        marks, lag_error = (source or KafkaSource()).watermarks(config), None
    except EosError as error:
        marks, lag_error = {}, str(error)
    partitions = partition_lags(config, last.until if last else {}, marks)
    lag = None if lag_error else total_lag(partitions)
    committed_at = last.committed_at if last else None
    if committed_at is not None and committed_at.tzinfo is None:
        committed_at = committed_at.replace(tzinfo=UTC)  # Delta timestamps are UTC
    now = now or datetime.now(UTC)
    age_s = None if committed_at is None else max(0.0, (now - committed_at).total_seconds())
    return StallCheck(
        pipeline=config.name,
        verdict=stall_verdict(age_s, lag, stall_after_ms / 1000),
        committed_epoch=committed, committed_at=committed_at, age_s=age_s, lag=lag,
        stall_after_s=stall_after_ms / 1000, lag_error=lag_error,
    )
