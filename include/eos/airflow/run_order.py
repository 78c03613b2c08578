"""Runs take epochs in logical-date order: ``begin`` waits while a run with an earlier logical
date is still running."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

log = logging.getLogger(__name__)

EARLIER_RUN_POLL = timedelta(seconds=30)


def wait_for_earlier_runs(context: Any) -> None:
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
    from airflow.sdk.exceptions import AirflowRescheduleException

    earlier = context["ti"].get_previous_dagrun(state="running")
    if earlier is None:
        return
    log.info("eos begin: run %s (logical date %s) is still running; this run takes an epoch "
             "after it ends (rechecked in %ss)", earlier.run_id, earlier.logical_date,
             EARLIER_RUN_POLL.seconds)
    raise AirflowRescheduleException(datetime.now(UTC) + EARLIER_RUN_POLL)
