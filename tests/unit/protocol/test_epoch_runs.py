"""Every run that touched an epoch, and which of its task tries did the work: the tries the
epoch log names (in the phase's own row for a try that did the work, ``epochlog.with_try``;
in a ``tried`` row for one that found it done, ``epochlog.log_try``), folded by
``eos.core.pipeline_status`` and rendered by the epochs view (``eos.airflow.epochs_html``) with
links
to each try's own log.

The scenario is the one a default backfill beside the ``*/1`` schedule makes: a backfill run
plans and stages epoch 0, its commit's first try dies, a scheduled run starting meanwhile
takes the same epoch over and commits it; the backfill run, cleared, finds everything done.
"""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import quote

import pytest

from eos.airflow.epochs_html import Links, pipeline_page, run_type
from eos.core import epochlog
from eos.core.config import PipelineConfig
from eos.core.errors import InjectedFault
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.pipeline_status import EpochState, pipeline_status
from eos.core.protocol import abort, begin_epoch, commit, precommit

from support.memory import MemorySource, MemoryStager

BACKFILL = "backfill__2026-11-01T00:00:00+00:00"
SCHEDULED = "scheduled__2026-11-25T20:00:00+00:00"
MANUAL = "manual__2026-11-25T20:01:00+00:00"


class Tries:
    """The DAG's tasks' way of logging their tries (``eos.airflow.task_tries``): the phase
    gets the try (``epochlog.Attempt``) and names it in its own row when it does the work;
    the try logs a ``tried`` row only when it found the work done (``epochlog.log_finished``).
    ``carried=False`` logs a ``tried`` row for every finished try, as the tasks did before
    (logs written then must show the same)."""

    def __init__(self, config: PipelineConfig, carried: bool) -> None:
        self.config, self.carried = config, carried
        self.own_rows = 0

    def attempt(self, run_id: str, task: str, number: int) -> epochlog.Attempt | None:
        return epochlog.Attempt(run_id, task, number) if self.carried else None

    def finished(self, epoch: int, run_id: str, task: str, number: int,
                 outcome: Outcome) -> None:
        tables = tables_for(self.config)
        if self.carried:
            attempt = epochlog.Attempt(run_id, task, number)
            self.own_rows += epochlog.log_finished(tables, epoch, attempt, outcome)
        else:
            epochlog.log_try(tables, epoch, run_id, task, number, outcome)
            self.own_rows += 1


