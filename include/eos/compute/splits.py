"""How a plan's ranges become Spark input splits: packed into as few as keep every core busy
(``splits_of``). A Spark task costs ~90 ms of a core whatever it reads (``python -m
bench.read_path``), so a split per partition made a 32-partition epoch pay it 32 times; one
split reads its pieces of several partitions with one consumer (``eos.compute.reader``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition


@dataclass(frozen=True)
class Piece:
    """``[start, until)`` of one partition, read by one split (``topic`` "": the read's one
    topic, the ``topic`` option)."""

    partition: int
    start: int
    until: int
    topic: str = ""

    @property
    def offsets(self) -> int:
        return self.until - self.start


@dataclass(frozen=True)
class KafkaSplit(InputPartition):
    """One Spark input split: pieces of distinct partitions, read together by one consumer."""

    pieces: tuple[Piece, ...]

    @property
    def offsets(self) -> int:
        return sum(p.offsets for p in self.pieces)


def splits_of(ranges: list[dict[str, Any]], split_records: int,
              min_splits: int = 1) -> list[KafkaSplit]:
    """The ranges' offsets dealt into ``max(min_splits, ceil(total / split_records))`` splits
    (fewer only when there are fewer offsets), their sizes within one offset of each other, in
    (topic, partition) order: a range is cut where a split is full, so a split never holds two
    pieces of one partition, and every offset of every non-empty range is in exactly one piece."""
    pieces = [Piece(r["partition"], r["start"], r["until"], str(r.get("topic", "")))
              for r in sorted(ranges, key=lambda r: (str(r.get("topic", "")), r["partition"]))
              if r["until"] > r["start"]]
    total = sum(p.offsets for p in pieces)
    if total == 0:
        return []
    count = min(total, max(min_splits, -(-total // max(1, split_records))))
    # Not ceil(total / count) each: that leaves the last splits empty (4 offsets, 3 splits).
    sizes = [total // count + (1 if i < total % count else 0) for i in range(count)]
    splits: list[KafkaSplit] = []
    current: list[Piece] = []
    room = sizes[0]
    for piece in pieces:
        lo = piece.start
        while lo < piece.until:
            hi = min(piece.until, lo + room)
            current.append(Piece(piece.partition, lo, hi, piece.topic))
            room -= hi - lo
            lo = hi
            if room == 0:
                splits.append(KafkaSplit(tuple(current)))
                current = []
                room = sizes[len(splits)] if len(splits) < count else 0
    return splits


NO_SPLIT = KafkaSplit(())  # Spark needs one split even when a plan reads nothing
