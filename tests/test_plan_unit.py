"""Planning rules that need no broker: fair capping and stable plan hashes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eos.plan import PartitionRange, Plan, cap_fairly
from eos.reader import splits_of


@given(st.dictionaries(st.integers(0, 15), st.integers(0, 10_000), max_size=8),
       st.integers(1, 50_000))
def test_cap_fairly(available: dict[int, int], budget: int) -> None:
    taken = cap_fairly(available, budget)
    assert set(taken) == set(available)
    assert all(0 <= taken[p] <= available[p] for p in available)
    assert sum(taken.values()) == min(budget, sum(available.values()))
    # Fair: a partition below its availability got at least as much as any other, minus one.
    for p in available:
        if taken[p] < available[p]:
            assert all(taken[q] <= taken[p] + 1 for q in available)


def test_plan_hash_is_stable_and_sensitive() -> None:
    plan = Plan("p", "t", 3, (PartitionRange(0, 10, 20), PartitionRange(1, 0, 5)))
    again = Plan.from_json(plan.to_json())
    assert again == plan and again.hash == plan.hash
    moved = Plan("p", "t", 3, (PartitionRange(0, 10, 21), PartitionRange(1, 0, 5)))
    assert moved.hash != plan.hash


def test_splits_cover_ranges_exactly() -> None:
    ranges = [{"partition": 0, "start": 5, "until": 23}, {"partition": 1, "start": 7, "until": 7}]
    splits = splits_of(ranges, 8)
    got = [(s.partition, s.start, s.until) for s in splits]
    assert got == [(0, 5, 13), (0, 13, 21), (0, 21, 23)]
