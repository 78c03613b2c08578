"""One Airflow DAG per pipeline: one DAG run is one checkpoint epoch (the Airflow adapter).

``begin`` (plan or reuse epoch N) -> ``precommit`` (Spark stages N) -> ``commit``
(every sink, then the checkpoint; idempotent, retried until it succeeds), and ``abort`` when
precommit failed. The DAG only wires the library's phases together: every decision lives in
``eos.core.protocol``. Building a DAG does no I/O beyond reading the pipeline's YAML: no Kafka, no
Spark, no Delta at parse time (the library modules that touch them are imported inside tasks).

Retry policy, per task (``eos.core.errors``): a ``TransientError`` (or anything unexpected) fails
the attempt and Airflow retries it with backoff; a ``PermanentError`` (protocol violation, data
loss, bad config) fails the task at once, without retries, with the error's message.

Compute (``compute.mode``): ``connect`` (default) runs precommit in the task's own process with a
session on the long-lived Spark Connect server named by the Airflow connection
``compute.connection`` (type ``spark_connect`` or a URI ``sc://:<token>@host:port``, default
``spark_connect_default``, the token in its password); ``submit`` runs
``spark_apps/precommit.py`` with ``SparkSubmitOperator`` on connection ``spark_default``: one
Spark application per epoch. Both run ``eos.core.protocol.precommit``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.exceptions import AirflowException, AirflowFailException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Asset, Param, TriggerRule, task

from eos.airflow.alerts import stall_deadline
from eos.airflow.triggers import epoch_schedule
from eos.compute.spark import PRECOMMIT_APP, app_args, spark_conf, spark_submit_binary, submit_env
from eos.core.config import PipelineConfig, list_pipelines, load_config
from eos.core.errors import EXIT_PERMANENT
from eos.core.sink import SupportsAssets, sinks_for

SPARK_CONN_ID = "spark_default"
START_DATE = datetime(2025, 1, 1)  # naive: Airflow reads it in its default timezone (UTC)
BEGIN_XCOM = "ti.xcom_pull(task_ids='begin')"

log = logging.getLogger(__name__)

OPERATOR_NOTES = """
### Operating notes
- One run is one epoch: `begin` logs the plan (offset ranges) before anything reads Kafka, and a
  run keeps its epoch forever: clearing a run, committed or not, re-finds the same epoch and plan.
- Clearing a committed run is harmless: every task is a no-op (the checkpoint table is the
  authority). `commit` still emits its asset events, with `outcome: already committed`.
- A task that fails with a permanent error (protocol violation, data loss, bad config) is not
  retried: read its message, fix the cause, then clear the run.
- Runs take epochs one after another: `begin` waits (up for reschedule, every 30 s) while a
  run with an earlier logical date is still running, then takes the next epoch. No task
  `depends_on_past`, so Airflow's backfill works with its defaults.
- After a failed run, the next run takes over its epoch (`begin` logs `outcome=reused`): the
  same plan, the same records, nothing later commits before it (the protocol refuses to stage
  or commit epoch N+1 before N). Clearing the failed run later is a no-op once its epoch is
  committed. To stop the pipeline after a failure, pause this DAG.
