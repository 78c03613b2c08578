"""What the epochs view shows of a pipeline: the recorded part read per request, the broker's
part (each sink's own epoch, the topic's high watermarks) read in the background.

The API server answers every UI and REST request from a few threads. A Kafka read waits up to
``eos.core.kafka.METADATA_TIMEOUT_S`` (10 s) when a broker is down or slow, per sink, so the
view must never make one in a request. A request reads only what the protocol recorded: the
checkpoint table (committed epoch, committed offsets), the epoch log and the audit verdicts.
What only a broker knows is read by ``BrokerState``'s one background thread per API server
process, for the pipelines someone looked at lately, and shown with its age ("as of 12 s ago"):
a broker that is down makes that age grow, never a page slow.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from eos.core import checkpoints
from eos.core import verdicts as audits
from eos.core.config import PipelineConfig
from eos.core.errors import EosError
from eos.core.layout import tables_for
from eos.core.pipeline_status import PartitionLag, PipelineStatus, partition_lags
from eos.core.storage import is_remote
from eos.core.topics import Marks, TopicPartition

REFRESH_S = 15.0  # how often a watched pipeline's sinks and watermarks are read again
WATCHED_S = 600.0  # a pipeline nobody looked at for this long is no longer read
STALE_S = 3 * REFRESH_S  # older than this, the page says the broker's part is stale


@dataclass(frozen=True)
class BrokerReading:
    """One background read of what only Kafka (and the sinks) know, and when it finished."""

    at: datetime
    sinks: dict[str, int] = field(default_factory=dict)
    sinks_error: str | None = None
    marks: Marks = field(default_factory=dict)  # topic-partition -> (low, high)
    lag_error: str | None = None


@dataclass(frozen=True)
class SinkState:
    """How old the broker's part of a page is; ``at`` None: not read yet (reading now)."""

    at: datetime | None

    def age_s(self, now: datetime | None = None) -> float | None:
        if self.at is None:
            return None
        return max(0.0, ((now or datetime.now(UTC)) - self.at).total_seconds())

    @property
    def stale(self) -> bool:
        age = self.age_s()
        return age is None or age > STALE_S

    def describe(self) -> str:
        age = self.age_s()
        if age is None:
            return "sink state and lag not read yet: reading them in the background"
        return (f"sink state and lag as of {age:.0f} s ago"
                + (" (stale: the broker or a sink is slow to answer)" if self.stale else ""))

    def to_json(self) -> dict[str, Any]:
        age = self.age_s()
        return {"at": self.at.isoformat() if self.at else None,
                "age_s": None if age is None else round(age, 1), "stale": self.stale}


def read_broker(config: PipelineConfig) -> BrokerReading:
    """The slow part, for the background thread only: each sink's marker and the watermarks
    (``eos.core.pipeline_status.pipeline_status``, which reports a broker it cannot read, not
    raises)."""
    from eos.core.pipeline_status import pipeline_status

    try:
        status = pipeline_status(config, limit=0, with_lag=True)
    except EosError as error:  # the recorded tables themselves could not be read
        return BrokerReading(datetime.now(UTC), sinks_error=str(error), lag_error=str(error))
    return BrokerReading(datetime.now(UTC), sinks=status.sinks, sinks_error=status.sinks_error,
                         marks={TopicPartition(p.topic, p.partition): (p.low, p.high)
                                for p in status.partitions
                                if p.low is not None and p.high is not None},
                         lag_error=status.lag_error)


class BrokerState:
    """The latest ``BrokerReading`` per pipeline, refreshed by one daemon thread.

    ``latest`` never waits for a read: it marks the pipeline watched and returns what it has.
    The thread reads the watched pipelines one after another (never-read ones first), every
    ``refresh_s``; it starts with the first ``latest``, so only the API server runs it.
    """

    def __init__(self, read: Any = read_broker, refresh_s: float = REFRESH_S) -> None:
        self._read = read
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._readings: dict[str, BrokerReading] = {}
        self._watched: dict[str, tuple[PipelineConfig, float]] = {}
        self._thread: threading.Thread | None = None

    def latest(self, config: PipelineConfig) -> BrokerReading | None:
        with self._lock:
            self._watched[config.name] = (config, time.monotonic())
            reading = self._readings.get(config.name)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="eos-broker-state",
                                                daemon=True)
                self._thread.start()
        if reading is None:
            self._wake.set()
        return reading

    def _due(self) -> list[PipelineConfig]:
        """Watched pipelines, the never-read first; forgets those nobody looked at lately."""
        now = time.monotonic()
        with self._lock:
            for name in [n for n, (_, seen) in self._watched.items() if now - seen > WATCHED_S]:
                del self._watched[name]
                self._readings.pop(name, None)
            configs = [config for config, _ in self._watched.values()]
            return sorted(configs, key=lambda c: c.name in self._readings)

    def _run(self) -> None:
        while True:
            for config in self._due():
                try:
                    reading = self._read(config)
                except Exception as error:  # the thread must outlive any read
                    reading = BrokerReading(datetime.now(UTC), sinks_error=repr(error),
                                            lag_error=repr(error))
                with self._lock:
                    if config.name in self._watched:
                        self._readings[config.name] = reading
            self._wake.wait(self._refresh_s)
            self._wake.clear()


BROKER_STATE = BrokerState()


def recorded_status(config: PipelineConfig, limit: int,
                    reading: BrokerReading | None = None) -> PipelineStatus:
    """The page's status without a Kafka read: the checkpoint table, the epoch log and the
    verdicts as recorded now, with the broker's part from ``reading`` (None: unknown yet).

    The lag is the committed offsets recorded now against the high watermarks as last read,
    so it never counts records the checkpoint already covers.
    """
    from eos.airflow.connections import export_kafka_connection
    from eos.airflow.storage import export_credentials
    from eos.core.kafka import client_settings, redact
    from eos.core.pipeline_status.reading import logged_epochs

    tables = tables_for(config)
    if is_remote(tables.root):
        export_credentials()  # the API server reads the tables with the tasks' connection
    export_kafka_connection()  # and the broker's watermarks with theirs
    committed = checkpoints.last_checkpointed(tables, config.app_id)
    epochs, last_logged = (logged_epochs(tables, config.app_id, committed, limit) if limit > 0
                           else ([], None))
    try:
        settings = client_settings(config.kafka.client)
    except EosError:
        settings = dict(config.kafka.client)
    status = PipelineStatus(
        name=config.name, topic=config.kafka.describe(), dag_id=config.dag_id,
        tables_root=str(tables.root), committed_epoch=committed, epochs=epochs,
        epochs_logged=None if last_logged is None else last_logged + 1,
        last_audit=audits.latest(tables), client=redact(settings))
    if reading is None:
        return status
    return replace(status, sinks=reading.sinks, sinks_error=reading.sinks_error,
                   partitions=_lags(config, tables, committed, reading.marks),
                   lag_error=reading.lag_error)


def _lags(config: PipelineConfig, tables: Any, committed: int,
          marks: Marks) -> list[PartitionLag]:
    """``eos status``'s lags (before the first epoch: the backlog), against watermarks read
    earlier: never below 0 when the checkpoint has moved past them since."""
    last = checkpoints.last(tables, committed)
    return [p if p.lag is None else replace(p, lag=max(0, p.lag))
            for p in partition_lags(config, last.until if last else {}, marks)]
