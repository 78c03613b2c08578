"""The protocol core: the epoch state machine (begin, precommit, commit, abort, recover).

Every decision about an epoch is taken here, against one authority: the checkpoint table
(``eos.core.checkpoints``). Epoch N is committed iff its checkpoint row is there; the epoch log is
for people and for reusing plans; sinks are asked only what *they* hold. DAG tasks, the Spark
app, the ``eos`` command, the audit and the chaos run call these functions and decide nothing.

The states of epoch N after the last checkpoint ``c`` (N = c + 1)::

    (none) --begin--> planned --precommit--> staged --commit--> committed (checkpoint row)
                         ^                      |
                         +------abort-----------+   (staging rows of N dropped)

Each transition is idempotent, safe to rerun after a crash at any point, and safe when two
attempts of the same task run at once (a zombie and its retry): planners agree on the first
plan logged, stagers write identical rows, and every sink write and the checkpoint append are
fenced, so exactly one attempt writes each of them.

Steps of different kinds are fenced against each other on the staging table
(``eos.core.staging.Fence``), not by the scheduler: a commit *seals* N before its first sink
write, after which an abort of N is refused (``IN_COMMIT``) and a rewind waits for N's
checkpoint (``EpochCommitting``); a rewind fences staging before it restores anything, after
which a precommit that read its state earlier stages nothing (``SUPERSEDED``) and a commit
that has not sealed yet is refused (``RewindUnfinished``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from eos.core import checkpoints, epochlog, faults, staging
from eos.core.checkpoints import Checkpoint
from eos.core.config import PipelineConfig
from eos.core.errors import CommitConflict, ProtocolViolation
from eos.core.layout import Tables, tables_for
from eos.core.maintenance import maintain, prune_staging
from eos.core.outcomes import Outcome
from eos.core.outputs import epoch_outputs, output_schema
from eos.core.phaselog import elapsed_ms, log_epoch_phase, timed
from eos.core.plan import Plan, Source, committed_source, new_plan, plan_of
from eos.core.rewind import check_none_unfinished
from eos.core.sink import SinkCommit, sinks_for
from eos.core.staging import (
    Fence,
    Stager,
    base_of,
    count_kinds,
    epoch_files,
    seal,
    staged_epoch,
    watermark_row,
)
from eos.core.tables import OpenTables, ensure_tables, staging_schema

if TYPE_CHECKING:
    from deltalake import DeltaTable


@dataclass
class StageResult:
    """What ``precommit`` did. It crosses processes (spark-submit writes it as JSON for the
    task that launched it: ``to_payload`` / ``from_payload``)."""

    epoch: int
    plan_hash: str
    outcome: Outcome
    counts: dict[str, int] = field(default_factory=dict)
    watermark_ms: int | None = None
    staging_version: int | None = None
    written_by: str | None = None  # "driver" or "executors": who wrote the staged files
    timings_ms: dict[str, float] = field(default_factory=dict)
    line: str = ""  # the phase line precommit logged (what ``eos precommit`` prints)

    def to_payload(self) -> dict[str, Any]:
        return {**asdict(self), "outcome": self.outcome.value}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> StageResult:
        return cls(**{**payload, "outcome": Outcome(payload["outcome"])})


@dataclass
class CommitResult:
    epoch: int
    plan_hash: str
    outcome: Outcome
    sinks: list[SinkCommit] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # by output
    checkpoint_version: int | None = None
    pruned_before: int | None = None
    maintenance: dict[str, Any] | None = None
    duration_ms: float = 0.0
    delta_versions: dict[str, int | None] = field(default_factory=dict)  # Delta sinks written

    @property
    def versions(self) -> dict[str, int | None]:
        """The version each sink wrote in this attempt (sinks it skipped are absent)."""
        return {s.sink: s.version for s in self.sinks if s.outcome is Outcome.COMMITTED}

    @property
    def skipped(self) -> list[str]:
        """Sinks that already held the epoch (an earlier attempt, or a race lost)."""
        return [s.sink for s in self.sinks if s.outcome is Outcome.ALREADY_COMMITTED]

    def summary(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "plan_hash": self.plan_hash, "outcome": str(self.outcome),
                "rows": self.rows, "sinks": {s.sink: _sink_summary(s) for s in self.sinks},
                "checkpoint_version": self.checkpoint_version}


def _sink_summary(done: SinkCommit) -> dict[str, Any]:
    return {"outcome": str(done.outcome), "version": done.version, "rows": done.rows,
            "raced": done.raced}


# -- the authority ------------------------------------------------------------------------------

def committed_epoch(config: PipelineConfig) -> int:
    """The last committed epoch of the pipeline, -1 if none: the checkpoint table's answer."""
    return checkpoints.committed_epoch(tables_for(config), config.app_id)


