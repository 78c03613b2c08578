"""The Airflow DAGs: their shape, and real DAG runs (begin -> spark-submit precommit -> commit).

The runs use Airflow 3's ``DAG.test()`` on a SQLite metadata DB (see support.airflow_home), the
embedded Kafka-protocol broker, real ``spark-submit`` and real Delta tables. What they prove:
three runs commit three epochs in order (target ``txn`` 0, 1, 2) and publish the target asset;
a run whose precommit dies is aborted without touching the target, and clearing and rerunning it
commits the same epoch (same plan hash) with the same result as a run that never failed;
clearing a committed run changes no table at all (the epoch log records the no-op tries).
"""

from __future__ import annotations

# Must come first: it points Airflow at a throwaway AIRFLOW_HOME before airflow is imported.
import support.airflow_home as af  # isort: skip

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from eos.airflow.precommit_operator import PrecommitOperator
from eos.core import epochlog
from eos.core.config import PipelineConfig, load_config, pipeline_path
from eos.core.delta import read_table
from eos.core.layout import tables_for
from eos.core.pipeline_status import epoch_rows
from eos.tools.audit.verify import audit
from eos.tools.generator import GeneratorSpec

from support.harness import delta_path, sink, table_versions
from support.pipelines import SHIPPED_PIPELINES, make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

# Fixtures shared through support.airflow_home (tests/conftest.py belongs to the core tests).
airflow_db = af.airflow_db
pipelines_dir = af.pipelines_dir

EVENTS = 2400  # epoch.max_records 1000: epochs of 1000, 1000 and 400 records
SPEC = GeneratorSpec(
    events=EVENTS, keys=20, interval_ms=250, late_fraction=0.02, late_delay_ms=30_000,
    bad_fraction=0.02, seed=20260101,
)
SUCCESS = {"begin": "success", "precommit": "success", "commit": "success", "abort": "skipped"}


def txn_by_version(path: str, app_id: str) -> list[int | None]:
    """The ``txn`` version of ``app_id`` at every Delta version of a table."""
    last = DeltaTable(path).version()
    return [DeltaTable(path, version=v).transaction_version(app_id) for v in range(last + 1)]


def version_with_txn(path: str, app_id: str, epoch: int) -> int:
    return txn_by_version(path, app_id).index(epoch)


def sorted_rows(path: str, version: int | None = None) -> list[dict[str, Any]]:
    """A sink's rows in a fixed order, less ``kafka_topic``: the pipelines compared read the
    same records from topics of their own (each ``make_pipeline(dag=...)`` gets one)."""
    table: pa.Table = read_table(path, version=version)
    if "kafka_topic" in table.column_names:
        table = table.drop_columns(["kafka_topic"])
    return sorted(table.to_pylist(), key=lambda row: json.dumps(row, sort_keys=True, default=str))


def run_id_of(index: int) -> str:
    return f"manual__{af.logical_date(index).isoformat()}"


# ---------------------------------------------------------------------------------------------
# (a) the DAG file


