"""A result of the streaming peer benchmark (``bench.streaming_peer``) with every field set, and
the figures its report must show: for the report's unit test and the benchmark's smoke test."""

from __future__ import annotations

from bench import streaming_peer as peer_bench


def synthetic_result() -> peer_bench.Result:
    """A result with every field set, for the renderer alone."""
    from bench.scenarios import EpochTiming

    timing = EpochTiming(epoch=0, records=10, begin=0.1, precommit=1.0, commit=0.1,
                         counts={"output": 3, "late": 1, "quarantine": 1})
    batch = peer_bench.Batch(batch_id=1, input_rows=10, trigger_s=0.5, dropped_by_watermark=1,
                             malformed=1, start={"0": 0}, end={"0": 10})
    replay = peer_bench.Replay("x", skipped=True, rows_before=3, rows_after=3, txn=1, seconds=1.0)
    return peer_bench.Result(events=10, eo=[timing], stream=[1.0], batches=[batch], start_s=1.0,
                             eo_rows=3, peer_rows=3, peer_appends=1, eo_replay=replay,
                             peer_replay=replay,
                             comparison=peer_bench.Comparison(both=3, equal=3))


FIGURES = [label for label, _, _ in peer_bench.rows(synthetic_result())]
