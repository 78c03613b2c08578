"""The triggerer's looks at a pipeline whose tables are on an object store.

A task exports the store's Airflow connection (``eos.airflow.storage.STORAGE_CONN_ID``) into
its environment before a phase runs; the triggerer's two readers of the same tables, the
data-driven epochs' ``EpochDueTrigger`` and the stall alert's callback, did not, so on a store
every poll failed with one warning (no run was ever asked for) and a stall raised instead of
alerting.

Here the store (SeaweedFS's S3 gateway, ``support.store``) holds a pipeline's tables with one
epoch committed; its credentials are then only in an Airflow connection (a secrets backend
reading a file, as a deployment's would be), none in this process's environment. The trigger's
own loop and the alert's callback run on an event loop, as in the triggerer, and must read the
pipeline's state: epoch 0 committed, 50 records after it on the real broker. Last, the same in
a real ``airflow standalone``'s triggerer, which reads the connection through its supervisor.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from eos.core import storage
from eos.core.config import PipelineConfig
from eos.core.kafka import client_settings
from eos.core.plan import KafkaSource
from eos.tools.generator import GeneratorSpec
from eos.tools.pipelines import unique_topic, write_pipeline
from eos.tools.produce import produce

from support.airflow_standalone import running_airflow, wait_for
from support.memory import MemoryStager, run_epoch
from support.pipelines import IN_MEMORY, make_pipeline

pytestmark = pytest.mark.integration

LAG_RECORDS = 40
MORE = 50  # records produced after epoch 0, over LAG_RECORDS


@pytest.fixture
def on_store(tmp_path: Path, object_store: Any, s3_root: str, kafka: str,
             monkeypatch: pytest.MonkeyPatch) -> PipelineConfig:
    """A pipeline on the store with epoch 0 committed and ``MORE`` records after it; then the
    store's credentials only in the ``eos_object_store`` connection of a file secrets backend
    (this process's ``AWS_*`` variables removed, its cached filesystems dropped)."""
    config = make_pipeline(
        tmp_path, base=IN_MEMORY, kafka={"topic": unique_topic("trig")}, tables={"root": s3_root},
        schedule={"lag_records": LAG_RECORDS, "poll": "1s"}, alerts={"stall_after": "1s"})
    settings = client_settings(config.kafka.client)
    produce(GeneratorSpec(events=30, seed=6), config.kafka.topic, settings, progress=False)
    plan = run_epoch(config, KafkaSource(settings), MemoryStager())
    assert (plan.epoch, plan.records) == (0, 30)
    produce(GeneratorSpec(events=MORE, seed=7), config.kafka.topic, settings, progress=False)

    env = object_store.env
    connections = tmp_path / "connections.json"
    connections.write_text(json.dumps({"eos_object_store": {
        "conn_type": "aws", "login": env["AWS_ACCESS_KEY_ID"],
        "password": env["AWS_SECRET_ACCESS_KEY"],
        "extra": {"endpoint_url": env["AWS_ENDPOINT_URL"],
                  "region_name": env.get("AWS_REGION", "us-east-1")}}}))
    connections.chmod(0o600)
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND",
                       "airflow.secrets.local_filesystem.LocalFilesystemBackend")
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND_KWARGS",
                       json.dumps({"connections_file_path": str(connections)}))
    for name in env:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(storage, "_filesystems", {})
    assert not set(env) & set(os.environ), "the store's variables are still set"
    return config


@pytest.mark.timeout(300)
def test_the_trigger_reads_a_pipeline_on_the_store_with_the_connection(
        on_store: PipelineConfig) -> None:
    from eos.airflow.triggers import EpochDueTrigger

    trigger = EpochDueTrigger(pipeline=on_store.name, config_path=str(on_store.source_path),
                              lag_records=LAG_RECORDS, poll_ms=1000)

    async def first_event() -> Any:
        return await asyncio.wait_for(anext(trigger.run()), 45)

    event = asyncio.run(first_event())
    assert event.payload == {"pipeline": on_store.name, "reason": "lag_records",
                             "committed_epoch": 0, "lag": MORE, "oldest_age_ms": None}


@pytest.mark.timeout(300)
def test_the_stall_alert_reads_a_pipeline_on_the_store_with_the_connection(
        on_store: PipelineConfig) -> None:
    from eos.airflow.alerts import stall_alert

    fields = asyncio.run(asyncio.wait_for(stall_alert(str(on_store.source_path)), 45))
    assert (fields["committed_epoch"], fields["lag"], fields["lag_error"]) == (0, MORE, None)


# -- in the real triggerer ------------------------------------------------------------------------

@pytest.mark.airflow
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_triggerer_reads_a_pipeline_on_the_store_through_the_connection(
        tmp_path: Path, data_dir: Path, object_store: Any, s3_root: str, kafka: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``airflow standalone`` without the store's variables, the connection made through the
    REST API (so the triggerer gets it from its supervisor, the call ``aexport_credentials``
    must make off the event loop): the trigger's looks read the pipeline's lag, none due."""
    config = write_pipeline(tmp_path / "pipelines", tables={"root": s3_root},
                            schedule={"lag_records": 1_000_000, "poll": "1s"})
    produce(GeneratorSpec(events=MORE, seed=8), config.kafka.topic,
            client_settings(config.kafka.client), progress=False)
    env = object_store.env
    for name in env:
        monkeypatch.delenv(name, raising=False)
    extra = {"AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False"}  # watchers need unpaused
    home = tmp_path / "home"
    home.mkdir()
    with running_airflow(home, [config], data_dir, extra_env=extra) as airflow:
        assert not set(env) & set(airflow.env), "the store's variables reached Airflow"
        airflow.api("POST", "/api/v2/connections", json={
            "connection_id": "eos_object_store", "conn_type": "aws",
            "login": env["AWS_ACCESS_KEY_ID"], "password": env["AWS_SECRET_ACCESS_KEY"],
            "extra": json.dumps({"endpoint_url": env["AWS_ENDPOINT_URL"],
                                 "region_name": env.get("AWS_REGION", "us-east-1")})})
        seen = (f"pipeline={config.name} lag={MORE} committed_epoch=-1 oldest_age_ms=None: "
                "no epoch due")
        wait_for("the trigger to read the pipeline's lag on the store",
                 lambda: seen in airflow.output.read_text(errors="replace"), 240,
                 airflow.problem)
        output = airflow.output.read_text(errors="replace")
        assert env["AWS_SECRET_ACCESS_KEY"] not in output