def check_sinks(config: PipelineConfig, committed: int, read_only: bool = False
                ) -> dict[str, int]:
    """Each sink's own committed epoch, which must be ``committed`` or ``committed + 1``.

    A sink may be one ahead after a crash between sinks, or between the last sink and the
    checkpoint: the next commit attempt completes that epoch. Anything else (a sink behind the
    checkpoint, or two ahead) means the sink was changed outside the protocol, or its marker
    was lost: stop, do not guess.

    ``begin`` first creates what a sink needs (a table, a topic) and fences earlier writers
    where the sink can; ``read_only`` (``eos status``, the UI) does neither, so looking at a
    pipeline never disturbs a commit in flight.
    """
    held = {}
    for sink in sinks_for(config):
        if not read_only:
            sink.prepare(output_schema(config, sink.output))
        held[sink.name] = sink.committed_epoch(fence=not read_only)
    for name, epoch in held.items():
        if epoch not in (committed, committed + 1):
            raise ProtocolViolation(
                f"sink {name} holds epoch {epoch} but the last checkpoint is epoch {committed}; "
                "a sink may only be one epoch ahead of the checkpoint. Inspect the sink (was it "
                "rewritten, truncated, or its marker lost?) before going on"
            )
    return held


# -- begin --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Began:
    """What ``begin_epoch`` did: the plan this run processes, and how it got it."""

    plan: Plan
    outcome: Outcome


def begin(config: PipelineConfig, run_id: str | None = None, *,
          source: Source | None = None) -> Plan:
    """The plan of the epoch this run processes (``begin_epoch``, without how it was found)."""
    return begin_epoch(config, run_id, source=source).plan


def begin_epoch(config: PipelineConfig, run_id: str | None = None, *,
                source: Source | None = None, attempt: epochlog.Attempt | None = None) -> Began:
    """Return the plan of the epoch this run processes, logging a new one only if none exists.
    A new plan reads ``source``'s watermarks (default: the pipeline's Kafka topic). The plan
    row this call logs names ``attempt`` (a scheduler's task try) when it planned the epoch
    (``epochlog.with_try``); a try that found a plan logs its own row, if its caller wants.

    Scenarios:
    - a rewind is unfinished: ``RewindUnfinished`` (finish the rewind first);
    - the run was bound to an epoch before (a cleared run, committed or not): that epoch's plan,
      so clearing a run never moves it to another epoch (after a rewind, a backfill of the
      same runs replays each run's own epoch);
    - the log already holds a plan for c + 1 (a crash after logging, a retry): that plan;
    - otherwise a new plan for c + 1, logged *before* returning; of planners that race, exactly
      one logs its plan (a fenced append, ``epochlog.log_plan``) and the others adopt it.
    - a new plan's source (topic, cluster) is not the one the last checkpoint's offsets are
      of: ``SourceChanged`` (moving is ``eos move-source``, ``eos.core.move``).

    Costs: each table opened once, the epoch log read once (the run's rows and c + 1's, by file
    statistics), the last checkpoint read once, one append.
    """
    with timed() as took, ensure_tables(config) as tables:
        committed = checkpoints.committed_epoch(tables, config.app_id)
        last = checkpoints.last(tables, committed)
        checkpoints.check_schema_view(last, config)
        logged = epochlog.plan_rows(tables, committed + 1, run_id)
        check_none_unfinished(logged)  # a half-done rewind: its tables are not consistent
        check_sinks(config, committed)
        plan, how = _existing_plan(logged, committed, run_id)
        if plan is None:
            fresh = new_plan(config, committed + 1, last.until if last else {}, source,
                             since=committed_source(tables, last))  # SourceChanged
            won = epochlog.log_plan(tables, config.app_id, fresh.epoch, fresh.to_json(),
                                    fresh.hash, run_id, elapsed_ms(took), attempt)
            faults.hit("begin.after_log")
            plan, how = fresh, Outcome.PLANNED
            if not won:  # another planner logged first: everyone uses its plan
                plan = plan_of(tables, fresh.epoch)
                how = Outcome.PLANNED if plan == fresh else Outcome.REUSED_RACE
                _bind(tables, plan, run_id, took, epochlog.with_try(None, attempt, how))
        elif how is not Outcome.REUSED_RUN:
            _bind(tables, plan, run_id, took, None)
    log_epoch_phase(
        "begin", epoch=plan.epoch, plan_hash=plan.hash, outcome=how,
        ranges=plan.describe_ranges(","), records=plan.records, rows=None, delta_versions={},
        duration_ms=took["ms"], committed_epoch=committed, run_id=run_id,
    )
    assert how is not None  # _existing_plan gives an outcome with every plan it finds
    return Began(plan, how)


