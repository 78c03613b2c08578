"""The staging fence (``eos.core.staging_fence.Fence``, docs/design.md): a rewind and an abort never
interleave with a precommit or a commit of the same pipeline so as to lose or reuse an epoch.

Each test lines two steps up at a real point of the other (a sink's write, the stager's compute,
a fault point, the seal) on real Delta tables; each failed on the code before the fence."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from eos.core import checkpoints, epochlog, faults, maintenance, staging, staging_fence
from eos.core.config import PipelineConfig
from eos.core.errors import (
    ConfigError,
    EpochCommitting,
    InjectedFault,
    ProtocolViolation,
    RewindRefused,
    RewindUnfinished,
)
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.plan import Plan, plan_of
from eos.core.protocol import (
    abort,
    begin,
    checkpointed_epoch,
    commit,
    committing,
    precommit,
    precommitting,
    sealing,
)
from eos.core.rewind import rewind
from eos.core.tables import ensure_tables, staging_schema

from support import memory
from support.memory import (
    REWINDABLE_SINKS,
    MemorySource,
    MemoryStager,
    log_rows,
    record,
    run_epoch,
    staged_rows,
    store,
)
from support.pipelines import IN_MEMORY, make_pipeline, same_pipeline


def at_point(monkeypatch: pytest.MonkeyPatch, point: str, then: Callable[[], Any]) -> None:
    """Run ``then`` once, the first time the protocol reaches fault point ``point``."""
    hit, pending = faults.hit, [then]

    def hit_(name: str) -> None:
        if name == point and pending:
            pending.pop()()
        hit(name)

    monkeypatch.setattr(faults, "hit", hit_)


def epochs(config: PipelineConfig, source: MemorySource, n: int) -> None:
    for _ in range(n):
        run_epoch(config, source)
        source.produce(0, 5)


# -- abort against commit -----------------------------------------------------------------------

def test_an_abort_while_the_epoch_commits_is_refused(pipeline: PipelineConfig,
                                                     source: MemorySource) -> None:
    """Before the fence, the abort dropped N's staged rows while commit promoted them: N was
    checkpointed without its state and epoch N+1's precommit halted the pipeline."""
    plan = begin(pipeline, source=source)
    precommit(pipeline, 0, MemoryStager())
    aborted: list[Outcome] = []

    def operator_aborts(_: int) -> None:  # right before the first sink write
        store(pipeline, "memory:a").before_write = None
        aborted.append(abort(pipeline, 0, reason="operator"))

    store(pipeline, "memory:a").before_write = operator_aborts
    assert commit(pipeline, 0).outcome is Outcome.COMMITTED
    assert aborted == [Outcome.IN_COMMIT]
    assert staged_rows(pipeline, 0, plan.hash) is not None  # the state epoch 1 resumes from
    source.produce(0, 5)
    assert run_epoch(pipeline, source).epoch == 1
    assert checkpointed_epoch(pipeline) == 1


