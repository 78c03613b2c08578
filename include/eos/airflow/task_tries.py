"""A task try as the epoch log names it, and the row that says what a try found, for the epochs
view's list of the runs that touched each epoch."""

from __future__ import annotations

import logging
from typing import Any

from eos.core.config import PipelineConfig

log = logging.getLogger(__name__)


def attempt(context: Any, task_id: str) -> Any:
    """This task try as the epoch log names it (``eos.core.epochlog.Attempt``): the phase's own
    row carries it when the try does the work, so that try costs no append of its own."""
    from eos.core.epochlog import Attempt

    return Attempt(context["run_id"], task_id, getattr(context["ti"], "try_number", None))


def record_try(config: PipelineConfig, context: Any, task_id: str, epoch: int,
               plan_hash: str | None, outcome: Any) -> None:
    """Log this task try's outcome for the epoch, for the epochs view's list of the runs that
    touched each epoch, unless the phase's own row carried it (``epochlog.carried``: the try
    did the work). Never fails the task: the row is for people, and the phase itself is
    done."""
    from eos.core import epochlog
    from eos.core.layout import tables_for

    try:
        epochlog.log_finished(tables_for(config), epoch, attempt(context, task_id), outcome,
                              plan_hash)
    except Exception as error:
        log.warning("eos: try of %s not logged for epoch %s (%s: %s)", task_id, epoch,
                    type(error).__name__, error)
