"""Whether the data asks for an epoch now: the decision behind data-driven schedules
(``schedule: {lag_records, max_delay}``, watched in Airflow's triggerer by
``eos.airflow.triggers``).

It reads only what the planner's start rule reads (docs/design.md, "Plan"): the last checkpoint
(where the next epoch starts, ``partition_lags``) and the topic's watermarks, plus, for
``max_delay``, the Kafka timestamp of the first record after the checkpoint in each partition,
read by offset with ``assign`` (no consumer group is joined, no offset is committed). What an
epoch reads is still decided by ``begin``'s plan, so a decision made on a stale view, lost or
repeated, costs at most one early or empty epoch, never a record.

The decision is a pure function (``decide``) of that observation, the thresholds, the clock and
what was fired last: after firing, the watcher waits for the checkpoint to move (the epoch it
asked for committed) before it fires again, so a run in progress does not pile up requests; it
fires again anyway after ``refire_ms`` if the checkpoint has not moved (an event lost while the
DAG was paused, a run that failed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from eos.core import checkpoints
from eos.core.config import PipelineConfig, ScheduleConfig
from eos.core.errors import DataLoss
from eos.core.layout import tables_for
from eos.core.pipeline_status import PartitionLag, partition_lags, source_moved
from eos.core.plan import KafkaSource, Source
from eos.core.topics import TopicPartition

REFIRE_MS = 300_000  # a request not answered by a commit within this long is made again


class Reason(StrEnum):
    """Why an epoch is due (or why not: ``NOT_DUE``, ``ASKED``)."""

    LAG = "lag_records"  # the records after the checkpoint reached lag_records
    DELAY = "max_delay"  # the oldest record after the checkpoint is max_delay old
    DATA_LOSS = "data_loss"  # records after the checkpoint are gone: begin must say so
    # The config reads another topic than the checkpoint's offsets are of: no lag can be
    # computed; begin refuses (SourceChanged) or, after eos move-source, runs the move's plan.
    SOURCE_CHANGED = "source_changed"
    NOT_DUE = "not_due"
    ASKED = "asked"  # due, but already asked for at this checkpoint: waiting for the commit


class RecordStamps(Protocol):
    """The Kafka timestamp (ms) of the first readable record of a partition at or after an
    offset, or None when there is none to read yet."""

    def first_timestamp(self, config: PipelineConfig, partition: TopicPartition,
                        offset: int) -> int | None: ...


@dataclass
class KafkaStamps:
    """``RecordStamps`` on the pipeline's topic: one record read by offset per partition whose
    start moved, remembered (the record at an offset never changes). Assign only, no group."""

    settings: dict[str, Any] | None = None
    seen: dict[tuple[TopicPartition, int], int | None] = field(default_factory=dict)

    def first_timestamp(self, config: PipelineConfig, partition: TopicPartition,
                        offset: int) -> int | None:
        from eos.core.kafka import client_settings, read_partition

        key = (partition, offset)
        if self.seen.get(key) is not None:
            return self.seen[key]
        settings = self.settings or client_settings(config.kafka.client)
        messages = read_partition(settings, partition.topic, partition.partition, offset,
                                  group="eos-readiness", timeout_s=10.0)
        try:
            first = next(messages, None)
        finally:
            getattr(messages, "close", lambda: None)()  # a generator: closes its consumer
        # a record without a timestamp (-1) counts as old enough
        stamp = None if first is None else max(first.timestamp()[1], 0)
        self.seen = {k: v for k, v in self.seen.items() if k[0] != partition}
        self.seen[key] = stamp
        return stamp


@dataclass(frozen=True)
class Observation:
    """The lag as the next epoch would see it, and how old its oldest record is."""

    committed_epoch: int  # -1: none committed yet
    partitions: tuple[PartitionLag, ...]
    oldest_ms: int | None = None  # Kafka timestamp of the oldest record after the checkpoint
    data_loss: str | None = None  # records after the checkpoint are no longer in the log
    source_changed: str | None = None  # the checkpoint's offsets are of another topic

    @property
    def lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)


@dataclass(frozen=True)
class Fired:
    """The last request for an epoch: at which checkpoint, when (ms)."""

    committed_epoch: int
    at_ms: int


@dataclass(frozen=True)
class Decision:
    fire: bool
    reason: Reason
    committed_epoch: int
    lag: int
    oldest_age_ms: int | None

    def payload(self, pipeline: str) -> dict[str, Any]:
        """The trigger event's payload (an asset event's ``extra``): why this epoch was asked."""
        return {"pipeline": pipeline, "reason": str(self.reason),
                "committed_epoch": self.committed_epoch, "lag": self.lag,
                "oldest_age_ms": self.oldest_age_ms}


def observe(config: PipelineConfig, *, source: Source | None = None,
            stamps: RecordStamps | None = None, with_oldest: bool = True) -> Observation:
    """Read the last checkpoint and the watermarks (``source``, default the topic) and, when
    ``with_oldest``, the timestamp of the first record after the checkpoint per lagging
    partition. Creates no table; before the first epoch the checkpoint is empty."""
    tables = tables_for(config)
    committed = checkpoints.last_checkpointed(tables, config.app_id)
    last = checkpoints.last(tables, committed)
    offsets = last.until if last else {}
    if (moved := source_moved(config, last)) is not None:
        return Observation(committed, (), source_changed=moved)
    source = source if source is not None else KafkaSource()
    lags = tuple(partition_lags(config, offsets, source.watermarks(config)))
    gone = [p for p in lags if p.low is not None and p.committed is not None
            and p.committed < p.low]
    if gone:
        lost = ", ".join(f"topic '{p.topic}' partition {p.partition} from {p.committed} (log "
                         f"starts at {p.low})" for p in gone)
        return Observation(committed, lags, None, lost)
    oldest = None
    if with_oldest:
        stamps = stamps if stamps is not None else KafkaStamps()
        try:
            found = [stamps.first_timestamp(config, TopicPartition(p.topic, p.partition),
                                            p.committed)
                     for p in lags if p.lag and p.committed is not None]
        except DataLoss as error:  # removed between the watermarks and the read
            return Observation(committed, lags, None, str(error))
        oldest = min((s for s in found if s is not None), default=None)
    return Observation(committed, lags, oldest)


def decide(schedule: ScheduleConfig, seen: Observation, now_ms: int,
           fired: Fired | None = None, refire_ms: int = REFIRE_MS) -> Decision:
    """Fire when a threshold is reached and this checkpoint was not asked for yet (or was
    asked ``refire_ms`` ago and has not moved since). Pure: a function of its arguments."""
    age = None if seen.oldest_ms is None else max(0, now_ms - seen.oldest_ms)
    if seen.data_loss:
        reason = Reason.DATA_LOSS
    elif seen.source_changed:
        reason = Reason.SOURCE_CHANGED
    elif schedule.lag_records is not None and seen.lag >= schedule.lag_records:
        reason = Reason.LAG
    elif schedule.max_delay is not None and age is not None and age >= schedule.max_delay:
        reason = Reason.DELAY
    else:
        return Decision(False, Reason.NOT_DUE, seen.committed_epoch, seen.lag, age)
    asked = (fired is not None and fired.committed_epoch == seen.committed_epoch
             and now_ms - fired.at_ms < refire_ms)
    return Decision(not asked, Reason.ASKED if asked else reason, seen.committed_epoch,
                    seen.lag, age)