def _bind(tables: Tables, plan: Plan, run_id: str | None, took: dict[str, float],
          details: dict[str, Any] | None) -> None:
    """Bind this run to the epoch it adopted, so clearing it later finds the same epoch."""
    if run_id:
        epochlog.append(tables, plan.epoch, epochlog.PLANNED, run_id=run_id,
                        plan_hash=plan.hash, plan=plan.to_json(), duration_ms=elapsed_ms(took),
                        details=details)


def _existing_plan(logged: list[dict[str, Any]], committed: int,
                   run_id: str | None) -> tuple[Plan | None, Outcome | None]:
    """The run's own plan, else the logged plan of c + 1 (``logged``: one read of the log)."""
    mine = epochlog.first_planned([r for r in logged if run_id and r["run_id"] == run_id])
    if mine is not None:
        return Plan.from_json(mine["plan"]), Outcome.REUSED_RUN
    row = epochlog.first_planned([r for r in logged if r["epoch"] == committed + 1])
    if row is not None:
        return Plan.from_json(row["plan"]), Outcome.REUSED_LOG
    return None, None


# -- precommit ----------------------------------------------------------------------------------

def precommit(config: PipelineConfig, epoch: int, stager: Stager,
              expected_hash: str | None = None, *,
              attempt: epochlog.Attempt | None = None) -> StageResult:
    """Stage epoch N in one Delta commit, or do nothing when that is already done. The
    precommitted row names ``attempt`` (a scheduler's task try) as the one that staged N.

    ``stager`` computes N's staging files (Spark: ``eos.compute.stage.SparkStager``); every
    decision about whether they may be committed is taken here.

    Scenarios:
    - N is committed (a cleared committed run, a zombie): nothing, ``ALREADY_COMMITTED``;
    - staging holds a complete N for this plan hash (a crash after the write): ``REUSED_STAGE``;
    - N-1 is not committed: ``ProtocolViolation`` (epochs are staged in order);
    - otherwise compute N and replace any earlier attempt's rows of N in one commit; if N got
      committed while we computed, we are a zombie and discard our rows (``DISCARDED``); if
      its commit has sealed it, its staged rows are the ones being promoted: ``SEALED``,
      nothing written. "N is not staged" is read through the staging snapshot the write goes
      through, so an attempt that staged N since makes the write conflict (``REUSED_STAGE``).
    """
    with timed() as total, ensure_tables(config) as tables:
        plan = plan_of(tables, epoch)
        if expected_hash and expected_hash != plan.hash:
            raise ProtocolViolation(
                f"epoch {epoch}: asked to stage plan {expected_hash} but the log's plan is "
                f"{plan.hash}; refusing to stage a plan the log does not hold"
            )
        result = StageResult(epoch, plan.hash, Outcome.STAGED)
        committed = checkpoints.committed_epoch(tables, config.app_id)
        if committed >= epoch:
            result.outcome = Outcome.ALREADY_COMMITTED
        elif (existing := staged_epoch(tables, epoch, plan.hash)) is not None:
            result.outcome = Outcome.REUSED_STAGE
            result.counts = count_kinds(existing)
        elif committed < epoch - 1:
            raise ProtocolViolation(
                f"epoch {epoch - 1} is not committed (last checkpoint: {committed}); epochs are "
                "staged and committed in order"
            )
        else:
            _check_no_rewind(tables)
            previous = checkpoints.last(tables, committed)  # N-1: its config and plan hash
            checkpoints.check_schema_view(previous, config)
            _stage(config, tables, plan, previous, stager, result, attempt)
    result.timings_ms["total"] = total["ms"]
    result.line = log_epoch_phase(
        "precommit", epoch=epoch, plan_hash=plan.hash, outcome=result.outcome,
        ranges=plan.describe_ranges(","), records=plan.records, rows=result.counts,
        delta_versions={"staging": result.staging_version}, duration_ms=total["ms"],
        watermark_ms=result.watermark_ms, written_by=result.written_by,
        durations_ms=result.timings_ms,
    )
    return result


