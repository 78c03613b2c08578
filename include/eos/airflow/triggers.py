"""Data-driven epochs in Airflow's terms: an event trigger in the triggerer asks for a DAG run
when a pipeline's lag reaches ``schedule.lag_records`` or its oldest record after the last
checkpoint is ``schedule.max_delay`` old (``eos.core.readiness`` decides).

Wiring (Airflow 3 event-driven scheduling): the trigger (``EpochDueTrigger``, a
``BaseEventTrigger``) watches the asset ``x-eos-lag://<pipeline>`` through an ``AssetWatcher``;
each event it yields is an asset event, and the pipeline's DAG is scheduled on that asset
(``AssetOrTimeSchedule`` with the cron when one is given too). Airflow queues one run per DAG
and asset however many events arrive (the asset-DAG-run queue is keyed by the pair) and creates
it only when ``max_active_runs`` allows, so a burst of events while a run is going yields one
next run. Unlike the Kafka provider's ``MessageQueueTrigger`` this trigger joins no consumer
group and commits no offsets: the plan owns the offsets.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetWatcher
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from eos.airflow.connections import aexport_kafka_connection
from eos.airflow.storage import aexport_credentials
from eos.core.config import PipelineConfig, ScheduleConfig, load_config
from eos.core.storage import is_remote

if TYPE_CHECKING:  # the DAG file imports this module: the readers load in the triggerer only
    from eos.core.readiness import Decision, Fired, KafkaStamps

LAG_SCHEME = "x-eos-lag"  # Airflow's prefix for a scheme no provider defines


def lag_asset_uri(config: PipelineConfig) -> str:
    return f"{LAG_SCHEME}://{config.name}"


@dataclass
class _Watch:
    """What one trigger keeps between polls: the config (reloaded when its file changes), the
    timestamps already read, the last request, the last state logged."""

    config_path: str
    schedule: ScheduleConfig
    stamps: KafkaStamps | None = None
    config: PipelineConfig | None = None
    mtime: float | None = None
    fired: Fired | None = None

    def load(self) -> PipelineConfig:
        mtime = os.stat(self.config_path).st_mtime
        if self.config is None or mtime != self.mtime:
            from eos.core.readiness import KafkaStamps

            self.config, self.mtime = load_config(self.config_path), mtime
            self.stamps = KafkaStamps()
        return self.config

    async def credentials(self) -> None:
        """The store's connection in this process's environment when the tables are on one,
        and the Kafka connection's settings, as a task exports them before a phase
        (``eos.airflow.storage``, ``eos.airflow.connections``)."""
        config = await asyncio.to_thread(self.load)
        if is_remote(config.root):
            await aexport_credentials()
        await aexport_kafka_connection()

    def check(self, refire_ms: int | None) -> Decision:
        """Blocking: one look at the checkpoint and the broker, and the decision."""
        from eos.core.readiness import REFIRE_MS, decide, observe

        config = self.load()
        seen = observe(config, stamps=self.stamps,
                       with_oldest=self.schedule.max_delay is not None)
        return decide(self.schedule, seen, _now_ms(), self.fired,
                      REFIRE_MS if refire_ms is None else refire_ms)


def _now_ms() -> int:
    return int(time.time() * 1000)


class EpochDueTrigger(BaseEventTrigger):
    """Yields an event whenever the pipeline's data asks for an epoch (``eos.core.readiness``).

    Polls every ``poll_ms`` with the blocking reads (Delta log, broker) in a worker thread, so
    the triggerer's event loop is never held. A failed look (broker away, table unreadable) is
    logged once per distinct error and retried at the next poll: the trigger never exits, which
    the triggerer would answer by starting it again at once.
    """

    def __init__(self, pipeline: str, config_path: str, lag_records: int | None = None,
                 max_delay_ms: int | None = None, poll_ms: int = 5_000,
                 refire_ms: int | None = None) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.config_path = config_path
        self.lag_records = lag_records
        self.max_delay_ms = max_delay_ms
        self.poll_ms = poll_ms
        self.refire_ms = refire_ms

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "pipeline": self.pipeline, "config_path": self.config_path,
            "lag_records": self.lag_records, "max_delay_ms": self.max_delay_ms,
            "poll_ms": self.poll_ms, "refire_ms": self.refire_ms,
        })

    def schedule(self) -> ScheduleConfig:
        return ScheduleConfig(lag_records=self.lag_records, max_delay=self.max_delay_ms,
                              poll=self.poll_ms)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # Imported off the event loop: the readers load Delta and Kafka clients (~0.5 s).
        readiness = await asyncio.to_thread(importlib.import_module, "eos.core.readiness")
        watch = _Watch(self.config_path, self.schedule())
        self.log.info("eos trigger: watching pipeline=%s lag_records=%s max_delay_ms=%s "
                      "poll_ms=%s", self.pipeline, self.lag_records, self.max_delay_ms,
                      self.poll_ms)
        problem: str | None = None
        shown: tuple[int, str] | None = None
        exported = False
        while True:
            try:
                if not exported:  # first, and again after a failed look (a rotated secret)
                    await watch.credentials()
                    exported = True
                decision = await asyncio.to_thread(watch.check, self.refire_ms)
            except Exception as error:  # logged, retried: the broker or a table may come back
                exported = False
                text = f"{type(error).__name__}: {error}"
                if text != problem:
                    self.log.warning("eos trigger: pipeline=%s cannot look at its lag: %s",
                                     self.pipeline, text)
                problem = text
            else:
                problem = None
                # One line per checkpoint and verdict, not per poll: a live topic's lag
                # changes at every look.
                state = (decision.committed_epoch, str(decision.reason))
                if decision.fire:
                    watch.fired = readiness.Fired(decision.committed_epoch, _now_ms())
                    self.log.info("eos trigger: pipeline=%s epoch due reason=%s lag=%s "
                                  "committed_epoch=%s oldest_age_ms=%s", self.pipeline,
                                  decision.reason, decision.lag, decision.committed_epoch,
                                  decision.oldest_age_ms)
                    yield TriggerEvent(decision.payload(self.pipeline))
                elif state != shown and decision.reason is not readiness.Reason.ASKED:
                    self.log.info("eos trigger: pipeline=%s lag=%s committed_epoch=%s "
                                  "oldest_age_ms=%s: no epoch due", self.pipeline,
                                  decision.lag, decision.committed_epoch,
                                  decision.oldest_age_ms)
                shown = state
            await asyncio.sleep(self.poll_ms / 1000)


def lag_asset(config: PipelineConfig) -> Asset:
    """The asset whose events start the pipeline's epochs, watched by its ``EpochDueTrigger``."""
    schedule = config.schedule
    if schedule is None or not schedule.data_driven:
        raise ValueError(f"pipeline {config.name} has no lag_records or max_delay to watch")
    trigger = EpochDueTrigger(
        pipeline=config.name, config_path=str(config.source_path),
        lag_records=schedule.lag_records, max_delay_ms=schedule.max_delay,
        poll_ms=schedule.poll)
    uri = lag_asset_uri(config)
    return Asset(name=uri, uri=uri,
                 watchers=[AssetWatcher(name=f"eos-lag-{config.name}", trigger=trigger)])


def epoch_schedule(config: PipelineConfig) -> Any:
    """The DAG's ``schedule``: the cron as written; the lag asset when the data starts epochs;
    both (``AssetOrTimeSchedule``: whichever comes first) when both are given."""
    schedule = config.schedule
    if schedule is None:
        return None
    if not schedule.data_driven:
        return schedule.cron
    asset = lag_asset(config)
    if schedule.cron is None:
        return [asset]
    from airflow import settings
    from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable  # the DAG author's kinds

    return AssetOrTimeSchedule(
        timetable=CronTriggerTimetable(schedule.cron, timezone=settings.TIMEZONE),
        assets=[asset])