def test_dag_file_builds_the_clicks_dag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOS_PIPELINES_DIR", str(SHIPPED_PIPELINES))
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from eos.airflow.assets import sink_assets
    from eos.airflow.precommit_operator import PrecommitOperator

    dag = af.load_dag("eos_clicks")
    config = load_config(pipeline_path("clicks"))
    tasks = dag.task_dict
    assert set(tasks) == {"begin", "precommit", "commit", "abort"}
    assert tasks["begin"].downstream_task_ids == {"precommit", "commit"}
    assert tasks["precommit"].upstream_task_ids == {"begin"}
    assert tasks["precommit"].downstream_task_ids == {"commit", "abort"}
    assert tasks["commit"].upstream_task_ids == {"begin", "precommit"}
    assert tasks["abort"].upstream_task_ids == {"precommit"}
    assert tasks["abort"].trigger_rule == "one_failed"
    assert tasks["commit"].trigger_rule == "all_success"
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    assert dag.timetable.expression == config.schedule.cron

    # compute.mode connect (the default): a TaskFlow task on the Spark Connect server.
    precommit = tasks["precommit"]
    assert not isinstance(precommit, SparkSubmitOperator)
    assert "spark_connect_default" in precommit.doc_md
    assert precommit.retries == 2
    # EOS_COMPUTE_MODE=submit switches a deployment to one spark-submit per epoch.
    monkeypatch.setenv("EOS_COMPUTE_MODE", "submit")
    precommit = af.load_dag("eos_clicks").task_dict["precommit"]
    assert isinstance(precommit, SparkSubmitOperator) and isinstance(precommit, PrecommitOperator)
    assert precommit.application.endswith("eos/compute/app.py")
    assert "{{ ti.xcom_pull(task_ids='begin')['epoch'] }}" in precommit.application_args
    assert "{{ ti.xcom_pull(task_ids='begin')['plan_hash'] }}" in precommit.application_args
    assert precommit.conf["spark.pyspark.python"] == sys.executable
    assert precommit.env_vars["PYSPARK_PYTHON"] == sys.executable
    for task in tasks.values():
        # Airflow refuses a default backfill ("Missing Runs") of a DAG with depends_on_past;
        # begin's wait for earlier runs orders the runs instead (test_airflow_scheduler).
        assert not task.depends_on_past and not task.wait_for_downstream, task.task_id
        assert task.execution_timeout is not None, task.task_id
    for task_id in ("begin", "precommit", "commit"):
        assert tasks[task_id].retries > 0, task_id
    assert tasks["begin"].retry_exponential_backoff
    assert tasks["commit"].retry_exponential_backoff
    assert tasks["commit"].retries >= 50  # commit must eventually succeed
    # Airflow's own check of a backfill request accepts the defaults (reprocess "none", the
    # UI dialog's "Missing Runs"): it raised InvalidReprocessBehavior with depends_on_past.
    from airflow.models.backfill import _validate_backfill_params
    from airflow.serialization.serialized_objects import DagSerialization

    served = DagSerialization.from_dict(DagSerialization.to_dict(dag))  # what the API server reads
    assert served.timetable.summary == config.schedule.cron  # what the UI shows
    _validate_backfill_params(served, False, datetime(2025, 1, 1, tzinfo=UTC),
                              datetime(2025, 1, 2, tzinfo=UTC), None)

    assert tasks["commit"].outlets == list(sink_assets(config).values())
    uris = [outlet.uri for outlet in tasks["commit"].outlets]
    assert uris == [f"file://{(Path(config.root) / t).resolve()}"
                    for t in ("target", "late", "quarantine")]
    # The source topic is an inlet of the task that reads it, named by the first bootstrap
    # server (OpenLineage's kafka://host:port namespace), with no credential in the name.
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "SASL_SSL://u:pw@b1.example:9093,b2:9093")
    for mode in ("connect", "submit"):
        monkeypatch.setenv("EOS_COMPUTE_MODE", mode)
        inlets = af.load_dag("eos_clicks").task_dict["precommit"].inlets
        assert [a.uri for a in inlets] == [f"kafka://b1.example:9093/{config.kafka.topic}"]

    # Its maintenance DAG: manual runs only, one rewind each, parameterised.
    rewind = af.load_dag("eos_clicks__rewind")
    assert set(rewind.task_dict) == {"rewind"}
    served = DagSerialization.from_dict(DagSerialization.to_dict(rewind))
    assert served.timetable.summary == "None" and rewind.max_active_runs == 1
    assert set(rewind.params) == {"to_epoch", "republish"}
    assert rewind.params.get_param("to_epoch").schema == {"type": "integer", "minimum": -1}