STAGE_ATTEMPTS = 5  # fenced staging writes re-decided after a concurrent fenced step
@dataclass(frozen=True)
class _Base:
    """What a precommit computed N from, as its snapshot of staging saw it: the rewinds begun
    and the files of N-1 (its open windows and watermark). If either has changed when the
    staging commit is refused, the computation is stale."""

    rewinds: int
    files: frozenset[str]


def _stage(config: PipelineConfig, tables: OpenTables, plan: Plan, previous: Checkpoint | None,
           stager: Stager, result: StageResult, attempt: epochlog.Attempt | None) -> None:
    timings = result.timings_ms
    # The snapshot precommit found N unstaged in (not a newer one: a seal and the stage it
    # seals could land in between unseen); the stager reads N-1's state through it.
    snapshot = _decided_from(tables)
    base = _Base(Fence.of(snapshot, config.app_id).rewinds, epoch_files(snapshot, plan.epoch - 1))
    staged = stager.stage(config, tables, plan, previous, timings)
    faults.hit("precommit.before_write")
    with timed() as took:
        # Through the snapshot the state was read from (not a refreshed one): if a fenced step
        # committed since (a rewind, an abort, another attempt), delta-rs refuses the write
        # and ``_restaged`` decides again from the latest snapshot.
        for _ in range(STAGE_ATTEMPTS):
            if not _still_next(config, tables, plan, result) or _sealed(config, snapshot,
                                                                       plan, result):
                return
            result.staging_version = staging.commit(
                snapshot, staged.files, plan.epoch, staging_schema(config), config.app_id,
                plan.hash)
            if result.staging_version is not None or _restaged(config, tables, plan, base,
                                                               result):
                break
        else:
            raise CommitConflict(f"staging epoch {plan.epoch} conflicted with concurrent "
                                 f"writes {STAGE_ATTEMPTS} times; retrying is safe")
    if result.staging_version is None:  # superseded, or another attempt staged the same plan
        return
    faults.hit("precommit.after_write")
    timings["staging_write"] = took["ms"]
    result.counts = staged.counts
    result.watermark_ms = staged.watermark_ms
    result.written_by = staged.written_by
    epochlog.append(
        tables, plan.epoch, epochlog.PRECOMMITTED, plan_hash=plan.hash,
        run_id=attempt.run_id if attempt else None, duration_ms=sum(timings.values()),
        details=epochlog.with_try(
            {"rows": result.counts, "watermark_ms": staged.watermark_ms,
             "staging_version": result.staging_version, "files": len(staged.files),
             "written_by": staged.written_by, "timings_ms": timings},
            attempt, result.outcome),
    )


def _still_next(config: PipelineConfig, tables: OpenTables, plan: Plan,
                result: StageResult) -> bool:
    """After computing: is N still the epoch after the last checkpoint? (The compute took a
    while: the checkpoint table is asked again, at its latest version.)"""
    tables.refresh(tables.checkpoints)
    now = checkpoints.committed_epoch(tables, config.app_id)
    if now >= plan.epoch:
        result.outcome = Outcome.DISCARDED  # our files stay invisible; a vacuum deletes them
        return False
    if now < plan.epoch - 1:  # a rewind moved the checkpoint back while we computed
        raise ProtocolViolation(
            f"epoch {plan.epoch} was computed from epoch {plan.epoch - 1}, but the last "
            f"checkpoint is now epoch {now} (a rewind): not staging it"
        )
    return True


