"""The streaming peer benchmark's report: its markdown table has every figure."""

from __future__ import annotations

from bench import streaming_peer as peer_bench

from support.streaming_peer import FIGURES, synthetic_result


def test_markdown_table_has_every_figure() -> None:
    table = peer_bench.render(synthetic_result(), markdown=True)
    for figure in FIGURES:
        assert f"| {figure} |" in table
    assert "What each guarantees:" in table