def test_the_projects_dag_folder_builds_every_shipped_pipeline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The project's own ``dags/`` (what ``./dev ui`` and the compose stack parse) yields each
    shipped pipeline's DAG and rewind DAG, with no import error."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("EOS_PIPELINES_DIR", str(SHIPPED_PIPELINES))
    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[3] / "dags"))
    assert not bag.import_errors, bag.import_errors
    names = [load_config(path).name for path in sorted(SHIPPED_PIPELINES.glob("*.yaml"))]
    assert names and set(bag.dag_ids) == {f"eos_{n}{s}" for n in names for s in ("", "__rewind")}


def test_the_pipelines_dir_comes_from_the_variable_when_nothing_else_names_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The DAG file's directory: ``$EOS_PIPELINES_DIR``, else the Variable ``eos_pipelines_dir``
    (here from Airflow's environment-variable secrets backend), else ``./pipelines``; a Variable
    that does not exist is the default, with nothing logged."""
    from eos.airflow import pipeline_dags

    monkeypatch.delenv("EOS_PIPELINES_DIR")
    monkeypatch.setenv("AIRFLOW_VAR_EOS_PIPELINES_DIR", str(SHIPPED_PIPELINES))
    assert "eos_clicks" in pipeline_dags()

    monkeypatch.delenv("AIRFLOW_VAR_EOS_PIPELINES_DIR")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "clicks.yaml").write_text(
        (SHIPPED_PIPELINES / "clicks.yaml").read_text())
    with caplog.at_level("DEBUG"):
        assert sorted(pipeline_dags()) == ["eos_clicks", "eos_clicks__rewind"]
    # Nothing logged about the lookup (eos's own parse-time warnings aside).
    noise = [r for r in caplog.records if r.levelno >= 30 and not r.name.startswith("eos.")]
    assert noise == [], noise
    # An explicit directory beats everything.
    monkeypatch.setenv("EOS_PIPELINES_DIR", str(tmp_path / "nowhere"))
    assert "eos_clicks" in pipeline_dags(SHIPPED_PIPELINES)


def test_parsing_the_dag_file_touches_no_kafka_spark_or_delta() -> None:
    """The dag processor re-parses the DAG folder constantly: no heavy imports, no tables
    created."""
    probe = (
        "import sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        "before = set(sys.modules)\n"
        f"bag = DagBag(dag_folder={str(af.DAGS_DIR)!r})\n"
        "assert not bag.import_errors, bag.import_errors\n"
        "assert 'eos_clicks' in bag.dag_ids, bag.dag_ids\n"
        "heavy = ('confluent_kafka', 'deltalake', 'pyarrow', 'pyspark')\n"
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in heavy))\n"
    )
    env = {**os.environ, "EOS_PIPELINES_DIR": str(SHIPPED_PIPELINES)}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


# ---------------------------------------------------------------------------------------------
# (b) three real DAG runs, three epochs


@pytest.fixture(scope="module")
def reference(airflow_db: Path, pipelines_dir: Path, data_dir: Path, kafka: str,
              spark_server: dict) -> dict:
    """A pipeline driven by three successful DAG runs on Spark Connect (the default compute):
    the result a failure (in submit mode, below) must reproduce."""
    config = make_pipeline(pipelines_dir, dag=(data_dir, "afref"), records=SPEC,
                           compute={"mode": "connect"})
    dag = af.load_dag(config.dag_id)
    with statsd_listener() as packets:
        runs = [af.run_dag(dag, i) for i in range(3)]
    return {"config": config, "dag": dag, "runs": runs, "metrics": packets}


@contextlib.contextmanager
def statsd_listener() -> Iterator[list[str]]:
    """A real UDP socket on loopback as the StatsD server, and Airflow's metrics pointed at it
    (``[metrics] statsd_on``), for the block: yields the lines it received. A task process picks
    its metrics client from ``[metrics]`` when it starts (the task runner's
    ``stats.initialize``); the tasks here run in this process, so the block sets the client up
    as a task process would with this configuration, and again as before after it."""
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    received: list[str] = []
    done = threading.Event()

    def drain() -> None:
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                received.extend(sock.recv(65535).decode().splitlines())

    env = {"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
           "AIRFLOW__METRICS__STATSD_PORT": str(sock.getsockname()[1])}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        done.set()
        thread.join()
        sock.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)


def eos_metrics(lines: list[str], config: PipelineConfig) -> dict[str, list[tuple[float, str]]]:
    """``airflow.eos.<pipeline>.<what>:<value>|<type>`` lines by ``<what>``, in arrival order."""
    prefix = f"airflow.eos.{config.name}."
    out: dict[str, list[tuple[float, str]]] = {}
    for line in lines:
        if line.startswith(prefix):
            what, _, rest = line[len(prefix):].partition(":")
            value, _, kind = rest.partition("|")
            out.setdefault(what, []).append((float(value), kind))
    return out


@pytest.mark.timeout(900)
def test_three_dag_runs_commit_three_epochs(reference: dict) -> None:
    config: PipelineConfig = reference["config"]
    tables = tables_for(config)
    target = delta_path(config, "target")
    for index, run in enumerate(reference["runs"]):
        assert run.state == "success", (index, af.task_states(run))
        assert af.task_states(run) == SUCCESS
        assert run.run_id == run_id_of(index)

    # The target: created, then one commit per epoch, each carrying txn(app id, N).
    assert txn_by_version(target, config.app_id) == [None, 0, 1, 2]
    operations = [h["operation"] for h in reversed(DeltaTable(target).history())]
    assert operations == ["CREATE TABLE", "WRITE", "WRITE", "WRITE"]
    assert txn_by_version(tables.checkpoints, config.app_id) == [None, 0, 1, 2]

    # Run i planned epoch i; the ranges tile every produced record once.
    plans = [epochlog.plan_row_for_run(tables, run_id_of(i)) for i in range(3)]
    assert [row["epoch"] for row in plans] == [0, 1, 2]
    records = [json.loads(row["plan"])["ranges"] for row in plans]
    assert [sum(r["until"] - r["start"] for r in ranges) for ranges in records] == [1000, 1000, 400]

    # precommit ran on the Spark Connect server, staging the plan begin returned.
    assert not isinstance(reference["dag"].get_task("precommit"), PrecommitOperator)
    staged = [r for r in epoch_rows(tables, 1) if r["phase"] == epochlog.PRECOMMITTED]
    assert [r["plan_hash"] for r in staged] == [plans[1]["plan_hash"]]

    # Every committed epoch published the target asset, with what it read and wrote.
    events = af.asset_events(f"file://{Path(target).resolve()}")
    assert [(e["epoch"], e["outcome"]) for e in events] == [
        (0, "committed"), (1, "committed"), (2, "committed")
    ]
    assert [e["plan_hash"] for e in events] == [row["plan_hash"] for row in plans]
    assert [e["records"] for e in events] == [1000, 1000, 400]
    assert [e["ranges"] for e in events] == [
        [{"topic": config.kafka.topic, **r} for r in ranges] for ranges in records]
    assert all(e["rows"]["windows"] > 0 for e in events), events

    # Independent check: re-read the committed ranges from Kafka and recompute every sink.
    report = audit(config)
    assert report.ok, report.render()
    assert report.records == EVENTS
    assert report.counts["delta:target"][1] > 0
    assert report.counts["delta:late"][1] > 0
    assert report.counts["delta:quarantine"][1] > 0


def test_each_epoch_sends_its_metrics_to_the_configured_statsd(reference: dict) -> None:
    """Airflow's own metrics client (StatsD here, a real UDP listener) carries every epoch's
    figures with the values the epochs had: records planned, the lag each plan left, rows
    staged and committed per output, the watermark's delay, commit outcomes, phase times."""
    config: PipelineConfig = reference["config"]
    got = eos_metrics(reference["metrics"], config)
    assert got, reference["metrics"][:20]
    assert [v for v, kind in got["planned_records"]] == [1000, 1000, 400]
    assert {kind for _, kind in got["planned_records"]} == {"g"}
    assert [v for v, _ in got["lag"]] == [1400, 400, 0]  # what each plan left in the topic
    partitions = [k for k in got if k.startswith("lag.p")]
    assert partitions and all(len(got[k]) == 3 for k in partitions)
    assert sum(got[k][0][0] for k in partitions) == 1400
    committed_rows = [v for v, _ in got["rows.windows"]]
    assert len(committed_rows) == 3 and all(v > 0 for v in committed_rows)
    sinks = {e["epoch"]: e["rows"]["windows"] for e in af.asset_events(
        f"file://{Path(delta_path(config, 'target')).resolve()}")}
    assert committed_rows == [sinks[0], sinks[1], sinks[2]]
    assert [v for v, _ in got["rows.quarantine"]] == [
        v for v, _ in got["staged.quarantine"]]
    assert got["commit.committed"] == [(1.0, "c")] * 3
    assert len(got["watermark_delay_ms"]) == 3 and all(v >= 0 for v, _ in got["watermark_delay_ms"])
    for phase in ("begin", "precommit", "commit"):
        assert [kind for _, kind in got[f"phase.{phase}"]] == ["ms"] * 3, got.keys()
    assert len(got["precommit.read_parse"]) == 3


# ---------------------------------------------------------------------------------------------
# (c) precommit dies: abort, clear and rerun the same run, clear a committed run


@pytest.mark.timeout(900)
def test_failed_precommit_is_aborted_and_the_rerun_commits_the_same_epoch(
    reference: dict, pipelines_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    # compute.mode submit: the SparkSubmitOperator path, compared with the Connect reference.
    config = make_pipeline(pipelines_dir, dag=(data_dir, "affail"), records=SPEC,
                           compute={"mode": "submit"})
    tables = tables_for(config)
    target = delta_path(config, "target")
    dag = af.load_dag(config.dag_id)
    assert isinstance(dag.get_task("precommit"), PrecommitOperator)
    with statsd_listener() as packets:
        first = af.run_dag(dag, 0)
    assert af.task_states(first) == SUCCESS
    # The spark-submitted precommit's figures reach Airflow's metrics client too (the app's
    # result file, read by the task): the rows it staged are the rows commit committed.
    got = eos_metrics(packets, config)
    staged_kinds = {k for k in got if k.startswith("staged.")}
    assert {"staged.output", "staged.late", "staged.quarantine"} <= staged_kinds, got.keys()
    assert [v for v, _ in got["staged.quarantine"]] == [v for v, _ in got["rows.quarantine"]]
    assert [kind for _, kind in got["phase.precommit"]] == ["ms"]
    assert got["phase.precommit"][0][0] > 0
    assert len(got["precommit.read_parse"]) == 1
    assert len(got["watermark_delay_ms"]) == 1 and got["watermark_delay_ms"][0][0] >= 0
    # precommit was spark-submitted with the epoch and plan hash begin returned.
    args = af.rendered_fields(first, "precommit")["application_args"]
    assert args[args.index("--epoch") + 1] == "0"
    assert args[args.index("--plan-hash") + 1] == epochlog.plan_row_for_run(
        tables, run_id_of(0))["plan_hash"]
    target_before = DeltaTable(target).version()

    # Run 1: the Spark app stages epoch 1 and is SIGKILLed before it exits (only the
    # spark-submit child sees the fault; no retry, so precommit fails and abort runs).
    precommit = dag.get_task("precommit")
    original = (precommit.retries, dict(precommit.env_vars))
    precommit.retries = 0
    precommit.env_vars = {
        **original[1],
        "EOS_FAULTS": "precommit.after_write:1",
        "EOS_FAULTS_DIR": str(tmp_path / "faults"),
    }
    failed = af.run_dag(dag, 1)
    precommit.retries, precommit.env_vars = original
    states = af.task_states(failed)
    assert failed.state == "failed", states
    assert states == {"begin": "success", "precommit": "failed", "commit": "upstream_failed",
                      "abort": "success"}
    assert (tmp_path / "faults" / "precommit.after_write.hits").read_text() == "x"

    planned = epochlog.plan_row_for_run(tables, run_id_of(1))
    assert planned["epoch"] == 1
    # The target is untouched; abort removed what the killed attempt had staged.
    assert DeltaTable(target).version() == target_before
    assert DeltaTable(tables.checkpoints).transaction_version(config.app_id) == 0
    assert read_table(tables.staging, filters=[("epoch", "=", 1)]).num_rows == 0
    staging_ops = [h["operation"] for h in DeltaTable(tables.staging).history(2)]
    assert staging_ops[0] == "DELETE" and staging_ops[1] == "WRITE", staging_ops
    aborted = [r for r in epochlog.rows(tables, 1) if r["phase"] == epochlog.ABORTED]
    assert len(aborted) == 1
    assert run_id_of(1) in aborted[0]["details"]

    # Clear and rerun the same run (same run id): it re-finds epoch 1 and its plan, and commits.
    rerun = af.run_dag(dag, 1)
    assert rerun.run_id == failed.run_id
    assert af.task_states(rerun) == SUCCESS
    assert txn_by_version(target, config.app_id) == [None, 0, 1]
    committed = [r for r in epoch_rows(tables, 1)
                 if r["phase"] == epochlog.COMMITTED]
    assert [r["plan_hash"] for r in committed] == [planned["plan_hash"]]
    assert epochlog.first_plan_row(tables, 1)["plan_hash"] == planned["plan_hash"]

    # Same result as the pipeline whose runs never failed, sink by sink, after epoch 1.
    ref_config = reference["config"]
    for name in ("delta:target", "delta:late", "delta:quarantine"):
        path, ref_path = sink(config, name).path, sink(ref_config, name).path
        ref_version = version_with_txn(ref_path, ref_config.app_id, 1)
        assert sorted_rows(path) == sorted_rows(ref_path, ref_version), name
    assert audit(config).ok

    # Clearing a committed run changes nothing: every task is a no-op for its epoch. The epoch
    # log (for people) records each try that found its work done, and nothing else.
    versions = table_versions(config)
    for index in (1, 0):
        logged = len(epochlog.rows(tables))
        again = af.run_dag(dag, index)
        assert af.task_states(again) == SUCCESS
        assert {k: v for k, v in table_versions(config).items() if k != "epochs"} == {
            k: v for k, v in versions.items() if k != "epochs"}
        added = epochlog.rows(tables)[logged:]
        # begin and commit (precommit runs in its Spark app in submit mode: not recorded)
        assert [(r["phase"], r["run_id"], json.loads(r["details"])["task"],
                 json.loads(r["details"])["wrote"]) for r in added] == [
            (epochlog.TRIED, run_id_of(index), task, False) for task in ("begin", "commit")]
    assert [r["phase"] for r in epoch_rows(tables, 1)].count(epochlog.COMMITTED) == 1
    events = af.asset_events(f"file://{Path(target).resolve()}")
    assert [(e["epoch"], e["outcome"]) for e in events] == [
        (0, "committed"), (1, "committed"), (1, "already committed"), (0, "already committed")
    ]


def run_with_fault(dag: Any, index: int, fault: str, monkeypatch: pytest.MonkeyPatch,
                   directory: Path) -> Any:
    """Run (or clear and rerun) the DAG run at ``index`` with ``EOS_FAULTS=fault`` armed in
    this process (``DAG.test`` runs the tasks here), its hit counters under ``directory``."""
    from eos.core import faults

    monkeypatch.setenv("EOS_FAULTS", fault)
    monkeypatch.setenv("EOS_FAULTS_DIR", str(directory))
    faults._armed.cache_clear()
    try:
        return af.run_dag(dag, index)
    finally:
        monkeypatch.delenv("EOS_FAULTS")
        faults._armed.cache_clear()


# ---------------------------------------------------------------------------------------------
# (c2) the one-task DAG (compute.tasks: one): the same epochs, one task each


@pytest.mark.timeout(900)
def test_the_one_task_dag_commits_the_same_epochs_and_aborts_a_failed_try(
    reference: dict, pipelines_dir: Path, data_dir: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``compute.tasks: one`` runs begin, precommit and commit in one task. Its runs commit
    the reference's epochs row for row; a try that fails after staging (no retry left) is
    aborted by ``abort``, which finds the run's plan in the XCom the task pushed as soon as it
    began, and the cleared run commits the same epoch with the same plan."""
    config = make_pipeline(pipelines_dir, dag=(data_dir, "afone"), records=SPEC,
                          compute={"mode": "connect", "tasks": "one"})
    tables = tables_for(config)
    target = delta_path(config, "target")
    dag = af.load_dag(config.dag_id)
    tasks = dag.task_dict
    assert set(tasks) == {"epoch", "abort"}
    assert tasks["epoch"].downstream_task_ids == {"abort"}
    assert tasks["abort"].trigger_rule == "one_failed"
    assert tasks["epoch"].retries >= 50 and tasks["epoch"].retry_exponential_backoff
    assert tasks["epoch"].outlets and tasks["epoch"].execution_timeout is not None
    one = {"epoch": "success", "abort": "skipped"}

    assert af.task_states(af.run_dag(dag, 0)) == one
    # Run 1: staged, then the task fails (a transient fault, no retry left): abort drops it.
    epoch_task = dag.get_task("epoch")
    retries, epoch_task.retries = epoch_task.retries, 0
    try:
        failed = run_with_fault(dag, 1, "precommit.after_write:fail", monkeypatch, tmp_path)
    finally:
        epoch_task.retries = retries
    assert af.task_states(failed) == {"epoch": "failed", "abort": "success"}
    assert (tmp_path / "precommit.after_write.hits").read_text() == "x"
    planned = epochlog.plan_row_for_run(tables, run_id_of(1))
    assert planned["epoch"] == 1
    assert read_table(tables.staging, filters=[("epoch", "=", 1)]).num_rows == 0
    aborted = [r for r in epochlog.rows(tables, 1) if r["phase"] == epochlog.ABORTED]
    assert len(aborted) == 1 and run_id_of(1) in aborted[0]["details"]

    rerun = af.run_dag(dag, 1)
    assert af.task_states(rerun) == one
    assert af.task_states(af.run_dag(dag, 2)) == one
    assert txn_by_version(target, config.app_id) == [None, 0, 1, 2]
    committed = [r for r in epoch_rows(tables, 1)
                 if r["phase"] == epochlog.COMMITTED]
    assert [r["plan_hash"] for r in committed] == [planned["plan_hash"]]
    # Every phase row that did the work names the one task's try.
    tried = [epochlog.try_facts(r) for r in epoch_rows(tables)
             if r["phase"] in (epochlog.PRECOMMITTED, epochlog.COMMITTED)]
    assert tried and {t["task"] for t in tried if t} == {"epoch"}, tried

    ref_config = reference["config"]
    for name in ("delta:target", "delta:late", "delta:quarantine"):
        path, ref_path = sink(config, name).path, sink(ref_config, name).path
        assert sorted_rows(path) == sorted_rows(ref_path), name
    events = af.asset_events(f"file://{Path(target).resolve()}")
    assert [(e["epoch"], e["outcome"]) for e in events] == [
        (0, "committed"), (1, "committed"), (2, "committed")]
    report = audit(config)
    assert report.ok, report.render()


def test_one_task_is_refused_with_spark_submit() -> None:
    from pydantic import ValidationError

    from eos.core.config import ComputeConfig

    with pytest.raises(ValidationError, match="tasks: one runs precommit on Spark Connect"):
        ComputeConfig(mode="submit", tasks="one")


# ---------------------------------------------------------------------------------------------
# (d) the retry policy: permanent errors fail at once, transient ones are retried


def task_instance(dag_run: Any, task_id: str) -> Any:
    return next(ti for ti in dag_run.get_task_instances() if ti.task_id == task_id)


@pytest.mark.timeout(900)
def test_permanent_error_fails_commit_on_first_try_and_transient_is_retried(
    reference: dict, pipelines_dir: Path, data_dir: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture,
) -> None:
    config = make_pipeline(pipelines_dir, dag=(data_dir, "afretry"), records=SPEC,
                           compute={"mode": "connect"})
    dag = af.load_dag(config.dag_id)
    commit = dag.get_task("commit")
    assert commit.retries >= 50
    commit.retry_delay, commit.retry_exponential_backoff = timedelta(seconds=1), False

    # Permanent: an operator marked precommit success by hand, so epoch 0 is not staged. The
    # commit is a protocol violation: it fails on its first try despite 100 retries, with the
    # message, and nothing is written.
    failed = af.run_dag_marking_success(dag, 0, "precommit")
    ti = task_instance(failed, "commit")
    assert (ti.state, ti.try_number) == ("failed", 1)
    assert "ProtocolViolation: epoch 0 is not pre-committed" in capfd.readouterr().out
    assert sink(config, "delta:target").committed_epoch() == -1

    # Transient: the first commit attempt fails right before the checkpoint (after every sink
    # committed); the retry finds the sinks holding epoch 0 and appends the checkpoint.
    run = run_with_fault(dag, 0, "commit.before_checkpoint:fail", monkeypatch, tmp_path)
    ti = task_instance(run, "commit")
    assert (ti.state, ti.try_number) == ("success", 2), af.task_states(run)
    assert (tmp_path / "commit.before_checkpoint.hits").read_text() == "x"
    assert audit(config).ok


# ---------------------------------------------------------------------------------------------
# (e) rewind and replay through Airflow: the rewind DAG, then the pipeline's runs replay


@pytest.mark.timeout(900)
def test_the_rewind_dag_rewinds_and_rerunning_the_same_runs_replays_them(
    reference: dict, pipelines_dir: Path, data_dir: Path
) -> None:
    config = make_pipeline(pipelines_dir, dag=(data_dir, "afrw"), records=SPEC,
                           compute={"mode": "connect"})
    dag = af.load_dag(config.dag_id)
    for index in range(3):
        assert af.task_states(af.run_dag(dag, index)) == SUCCESS
    target = delta_path(config, "target")
    final = sorted_rows(target)

    rewind_dag = af.load_dag(config.dag_id + "__rewind")
    when = af.logical_date(10)
    refused = rewind_dag.test(logical_date=when, run_after=when, run_conf={"to_epoch": 7})
    assert refused.state == "failed"
    assert task_instance(refused, "rewind").try_number == 1  # RewindRefused: permanent
    later = af.logical_date(11)
    done = rewind_dag.test(logical_date=later, run_after=later, run_conf={"to_epoch": 0})
    assert af.task_states(done) == {"rewind": "success"}
    assert DeltaTable(target).history(1)[0]["operation"] == "RESTORE"
    assert DeltaTable(target).transaction_version(config.app_id) == 0
    ref_config = reference["config"]
    assert sorted_rows(target) == sorted_rows(
        delta_path(ref_config, "target"),
        version_with_txn(delta_path(ref_config, "target"), ref_config.app_id, 0))

    # A backfill of the same dates (here: the runs cleared and rerun in order): each run keeps
    # its epoch, so runs 1 and 2 replay epochs 1 and 2 with their logged plans; run 0 is a no-op.
    for index in range(3):
        assert af.task_states(af.run_dag(dag, index)) == SUCCESS
    assert sorted_rows(target) == final
    assert sink(config, "delta:target").commits() == [0, 1, 2]
    report = audit(config)
    assert report.ok and report.records == EVENTS, report.render()
