"""Smoke test of ``python -m bench.streaming_peer``: the quick mode runs end to end as a user
runs it (its own process and local Spark session, on the tests' broker), prints every figure,
and the Spark Structured Streaming peer's Delta table holds the same closed windows, with the
same values, as our exactly-once sink.

No timing thresholds: the figures depend on the machine and on whatever else runs on it. The
data is compared here, row by row in plain Python, not with the module's own comparison.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project root holds bench/

from bench import streaming_peer as peer_bench
from eos.compute.connect import CONNECT_MARKS
from eos.core.delta import read_table

from support.streaming_peer import FIGURES

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]

WINDOW = ("key", "window_start", "window_end")
EXACT = ("count", "sum", "min", "max")




def cells(table: str, figure: str) -> list[str]:
    """The cells of a figure's row in the plain table (columns are 2+ spaces apart)."""
    found = [line for line in table.splitlines() if line.startswith(figure + "  ")]
    assert found, f"figure {figure!r} missing from the table:\n{table}"
    row = re.split(r"\s{2,}", found[0].strip())
    assert len(row) == 3 and all(row), f"figure {figure!r} lacks a value: {found[0]}"
    return row[1:]


def number(cell: str) -> int:
    """The first number of a cell (``"1,097 (4 commits)"`` -> 1097)."""
    return int(re.match(r"[\d,]+", cell).group(0).replace(",", ""))


def windows(path: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Every window of a Delta table by (key, start, end); a window written twice fails."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in read_table(path).to_pylist():
        key = tuple(row[c] for c in WINDOW)
        assert key not in out, f"window {key} written twice to {path}"
        out[key] = row
    return out


def test_quick_peer_prints_every_figure_and_matches_eo(kafka: str, data_dir: Path,
                                                       tmp_path: Path) -> None:
    workdir = tmp_path / "peer-bench"
    env = {k: v for k, v in os.environ.items() if k not in CONNECT_MARKS}  # a classic session
    env.update(KAFKA_BOOTSTRAP_SERVERS=kafka, PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.streaming_peer", "--quick", "--workdir", str(workdir),
         "--topic", f"bench-peer-{tmp_path.name}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stderr[-6000:]}"
    table = proc.stdout

    figures = {figure: cells(table, figure) for figure in FIGURES}
    events = peer_bench.QUICK["events"]
    assert figures["events / units of work"][0].startswith(f"{events:,} in 4 epochs")
    eo_read, peer_read = figures["records read"]
    assert number(eo_read) == number(peer_read) == events
    eo_bad, peer_bad = figures["malformed records"]
    assert number(eo_bad) == number(peer_bad) > 0  # the same parser on the same records
    assert number(figures["late data"][0]) > 0
    eo_rows, peer_rows = figures["window rows written to Delta"]
    assert number(eo_rows) == number(peer_rows) > 0
    for side in figures["replay after a crash"]:
        assert "skipped, rows unchanged" in side
    assert "What each guarantees:" in table

    eo_path, peer_path = peer_bench.sink_tables(workdir)
    ours, theirs = windows(eo_path), windows(peer_path)
    both = ours.keys() & theirs.keys()
    assert len(both) > 1000, f"only {len(both)} windows closed in both"
    # Same watermark rule on both sides: every window one closed, the other closed too.
    assert ours.keys() == theirs.keys(), (
        f"closed only by EO: {sorted(ours.keys() - theirs.keys())[:5]}, only by the peer: "
        f"{sorted(theirs.keys() - ours.keys())[:5]}")
    for key in both:
        mine, peer = ours[key], theirs[key]
        assert {c: mine[c] for c in EXACT} == {c: peer[c] for c in EXACT}, key
        assert mine["avg"] == pytest.approx(peer["avg"], rel=1e-9), key
