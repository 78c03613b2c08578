"""``commit``: promote a pre-committed epoch into every sink exactly once, then checkpoint it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from eos.core import checkpoints, epochlog, faults
from eos.core.checkpoints import PRECOMMIT_FACTS, STAGED_VIEW, Checkpoint
from eos.core.config import PipelineConfig
from eos.core.errors import ProtocolViolation
from eos.core.evolution import unstaged, without
from eos.core.maintenance import maintain
from eos.core.outcomes import Outcome
from eos.core.outputs import epoch_outputs, sink_rows
from eos.core.phaselog import elapsed_ms, log_epoch_phase, timed
from eos.core.plan import Plan, carried_offsets, plan_of
from eos.core.protocol.authority import join_sinks, left_sinks
from eos.core.protocol.results import CommitResult, sink_summary
from eos.core.protocol.sealing import seal_epoch, sealed_already
from eos.core.sink import sinks_for
from eos.core.staging import precommit_facts, staged_epoch, watermark_row
from eos.core.staging_fence import rewinds_at
from eos.core.tables import OpenTables, ensure_tables


def commit(config: PipelineConfig, epoch: int, *,
           attempt: epochlog.Attempt | None = None) -> CommitResult:
    """Promote pre-committed epoch N into every sink exactly once, then checkpoint it. The
    checkpoint names ``attempt`` (a scheduler's task try) as the one that committed N (its
    ``details``: the epochs view's committed entry, ``Checkpoint.log_rows``).

    Like Flink's ``notifyCheckpointComplete``, this must eventually succeed once N is staged:
    it is retried until it does, and every retry is safe. Scenarios:
    - N's checkpoint exists: nothing, ``ALREADY_COMMITTED`` (a retry after a crash after the
      checkpoint, a cleared committed run, the loser of a race);
    - the last checkpoint is not N-1: ``ProtocolViolation`` (epochs commit in order);
    - N is not staged for this plan: ``ProtocolViolation`` (run precommit first);
    - some sinks hold N already (a crash between sinks, or before the checkpoint): they skip,
      the others write, then the checkpoint is appended;
    - two attempts at once: each sink write and the checkpoint append are fenced; exactly one
      attempt writes each, the other finds it committed (``raced``). The attempt that loses
      the checkpoint race reports ``ALREADY_COMMITTED`` and leaves the bookkeeping to the
      winner.
    """
    with timed() as took, ensure_tables(config) as tables:
        plan = plan_of(tables, epoch)
        result = CommitResult(epoch, plan.hash, Outcome.COMMITTED)
        committed = checkpoints.last_checkpointed(tables, config.app_id)
        if committed >= epoch:
            result.outcome = Outcome.ALREADY_COMMITTED
        elif committed != epoch - 1:
            raise ProtocolViolation(
                f"cannot commit epoch {epoch}: the last checkpoint is epoch {committed}; "
                "epochs commit in order"
            )
        else:
            _commit_sinks_and_checkpoint(config, tables, plan, result, took, attempt)
    result.duration_ms = took["ms"]
    log_epoch_phase(
        "commit", epoch=epoch, plan_hash=plan.hash, outcome=result.outcome,
        ranges=plan.describe_ranges(","), records=plan.records, rows=result.rows,
        delta_versions={**result.delta_versions, "checkpoints": result.checkpoint_version},
        duration_ms=result.duration_ms, sinks={s.sink: sink_summary(s) for s in result.sinks},
        checkpoint_version=result.checkpoint_version, pruned_staging_before=result.pruned_before,
        maintenance=result.maintenance,
    )
    return result


def _commit_sinks_and_checkpoint(config: PipelineConfig, tables: OpenTables, plan: Plan,
                                 result: CommitResult, took: dict[str, float],
                                 attempt: epochlog.Attempt | None) -> None:
    epoch = plan.epoch
    # Open windows stay in staging: the commit promotes outputs, never reads the state.
    staged = staged_epoch(tables, epoch, plan.hash, state=False)
    if staged is None:
        raise ProtocolViolation(
            f"epoch {epoch} is not pre-committed for plan {plan.hash}; run precommit first"
        )
    previous = checkpoints.last(tables, epoch - 1)
    checkpoints.check_schema_view(previous, config)  # N is checkpointed with this config's view
    watermark = previous.watermark_ms if previous else None
    # Columns the select gained after N was precommitted: N commits as it was staged.
    unready = unstaged(config, tables, epoch, previous.config if previous else None)
    outputs = _without(epoch_outputs(config, staged, epoch, watermark, plan.topic), unready)
    sinks = join_sinks(sinks_for(config), previous)
    # Every deterministic failure is found here, before the seal, while N can be aborted:
    # once sealed, N's commit must eventually succeed (docs/guarantees.md). A retry of a sealed N
    # checks nothing: it can only go forward.
    given = {sink.name: sink_rows(config, sink.name, outputs[sink.output]) for sink in sinks}
    if not sealed_already(config, tables, epoch):
        for sink in sinks:
            sink.check(epoch, given[sink.name])
    sealed = seal_epoch(config, tables, plan, staged)
    result.pruned_before = sealed.pruned_before
    if sealed.rows is not staged:  # read again after a lost seal: promote what was sealed
        staged = sealed.rows
        outputs = _without(epoch_outputs(config, staged, epoch, watermark, plan.topic), unready)
        given = {sink.name: sink_rows(config, sink.name, outputs[sink.output]) for sink in sinks}
    result.rows = {output: rows.num_rows for output, rows in outputs.items()}
    for i, sink in enumerate(sinks):
        done = sink.commit(epoch, given[sink.name], plan.hash)
        result.sinks.append(done)
        if sink.versions_tables and done.outcome is Outcome.COMMITTED:
            result.delta_versions[sink.name] = done.version
        if i < len(sinks) - 1:
            faults.hit("commit.between_sinks")
    faults.hit("commit.before_checkpoint")
    facts = precommit_facts(staged)
    # The view N was staged with; an epoch staged by an earlier version has none recorded:
    # the config's, less the columns it was not staged with.
    view = facts.pop(STAGED_VIEW, None) if facts else None
    checkpoint = Checkpoint(
        epoch=epoch, plan_hash=plan.hash,
        until={**(carried_offsets(previous.until, previous.source, plan) if previous else {}),
               **plan.until},
        watermark_ms=_staged_watermark(staged), rows=result.rows,
        sinks={s.sink: sink_summary(s, since=sink.joined_at)
               for s, sink in zip(result.sinks, sinks, strict=True)},
        config=view if view is not None else without(config.schema_view(), unready),
        source=plan.source,
        details=_committed_details(result, attempt, took, facts,
                                   left_sinks(sinks, previous)),
    )
    written = checkpoints.append(tables, config.app_id, checkpoint)
    faults.hit("commit.after_checkpoint")
    if written.outcome is Outcome.ALREADY_COMMITTED:
        result.outcome = Outcome.ALREADY_COMMITTED  # a concurrent attempt checkpointed N first
        return
    result.checkpoint_version = written.version
    every = config.epoch.maintenance_every
    if every and epoch > 0 and epoch % every == 0:
        rewinds = rewinds_at(tables.staging, config.app_id, sealed.version)
        result.maintenance = maintain(tables, log_retention_ms=config.epoch.log_retention,
                                      app_id=config.app_id, epoch=epoch, rewinds=rewinds)


def _committed_details(result: CommitResult, attempt: epochlog.Attempt | None,
                       took: dict[str, float], staged: dict[str, Any] | None,
                       left: list[str]) -> dict[str, Any]:
    """What the epochs view shows of this commit, and of the precommit whose rows it promotes
    (``staged``: their precommit row's facts), carried by the checkpoint itself
    (``Checkpoint.log_rows``): no epoch-log appends of their own. The checkpoint's version is
    not in them (it is the commit being written); the view reads it from the table's history."""
    summary = {k: v for k, v in result.summary().items() if k != "checkpoint_version"}
    facts = epochlog.facts(summary, attempt, Outcome.COMMITTED, elapsed_ms(took))
    facts.pop("at")  # the checkpoint's own time (``committed_at``)
    # ``sinks_left``: sinks the previous checkpoint listed that this config no longer has.
    return {**facts, **({PRECOMMIT_FACTS: staged} if staged else {}),
            **({"sinks_left": left} if left else {})}


def _without(outputs: dict[str, pa.Table], columns: list[str]) -> dict[str, pa.Table]:
    """The outputs with a stateless epoch's rows lacking ``columns`` (``unstaged``)."""
    if not columns:
        return outputs
    return {**outputs, "rows": outputs["rows"].drop_columns(columns)}


def _staged_watermark(staged: pa.Table) -> int:
    """wm(N): the watermark row staged with epoch N."""
    return watermark_row(staged)["watermark_ms"]
