"""Data-driven epochs under a real ``airflow standalone`` (API server, scheduler, DAG processor,
triggerer): pipelines whose ``schedule`` has no cron, only ``lag_records`` or ``max_delay``, so
every run is started by ``eos.airflow.triggers.EpochDueTrigger`` in the triggerer through its
asset ``x-eos-lag://<pipeline>``.

Two pipelines run side by side on the embedded broker, their epochs on the shared Spark Connect
server:
- ``delay`` (``max_delay: 10s``): its topic starts empty and stays quiet for a while (no run);
  300 records stamped now start one epoch no sooner than 10 s later and within a few seconds
  of that, which reads all 300;
- ``lag`` (``lag_records: 1000``, ``epoch.max_records: 1000``): 500 records are not enough (no
  run); 2,700 more (3,200) yield three consecutive runs, epochs 0, 1 and 2 of 1,000 records
  each, and the 200 left start none; 800 more start epoch 3, and five asset events posted while
  its run is going are queued as one (Airflow's asset-DAG-run queue is keyed by DAG and asset,
  and ``max_active_runs=1`` holds the run back) and start one next run: epoch 4, empty.
Every epoch is committed exactly once (the checkpoint table), each run planned its own epoch
(the epoch log), and no run was ever started by a clock.

Two quick tests on the broker alone come first: the trigger's loop asks once per checkpoint,
and its ``max_delay`` read (one record by offset) leaves no offset under its group id.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from eos.core import checkpoints, epochlog
from eos.core.config import PipelineConfig
from eos.core.kafka import client_settings
from eos.core.layout import tables_for
from eos.core.readiness import KafkaStamps, Reason, decide, observe
from eos.sinks.kafka.topics import ensure_topic
from eos.tools.generator import BASE_TIME_MS, GeneratorSpec
from eos.tools.pipelines import write_pipeline
from eos.tools.produce import produce

from support.airflow_standalone import POLL_S, Airflow, running_airflow, wait_for
from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]

DELAY_S = 10
LAG_RECORDS = 1000  # = dag_pipeline's epoch.max_records
QUIET_S = 15.0  # the triggers look every second: fifteen looks at a quiet topic
RUNS_TIMEOUT_S = 300.0
SPEC = GeneratorSpec(events=500, keys=10, interval_ms=50, seed=28)


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, kafka: str
              ) -> dict[str, PipelineConfig]:
    directory = tmp_path_factory.mktemp("data-driven")
    delay = make_pipeline(directory, dag=(data_dir, "ddelay"), records=replace(SPEC, events=0),
                         schedule={"max_delay": f"{DELAY_S}s", "poll": "1s"})
    ensure_topic(client_settings(delay.kafka.client), delay.kafka.topic, None)  # quiet, empty
    lag = make_pipeline(directory, dag=(data_dir, "ddlag"), records=SPEC,
                       schedule={"lag_records": LAG_RECORDS, "poll": "1s"})
    return {"delay": delay, "lag": lag}


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory, pipelines: dict[str, PipelineConfig],
            data_dir: Path, kafka: str, spark_server: dict) -> Iterator[Airflow]:
    extra = {
        # Unpaused when parsed: the DAG processor registers an asset's watchers only for a
        # DAG that is active and unpaused.
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
    }
    with running_airflow(tmp_path_factory.mktemp("airflow-home"), list(pipelines.values()),
                         data_dir, extra_env=extra) as instance:
        yield instance


# -- reading Airflow ----------------------------------------------------------------------------

def runs_of(airflow: Airflow, dag_id: str) -> list[dict[str, Any]]:
    """The DAG's runs in the order they were asked for (asset-triggered runs have no logical
    date)."""
    return airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns",
                       params={"order_by": "run_after", "limit": 100})["dag_runs"]


def summarize(airflow: Airflow, dag_id: str) -> str:
    """The runs and their task states, for failure messages (``airflow_standalone.summarize``
    orders by logical date, which asset-triggered runs do not have)."""
    lines = []
    for run in runs_of(airflow, dag_id):
        tis = airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}"
                                 "/taskInstances")["task_instances"]
        states = {ti["task_id"]: ti["state"] for ti in tis}
        lines.append(f"{run['dag_run_id']} {run['run_type']} {run['state']} {states}")
    return "\n".join(lines)


def lag_asset(airflow: Airflow, config: PipelineConfig) -> dict[str, Any]:
    uri = f"x-eos-lag://{config.name}"
    assets = airflow.api("GET", "/api/v2/assets", params={"uri_pattern": uri})["assets"]
    (asset,) = [a for a in assets if a["uri"] == uri]
    return asset


def asset_events(airflow: Airflow, asset_id: int) -> list[dict[str, Any]]:
    return airflow.api("GET", "/api/v2/assets/events",
                       params={"asset_id": asset_id, "order_by": "timestamp",
                               "limit": 100})["asset_events"]


def trigger_lines(airflow: Airflow, config: PipelineConfig) -> list[str]:
    """The trigger's own log lines (the triggerer's output, inside the standalone's)."""
    text = airflow.output.read_text(errors="replace")
    return [line for line in text.splitlines()
            if "eos trigger:" in line and f"pipeline={config.name} " in line]