@pytest.mark.parametrize("carried", [True, False], ids=["tries-in-phase-rows", "tried-rows"])
def test_the_epochs_view_lists_every_run_that_touched_an_epoch_and_links_the_working_try(
        pipeline: PipelineConfig, source: MemorySource, carried: bool) -> None:
    log = Tries(pipeline, carried)
    # The backfill run plans and stages epoch 0; its commit's first try dies (no row).
    began = begin_epoch(pipeline, BACKFILL, source=source,
                        attempt=log.attempt(BACKFILL, "begin", 1))
    assert (began.plan.epoch, began.outcome) == (0, Outcome.PLANNED)
    log.finished(0, BACKFILL, "begin", 1, began.outcome)
    staged = precommit(pipeline, 0, MemoryStager(),
                       attempt=log.attempt(BACKFILL, "precommit", 1))
    log.finished(0, BACKFILL, "precommit", 1, staged.outcome)
    # A scheduled run starts meanwhile: epoch 0 is the next one, it takes it over and commits.
    taken = begin_epoch(pipeline, SCHEDULED, source=source,
                        attempt=log.attempt(SCHEDULED, "begin", 1))
    assert (taken.plan, taken.outcome) == (began.plan, Outcome.REUSED_LOG)
    log.finished(0, SCHEDULED, "begin", 1, taken.outcome)
    again = precommit(pipeline, 0, MemoryStager(),
                      attempt=log.attempt(SCHEDULED, "precommit", 1))
    assert again.outcome is Outcome.REUSED_STAGE
    log.finished(0, SCHEDULED, "precommit", 1, again.outcome)
    done = commit(pipeline, 0, attempt=log.attempt(SCHEDULED, "commit", 1))
    assert done.outcome is Outcome.COMMITTED
    log.finished(0, SCHEDULED, "commit", 1, done.outcome)
    # The backfill run is cleared: its begin finds its own epoch, its commit finds it done.
    cleared = begin_epoch(pipeline, BACKFILL, source=source,
                          attempt=log.attempt(BACKFILL, "begin", 2))
    assert (cleared.plan.epoch, cleared.outcome) == (0, Outcome.REUSED_RUN)
    log.finished(0, BACKFILL, "begin", 2, cleared.outcome)
    late = commit(pipeline, 0, attempt=log.attempt(BACKFILL, "commit", 2))
    log.finished(0, BACKFILL, "commit", 2, late.outcome)
    # Epoch 1, by a manual run, aborted after its precommit: the tries' rows follow the abort.
    source.produce(0, 5)
    one = begin_epoch(pipeline, MANUAL, source=source, attempt=log.attempt(MANUAL, "begin", 1))
    log.finished(1, MANUAL, "begin", 1, one.outcome)
    precommit(pipeline, 1, MemoryStager())
    aborted = abort(pipeline, 1, "precommit failed", attempt=log.attempt(MANUAL, "abort", 1))
    log.finished(1, MANUAL, "abort", 1, aborted)
    # A try that did the work costs no append of its own: only the 4 no-op tries wrote rows.
    assert log.own_rows == (4 if carried else 9)
    assert sum(r["phase"] == epochlog.TRIED for r in epochlog.rows(tables_for(pipeline))) == (
        log.own_rows)

    status = pipeline_status(pipeline, limit=10, with_lag=False)
    first, second = status.epochs
    # The tries' rows change no epoch's state (the aborted one ends with a ``tried`` row).
    assert (first.state, second.state) == (EpochState.COMMITTED, EpochState.ABORTED)
    assert first.run_id == BACKFILL  # the planner, as before
    assert [(r.run_id, r.role) for r in first.runs] == [(BACKFILL, "planned"),
                                                        (SCHEDULED, "adopted")]
    backfill, scheduled = first.runs
    assert [(t.task, t.try_number, t.wrote) for t in backfill.tries] == [
        ("begin", 1, True), ("precommit", 1, True), ("begin", 2, False), ("commit", 2, False)]
    assert [(t.task, t.try_number, t.wrote) for t in scheduled.tries] == [
        ("begin", 1, False), ("precommit", 1, False), ("commit", 1, True)]
    worked = first.worked("commit")
    assert worked is not None and (worked[0], worked[1].try_number) == (SCHEDULED, 1)
    assert [(r.run_id, r.role) for r in second.runs] == [(MANUAL, "planned")]
    assert [(t.task, t.wrote) for t in second.runs[0].tries] == [("begin", True),
                                                                 ("abort", True)]

    page = pipeline_page(status, Links(airflow=""), took_ms=1.0)
    row = re.search(r'<tr data-epoch="0">(.*?)</tr>', page, re.S)
    assert row is not None
    cells = row.group(1)
    base = f"/dags/{pipeline.dag_id}/runs/"

    def task_link(run_id: str, task: str, try_number: int) -> str:
        return f"{base}{quote(run_id, safe='')}/tasks/{task}?try_number={try_number}"

    logs = re.search(r'<td class="logs">(.*?)</td>', cells, re.S)
    assert logs is not None
    hrefs = {task: unescape(href) for href, task in re.findall(
        r'<a href="([^"]+)" data-airflow data-task="(\w+)"', logs.group(1))}
    # Each phase's log link opens the try that did the work, in whichever run it was.
    assert hrefs == {"begin": task_link(BACKFILL, "begin", 1),
                     "precommit": task_link(BACKFILL, "precommit", 1),
                     "commit": task_link(SCHEDULED, "commit", 1)}
    runs = re.search(r'<td class="runs">(.*?)</td>', cells, re.S)
    assert runs is not None
    touches = re.findall(r'<div class="touch" data-run="([^"]+)" data-type="(\w+)" '
                         r'data-role="(\w*)">', runs.group(1))
    assert [(unescape(r), t, role) for r, t, role in touches] == [
        (BACKFILL, "backfill", "planned"), (SCHEDULED, "scheduled", "adopted")]
    tries = re.findall(r'<a class="try (work|noop)" data-task="(\w+)" data-try="(\d+)" '
                       r'data-wrote="\w+" href="([^"]+)"', runs.group(1))
    assert [(kind, task, n) for kind, task, n, _ in tries] == [
        ("work", "begin", "1"), ("work", "precommit", "1"), ("noop", "begin", "2"),
        ("noop", "commit", "2"), ("noop", "begin", "1"), ("noop", "precommit", "1"),
        ("work", "commit", "1")]
    assert unescape(tries[3][3]) == task_link(BACKFILL, "commit", 2)


