"""A pipeline's status as an operator reads it: the one function behind ``eos status`` and the
Airflow UI's epochs view (``eos.airflow.epochs_view``), so the two can never disagree.

Everything here only reads: no table is created, no sink is prepared or fenced, so looking at a
pipeline never disturbs a commit in flight. What is committed comes from the checkpoint table
(the authority); what each epoch did (plan, counts, durations, versions) comes from the epoch
log, which is for people (docs/pipelines.md, "Tables"), and from the rows precommit and commit
record in their own commits instead of log appends (``epoch_rows``).

The data model is in ``model``, the reading in ``reading``, ``eos status``'s text in
``rendering`` and the stall alert's decision in ``stall``.
"""

from eos.core.pipeline_status.model import (
    DEFAULT_LIMIT,
    EpochRun,
    EpochState,
    EpochStatus,
    PartitionLag,
    PipelineStatus,
    TaskTry,
    total_lag,
)
from eos.core.pipeline_status.reading import (
    epoch_rows,
    partition_lags,
    pipeline_status,
    source_moved,
)
from eos.core.pipeline_status.rendering import render
from eos.core.pipeline_status.stall import StallCheck, StallVerdict, check_stall, stall_verdict

__all__ = [
    "DEFAULT_LIMIT",
    "EpochRun",
    "EpochState",
    "EpochStatus",
    "PartitionLag",
    "PipelineStatus",
    "StallCheck",
    "StallVerdict",
    "TaskTry",
    "check_stall",
    "epoch_rows",
    "partition_lags",
    "pipeline_status",
    "render",
    "source_moved",
    "stall_verdict",
    "total_lag",
]