def at(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def wait_for_runs(airflow: Airflow, config: PipelineConfig, count: int) -> list[dict[str, Any]]:
    """Wait until ``count`` runs of the DAG succeeded; fail at once on a failed run."""
    def done() -> list[dict[str, Any]] | None:
        runs = runs_of(airflow, config.dag_id)
        if any(run["state"] == "failed" for run in runs):
            pytest.fail("a run failed:\n" + summarize(airflow, config.dag_id))
        finished = [run for run in runs if run["state"] == "success"]
        return runs if len(finished) >= count and len(runs) == len(finished) else None

    return wait_for(f"{count} successful runs of {config.dag_id}", done, RUNS_TIMEOUT_S,
                    airflow.problem)


def produce_more(config: PipelineConfig, events: int, start_ms: int, seed: int) -> None:
    produce(replace(SPEC, events=events, start_ms=start_ms, seed=seed), config.kafka.topic,
            client_settings(config.kafka.client), progress=False)


# -- reading the pipeline -----------------------------------------------------------------------

def epochs_by_run(config: PipelineConfig, runs: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(epoch, records) each run planned, in run order (the epoch log: a run keeps its epoch)."""
    tables = tables_for(config)
    planned = []
    for run in runs:
        row = epochlog.plan_row_for_run(tables, run["dag_run_id"])
        assert row is not None, f"run {run['dag_run_id']} planned nothing"
        planned.append((row["epoch"], sum(r["until"] - r["start"] for r in
                                          json.loads(row["plan"])["ranges"])))
    return planned


def committed_once(config: PipelineConfig, epochs: int) -> None:
    """The checkpoint table holds exactly one row for each of epochs 0..epochs-1."""
    rows = checkpoints.read_all(tables_for(config))
    assert [c.epoch for c in rows] == list(range(epochs)), [c.epoch for c in rows]


# -- the trigger's reads, on the broker alone -----------------------------------------------------

def test_the_trigger_reads_watermarks_and_one_record_by_offset_joining_no_group(
        tmp_path: Path, kafka: str) -> None:
    """``max_delay``'s reads on the real broker: the oldest record's Kafka timestamp, read by
    offset; no offset is committed under the group id the reader carries (assign only)."""
    config = write_pipeline(tmp_path, schedule={"max_delay": "1m"})
    settings = client_settings(config.kafka.client)
    start_ms = int(time.time() * 1000) - 90_000
    produce(replace(SPEC, events=50, interval_ms=100, start_ms=start_ms), config.kafka.topic,
            settings, progress=False)
    seen = observe(config, stamps=KafkaStamps())
    assert (seen.committed_epoch, seen.lag, seen.oldest_ms) == (-1, 50, start_ms)
    decision = decide(config.schedule, seen, int(time.time() * 1000))
    assert (decision.fire, decision.reason) == (True, Reason.DELAY)
    assert decision.oldest_age_ms is not None and decision.oldest_age_ms >= 90_000

    partitions = [ck.TopicPartition(config.kafka.topic, p.partition) for p in seen.partitions]
    group = ck.Consumer({**settings, "group.id": "eos-readiness"})
    try:
        stored = group.committed(partitions, timeout=10)
    finally:
        group.close()
    assert [tp.offset for tp in stored] == [ck.OFFSET_INVALID] * len(partitions)


def test_the_trigger_asks_once_per_checkpoint(tmp_path: Path, kafka: str) -> None:
    """The trigger's own loop on the real broker (its reads in a worker thread): a backlog at
    lag_records yields one event saying why, and the following looks, at the same checkpoint,
    yield none (a run in progress is not asked for twice)."""
    from eos.airflow.triggers import EpochDueTrigger

    config = write_pipeline(tmp_path, schedule={"lag_records": 40, "poll": "1s"})
    produce(replace(SPEC, events=50), config.kafka.topic, client_settings(config.kafka.client),
            progress=False)
    trigger = EpochDueTrigger(pipeline=config.name, config_path=str(config.source_path),
                              lag_records=40, poll_ms=1000)

    async def first_event_then_silence() -> Any:
        events = trigger.run()
        first = await asyncio.wait_for(anext(events), 60)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(events), 4)  # four more looks
        return first

    event = asyncio.run(first_event_then_silence())
    assert event.payload == {"pipeline": config.name, "reason": "lag_records",
                             "committed_epoch": -1, "lag": 50, "oldest_age_ms": None}


# -- the test -------------------------------------------------------------------------------------

@pytest.mark.timeout(1200)
def test_the_data_starts_epochs_without_a_cron(airflow: Airflow,
                                               pipelines: dict[str, PipelineConfig]) -> None:
    delay, lag = pipelines["delay"], pipelines["lag"]

    # Both DAGs parsed, unpaused, scheduled on their lag asset only; both triggers looking.
    def ready() -> bool:
        errors = airflow.api("GET", "/api/v2/importErrors")["import_errors"]
        assert not errors, errors
        return all("no epoch due" in "\n".join(trigger_lines(airflow, config))
                   for config in (delay, lag))

    wait_for("both triggers to look at their pipeline's lag", ready, 300, airflow.problem)
    for config in (delay, lag):
        dag = airflow.api("GET", f"/api/v2/dags/{config.dag_id}")
        assert not dag["is_paused"], dag
        assert dag["timetable_summary"] == "Asset", dag  # no cron at all
    assert "lag=500 committed_epoch=-1" in "\n".join(trigger_lines(airflow, lag))

    # Quiet: an empty topic, and a backlog below lag_records, start no epoch.
    time.sleep(QUIET_S)
    assert runs_of(airflow, delay.dag_id) == []
    assert runs_of(airflow, lag.dag_id) == []

    # Records arrive: 300 stamped now on the delay pipeline; a burst to 3,200 on the lag one.
    produced_at = time.time()
    produce_more(delay, 300, int(produced_at * 1000), seed=1)
    produce_more(lag, 2700, BASE_TIME_MS + 500 * SPEC.interval_ms, seed=2)

    lag_runs = wait_for_runs(airflow, lag, 3)
    delay_runs = wait_for_runs(airflow, delay, 1)

    # max_delay: asked for once the oldest record was 10 s old (not before), the run right after.
    delay_asset = lag_asset(airflow, delay)
    (event,) = asset_events(airflow, delay_asset["id"])
    waited = at(event["timestamp"]) - produced_at
    assert DELAY_S - 0.5 <= waited <= DELAY_S + 8, (waited, event)
    assert event["extra"]["payload"]["reason"] == "max_delay", event
    (run,) = delay_runs
    assert run["run_type"] == "asset_triggered", run
    assert at(run["queued_at"]) - at(event["timestamp"]) < 30, (run, event)
    assert epochs_by_run(delay, delay_runs) == [(0, 300)]
    committed_once(delay, 1)

    # lag_records: the burst is drained by consecutive runs, each its own epoch, and the 200
    # records left (below lag_records) start none.
    summary = summarize(airflow, lag.dag_id)
    assert [r["run_type"] for r in lag_runs] == ["asset_triggered"] * 3, summary
    assert epochs_by_run(lag, lag_runs) == [(0, 1000), (1, 1000), (2, 1000)], summary
    for earlier, later in itertools.pairwise(lag_runs):
        assert at(later["start_date"]) >= at(earlier["end_date"]), summary
    committed_once(lag, 3)
    assert "lag=200 committed_epoch=2" in "\n".join(trigger_lines(airflow, lag))

    # A burst of events while a run is going: 800 more records start epoch 3; five events
    # posted during its run are queued as one and start one run (epoch 4, nothing to read).
    produce_more(lag, 800, BASE_TIME_MS + 3200 * SPEC.interval_ms, seed=3)
    going = wait_for("the run of epoch 3 to start", lambda: [
        r for r in runs_of(airflow, lag.dag_id)[3:] if r["state"] == "running"], 120,
        airflow.problem)
    asset = lag_asset(airflow, lag)
    before = len(asset_events(airflow, asset["id"]))
    for n in range(5):
        airflow.api("POST", "/api/v2/assets/events",
                    json={"asset_id": asset["id"], "extra": {"burst": n}})
    queued = airflow.api("GET", f"/api/v2/dags/{lag.dag_id}/assets/queuedEvents")
    still = airflow.api("GET", f"/api/v2/dags/{lag.dag_id}/dagRuns/{going[0]['dag_run_id']}")
    assert still["state"] == "running", "the run ended before the check: " + str(still)
    assert queued["total_entries"] == 1, queued  # five events, one queued run
    assert len(asset_events(airflow, asset["id"])) == before + 5

    runs = wait_for_runs(airflow, lag, 5)
    time.sleep(5 * POLL_S)  # nothing else is due: no sixth run
    runs = runs_of(airflow, lag.dag_id)
    summary = summarize(airflow, lag.dag_id)
    assert len(runs) == 5, summary
    assert epochs_by_run(lag, runs) == [(0, 1000), (1, 1000), (2, 1000), (3, 1000), (4, 0)]
    consumed = airflow.api(
        "GET", f"/api/v2/dags/{lag.dag_id}/dagRuns/{runs[4]['dag_run_id']}/upstreamAssetEvents"
    )["asset_events"]
    # Airflow 3.1 keeps the queue row's first time (a merge does not move ``created_at``): the
    # run consumed the burst's events up to the one that queued it, and the rest start none.
    assert consumed and {e["extra"].get("burst") for e in consumed} <= set(range(5)), consumed
    committed_once(lag, 5)
    assert len(runs_of(airflow, delay.dag_id)) == 1  # its topic drained: quiet again
