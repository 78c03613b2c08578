"""Planning rules that need no broker: fair capping and stable plan hashes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eos.compute.splits import splits_of
from eos.core.plan import PartitionRange, Plan, cap_fairly


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
    got = [[(p.partition, p.start, p.until) for p in s.pieces] for s in splits]
    assert got == [[(0, 5, 11)], [(0, 11, 17)], [(0, 17, 23)]]
    packed = splits_of([{"partition": p, "start": 0, "until": 10} for p in range(4)], 100, 2)
    assert [[(p.partition, p.start, p.until) for p in s.pieces] for s in packed] == [
        [(0, 0, 10), (1, 0, 10)], [(2, 0, 10), (3, 0, 10)]]
    assert splits_of([{"partition": 0, "start": 3, "until": 3}], 8, 2) == []


@given(st.dictionaries(st.integers(0, 40), st.tuples(st.integers(0, 500), st.integers(0, 900)),
                       max_size=40),
       st.integers(1, 2_000), st.integers(1, 8))
def test_splits_deal_every_offset_once(bounds: dict[int, tuple[int, int]], split_records: int,
                                       min_splits: int) -> None:
    """Every offset of every range in exactly one piece; no split holds a partition twice; the
    splits are as many as the size and the cores ask, and within one offset of each other."""
    ranges = [{"partition": p, "start": lo, "until": lo + n} for p, (lo, n) in bounds.items()]
    total = sum(n for _, n in bounds.values())
    splits = splits_of(ranges, split_records, min_splits)
    covered = sorted((p.partition, o) for s in splits for p in s.pieces
                     for o in range(p.start, p.until))
    assert covered == sorted((r["partition"], o) for r in ranges
                             for o in range(r["start"], r["until"]))
    for s in splits:
        assert len({p.partition for p in s.pieces}) == len(s.pieces)
        assert all(p.until > p.start for p in s.pieces)
    if total:
        wanted = max(min_splits, -(-total // split_records))
        assert len(splits) == min(wanted, total)
        sizes = [s.offsets for s in splits]
        assert max(sizes) <= -(-total // wanted) and min(sizes) >= 1


def test_an_epoch_is_collected_when_predicted_small_and_bounded_small() -> None:
    """The prediction: N-1 staged at most ``collect_rows`` rows (a snapshot: the rows it read).
    The guarantee: the state rows read + records x windows per event (a hopping window of
    60 s sliding by 20 s puts an event in 3) within ``COLLECT_MAX_ROWS``. Unknown counts,
    wide quarantined records and ``collect_rows: 0`` go to the executors."""
    from eos.compute.precommit.frames import Frames
    from eos.compute.precommit.resume import ResumePoint
    from eos.compute.precommit.write import COLLECT_MAX_ROWS, COLLECT_RAW_BYTES, collects
    from eos.core.config import parse_config
    from eos.core.window_state import EMPTY

    def config(window: dict, collect_rows: int = 1000):
        return parse_config({
            "name": "p", "kafka": {"topic": "t"},
            "event": {"time": {"field": "ts", "format": "epoch_ms"}, "fields": {"k": "string"}},
            "group_by": ["k"], "window": window, "aggregations": {"n": "count(*)"},
            "spark": {"collect_rows": collect_rows}}, "test")

    tumbling = config({"type": "tumbling", "size": "60s"})
    hopping = config({"type": "hopping", "size": "60s", "slide": "20s"})
    session = config({"type": "session", "gap": "30s"})
    small = Plan("p", "t", 1, (PartitionRange(0, 0, 200), PartitionRange(1, 0, 100)))
    big = Plan("p", "t", 1, (PartitionRange(0, 0, COLLECT_MAX_ROWS - 1000),))
    def frames(read_rows: int | None = 1000, raw: int = COLLECT_RAW_BYTES) -> Frames:
        return Frames(None, None, None, 0, quarantined_bytes=raw, read_rows=read_rows)

    narrow, wide = frames(), frames(raw=COLLECT_RAW_BYTES + 1)

    def state(rows: int | None, snapshot: bool = False) -> ResumePoint:
        return ResumePoint(EMPTY, 0, None, rows, snapshot)

    assert collects(tumbling, small, state(0, snapshot=True), frames(0))  # epoch 0
    assert collects(tumbling, small, state(1000), narrow)
    assert not collects(tumbling, small, state(1001), narrow)  # predicted big
    assert collects(tumbling, big, state(1000), narrow)  # 1,000 read + records: within the bound
    assert not collects(hopping, big, state(1000), narrow)  # x 3 windows: past it
    assert collects(session, big, state(1000), narrow)
    assert not collects(tumbling, small, state(None), narrow)
    assert not collects(tumbling, small, state(10), frames(None))  # rows read unknown
    assert not collects(tumbling, small, state(10), wide)
    # Changes predict from N-1's rows; a snapshot stages every open window it read again.
    assert collects(tumbling, small, state(10), frames(5000))
    assert not collects(tumbling, small, state(10, snapshot=True), frames(5000))
    assert not collects(config({"type": "tumbling", "size": "60s"}, 0), small, state(0), narrow)


def test_only_a_brand_new_pipeline_starts_at_latest() -> None:
    """``kafka.start: latest`` places partitions at their end for the first epoch only; a
    partition the checkpoint does not know later (added to the topic) starts at its log start."""
    from eos.core.config import parse_config
    from eos.core.plan import first_offset

    def config(start: str):
        return parse_config({
            "name": "p", "kafka": {"topic": "t", "start": start},
            "event": {"time": {"field": "ts", "format": "epoch_ms"}, "fields": {"k": "string"}},
            "group_by": ["k"], "window": {"type": "tumbling", "size": "60s"},
            "aggregations": {"n": "count(*)"}}, "test")

    assert first_offset(config("latest"), {}, 3, 10) == 10  # brand new
    assert first_offset(config("latest"), {0: 7}, 3, 10) == 3  # a partition added later
    assert first_offset(config("earliest"), {}, 3, 10) == 3
    assert first_offset(config("earliest"), {0: 7}, 3, 10) == 3
