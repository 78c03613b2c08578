"""The audit's own rule for what an upserting sink holds (``latest_rows``, plain Python) and
the pipeline's (``eos.core.upserts.last_per_key``, pyarrow, applied per epoch) agree on random
epochs: keys seen in several partitions and topics, timestamps out of offset order, equal
timestamps, a record's several late windows."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from eos.core.upserts import RECORD_TIMESTAMP as PIPELINE_TIMESTAMP
from eos.core.upserts import last_per_key
from eos.tools.audit.checks import RECORD_TIMESTAMP, latest_rows


def _rows(rng: random.Random, epoch: int) -> list[dict]:
    rows, offsets = [], {}
    for _ in range(rng.randint(1, 30)):
        where = (rng.choice(["a", "b"]), rng.randint(0, 2))
        offsets[where] = offsets.get(where, -1) + rng.randint(1, 3)
        rows.append({"key": rng.choice(["k1", "k2", "k3", None]), "value": rng.randint(0, 9),
                     "kafka_topic": where[0], "kafka_partition": where[1],
                     "kafka_offset": offsets[where], "ts": rng.choice([100, 200, 300, None]),
                     "epoch": epoch})
    return rows


def _late(rng: random.Random, epoch: int) -> list[dict]:
    rows = []
    for offset in range(rng.randint(1, 12)):
        for start in rng.sample([0, 10, 20], rng.randint(1, 3)):  # a record's late windows
            rows.append({"page": rng.choice(["x", "y"]), "kafka_topic": "a",
                         "partition": rng.randint(0, 1), "offset": offset,
                         "window_start": start, "window_end": start + 10,
                         "ts": rng.choice([5, 6]), "epoch": epoch})
    return rows


def _pipeline(rows: list[dict], keys: tuple[str, ...], output: str) -> list[dict]:
    """What the sink holds: each epoch reduced by the pipeline, applied in epoch order."""
    held: dict[tuple, dict] = {}
    for epoch in sorted({r["epoch"] for r in rows}):
        mine = [{**r, PIPELINE_TIMESTAMP if output == "rows" else "kafka_timestamp": r["ts"]}
                for r in rows if r["epoch"] == epoch]
        for row in last_per_key(pa.Table.from_pylist(mine), keys, output).to_pylist():
            held[tuple(row[k] for k in keys)] = row
    return sorted(held.values(), key=lambda r: str(sorted(r.items())))


def _audit(rows: list[dict], keys: tuple[str, ...], output: str) -> list[dict]:
    expected = latest_rows([{**r, RECORD_TIMESTAMP: r["ts"]} for r in rows], keys, output)
    return sorted(expected, key=lambda r: str(sorted(r.items())))


@pytest.mark.parametrize("seed", range(40))
def test_the_audit_expects_the_row_the_pipeline_keeps(seed: int) -> None:
    rng = random.Random(seed)
    rows = [r for epoch in range(3) for r in _rows(rng, epoch)]
    ours = [(r["kafka_topic"], r["kafka_partition"], r["kafka_offset"], r["epoch"])
            for r in _pipeline(rows, ("key",), "rows")]
    theirs = [(r["kafka_topic"], r["kafka_partition"], r["kafka_offset"], r["epoch"])
              for r in _audit(rows, ("key",), "rows")]
    assert ours == theirs


@pytest.mark.parametrize("seed", range(20))
def test_late_rows_of_several_windows_keep_the_same_row(seed: int) -> None:
    rng = random.Random(seed)
    rows = [r for epoch in range(2) for r in _late(rng, epoch)]
    pick = ("partition", "offset", "window_start", "epoch")
    assert ([tuple(r[c] for c in pick) for r in _pipeline(rows, ("page",), "late")]
            == [tuple(r[c] for c in pick) for r in _audit(rows, ("page",), "late")])
