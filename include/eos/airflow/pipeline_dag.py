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
``eos/compute/app.py`` with ``SparkSubmitOperator`` on connection ``spark_default``: one
Spark application per epoch. Both run ``eos.core.protocol.precommit``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG

from eos.airflow.alerts import stall_deadline
from eos.airflow.assets import sink_assets
from eos.airflow.dag_settings import dag_arguments, task_defaults
from eos.airflow.tasks import (
    abort_task,
    begin_task,
    commit_task,
    connect_precommit_task,
    epoch_task,
    submit_precommit_task,
)
from eos.airflow.triggers import epoch_schedule
from eos.core.config import PipelineConfig

START_DATE = datetime(2025, 1, 1)  # naive: Airflow reads it in its default timezone (UTC)
TASK_TIMEOUT = timedelta(minutes=10)  # begin, commit and abort (precommit has its own)

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


def default_args(config: PipelineConfig) -> dict[str, Any]:
    """Every task's defaults: the pipeline's ``airflow`` section (owner, pool, queue, retries,
    failure callback: ``eos.airflow.dag_settings``) and backoff (precommit, commit and the one
    ``epoch`` task lay their own retry policies over it)."""
    return {
        # No depends_on_past (Airflow refuses a default backfill of such a DAG): epochs commit
        # in order by the protocol itself, and runs take them in order by begin's wait for
        # earlier runs (``eos.airflow.run_order``).
        **task_defaults(config),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=5),
        "execution_timeout": TASK_TIMEOUT,
    }


def build_dag(config: PipelineConfig, **dag_kwargs: Any) -> DAG:
    """The DAG of one pipeline; ``dag_kwargs`` override DAG arguments (tests, special setups)."""
    assets = sink_assets(config)
    kwargs: dict[str, Any] = {
        "dag_id": config.dag_id,
        "description": f"exactly-once micro-batches of {config.kafka.describe()} into "
        f"{config.root}: one run = one epoch",
        "schedule": epoch_schedule(config),  # cron, data-driven or both (eos.airflow.triggers)
        "start_date": START_DATE,
        "catchup": False,
        "max_active_runs": 1,
        "default_args": default_args(config),
        **dag_arguments(config, ["eos", config.name], (__doc__ or "") + OPERATOR_NOTES),
        # alerts.stall_after: a deadline on every run (eos.airflow.alerts), none when unset
        **({"deadline": stall} if (stall := stall_deadline(config)) is not None else {}),
        **dag_kwargs,
    }

    with DAG(**kwargs) as dag:
        epoch_phases(config, assets)
    return dag


def epoch_phases(config: PipelineConfig, assets: dict[str, Any],
                 group: str | None = None) -> tuple[Any, list[Any]]:
    """The phase tasks of one epoch, wired, in the DAG (or task group ``group``) being built:
    begin -> precommit -> commit, abort when precommit failed (or the one ``epoch`` task and
    its abort). Returns the first task and the last ones, for what comes before and after."""
    if config.compute.tasks == "one":
        epoch = epoch_task(config, assets)
        aborted = abort_task(config, TASK_TIMEOUT)
        epoch >> aborted
        return epoch, [epoch, aborted]

    precommit = (submit_precommit_task(config, group) if config.compute.mode == "submit"
                 else connect_precommit_task(config))
    planned = begin_task(config)
    committed = commit_task(config, assets, TASK_TIMEOUT)
    aborted = abort_task(config, TASK_TIMEOUT)
    planned >> precommit >> [committed, aborted]
    # Redundant for this run's order (commit reads begin's plan); kept so the graph shows it.
    planned >> committed
    return planned, [committed, aborted]
