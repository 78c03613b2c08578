"""``precommit``: every decision about whether epoch N's staged rows may be written."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from eos.core import epochlog
from eos.core.config import PipelineConfig
from eos.core.errors import ConfigError, ProtocolViolation
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.plan import Plan
from eos.core.protocol import begin, checkpointed_epoch, commit, precommit
from eos.core.rewind import rewind

from support.memory import MemorySource, MemoryStager, log_plan, log_rows, run_epoch, staged_rows
from support.pipelines import same_pipeline


def staging_version(config: PipelineConfig) -> int:
    return DeltaTable(tables_for(config).staging).version()


def test_an_epoch_is_staged_in_one_commit(pipeline: PipelineConfig, source: MemorySource,
                                          stager: MemoryStager, phases) -> None:
    plan = begin(pipeline, source=source)
    result = precommit(pipeline, 0, stager, expected_hash=plan.hash)
    assert result.outcome is Outcome.STAGED and stager.staged == [0]
    assert result.staging_version == staging_version(pipeline)
    history = DeltaTable(tables_for(pipeline).staging).history()
    assert [(h.get("eos.op"), h.get("eos.epoch")) for h in history if "eos.op" in h] == [
        ("stage", "0")]
    # 40 records: offsets 8, 18 (p0) and 8 (p1) late; 9, 19 (p0) and 9 (p1) quarantined.
    assert result.counts == {"output": 1, "state": 1, "late": 3, "quarantine": 3, "offsets": 2,
                             "filtered": 0}
    assert result.watermark_ms == 10_000 and result.written_by == "driver"
    rows = staged_rows(pipeline, 0, plan.hash)
    assert rows is not None and len(rows) == 1 + 1 + 3 + 3 + 2 + 1  # and the precommit row
    assert [r["plan_hash"] for r in log_rows(pipeline, 0, epochlog.PRECOMMITTED)] == [plan.hash]
    assert phases.outcome("precommit") == Outcome.STAGED


def test_a_committed_epoch_is_not_staged_again(pipeline: PipelineConfig,
                                               source: MemorySource) -> None:
    run_epoch(pipeline, source)
    before = staging_version(pipeline)
    again = MemoryStager()
    assert precommit(pipeline, 0, again).outcome is Outcome.ALREADY_COMMITTED
    assert again.staged == [] and staging_version(pipeline) == before


def test_a_staged_epoch_is_reused(pipeline: PipelineConfig, source: MemorySource,
                                  stager: MemoryStager) -> None:
    """A crash after the staging write: the rerun finds N staged for its plan hash and writes
    nothing (failure matrix: "crash after precommit")."""
    begin(pipeline, source=source)
    first = precommit(pipeline, 0, stager)
    before = staging_version(pipeline)
    again = MemoryStager()
    reused = precommit(pipeline, 0, again)
    assert reused.outcome is Outcome.REUSED_STAGE and again.staged == []
    assert reused.counts == first.counts
    assert staging_version(pipeline) == before
    assert len(log_rows(pipeline, 0, epochlog.PRECOMMITTED)) == 1


def test_epochs_are_staged_in_order(pipeline: PipelineConfig, stager: MemoryStager) -> None:
    """A plan for N while N-1 is not committed (the log keeps plans a rewind went back past)."""
    log_plan(pipeline, 1)
    with pytest.raises(ProtocolViolation, match="epoch 0 is not committed"):
        precommit(pipeline, 1, stager)
    assert stager.staged == []


def test_an_epoch_without_a_plan_is_refused(pipeline: PipelineConfig,
                                            stager: MemoryStager) -> None:
    with pytest.raises(ProtocolViolation, match="epoch 0 has no plan in the epoch log"):
        precommit(pipeline, 0, stager)


def test_a_plan_the_log_does_not_hold_is_refused(pipeline: PipelineConfig, source: MemorySource,
                                                 stager: MemoryStager) -> None:
    plan = begin(pipeline, source=source)
    with pytest.raises(ProtocolViolation, match="asked to stage plan 0000000000000000"):
        precommit(pipeline, 0, stager, expected_hash="0" * 16)
    assert stager.staged == [] and staged_rows(pipeline, 0, plan.hash) is None


def test_a_changed_schema_view_is_refused(pipeline: PipelineConfig, source: MemorySource,
                                          stager: MemoryStager) -> None:
    run_epoch(pipeline, source)
    begin(pipeline, source=source)
    changed = same_pipeline(pipeline, aggregations={"n": "count(key)"})
    with pytest.raises(ConfigError, match=r"aggregations\.n: 'count\(\*\)' -> 'count\(key\)'"):
        precommit(changed, 1, stager)
    assert stager.staged == []


def test_a_zombie_discards_what_it_computed(pipeline: PipelineConfig,
                                            source: MemorySource) -> None:
    """N got committed by another attempt while this one computed: it steps aside, its files
    stay invisible (failure matrix: "zombie precommit after commit")."""
    plan: Plan = begin(pipeline, source=source)
    rival = MemoryStager()

    def rival_commits(_: Plan) -> None:
        assert precommit(pipeline, 0, rival).outcome is Outcome.STAGED
        assert commit(pipeline, 0).outcome is Outcome.COMMITTED

    zombie = MemoryStager(during=rival_commits)
    before = staged_rows(pipeline, 0, plan.hash)
    result = precommit(pipeline, 0, zombie)
    assert before is None and zombie.staged == rival.staged == [0]
    assert result.outcome is Outcome.DISCARDED and result.staging_version is None
    held = DeltaTable(tables_for(pipeline).staging).file_uris()
    assert held and not [uri for uri in held if zombie.attempts[0] in uri]
    assert all(rival.attempts[0] in uri for uri in held)
    assert len(log_rows(pipeline, 0, epochlog.PRECOMMITTED)) == 1  # the rival's
    assert checkpointed_epoch(pipeline) == 0


def test_a_rewind_while_computing_is_refused(rewindable: PipelineConfig,
                                             source: MemorySource) -> None:
    """The checkpoint went back (a rewind) while N was computed from N-1's state: N is not
    staged."""
    run_epoch(rewindable, source)
    source.produce(0, 5)
    plan = begin(rewindable, source=source)
    stager = MemoryStager(during=lambda _: rewind(rewindable, -1) and None)
    with pytest.raises(ProtocolViolation, match="the last checkpoint is now epoch -1"):
        precommit(rewindable, 1, stager)
    assert stager.staged == [1] and staged_rows(rewindable, 1, plan.hash) is None
    assert checkpointed_epoch(rewindable) == -1