def _decided_from(tables: OpenTables) -> DeltaTable:
    """The staging handle as precommit read it (first opened after the checkpoint read, so it
    holds N-1's staged state)."""
    snapshot = tables.handle(tables.staging)
    return tables.refreshed(tables.staging) if snapshot is None else snapshot


def _sealed(config: PipelineConfig, snapshot: DeltaTable, plan: Plan,
            result: StageResult) -> bool:
    """Has a commit sealed N, as the snapshot the write goes through sees it? Then N's staged
    rows are being promoted and are never replaced (``SEALED``); a seal landing after the
    snapshot makes the write conflict (both carry the staging fence), and this is asked
    again through the updated snapshot."""
    if Fence.of(snapshot, config.app_id).sealed < plan.epoch:
        return False
    result.outcome = Outcome.SEALED
    return True


def _restaged(config: PipelineConfig, tables: OpenTables, plan: Plan, base: _Base,
              result: StageResult) -> bool:
    """The staging commit was refused: another fenced step committed since the snapshot. True
    when that settles the epoch (our rows must not be staged, or already are), False when
    the write may be tried again through the now up-to-date snapshot.

    - a rewind began since N-1's state was read, or N-1's staged files are not the ones read
      (a rewind and a replay of N-1): ``SUPERSEDED``, nothing staged;
    - a commit sealed N since: ``SEALED`` (its staged rows are being promoted);
    - staging holds N for this plan now (a concurrent attempt, identical rows): ``REUSED_STAGE``;
    - otherwise (a prune, an abort of N): try again."""
    latest = tables.refreshed(tables.staging)
    if (Fence.of(latest, config.app_id).rewinds != base.rewinds
            or epoch_files(latest, plan.epoch - 1) != base.files):
        result.outcome = Outcome.SUPERSEDED
        return True
    if _sealed(config, latest, plan, result):
        return True
    existing = staged_epoch(tables, plan.epoch, plan.hash)
    if existing is not None:
        result.outcome = Outcome.REUSED_STAGE
        result.counts = count_kinds(existing)
        return True
    return False


def _check_no_rewind(tables: OpenTables) -> None:
    """No step of an epoch starts while a rewind is half done (its tables disagree). The epoch
    log is read at its latest version: it must be at least as new as the staging snapshot."""
    tables.refresh(tables.epochs)
    check_none_unfinished(epochlog.rewind_rows(tables))


# -- commit -------------------------------------------------------------------------------------