def test_a_commit_that_loses_its_seal_to_an_abort_writes_nothing(
        pipeline: PipelineConfig, source: MemorySource,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The abort drops N after the commit read N's rows and before it sealed N: the seal is
    refused, no sink is written, and the rerun computes N again."""
    plan = begin(pipeline, source=source)
    precommit(pipeline, 0, MemoryStager())
    seal = sealing.seal

    def abort_first(*args: Any, **kwargs: Any) -> bool:
        assert abort(pipeline, 0, reason="operator") is Outcome.ABORTED
        return seal(*args, **kwargs)

    monkeypatch.setattr(sealing, "seal", abort_first)
    with pytest.raises(ProtocolViolation, match=r"dropped .* run precommit again"):
        commit(pipeline, 0)
    monkeypatch.undo()
    assert [store(pipeline, n).marker for n in ("memory:a", "memory:b", "memory:c")] == [-1] * 3
    assert checkpointed_epoch(pipeline) == -1
    assert precommit(pipeline, 0, MemoryStager()).outcome is Outcome.STAGED
    assert commit(pipeline, 0).outcome is Outcome.COMMITTED
    assert staged_rows(pipeline, 0, plan.hash) is not None


# -- precommit against commit ------------------------------------------------------------------

@pytest.mark.parametrize("sealed", [False, True])
def test_an_attempt_never_replaces_the_first_complete_stage_of_its_plan(
        pipeline: PipelineConfig, source: MemorySource, arm,
        monkeypatch: pytest.MonkeyPatch, sealed: bool) -> None:
    """A zombie precommit saw N unstaged; then a rival staged N (and, ``sealed``, a commit
    sealed it and crashed before its checkpoint: its retry must finish with the sealed rows);
    then the zombie read staging and computed. Before the fix its write replaced the rival's
    rows: with a record the two attempts read differently (a schema id registered in between)
    a commit that had read the rival's rows would promote them while staging kept the
    zombie's. The first complete stage of a plan is the one committed."""
    plan = begin(pipeline, source=source)
    rival, zombie = MemoryStager(), MemoryStager()
    check, pending = checkpoints.check_schema_view, [True]

    def rival_stages(*args: Any) -> None:  # right before the zombie reads staging
        if pending and pending.pop():
            assert precommit(pipeline, 0, rival).outcome is Outcome.STAGED
            if sealed:
                arm("commit.after_seal:fail")
                with pytest.raises(InjectedFault):
                    commit(pipeline, 0)
                arm("")
        check(*args)

    monkeypatch.setattr(checkpoints, "check_schema_view", rival_stages)
    result = precommit(pipeline, 0, zombie)
    monkeypatch.undo()
    assert zombie.staged == [0]  # it did compute, from a snapshot holding the rival's rows
    # Sealed: the precommit's own check steps aside first (SEALED); else staging does.
    assert result.outcome is (Outcome.SEALED if sealed else Outcome.REUSED_STAGE)
    assert result.staging_version is None
    held = DeltaTable(tables_for(pipeline).staging).file_uris()
    assert held and all(rival.attempts[0] in uri for uri in held)
    assert commit(pipeline, 0).outcome is Outcome.COMMITTED
    assert staged_rows(pipeline, 0, plan.hash) is not None


def test_a_commit_promotes_the_rows_staging_keeps(pipeline: PipelineConfig,
                                                 source: MemorySource,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit reads N's rows, then seals N. Between the two, another attempt's write of N
    (one that read record 0 differently: quarantined) arrives. Before the fix it replaced the
    rows, the seal was retried over it, and the sinks got the rows read first while staging
    (the next epoch's state, the audit) kept the other attempt's."""
    plan = begin(pipeline, source=source)
    assert precommit(pipeline, 0, MemoryStager()).outcome is Outcome.STAGED
    seal, pending = sealing.seal, [True]

    def misread(partition: int, offset: int) -> str:
        return "quarantine" if offset == 0 else record(partition, offset)

    def another_attempt_writes(*args: Any, **kwargs: Any) -> bool:
        if pending and pending.pop():
            with monkeypatch.context() as patch, ensure_tables(pipeline) as tables:
                patch.setattr(memory, "record", misread)
                snapshot = tables.refreshed(tables.staging)
                files = MemoryStager().stage(pipeline, tables, plan, None, {}).files
                assert staging.commit(snapshot, files, 0, staging_schema(pipeline),
                                      pipeline.app_id, plan.hash) is None
        return seal(*args, **kwargs)

    monkeypatch.setattr(sealing, "seal", another_attempt_writes)
    assert commit(pipeline, 0).outcome is Outcome.COMMITTED
    monkeypatch.undo()
    staged = staged_rows(pipeline, 0, plan.hash) or []
    quarantined = [r for r in staged if r["kind"] == "quarantine"]
    assert store(pipeline, "memory:c").rows[0].num_rows == len(quarantined) == 3


# -- rewind against precommit -------------------------------------------------------------------

def test_a_zombie_that_computed_before_a_rewind_and_replay_is_not_staged(
        rewindable: PipelineConfig, source: MemorySource) -> None:
    """Before the fence, the zombie's check compared only the checkpoint's epoch number: a
    rewind and a replay back to N-1 passed it, and the replay reused the zombie's rows,
    computed from the old N-1 state."""
    epochs(rewindable, source, 2)
    begin(rewindable, source=source)
    fixed = same_pipeline(rewindable, window={"type": "tumbling", "size": "20s"})

    def rewind_and_replay(_: Plan) -> None:  # the operator, while the zombie computes epoch 2
        rewind(fixed, -1)
        run_epoch(fixed, source)
        run_epoch(fixed, source)

    zombie = MemoryStager(during=rewind_and_replay)
    assert precommit(rewindable, 2, zombie).outcome is Outcome.SUPERSEDED
    assert checkpointed_epoch(fixed) == 1
    assert precommit(fixed, 2, MemoryStager()).outcome is Outcome.STAGED


def test_a_precommit_that_read_its_state_before_a_rewind_began_is_superseded(
        rewindable: PipelineConfig, source: MemorySource, arm) -> None:
    """A rewind that has fenced staging and crashed before restoring anything: the precommit
    that computed meanwhile stages nothing (the checkpoint still says N-1)."""
    epochs(rewindable, source, 2)
    begin(rewindable, source=source)

    def rewind_crashes(_: Plan) -> None:
        arm("rewind.after_fence:fail")
        with pytest.raises(InjectedFault):
            rewind(rewindable, 0)
        arm("")

    assert precommit(rewindable, 2, MemoryStager(during=rewind_crashes)).outcome \
        is Outcome.SUPERSEDED
    assert checkpointed_epoch(rewindable) == 1
    with pytest.raises(RewindUnfinished):  # and a new attempt is refused until it finishes
        precommit(rewindable, 2, MemoryStager())
    assert rewind(rewindable, 0).outcome is Outcome.REWOUND


# -- rewind against commit ----------------------------------------------------------------------

def test_a_rewind_waits_for_an_epoch_whose_commit_began(rewindable: PipelineConfig,
                                                        source: MemorySource, arm) -> None:
    """A commit that sealed N and crashed (sinks may hold N): the rewind is refused before it
    logs anything, the commit's retry finishes N, then the rewind goes ahead."""
    epochs(rewindable, source, 2)
    begin(rewindable, source=source)
    precommit(rewindable, 2, MemoryStager())
    arm("commit.after_seal:fail")
    with pytest.raises(InjectedFault):
        commit(rewindable, 2)
    arm("")
    with pytest.raises(EpochCommitting, match=r"epoch 2 .* is being committed"):
        rewind(rewindable, 0)
    assert log_rows(rewindable, phase=epochlog.REWINDING) == []
    assert abort(rewindable, 2, reason="operator") is Outcome.IN_COMMIT
    assert commit(rewindable, 2).outcome is Outcome.COMMITTED
    assert rewind(rewindable, 0).outcome is Outcome.REWOUND
    assert checkpointed_epoch(rewindable) == 0


def test_a_commit_that_has_not_sealed_is_refused_while_a_rewind_is_unfinished(
        rewindable: PipelineConfig, source: MemorySource, arm) -> None:
    epochs(rewindable, source, 2)
    begin(rewindable, source=source)
    precommit(rewindable, 2, MemoryStager())
    arm("rewind.after_fence:fail")
    with pytest.raises(InjectedFault):
        rewind(rewindable, 0)
    arm("")
    with pytest.raises(RewindUnfinished):
        commit(rewindable, 2)
    assert store(rewindable, "memory_rewind:a").marker == 1  # no sink received epoch 2
    assert rewind(rewindable, 0).outcome is Outcome.REWOUND
    assert checkpointed_epoch(rewindable) == 0


def test_a_commit_finishing_during_a_rewind_never_prunes_the_rewound_state(
        rewindable: PipelineConfig, source: MemorySource,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Epoch 3's commit checkpoints, then a rewind to 0 runs to the end before the commit
    returns. Once the prune ran after the checkpoint and deleted epoch 0's restored state (the
    replay of epoch 1 halted); now it rides on the seal (retention 2: epochs below 2 go), before
    any rewind can begin, and the rewind's restore brings epoch 0's state back."""
    epochs(rewindable, source, 3)
    begin(rewindable, source=source)
    precommit(rewindable, 3, MemoryStager())
    at_point(monkeypatch, "commit.after_checkpoint", lambda: rewind(rewindable, 0))
    result = commit(rewindable, 3)
    assert result.outcome is Outcome.COMMITTED and result.pruned_before == 2
    assert checkpointed_epoch(rewindable) == 0
    replayed = run_epoch(rewindable, source)  # resumes from epoch 0's staged state
    assert replayed.epoch == 1 and checkpointed_epoch(rewindable) == 1


# -- the schema view at commit ------------------------------------------------------------------

def test_a_changed_schema_view_is_refused_at_commit(pipeline: PipelineConfig,
                                                    source: MemorySource) -> None:
    """Before, commit checked no schema view and checkpointed the committing process's view:
    an epoch staged under one config and committed under another was recorded as the new
    config's, and begin then accepted the change."""
    run_epoch(pipeline, source)
    source.produce(0, 5)
    begin(pipeline, source=source)
    precommit(pipeline, 1, MemoryStager())
    changed = same_pipeline(pipeline, window={"type": "tumbling", "size": "20s"})
    with pytest.raises(ConfigError, match="window"):
        commit(changed, 1)
    assert store(pipeline, "memory:a").marker == 0  # refused before any sink write
    assert commit(pipeline, 1).outcome is Outcome.COMMITTED
    last = checkpoints.read(tables_for(pipeline), 1)
    assert last is not None and last.config == pipeline.schema_view()


# -- precommit against the seal -----------------------------------------------------------------

def drifted(partition: int, offset: int) -> str:
    """``memory.record`` after an outside answer changed (a schema registry's, say): the same
    plan now computes other rows. Determinism is what keeps a zombie's rows identical; the seal
    must not depend on it."""
    return "quarantine"


def staged_and_half_committed(config: PipelineConfig, epoch: int, arm) -> list[dict[str, Any]]:
    """Another attempt stages ``epoch`` and a commit seals it, writes the first sink and
    crashes: what a zombie precommit of ``epoch`` may still meet. Returns the staged rows."""
    assert precommit(config, epoch, MemoryStager()).outcome is Outcome.STAGED
    arm("commit.between_sinks:fail")
    with pytest.raises(InjectedFault):
        commit(config, epoch)
    arm("")
    rows = staged_rows(config, epoch, plan_of(tables_for(config), epoch).hash)
    assert rows is not None and store(config, "memory:a").marker == epoch
    return rows


def test_a_precommit_that_finds_its_epoch_sealed_stages_nothing(
        pipeline: PipelineConfig, source: MemorySource, arm,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The zombie read "N is not staged" before another attempt staged N and a commit sealed
    it, and took its staging snapshot after. Before the fix it wrote through that snapshot
    (nothing fenced had landed since): N's staged rows changed under a commit that had written
    a sink, and the commit's retry promoted the new rows to the other sinks."""
    plan = begin(pipeline, source=source)
    first: list[list[dict[str, Any]]] = []
    check, pending = precommitting.check_no_rewind, [True]

    def meanwhile(tables: Any) -> None:  # between the zombie's staged check and its write
        if pending:
            pending.clear()
            first.append(staged_and_half_committed(pipeline, 0, arm))
            monkeypatch.setattr(memory, "record", drifted)
        check(tables)

    monkeypatch.setattr(precommitting, "check_no_rewind", meanwhile)
    zombie = precommit(pipeline, 0, MemoryStager())
    monkeypatch.undo()
    assert zombie.outcome is Outcome.SEALED and zombie.staging_version is None
    assert staged_rows(pipeline, 0, plan.hash) == first[0]  # the commit's rows stand
    assert commit(pipeline, 0).outcome is Outcome.COMMITTED  # the crashed commit's retry
    assert store(pipeline, "memory:c").rows[0].num_rows == sum(
        1 for r in first[0] if r["kind"] == "quarantine")  # what sink a's epoch was cut from


def test_a_precommit_paused_while_its_epoch_is_sealed_stages_nothing(
        pipeline: PipelineConfig, source: MemorySource, arm,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The zombie computed N, and before its write another attempt staged N and a commit
    sealed it: its write (through the snapshot it decided from) conflicts, and it stands aside
    as sealed; the commit's retry finishes N with the rows its first sink got."""
    plan = begin(pipeline, source=source)
    first: list[list[dict[str, Any]]] = []
    at_point(monkeypatch, "precommit.before_write",
             lambda: first.append(staged_and_half_committed(pipeline, 0, arm)))
    zombie = precommit(pipeline, 0, MemoryStager())
    monkeypatch.undo()
    assert zombie.outcome is Outcome.SEALED and zombie.staging_version is None
    assert staged_rows(pipeline, 0, plan.hash) == first[0]
    assert commit(pipeline, 0).outcome is Outcome.COMMITTED
    assert checkpointed_epoch(pipeline) == 0


def test_a_commit_promotes_the_rows_it_sealed(pipeline: PipelineConfig, source: MemorySource,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An abort and a precommit under a changed outside answer replace N's staged rows after
    the commit read them and before its seal: the seal is retried through the new snapshot.
    Before the fix the commit promoted the rows it read first; the checkpointed epoch and its
    sinks disagreed with staging."""
    plan = begin(pipeline, source=source)
    precommit(pipeline, 0, MemoryStager())
    seal = sealing.seal
    replaced: list[bool] = []

    def replace_first(*args: Any, **kwargs: Any) -> bool:
        if not replaced:
            replaced.append(True)
            assert abort(pipeline, 0, reason="operator") is Outcome.ABORTED
            with monkeypatch.context() as patch:
                patch.setattr(memory, "record", drifted)
                assert precommit(pipeline, 0, MemoryStager()).outcome is Outcome.STAGED
        return seal(*args, **kwargs)

    monkeypatch.setattr(sealing, "seal", replace_first)
    assert commit(pipeline, 0).outcome is Outcome.COMMITTED
    monkeypatch.undo()
    staged = staged_rows(pipeline, 0, plan.hash)
    assert staged is not None
    quarantined = sum(1 for r in staged if r["kind"] == "quarantine")
    assert quarantined == plan.records  # the rows staged now: every record quarantined
    assert store(pipeline, "memory:c").rows[0].num_rows == quarantined
    assert store(pipeline, "memory:b").rows[0].num_rows == 0


# -- maintenance against rewind -----------------------------------------------------------------

@pytest.fixture
def maintained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PipelineConfig:
    """A rewindable pipeline whose commit of every third epoch maintains its tables, deleting
    what it may at once (a vacuum retention of 0 hours: what 24 hours later looks like)."""
    monkeypatch.setattr(committing, "maintain", partial(maintenance.maintain, retention_hours=0))
    return make_pipeline(tmp_path, base=IN_MEMORY, sinks=REWINDABLE_SINKS,
                         epoch={"max_records": 1000, "staging_retention": 2,
                                "maintenance_every": 3})


def replays(config: PipelineConfig, source: MemorySource, to_epoch: int) -> None:
    """The pipeline goes on from ``to_epoch``: the next epoch resumes from its staged state."""
    assert run_epoch(config, source).epoch == to_epoch + 1
    assert checkpointed_epoch(config) == to_epoch + 1


def test_maintenance_stands_aside_while_a_rewind_is_unfinished(
        maintained: PipelineConfig, source: MemorySource, arm,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewind to 0 logged right after epoch 3's checkpoint crashes before its fence; epoch
    3's commit then maintains. Before the fix its vacuum deleted the files of epoch 0's staging
    version (pruned since), and the rewind could never finish (nor any epoch run again)."""
    epochs(maintained, source, 3)
    begin(maintained, source=source)
    precommit(maintained, 3, MemoryStager())

    def rewind_crashes() -> None:
        arm("rewind.after_log:fail")
        with pytest.raises(InjectedFault):
            rewind(maintained, 0)
        arm("")

    at_point(monkeypatch, "commit.after_checkpoint", rewind_crashes)
    done = commit(maintained, 3)
    assert done.outcome is Outcome.COMMITTED
    assert done.maintenance is not None and "skipped" in done.maintenance, done.maintenance
    assert rewind(maintained, 0).outcome is Outcome.REWOUND
    replays(maintained, source, 0)


def test_a_rewind_that_begins_while_a_vacuum_runs_waits_for_it(
        maintained: PipelineConfig, source: MemorySource, arm,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Epoch 3's commit maintains, and its staging vacuum has begun when a rewind to 0 begins
    (and crashes after fencing staging). Before the fix the rewind was logged and fenced while
    the vacuum deleted the files its restore needs: it could never finish. Now it waits for
    the maintenance, nothing logged, and is then refused (or goes) on what is left."""
    epochs(maintained, source, 3)
    begin(maintained, source=source)
    precommit(maintained, 3, MemoryStager())
    vacuum, met = DeltaTable.vacuum, []

    def rewind_meanwhile(table: DeltaTable, *args: Any, **kwargs: Any) -> list[str]:
        if kwargs.get("full") and not met:
            arm("rewind.after_fence:fail")
            with pytest.raises(EpochCommitting, match="maintain") as waited:
                rewind(maintained, 0)
            arm("")
            met.append(waited)
        return vacuum(table, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "vacuum", rewind_meanwhile)
    done = commit(maintained, 3)
    monkeypatch.undo()
    assert met and done.maintenance is not None and "error" not in done.maintenance
    assert done.maintenance["staging_files_deleted"] > 0
    assert log_rows(maintained, phase=epochlog.REWINDING) == []  # it waited: nothing logged
    with pytest.raises(RewindRefused, match="vacuumed"):  # epoch 0's files are gone now
        rewind(maintained, 0)
    assert rewind(maintained, -1).outcome is Outcome.REWOUND  # a full replay needs none
    replays(maintained, source, -1)


def test_a_rewind_whose_history_went_while_it_was_logged_is_abandoned(
        maintained: PipelineConfig, source: MemorySource,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A maintenance that read the epoch log before the rewind was logged and vacuumed after
    the rewind had checked its history: the rewind finds its history gone before it restores
    anything and is abandoned. Before the fix its restore failed, it stayed unfinished and
    every later epoch was refused (``RewindUnfinished``)."""
    epochs(maintained, source, 3)

    def maintenance_meanwhile() -> None:
        tables = tables_for(maintained)
        assert "error" not in maintenance.maintain(tables, retention_hours=0)

    at_point(monkeypatch, "rewind.before_log", maintenance_meanwhile)
    with pytest.raises(RewindRefused, match="abandoned"):
        rewind(maintained, 0)
    monkeypatch.undo()
    assert checkpointed_epoch(maintained) == 2
    assert all(store(maintained, n).marker == 2 for n in
               ("memory_rewind:a", "memory_rewind:b", "memory_rewind:c"))
    replays(maintained, source, 2)


def test_a_rewind_waits_for_a_running_maintenance_not_for_a_dead_one(
        rewindable: PipelineConfig, source: MemorySource) -> None:
    """A maintenance killed mid-vacuum never ends its lease: a rewind waits for it while it
    may still be running, and goes ahead once it cannot be (``MAINTENANCE_LEASE_MS``)."""
    epochs(rewindable, source, 2)
    tables, now = tables_for(rewindable), int(time.time() * 1000)
    for began, waits in ((now, True), (now - staging_fence.MAINTENANCE_LEASE_MS - 1, False)):
        table = DeltaTable(tables.staging)
        assert staging_fence.begin_maintenance(table, rewindable.app_id, 1, 0, began)
        if waits:
            with pytest.raises(EpochCommitting, match="being maintained"):
                rewind(rewindable, 0)
            assert log_rows(rewindable, phase=epochlog.REWINDING) == []
    assert rewind(rewindable, 0).outcome is Outcome.REWOUND
    replays(rewindable, source, 0)
