"""Stall alerts through Airflow's own deadline machinery (``eos.airflow.alerts``).

A pipeline with ``alerts.stall_after`` gets a Deadline Alert on its DAG; Airflow records a
deadline for each run when it is created (``queued_at`` + ``stall_after``) and, once it is
missed, hands the callback to the triggerer as a ``CallbackTrigger``. Here the real
metadata DB, the real serialized DAG (dags/ parsed as the DAG processor parses it), the real
``Deadline`` rows and the real trigger run the callback; only the scheduler's loop, which calls
``Deadline.handle_miss`` for deadlines in the past, is called directly. The stall check reads the
pipeline's real checkpoint table and its topic's watermarks on the test broker.
"""

from __future__ import annotations

# Must come first: it points Airflow at a throwaway AIRFLOW_HOME before airflow is imported.
import support.airflow_home as af  # isort: skip

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from eos.airflow.pipeline_dag import build_dag
from eos.core.config import PipelineConfig
from eos.core.kafka import client_settings
from eos.sinks.kafka.topics import ensure_topic
from eos.tools.generator import GeneratorSpec

from support.alert_notifier import PATH as NOTIFIER
from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

airflow_db = af.airflow_db
pipelines_dir = af.pipelines_dir


def alerting_pipeline(directory: Path, data_dir: Path, prefix: str, events: int,
                      sent: Path, stall_after: str = "20m", **overrides: Any) -> PipelineConfig:
    """A pipeline on a topic of ``events`` records, alerting after ``stall_after`` to a
    ``FileNotifier`` that writes to ``sent``."""
    return make_pipeline(
        directory, dag=(data_dir, prefix), records=GeneratorSpec(events=events, keys=3, seed=7),
        **overrides,
        alerts={"stall_after": stall_after, "notifier": NOTIFIER,
                "notifier_kwargs": {"path": str(sent), "text": "{{ message }}"}})


def test_the_dag_carries_a_deadline_on_queued_runs_only_when_asked(
        pipelines_dir: Path, data_dir: Path, kafka: str, tmp_path: Path) -> None:
    from airflow.sdk.definitions.deadline import AsyncCallback, DeadlineReference
    from airflow.serialization.decoders import decode_deadline_alert
    from airflow.serialization.serialized_objects import DagSerialization

    config = alerting_pipeline(tmp_path, data_dir, "alparse", 0, tmp_path / "sent.json")
    dag = build_dag(config)
    (alert,) = dag.deadline
    assert isinstance(alert.reference, type(DeadlineReference.DAGRUN_QUEUED_AT))
    assert alert.interval == timedelta(minutes=20)
    assert isinstance(alert.callback, AsyncCallback)
    assert alert.callback.path == "eos.airflow.alerts.stall_alert"
    assert alert.callback.kwargs == {"config_path": config.source_path}
    # The deadline survives serialization (what the scheduler reads, and decodes when it
    # records the DAG's deadline alerts).
    restored = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    decoded = [decode_deadline_alert(encoded) for encoded in restored.deadline]
    assert [(type(d.reference).__name__, d.interval, d.callback.path) for d in decoded
            ] == [("DagRunQueuedAtDeadline", timedelta(minutes=20),
                   "eos.airflow.alerts.stall_alert")]
    plain = make_pipeline(tmp_path, dag=(data_dir, "alnone"),
                          records=GeneratorSpec(events=0, keys=1))
    assert build_dag(plain).deadline is None


