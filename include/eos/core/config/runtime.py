"""How epochs run: their size and table history, the Spark settings, and where precommit's
Spark work runs (a Spark Connect server or one application per epoch)."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from eos.core.config.spark_settings import check_spark_conf
from eos.core.config.values import DurationMs, Strict


class EpochConfig(Strict):
    """How big an epoch may be and how long the protocol's tables keep their history."""

    max_records: int = Field(
        default=500_000, gt=0,
        description="The most records one epoch reads, spread fairly over the partitions.")
    staging_retention: int = Field(
        default=3, ge=1,
        description="Committed epochs kept in staging (the last one, and the base of its "
                    "state, always are).")
    maintenance_every: int = Field(
        default=100, ge=0,
        description="Every this many committed epochs, commit compacts the epoch log, "
                    "vacuums the epoch log and staging and cleans up the protocol tables' "
                    "Delta logs; 0 turns it off.")
    # An epoch stages only the open windows it changed; every this many epochs (or once the
    # changes outnumber the last snapshot's rows) it stages them all (``eos.core.window_state``).
    # 1: every epoch a snapshot (no incremental state).
    state_snapshot_every: int = Field(
        default=20, ge=1,
        description="An epoch stages only the open windows it changed; every this many epochs "
                    "(or once the changes outnumber the last snapshot) it stages a snapshot of "
                    "every open window. 1: a snapshot every epoch.")
    # How long the epoch log's, staging's and the checkpoint table's Delta log history is kept
    # (their ``delta.logRetentionDuration``; maintenance checkpoints them and cleans up older
    # commit files). Every Delta read and write lists the table's ``_delta_log``, so this is what
    # bounds the per-epoch cost; it is also how far back a rewind can find those tables' commits.
    # At least an hour: a writer whose snapshot predates a cleanup could otherwise commit at a
    # version number the cleanup freed, below the Delta checkpoint, where no reader looks (Delta's
    # rule: the log retention must outlast any transaction).
    log_retention: DurationMs = Field(
        default=86_400_000, ge=3_600_000,
        description="How long the epoch log, staging and the checkpoint table keep their Delta "
                    "log history (delta.logRetentionDuration): it bounds every epoch's cost and "
                    "is how far back a rewind finds those tables' commits. At least 1h.")


class SparkConfig(Strict):
    """Spark settings. ``submit`` mode: the per-epoch application's (master, driver memory, any
    ``conf``). ``connect`` mode: the server owns master and memory (``eos spark start``); the
    session gets ``shuffle_partitions`` and the runtime SQL settings in ``conf``."""

    master: str = Field(default="local[2]",
                        description="compute.mode submit: the application's master.")
    shuffle_partitions: int = Field(
        default=2, gt=0,
        description="spark.sql.shuffle.partitions of the epoch's session, and the fewest "
                    "input splits an epoch's Kafka read makes.")
    driver_memory: str = Field(default="2g", pattern=r"^\d+[kmgt]?$",
                               description="compute.mode submit: the driver's memory.")
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="Spark settings. submit: any. connect: runtime SQL settings only, for the "
                    "epoch's session; a setting that cannot change per session is refused "
                    "(set it on the server).")
    @field_validator("conf")
    @classmethod
    def _spark_takes(cls, conf: dict[str, str]) -> dict[str, str]:
        check_spark_conf(conf)
        return conf

    # An epoch whose previous epoch staged at most this many rows (and whose own rows are bounded
    # by ``eos.compute.precommit.write.COLLECT_MAX_ROWS`` before it runs) is collected to the
    # driver as Arrow and written there, one Parquet file per kind: a Spark file write costs
    # ~0.5 s per epoch however small. Other epochs are written by the executors and never held
    # by the driver. 0: always the executors. Either way the files enter staging in one Delta
    # commit. The open windows an epoch reads are read by the driver too when their files hold
    # at most this many rows.
    collect_rows: int = Field(
        default=50_000, ge=0,
        description="When the previous epoch staged at most this many rows (and this one's "
                    "are bounded by 1,000,000), the epoch is collected and written by the "
                    "driver; otherwise the executors write it (without windows: when the "
                    "epoch reads at most this many records). 0: always the executors. The "
                    "staged rows are the same either way.")


COMPUTE_MODE_ENV = "EOS_COMPUTE_MODE"  # deployment-wide default for pipelines that do not say


def _default_compute_mode() -> Any:  # checked by ComputeConfig._known_mode
    return os.environ.get(COMPUTE_MODE_ENV) or "connect"


class ComputeConfig(Strict):
    """Where precommit's Spark work runs (docs/design.md, "Compute"). ``connect`` (the
    default): a long-lived Spark Connect server reached through the Airflow connection
    ``connection`` (outside Airflow: ``EOS_SPARK_REMOTE`` or the server ``eos spark start``
    runs). ``submit``: one Spark application per epoch (``spark-submit``), for clusters that
    want that. Both run the same precommit."""

    mode: Literal["connect", "submit"] = Field(
        default_factory=_default_compute_mode, json_schema_extra={"default": "connect"},
        description="connect (the default, or $EOS_COMPUTE_MODE): precommit runs on a "
                    "long-lived Spark Connect server. submit: one spark-submit application "
                    "per epoch.")
    connection: str = Field(
        default="spark_connect_default",
        description="The Airflow connection (type spark_connect: host, port, the token as "
                    "password, use_ssl in extra) precommit reaches the server through.")
    # ``pipeline``: every precommit of this pipeline joins one server session (a fixed id), so
    # the server's Python workers stay warm (a new session starts its own: about 3 s);
    # idle past the server's session timeout, the server closes it and the next precommit
    # joins the next one (``eos.compute.connect.pipeline_session_id``). ``task``: a fresh
    # session per precommit, released when it ends.
    session: Literal["pipeline", "task"] = Field(
        default="pipeline",
        description="pipeline: every precommit of the pipeline joins one server session (warm "
                    "Python workers). task: a fresh session per precommit, released when it "
                    "ends.")
    # The shape of an epoch's DAG run: ``phases``, one task per phase (begin -> precommit ->
    # commit, each cleared and retried on its own, each with its own log); ``one``, the three
    # phases in one task, which saves two task start-ups and two scheduler handovers per epoch
    # (``python -m bench.dag_runs``). The protocol, its fences and its epoch log are the
    # same; a retry of the one task re-runs begin and precommit as no-ops. Connect mode only.
    tasks: Literal["phases", "one"] = Field(
        default="phases",
        description="The shape of an epoch's DAG run: phases, one task per phase (begin, "
                    "precommit, commit); one, the three phases in one task epoch (connect "
                    "only): two task start-ups fewer per epoch.")

    @model_validator(mode="after")
    def _one_task_on_connect(self) -> ComputeConfig:
        if self.tasks == "one" and self.mode != "connect":
            raise ValueError("compute.tasks: one runs precommit on Spark Connect inside the "
                             "epoch's task; compute.mode: submit runs it as a spark-submit "
                             "task of its own (use tasks: phases)")
        return self

    @field_validator("mode", mode="before")
    @classmethod
    def _known_mode(cls, value: Any) -> Any:
        if value not in ("connect", "submit"):
            raise ValueError(f"compute.mode must be 'connect' or 'submit', got {value!r} (from the "
                             f"config or {COMPUTE_MODE_ENV})")
        return value
