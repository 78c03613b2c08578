"""The audit's offset check (``eos.tools.audit.verify.check_offsets``) across a moved source: ranges
continue per partition on one source, and a new source starts afresh only at a logged move."""

from __future__ import annotations

from eos.core.identity import SourceIdentity
from eos.core.plan import PartitionRange, Plan
from eos.tools.audit.checks import check_offsets
from eos.tools.audit.report import ProblemKind


def test_the_audit_starts_a_moved_source_afresh_and_only_at_a_logged_move() -> None:
    """``check_offsets``: ranges continue per partition on one source; the first plan after a
    logged move starts where the move says; a plan on another source without a move, and a
    gap after the move, are problems."""
    a, b = SourceIdentity.of("a", "c-1"), SourceIdentity.of("b", "c-1")

    def plan(epoch: int, on: SourceIdentity, *ranges: tuple[int, int, int]) -> Plan:
        return Plan("p", on.topics[0], epoch, tuple(PartitionRange(*r) for r in ranges), None,
                    on.cluster_id)

    plans = [plan(0, a, (0, 0, 700)), plan(1, a, (0, 700, 750)), plan(2, b, (0, 0, 400)),
             plan(3, b, (0, 400, 900))]
    assert check_offsets(plans, {2}) == []
    unexplained = check_offsets(plans)
    assert [(p.kind, p.where) for p in unexplained] == [(ProblemKind.OFFSETS, "epoch 2")]
    assert "no move is logged" in unexplained[0].detail
    gap = [*plans[:3], plan(3, b, (0, 401, 900))]
    assert [p.where for p in check_offsets(gap, {2})] == ["epoch 3"]