def commit(config: PipelineConfig, epoch: int, *,
           attempt: epochlog.Attempt | None = None) -> CommitResult:
    """Promote pre-committed epoch N into every sink exactly once, then checkpoint it. The
    committed row names ``attempt`` (a scheduler's task try) as the one that committed N.

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
        committed = checkpoints.committed_epoch(tables, config.app_id)
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
        duration_ms=result.duration_ms, sinks={s.sink: _sink_summary(s) for s in result.sinks},
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
    outputs = epoch_outputs(config, staged, epoch, watermark)
    sinks = sinks_for(config)
    # Every deterministic failure is found here, before the seal, while N can be aborted:
    # once sealed, N's commit must eventually succeed (DESIGN §9.1). A retry of a sealed N
    # checks nothing: it can only go forward.
    if not _commit_sealed(config, tables, epoch):
        for sink in sinks:
            sink.check(epoch, outputs[sink.output])
    rewinds, sealed = _seal(config, tables, plan, staged)
    if sealed is not staged:  # read again after a lost seal: promote what was sealed
        staged, outputs = sealed, epoch_outputs(config, sealed, epoch, watermark)
    result.rows = {output: rows.num_rows for output, rows in outputs.items()}
    for i, sink in enumerate(sinks):
        done = sink.commit(epoch, outputs[sink.output], plan.hash)
        result.sinks.append(done)
        if sink.versions_tables and done.outcome is Outcome.COMMITTED:
            result.delta_versions[sink.name] = done.version
        if i < len(sinks) - 1:
            faults.hit("commit.between_sinks")
    faults.hit("commit.before_checkpoint")
    checkpoint = Checkpoint(
        epoch=epoch, plan_hash=plan.hash, until={r.partition: r.until for r in plan.ranges},
        watermark_ms=_staged_watermark(staged), rows=result.rows,
        sinks={s.sink: _sink_summary(s) for s in result.sinks}, config=config.schema_view(),
        source=plan.source,
    )
    written = checkpoints.append(tables, config.app_id, checkpoint)
    faults.hit("commit.after_checkpoint")
    if written.outcome is Outcome.ALREADY_COMMITTED:
        result.outcome = Outcome.ALREADY_COMMITTED  # a concurrent attempt checkpointed N first
        return
    result.checkpoint_version = written.version
    epochlog.append(tables, epoch, epochlog.COMMITTED, plan_hash=plan.hash,
                    run_id=attempt.run_id if attempt else None, duration_ms=elapsed_ms(took),
                    details=epochlog.with_try(result.summary(), attempt, result.outcome))
    result.pruned_before = prune_staging(tables, config.app_id, epoch,
                                         config.epoch.staging_retention, rewinds,
                                         base_of(watermark_row(staged)))
    every = config.epoch.maintenance_every
    if every and epoch > 0 and epoch % every == 0:
        result.maintenance = maintain(tables, log_retention_ms=config.epoch.log_retention,
                                      app_id=config.app_id, epoch=epoch, rewinds=rewinds)


def _commit_sealed(config: PipelineConfig, tables: OpenTables, epoch: int) -> bool:
    """Whether a commit sealed ``epoch`` already, as the phase's staging snapshot sees it."""
    snapshot = tables.handle(tables.staging)
    return snapshot is not None and Fence.of(snapshot, config.app_id).sealed >= epoch


def _seal(config: PipelineConfig, tables: OpenTables, plan: Plan,
          staged: pa.Table) -> tuple[int, pa.Table]:
    """Seal N in staging before any sink write (``eos.core.staging.Fence``); return the count
    of rewinds it was sealed under (the prune after the checkpoint needs it) and N's staged
    rows as sealed: ``staged`` (read through the staging handle) when the seal was written
    through the snapshot they were read from, else read again once sealed (another fenced
    step landed in between: an abort and a precommit may have replaced them). Once N is
    sealed no precommit replaces its rows (``SEALED``), so the sinks get what staging holds.

    - N is sealed already (a retry after a crash, a concurrent attempt): go on, whatever began
      since: a rewind waits for a sealed epoch, so this commit must finish;
    - a rewind is half done: ``RewindUnfinished``, nothing written;
    - the seal lost to another fenced step: if N's staged rows are gone (an abort), a
      ``ProtocolViolation`` (precommit again); else seal again through the new snapshot."""
    snapshot = tables.handle(tables.staging)
    if snapshot is None:
        raise ProtocolViolation(f"epoch {plan.epoch} is not pre-committed: no staging table")
    for attempt in range(STAGE_ATTEMPTS):
        fence = Fence.of(snapshot, config.app_id)
        if fence.sealed >= plan.epoch:
            return fence.rewinds, _sealed_rows(tables, plan, staged if attempt == 0 else None)
        _check_no_rewind(tables)
        if seal(snapshot, config.app_id, plan.epoch):
            faults.hit("commit.after_seal")
            return fence.rewinds, _sealed_rows(tables, plan, staged if attempt == 0 else None)
        if staged_epoch(tables, plan.epoch, plan.hash, state=False) is None:
            raise ProtocolViolation(
                f"epoch {plan.epoch}'s staged rows were dropped (an abort) as this commit "
                "began; nothing was written: run precommit again")
    raise CommitConflict(f"sealing epoch {plan.epoch} conflicted with concurrent writes "
                         f"{STAGE_ATTEMPTS} times; retrying is safe")