def sync_dags() -> None:
    """Parse dags/ and write the serialized DAGs to the metadata DB, as the DAG processor does."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.utils.session import create_session

    manager = DagBundlesManager()
    with create_session() as session:
        manager.sync_bundles_to_db(session=session)
    for bundle in manager.get_all_dag_bundles():
        if not bundle.is_initialized:
            bundle.initialize()
        bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path)
        assert not bag.import_errors, bag.import_errors
        sync_bag_to_db(bag, bundle.name, bundle.version)


def miss_the_deadline(config: PipelineConfig) -> tuple[Any, list[dict[str, Any]]]:
    """Queue a run of ``config``'s DAG (its deadline recorded), let the deadline pass (the
    scheduler's ``handle_miss``), and run the trigger Airflow made for the callback. Returns the
    deadline's time and the trigger's events."""
    from airflow.models import Trigger
    from airflow.models.deadline import Deadline
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.sdk.module_loading import import_string
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType
    from sqlalchemy import select

    with create_session() as session:
        dag = SerializedDagModel.get_dag(config.dag_id, session=session)
        assert dag is not None
        now = datetime.now(UTC)
        run = dag.create_dagrun(
            run_id=f"manual__{now.isoformat()}", run_after=now, run_type=DagRunType.MANUAL,
            triggered_by=DagRunTriggeredByType.TEST, state=DagRunState.QUEUED, session=session)
        session.flush()  # Airflow's sessions do not autoflush
        (deadline,) = session.scalars(select(Deadline).where(Deadline.dagrun_id == run.id))
        assert deadline.deadline_time == run.queued_at + timedelta(minutes=20)
        # The deadline's callback is a row of its own (Airflow 3.3), queued on a miss only.
        assert not deadline.missed and deadline.callback.trigger_id is None
        deadline.handle_miss(session)
        session.flush()
        assert deadline.missed
        trigger = session.get(Trigger, deadline.callback.trigger_id)
        classpath, kwargs = trigger.classpath, trigger.kwargs
        when = deadline.deadline_time
    assert classpath == "airflow.triggers.callback.CallbackTrigger"

    async def events() -> list[dict[str, Any]]:
        return [event.payload async for event in import_string(classpath)(**kwargs).run()]

    return when, asyncio.run(events())


def test_a_missed_deadline_alerts_a_stalled_pipeline_and_not_a_caught_up_one(
        airflow_db: Path, pipelines_dir: Path, data_dir: Path, kafka: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    stalled_sent, quiet_sent = tmp_path / "stalled.json", tmp_path / "quiet.json"
    stalled = alerting_pipeline(pipelines_dir, data_dir, "alstall", 300, stalled_sent)
    quiet = alerting_pipeline(pipelines_dir, data_dir, "alquiet", 0, quiet_sent)
    ensure_topic(client_settings(quiet.kafka.client), quiet.kafka.topic, 2)  # empty
    sync_dags()
    caplog.set_level(logging.INFO, logger="eos.airflow.alerts")

    # 300 records wait and no epoch was ever committed: a stall, logged and notified.
    _, events = miss_the_deadline(stalled)
    assert [e["state"] for e in events] == ["running", "success"], events
    fields = events[-1]["body"]
    assert (fields["verdict"], fields["lag"], fields["committed_epoch"]) == ("stalled", 300, -1)
    assert (fields["dag_id"], fields["pipeline"]) == (stalled.dag_id, stalled.name)
    sent = json.loads(stalled_sent.read_text())
    assert sent["text"] == (f"pipeline {stalled.name} is stalled: no epoch committed yet, "
                            "300 records waiting")
    assert sent["stall"] == fields and sent["run_id"] == fields["run_id"]
    assert fields["run_id"].startswith("manual__")
    lines = [r.getMessage() for r in caplog.records if r.name == "eos.airflow.alerts"]
    assert any(line.startswith(f"eos alert: stall pipeline={stalled.name} "
                               f"dag_id={stalled.dag_id} run_id={sent['run_id']} ")
               and "lag=300" in line for line in lines), lines

    # An empty topic: the deadline passed, but nothing waits: no alert, no notification.
    caplog.clear()
    _, events = miss_the_deadline(quiet)
    assert [e["state"] for e in events] == ["running", "success"], events
    assert events[-1]["body"]["verdict"] == "caught up"
    assert not quiet_sent.exists()
    lines = [r.getMessage() for r in caplog.records if r.name == "eos.airflow.alerts"]
    assert [line.split(" dag_id")[0] for line in lines] == [
        f"eos alert: no stall pipeline={quiet.name}"]