- **Backfill** (the dialog's defaults, or `airflow backfill create --dag-id <this dag>
  --from-date .. --to-date ..`) adds one run per missing logical date. A run's logical date
  does not choose its data: each run takes the *next* epoch, the records after the last
  checkpoint (up to `epoch.max_records`), in logical-date order. A backfill so drains a
  backlog faster than the schedule; once the topic is drained its runs commit empty epochs.
  Scheduled runs go on meanwhile and take epochs between the backfill's, and a run that
  starts while another holds the next epoch shares it (one commits, the other finds it
  committed). Browse -> *Exactly-once epochs* lists every run that touched each epoch, and
  which task tries did the work.
- To reprocess committed epochs after a fix (rewind and replay): pause this DAG, trigger
  `<this dag>__rewind` with `to_epoch` N (the last epoch that stays committed, -1 for all), then
  unpause. The next runs replay epochs N+1.. with their logged ranges and the current config;
  to replay them at once, backfill this DAG's past dates with reprocess behavior `completed`
  (*All Runs*): each cleared run replays its own epoch, in order (runs of epochs up to N are
  no-ops).
"""

REWIND_SUFFIX = "__rewind"
REWIND_DOC = """
### Rewind (`eos.core.rewind`)
One manual run takes the pipeline back to committed epoch `to_epoch`: every Delta sink, staging
and the checkpoint table are restored (Delta `RESTORE`, visible in each table's history) to the
version at which that epoch was committed, with their markers saying it. The pipeline DAG's
next runs then replay the later epochs from their logged plans, with the current code and
config. Pause the pipeline DAG while this runs.

- `to_epoch`: the last epoch that stays committed; -1 replays everything (needed after a change
  of what rows mean: parsing, grouping, windows, aggregations).
- `republish`: also rewind sinks that cannot withdraw records (Kafka topics); their consumers
  then see the replayed epochs a second time.

Retries: a refusal (`RewindRefused`: not allowed as asked, nothing changed) or an unfinished
rewind to another epoch fails at once; anything else is retried, and a retry finishes the same
rewind (each step is idempotent).
"""


def sink_assets(config: PipelineConfig) -> dict[str, Asset]:
    """One Airflow Asset per sink, published when an epoch commits, keyed by sink name and named
    as OpenLineage and Airflow's providers name the dataset (``eos.core.lineage``):
    ``file:///abs/path`` (or ``s3://bucket/path``) for a Delta table,
    ``kafka://<first bootstrap host:port>/<topic>`` for a Kafka topic. The URI is the asset's
    name too, as the providers' ``create_asset`` makes it: another DAG that reads the topic or
    the table declares the same asset, and lineage joins. A Kafka sink where no broker is
    configured (the DAG parsed without ``KAFKA_BOOTSTRAP_SERVERS`` or a running embedded broker)
    has no name and publishes nothing."""
    assets = {}
    for sink in sinks_for(config):
        if not isinstance(sink, SupportsAssets):
            continue  # a sink type without asset naming publishes none
        uri = sink.asset_uri()
        if uri is None:
            log.warning("eos: no asset for sink %s of %s: no Kafka broker configured to name it",
                        sink.name, config.name)
            continue
        assets[sink.name] = Asset(uri=uri)
    return assets


def source_assets(config: PipelineConfig) -> list[Asset]:
    """The source topic as an inlet of the task that reads its records (precommit):
    ``kafka://<first bootstrap host:port>/<topic>``; none where no broker is configured."""
    from eos.core.lineage import topic_uri

    uri = topic_uri(config.kafka.client, config.kafka.topic)
    if uri is None:
        log.warning("eos: no asset for the source topic of %s: no Kafka broker configured to "
                    "name it", config.name)
        return []
    return [Asset(uri=uri)]


def asset_extra(planned: dict[str, Any], result: Any, sink: str) -> dict[str, Any]:
    """What one sink's asset event says about the epoch: which one, what it read (the offset
    ranges and their record count, from begin's plan) and what it wrote (rows by output; the
    sink's Delta version or offset when this attempt wrote)."""
    return {
        "epoch": result.epoch,
        "plan_hash": result.plan_hash,
        "outcome": str(result.outcome),
        # the offset ranges read, [start, until) per partition (a plan from before ``offsets``
        # existed gives its printed ranges)
        "ranges": planned.get("offsets", planned["ranges"]),
        "records": planned["records"],
        "rows": result.rows,
        "sink_version": result.versions.get(sink),
    }


def _permanent(error: Exception) -> Exception:
    """The protocol's retry policy in Airflow's terms: a PermanentError becomes an
    AirflowFailException (no retries, the message as the failure reason)."""
    from eos.core.errors import is_permanent

    if is_permanent(error):
        return AirflowFailException(f"{type(error).__name__}: {error}")
    return error


def _phase(config: PipelineConfig) -> Any:
    """Run a library phase of ``config``'s pipeline inside a task: log its lines, give it the
    store's credentials when its tables live on one, apply the retry policy to its errors."""
    import functools

    def decorate(func: Any) -> Any:
        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            from eos.airflow.storage import export_credentials
            from eos.core.storage import is_remote

            _phase_logging()
            if is_remote(config.root):
                export_credentials()  # its connection, if one exists (never logged)
            try:
                return func(*args, **kwargs)
            except Exception as error:
                mapped = _permanent(error)
                if mapped is error:
                    raise
                raise mapped from error

        return run

    return decorate


class PrecommitOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` with the protocol's retry policy: when the precommit app exits with
    ``EXIT_PERMANENT`` (a protocol violation, data loss, a bad config), the task fails at once
    with the app's error line instead of being retried. The app writes what it staged to a
    result file (``--result-file``) this task reads to send the epoch's precommit metrics, as
    the Spark Connect task does (``eos.airflow.metrics``); a driver on another host (cluster
    deploy mode) leaves no file here, and then no metrics."""

    def __init__(self, *, eos_config: PipelineConfig | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.eos_config = eos_config

    def _get_hook(self) -> Any:
        hook = super()._get_hook()
        process_log = hook._process_spark_submit_log
        self._eos_errors: list[str] = []

        def remember_errors(lines: Any) -> Any:
            def tee() -> Any:
                for line in lines:
                    if "eos: error:" in line:
                        self._eos_errors.append(line[line.index("eos: error:"):].strip())
                    yield line
            return process_log(tee())

        hook._process_spark_submit_log = remember_errors
        return hook

    def execute(self, context: Any) -> str | None:
        import tempfile
        from pathlib import Path

        args = self.application_args
        with tempfile.TemporaryDirectory(prefix="eos-precommit-") as scratch:
            result_file = Path(scratch) / "result.json"
            self.application_args = [*(args or []), "--result-file", str(result_file)]
            try:
                self._submit(context)
            finally:
                self.application_args = args
            return self._staged(result_file)

    def _submit(self, context: Any) -> None:
        try:
            super().execute(context)
        except AirflowException as error:
            # The hook keeps its spark-submit process; its exit code carries the error class.
            process = getattr(self._hook, "_submit_sp", None)
            if process is not None and process.returncode == EXIT_PERMANENT:
                message = self._eos_errors[-1] if self._eos_errors else str(error)
                raise AirflowFailException(message) from error
            raise

    def _staged(self, result_file: Any) -> str | None:
        """After a successful submit: send the precommit metrics of the app's result, and
        return its phase line (the task's XCom, as in Connect mode)."""
        import json

        from eos.airflow.metrics import precommit_metrics, safely
        from eos.core.protocol import StageResult

        try:
            result = StageResult.from_payload(json.loads(result_file.read_text())["result"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.info("eos precommit: no result file from the app (%s): no precommit metrics",
                     type(error).__name__)
            return None
        if self.eos_config is not None:
            safely(precommit_metrics, self.eos_config, result)
        return result.line


def pipeline_configs() -> list[PipelineConfig]:
    """Every pipeline config: ``include/pipelines/*.yaml``, or ``$EOS_PIPELINES_DIR/*.yaml``."""
    return [load_config(path) for path in list_pipelines()]


def _plan_of_run(config: PipelineConfig, context: Any) -> dict[str, Any] | None:
    """What ``begin`` returned for this run (epoch, plan_hash, records, ranges), if it ran: the
    ``begin`` task's value, or what the one-task DAG's ``epoch`` task pushed once it began."""
    if config.compute.tasks == "one":
        return context["ti"].xcom_pull(task_ids=EPOCH_TASK, key=PLAN_XCOM)
    return context["ti"].xcom_pull(task_ids="begin")


def _phase_logging() -> None:
    """Send the library's ``phase=...`` lines (logger "eos") to the task log."""
    from eos.core.phaselog import configure

    configure()


EARLIER_RUN_POLL = timedelta(seconds=30)


def _attempt(context: Any, task_id: str) -> Any:
    """This task try as the epoch log names it (``eos.core.epochlog.Attempt``): the phase's own
    row carries it when the try does the work, so that try costs no append of its own."""
    from eos.core.epochlog import Attempt

    return Attempt(context["run_id"], task_id, getattr(context["ti"], "try_number", None))


def _record_try(config: PipelineConfig, context: Any, task_id: str, epoch: int,
                plan_hash: str | None, outcome: Any) -> None:
    """Log this task try's outcome for the epoch, for the epochs view's list of the runs that
    touched each epoch, unless the phase's own row carried it (``epochlog.carried``: the try
    did the work). Never fails the task: the row is for people, and the phase itself is
    done."""
    from eos.core import epochlog
    from eos.core.layout import tables_for

    try:
        epochlog.log_finished(tables_for(config), epoch, _attempt(context, task_id), outcome,
                              plan_hash)
    except Exception as error:
        log.warning("eos: try of %s not logged for epoch %s (%s: %s)", task_id, epoch,
                    type(error).__name__, error)


def _wait_for_earlier_runs(context: Any) -> None:
    """Runs take epochs in logical-date order: while a run with an earlier logical date is
    running, reschedule this ``begin`` (up for reschedule, no try used, no worker held).

    This replaces ``depends_on_past`` + ``wait_for_downstream``, which made Airflow refuse a
    backfill with its default reprocess behavior. Exactly-once and the commit order never
    depended on them: ``begin`` only plans the epoch after the checkpoint (or takes the one
    already logged), and ``precommit`` / ``commit`` refuse epoch N+1 while N is not committed.
    What this wait adds is one epoch per run, in order, when several runs are active at once
    (a backfill runs up to 10): run N+1 plans only after run N ended, so it plans N+1 instead
    of sharing N. An earlier run that *failed* does not hold later runs back: the next run
    takes over its epoch (same plan). Queued earlier runs are not waited for: one waiting for
    the DAG's only active slot (``max_active_runs=1``, a cleared run) would wait for this one.
    Waits only ever point to earlier logical dates, so they cannot form a cycle; a run without
    a logical date waits for none (``max_active_runs=1`` orders those).
    """
    from airflow.exceptions import AirflowRescheduleException

    earlier = context["ti"].get_previous_dagrun(state="running")
    if earlier is None:
        return
    log.info("eos begin: run %s (logical date %s) is still running; this run takes an epoch "
             "after it ends (rechecked in %ss)", earlier.run_id, earlier.logical_date,
             EARLIER_RUN_POLL.seconds)
    raise AirflowRescheduleException(datetime.now(UTC) + EARLIER_RUN_POLL)


PRECOMMIT_RETRIES = {"retries": 2, "retry_delay": timedelta(seconds=30),
                     "execution_timeout": timedelta(minutes=30)}
PRECOMMIT_DOC = ("Stage epoch N in one Delta commit (no-op when staged for the same plan hash or "
                 "already committed). Retried on a transient failure (a server or broker that "
                 "does not answer, a lost Spark Connect session); a permanent one (data loss, a "
                 "bad config, a protocol violation) fails at once. ")


def _connect_precommit(config: PipelineConfig) -> Any:
    """precommit on the Spark Connect server of connection ``compute.connection``."""

    @task(task_id="precommit", doc_md=PRECOMMIT_DOC + "Runs on the Spark Connect server of "
          f"connection `{config.compute.connection}` (type spark_connect, token in the "
          "password); start a local one with `eos spark start`.", inlets=source_assets(config),
          **PRECOMMIT_RETRIES)
    @_phase(config)
    def precommit(**context: Any) -> str:
        return _connect_stage(config, context, "precommit", _planned(config, context))

    return precommit()


def _planned(config: PipelineConfig, context: Any) -> dict[str, Any]:
    """This run's plan from ``begin`` (precommit and commit of the three-task DAG)."""
    from eos.core.errors import ProtocolViolation

    planned = _plan_of_run(config, context)
    if not planned:
        raise ProtocolViolation("this run has no plan from begin: clear the run from begin")
    return planned


def _begin(config: PipelineConfig, context: Any, task_id: str) -> dict[str, Any]:
    """Plan epoch N (or reuse this run's / the logged plan) before anything reads data."""
    from eos.airflow.metrics import begin_metrics, safely
    from eos.core.plan import plan_summary
    from eos.core.protocol import begin_epoch

    _wait_for_earlier_runs(context)
    started = time.monotonic()
    began = begin_epoch(config, run_id=context["run_id"], attempt=_attempt(context, task_id))
    plan = began.plan
    safely(begin_metrics, config, plan, (time.monotonic() - started) * 1000)
    _record_try(config, context, task_id, plan.epoch, plan.hash, began.outcome)
    summary = plan_summary(plan)
    log.info("eos begin: %s", summary)
    return summary


def _connect_stage(config: PipelineConfig, context: Any, task_id: str,
                   planned: dict[str, Any]) -> str:
    """Stage the planned epoch on the Spark Connect server of ``compute.connection``."""
    from eos.airflow.metrics import precommit_metrics, safely
    from eos.compute.connect import airflow_endpoint
    from eos.compute.spark import connect_precommit

    endpoint = airflow_endpoint(config.compute.connection)
    log.info("eos precommit: epoch=%s plan_hash=%s on %s", planned["epoch"],
             planned["plan_hash"], endpoint.address)
    result = connect_precommit(config, planned["epoch"], planned["plan_hash"], endpoint,
                               _attempt(context, task_id))
    safely(precommit_metrics, config, result)
    _record_try(config, context, task_id, result.epoch, result.plan_hash, result.outcome)
    return result.line


def _commit(config: PipelineConfig, context: Any, task_id: str, planned: dict[str, Any],
            assets: dict[str, Asset]) -> dict[str, Any]:
    """Promote staged epoch N into every sink, then checkpoint it (no-op when committed), and
    say so in the sinks' asset events."""
    from eos.airflow.metrics import commit_metrics, safely
    from eos.core.errors import ProtocolViolation
    from eos.core.protocol import commit as commit_epoch

    result = commit_epoch(config, planned["epoch"], attempt=_attempt(context, task_id))
    safely(commit_metrics, config, result)
    _record_try(config, context, task_id, result.epoch, result.plan_hash, result.outcome)
    if result.plan_hash != planned["plan_hash"]:
        raise ProtocolViolation(
            f"epoch {result.epoch} committed plan {result.plan_hash} but this run "
            f"planned {planned['plan_hash']}"
        )
    summary = {**result.summary(), "ranges": planned["ranges"],
               "duration_ms": result.duration_ms}
    for name, asset in assets.items():
        context["outlet_events"][asset].extra = asset_extra(planned, result, name)
    log.info("eos commit: %s", summary)
    return summary


COMMIT_RETRIES = {
    # Commit must eventually succeed: idempotent, so retried for a long time.
    "retries": 100, "retry_delay": timedelta(seconds=15), "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=10),
}
EPOCH_TASK = "epoch"
PLAN_XCOM = "plan"  # the one-task DAG's plan, pushed as soon as begin returns (for abort)
EPOCH_DOC = (
    "The whole epoch in one task (`compute.tasks: one`): begin, precommit on the Spark Connect "
    "server of connection `{connection}`, then commit, each phase logged and fenced exactly as "
    "in the three-task DAG. A retry re-runs all three: begin takes the logged plan, precommit "
    "finds it staged (or re-stages it after an abort), commit is idempotent. Retried like "
    "commit (it must eventually succeed); a permanent error fails it at once.")


def _epoch_task(config: PipelineConfig, assets: dict[str, Asset]) -> Any:
    """begin, precommit and commit in one task (``compute.tasks: one``): what an epoch saves is
    two task start-ups and two scheduler handovers (docs/benchmarks.md, "as deployed")."""

    @task(task_id=EPOCH_TASK, doc_md=EPOCH_DOC.format(connection=config.compute.connection),
          inlets=source_assets(config), outlets=list(assets.values()),
          execution_timeout=PRECOMMIT_RETRIES["execution_timeout"], **COMMIT_RETRIES)
    @_phase(config)
    def epoch(**context: Any) -> dict[str, Any]:
        planned = _begin(config, context, EPOCH_TASK)
        context["ti"].xcom_push(key=PLAN_XCOM, value=planned)
        _connect_stage(config, context, EPOCH_TASK, planned)
        return _commit(config, context, EPOCH_TASK, planned, assets)

    return epoch()


def phase_tasks(config: PipelineConfig) -> dict[str, str]:
    """The task of the pipeline's DAG that runs each phase (the epochs view links its logs)."""
    if config.compute.tasks == "one":
        return {"begin": EPOCH_TASK, "precommit": EPOCH_TASK, "commit": EPOCH_TASK}
    return {"begin": "begin", "precommit": "precommit", "commit": "commit"}


def _submit_precommit(config: PipelineConfig) -> Any:
    """precommit as one spark-submit per epoch (connection ``spark_default`` names the master)."""
    return PrecommitOperator(
        task_id="precommit",
        application=str(PRECOMMIT_APP),
        application_args=app_args(
            config, f"{{{{ {BEGIN_XCOM}['epoch'] }}}}", f"{{{{ {BEGIN_XCOM}['plan_hash'] }}}}"
        ),
        conf=spark_conf(config),
        conn_id=SPARK_CONN_ID,
        spark_binary=spark_submit_binary(),
        env_vars={k: v for k, v in submit_env().items() if k.startswith("PYSPARK_")},
        name=f"eos-precommit-{config.name}",
        eos_config=config,
        doc_md=PRECOMMIT_DOC + f"Exit code {EXIT_PERMANENT} is permanent. Needs connection "
        "`spark_default` naming the master, e.g. "
        'AIRFLOW_CONN_SPARK_DEFAULT=\'{"conn_type": "spark", "host": "local[2]"}\'.',
        inlets=source_assets(config),
        **PRECOMMIT_RETRIES,
    )


def build_dag(config: PipelineConfig, **dag_kwargs: Any) -> DAG:
    """The DAG of one pipeline; ``dag_kwargs`` override DAG arguments (tests, special setups)."""
    assets = sink_assets(config)
    short = timedelta(minutes=10)

    default_args = {
        "owner": "eos",
        # No depends_on_past (Airflow refuses a default backfill of such a DAG): epochs commit
        # in order by the protocol itself, and runs take them in order by begin's wait for
        # earlier runs (``_wait_for_earlier_runs``).
        "retries": 3,
        "retry_delay": timedelta(seconds=10),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=5),
        "execution_timeout": short,
    }
    kwargs: dict[str, Any] = {
        "dag_id": config.dag_id,
        "description": f"exactly-once micro-batches of '{config.kafka.topic}' into "
        f"{config.root}: one run = one epoch",
        "schedule": epoch_schedule(config),  # cron, data-driven or both (eos.airflow.triggers)
        "start_date": START_DATE,
        "catchup": False,
        "max_active_runs": 1,
        "default_args": default_args,
        "tags": ["eos", config.name],
        "doc_md": (__doc__ or "") + OPERATOR_NOTES,
        # alerts.stall_after: a deadline on every run (eos.airflow.alerts), none when unset
        **({"deadline": stall} if (stall := stall_deadline(config)) is not None else {}),
        **dag_kwargs,
    }

    with DAG(**kwargs) as dag:
        if config.compute.tasks == "one":
            epoch = _epoch_task(config, assets)
            epoch >> _abort_task(config, short)
            return dag

        @task(task_id="begin")
        @_phase(config)
        def begin(**context: Any) -> dict[str, Any]:
            """Plan epoch N (or reuse this run's / the logged plan) before anything reads data."""
            return _begin(config, context, "begin")

        precommit = (_submit_precommit(config) if config.compute.mode == "submit"
                     else _connect_precommit(config))

        @task(task_id="commit", outlets=list(assets.values()), execution_timeout=short,
              **COMMIT_RETRIES)
        @_phase(config)
        def commit(**context: Any) -> dict[str, Any]:
            """Promote staged epoch N into every sink, then checkpoint it (no-op when committed)."""
            return _commit(config, context, "commit", _planned(config, context), assets)

        planned = begin()
        committed = commit()
        planned >> precommit >> [committed, _abort_task(config, short)]
        # Redundant for this run's order (commit reads begin's plan); kept so the graph shows it.
        planned >> committed

    return dag


def _abort_task(config: PipelineConfig, timeout: timedelta) -> Any:
    """``abort``: discard epoch N's staged rows once the task staging it failed."""

    @task(task_id="abort", trigger_rule=TriggerRule.ONE_FAILED, execution_timeout=timeout)
    @_phase(config)
    def abort(**context: Any) -> str:
        """Discard epoch N's staged rows after precommit (or the one ``epoch`` task) failed;
        the run still fails. Refused once the epoch's commit has begun (``IN_COMMIT``)."""
        from eos.core.protocol import abort as abort_epoch

        planned = _plan_of_run(config, context)
        if not planned:
            log.info("eos abort: begin produced no plan in this run, nothing was staged")
            return "nothing to abort"
        reason = f"{phase_tasks(config)['precommit']} failed in run {context['run_id']}"
        outcome = abort_epoch(config, planned["epoch"], reason,
                              attempt=_attempt(context, "abort"))
        _record_try(config, context, "abort", planned["epoch"], planned["plan_hash"],
                    outcome)
        log.info("eos abort: epoch=%s plan_hash=%s outcome=%s",
                 planned["epoch"], planned["plan_hash"], outcome)
        return str(outcome)

    return abort()


def rewind_dag_id(config: PipelineConfig) -> str:
    return config.dag_id + REWIND_SUFFIX


def build_rewind_dag(config: PipelineConfig, **dag_kwargs: Any) -> DAG:
    """The maintenance DAG of one pipeline: each manual run is one rewind (``REWIND_DOC``)."""
    kwargs: dict[str, Any] = {
        "dag_id": rewind_dag_id(config),
        "description": f"rewind '{config.name}' to a committed epoch; its next runs replay",
        "schedule": None,
        "start_date": START_DATE,
        "catchup": False,
        "max_active_runs": 1,
        "default_args": {"owner": "eos", "retries": 3, "retry_delay": timedelta(seconds=10),
                         "retry_exponential_backoff": True,
                         "execution_timeout": timedelta(minutes=30)},
        "params": {
            "to_epoch": Param(type="integer", minimum=-1,
                              description="the last epoch that stays committed (-1: none)"),
            "republish": Param(False, type="boolean",
                               description="also rewind Kafka sinks: consumers see the replayed "
                               "epochs again"),
        },
        "tags": ["eos", "eos-maintenance", config.name],
        "doc_md": REWIND_DOC,
        **dag_kwargs,
    }
    with DAG(**kwargs) as dag:

        @task(task_id="rewind")
        @_phase(config)
        def rewind(**context: Any) -> dict[str, Any]:
            """Restore every table to the epoch asked for (idempotent: a retry finishes it)."""
            from eos.core.rewind import rewind as rewind_pipeline

            params = context["params"]
            result = rewind_pipeline(config, int(params["to_epoch"]),
                                     republish=bool(params["republish"]),
                                     run_id=context["run_id"])
            summary = result.summary()
            log.info("eos rewind: %s", summary)
            return summary

        rewind()
    return dag


def build_dags(configs: Iterable[PipelineConfig] | None = None) -> dict[str, DAG]:
    """``{dag_id: DAG}`` for every pipeline config (its epochs' DAG and its rewind DAG), for a
    DAG file's globals()."""
    configs = pipeline_configs() if configs is None else configs
    dags: dict[str, DAG] = {}
    for config in configs:
        dags[config.dag_id] = build_dag(config)
        dags[rewind_dag_id(config)] = build_rewind_dag(config)
    return dags