def test_run_types_come_from_the_ids_airflow_makes() -> None:
    assert [run_type(r) for r in (BACKFILL, SCHEDULED, MANUAL,
                                  "asset_triggered__2026-11-25T20:00:00+00:00",
                                  "my-own-id", None)] == [
        "backfill", "scheduled", "manual", "asset_triggered", "other", "other"]


def test_a_try_that_dies_after_its_phase_row_is_the_one_that_did_the_work(
        pipeline: PipelineConfig, source: MemorySource, arm) -> None:
    """begin's first try logs the plan (naming itself, ``epochlog.with_try``) and dies before
    it returns; its retry finds the run's plan and logs a ``tried`` row. The view shows both:
    try 1 planned (its log link is the begin link), try 2 found it done. A try that dies
    before its phase's row (here: precommit's first try, before the staging write) leaves
    nothing; its retry stages and is the one named."""
    arm("begin.after_log:fail,precommit.before_write:fail")
    with pytest.raises(InjectedFault):
        begin_epoch(pipeline, MANUAL, source=source,
                    attempt=epochlog.Attempt(MANUAL, "begin", 1))
    again = begin_epoch(pipeline, MANUAL, source=source,
                        attempt=epochlog.Attempt(MANUAL, "begin", 2))
    assert again.outcome is Outcome.REUSED_RUN
    assert epochlog.log_finished(tables_for(pipeline), 0, epochlog.Attempt(MANUAL, "begin", 2),
                                 again.outcome)
    with pytest.raises(InjectedFault):
        precommit(pipeline, 0, MemoryStager(), attempt=epochlog.Attempt(MANUAL, "precommit", 1))
    staged = precommit(pipeline, 0, MemoryStager(),
                       attempt=epochlog.Attempt(MANUAL, "precommit", 2))
    assert staged.outcome is Outcome.STAGED
    assert not epochlog.log_finished(tables_for(pipeline), 0,
                                     epochlog.Attempt(MANUAL, "precommit", 2), staged.outcome)

    (epoch,) = pipeline_status(pipeline, limit=10, with_lag=False).epochs
    assert epoch.state is EpochState.PRECOMMITTED
    (run,) = epoch.runs
    assert (run.run_id, run.role) == (MANUAL, "planned")
    assert [(t.task, t.try_number, t.outcome, t.wrote) for t in run.tries] == [
        ("begin", 1, str(Outcome.PLANNED), True), ("begin", 2, str(Outcome.REUSED_RUN), False),
        ("precommit", 2, str(Outcome.STAGED), True)]
    assert [(task, epoch.worked(task)[1].try_number) for task in ("begin", "precommit")] == [
        ("begin", 1), ("precommit", 2)]


def test_a_one_task_dag_links_every_phase_to_the_epoch_tasks_try(
        pipeline: PipelineConfig, source: MemorySource) -> None:
    """``compute.tasks: one``: the three phases run in the ``epoch`` task, so each phase's log
    link opens the try of that task that did the phase (the first died before commit)."""
    from eos.airflow.tasks import EPOCH_TASK, phase_tasks

    one = pipeline.model_copy(update={"compute": pipeline.compute.model_copy(
        update={"tasks": "one"})})
    assert phase_tasks(one) == dict.fromkeys(("begin", "precommit", "commit"), EPOCH_TASK)
    source.produce(0, 5)
    first = epochlog.Attempt(MANUAL, EPOCH_TASK, 1)
    began = begin_epoch(one, MANUAL, source=source, attempt=first)
    precommit(one, began.plan.epoch, MemoryStager(), attempt=first)
    second = epochlog.Attempt(MANUAL, EPOCH_TASK, 2)  # the first try died before commit
    again = begin_epoch(one, MANUAL, source=source, attempt=second)
    epochlog.log_finished(tables_for(one), 0, second, again.outcome)
    assert commit(one, 0, attempt=second).outcome is Outcome.COMMITTED

    status = pipeline_status(one, limit=10, with_lag=False)
    page = pipeline_page(status, Links(airflow=""), took_ms=1.0, tasks=phase_tasks(one))
    logs = re.search(r'<tr data-epoch="0">.*?<td class="logs">(.*?)</td>', page, re.S)
    assert logs is not None
    hrefs = {phase: unescape(href) for href, phase in re.findall(
        r'<a href="([^"]+)" data-airflow data-task="(\w+)"', logs.group(1))}
    link = f"/dags/{one.dag_id}/runs/{quote(MANUAL, safe='')}/tasks/{EPOCH_TASK}?try_number="
    # Each phase's link opens the try of the one task that did that phase.
    assert hrefs == {"begin": link + "1", "precommit": link + "1", "commit": link + "2"}