def _sealed_rows(tables: OpenTables, plan: Plan, read: pa.Table | None) -> pa.Table:
    """N's staged rows (without its open windows) as sealed: ``read`` when they were read
    through the snapshot the seal was found or written in, else read now (after the seal)."""
    rows = read if read is not None else staged_epoch(tables, plan.epoch, plan.hash,
                                                      state=False)
    if rows is None:  # a sealed epoch is never dropped: the fence refuses it
        raise ProtocolViolation(f"epoch {plan.epoch} is sealed and not staged for plan "
                                f"{plan.hash}: inspect the staging table")
    return rows


# -- abort and recover --------------------------------------------------------------------------

def abort(config: PipelineConfig, epoch: int, reason: str = "", *,
          attempt: epochlog.Attempt | None = None) -> Outcome:
    """Discard epoch N's staged rows and anything a sink prepared, so a rerun starts clean.
    The aborted row names ``attempt`` (a scheduler's task try) as the one that aborted.

    Never touches a committed epoch (``NOTHING_TO_ABORT``), nor one whose commit has begun
    (``IN_COMMIT``: the commit sealed it and may have written sinks; it must finish). The drop
    is fenced against the seal (``eos.core.staging.Fence``): of an abort and a commit of N
    that race, exactly one goes ahead. Clearing the run afterwards re-executes ``begin``,
    which returns the same plan: the same records are read again.
    """
    with timed() as took, ensure_tables(config) as tables:
        row = epochlog.first_plan_row(tables, epoch)
        plan = None if row is None else Plan.from_json(row["plan"])
        outcome, staging_version = _drop_staged(config, tables, epoch)
        if outcome is Outcome.ABORTED:
            for sink in sinks_for(config):
                sink.abort(epoch)
            epochlog.append(tables, epoch, epochlog.ABORTED,
                            run_id=attempt.run_id if attempt else None,
                            details=epochlog.with_try({"reason": reason[:500]}, attempt,
                                                      outcome))
    log_epoch_phase(
        "abort", epoch=epoch, plan_hash=plan.hash if plan else None, outcome=outcome,
        ranges=plan.describe_ranges(",") if plan else None,
        records=plan.records if plan else None, rows=None,
        delta_versions={"staging": staging_version}, duration_ms=took["ms"],
        reason=reason[:200],
    )
    return outcome


def _drop_staged(config: PipelineConfig, tables: OpenTables, epoch: int
                 ) -> tuple[Outcome, int | None]:
    """Abort's one staging write, decided and written through one snapshot; with the staging
    version it wrote (None when it wrote nothing)."""
    snapshot = tables.refreshed(tables.staging)
    for _ in range(STAGE_ATTEMPTS):
        tables.refresh(tables.checkpoints)
        if checkpoints.committed_epoch(tables, config.app_id) >= epoch:
            return Outcome.NOTHING_TO_ABORT, None
        if Fence.of(snapshot, config.app_id).sealed >= epoch:
            return Outcome.IN_COMMIT, None
        if staging.drop(snapshot, config.app_id, epoch, "abort"):
            return Outcome.ABORTED, snapshot.version()
    raise CommitConflict(f"aborting epoch {epoch} conflicted with concurrent writes "
                         f"{STAGE_ATTEMPTS} times; retrying is safe")


def recover(config: PipelineConfig) -> tuple[int | None, Outcome]:
    """Finish the epoch after the last checkpoint if it is staged (Flink's recoverAndCommit).

    Returns (that epoch or None, what happened): ``NOTHING_PENDING`` when no plan follows the
    checkpoint, ``NEEDS_PRECOMMIT`` when it is planned but not staged, else commit's outcome.
    A pre-committed epoch is always committed as staged, never recomputed differently.
    """
    with ensure_tables(config) as tables:
        pending = checkpoints.committed_epoch(tables, config.app_id) + 1
        row = epochlog.first_plan_row(tables, pending)
        if row is None:
            return None, Outcome.NOTHING_PENDING
        if staged_epoch(tables, pending, Plan.from_json(row["plan"]).hash) is None:
            return pending, Outcome.NEEDS_PRECOMMIT
    return pending, commit(config, pending).outcome


# -- helpers ------------------------------------------------------------------------------------

def _staged_watermark(staged: pa.Table) -> int:
    """wm(N): the watermark row staged with epoch N."""
    return watermark_row(staged)["watermark_ms"]
