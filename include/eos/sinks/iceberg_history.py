"""What an Iceberg table's history says about one sink of one pipeline: the marker of each
epoch is its snapshot's summary, as in Flink's Iceberg committer.

Each epoch's commit is one snapshot whose summary carries ``eos.pipeline`` (the pipeline's app
id), ``eos.sink`` (the sink's name) and ``eos.epoch``. What the table holds is read from the
**current line**: the current snapshot and its ancestors (``parent-snapshot-id``), newest
first. A snapshot a rollback left behind is no longer an ancestor, so it no longer counts; a
snapshot of another writer (a second pipeline, a maintenance job) sits on the line without a
summary of ours and is stepped over.

A rewind to before the first epoch empties the table in a snapshot of ours whose epoch is
``-1`` (``eos.rewind`` names the rewind): the line's epochs start after the newest such one.

Pure functions over pyiceberg's ``TableMetadata``: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from eos.core.errors import RewindRefused
from eos.core.outcomes import NO_EPOCH

__all__ = ["EPOCH", "PIPELINE", "REWIND", "SINK", "Mark"]

PIPELINE, SINK, EPOCH, PLAN, REWIND = ("eos.pipeline", "eos.sink", "eos.epoch",
                                       "eos.plan-hash", "eos.rewind")
REPLACE = "replace"  # a snapshot that rewrites files without changing rows (compaction)


def line(metadata: Any) -> Iterator[Any]:
    """The current snapshot and its ancestors, newest first (none for a table never written)."""
    from pyiceberg.table.snapshots import ancestors_of

    return iter(ancestors_of(metadata.current_snapshot(), metadata))


def described(snapshot: Any) -> str:
    """A snapshot as a message names it: id, operation, time and who wrote it."""
    summary = snapshot.summary
    at = datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC).isoformat(timespec="seconds")
    writer = (f"{summary[PIPELINE]} sink {summary[SINK]} epoch {summary[EPOCH]}"
              if summary is not None and summary[PIPELINE] else "no eos summary")
    operation = summary.operation.value if summary is not None else "unknown"
    return f"snapshot {snapshot.snapshot_id} ({operation} at {at}, {writer})"


@dataclass(frozen=True)
class Mark:
    """The summary that makes a snapshot one of this pipeline's sink's commits."""

    pipeline: str  # the pipeline's app id
    sink: str  # the sink's name

    def summary(self, epoch: int, plan_hash: str | None = None,
                rewind: str | None = None) -> dict[str, str]:
        found = {PIPELINE: self.pipeline, SINK: self.sink, EPOCH: str(epoch)}
        if plan_hash is not None:
            found[PLAN] = plan_hash
        if rewind is not None:
            found[REWIND] = rewind
        return found

    def epoch_of(self, snapshot: Any) -> int | None:
        """The epoch a snapshot of ours committed (``-1``: a rewind emptied the table), None
        for another writer's."""
        summary = snapshot.summary
        if summary is None or summary[PIPELINE] != self.pipeline or summary[SINK] != self.sink:
            return None
        text = summary[EPOCH]
        return int(text) if text is not None and text.lstrip("-").isdigit() else None

    def held(self, metadata: Any) -> int:
        """The newest epoch of ours on the current line, ``-1`` if none."""
        for snapshot in line(metadata):
            epoch = self.epoch_of(snapshot)
            if epoch is not None:
                return epoch
        return NO_EPOCH

    def snapshot_of(self, metadata: Any, epoch: int) -> Any | None:
        """The snapshot on the current line that committed ``epoch``, if any."""
        return next((s for s in line(metadata) if self.epoch_of(s) == epoch), None)

    def epochs(self, metadata: Any) -> list[int]:
        """The epochs of ours on the current line, oldest first, after the newest emptying."""
        found = []
        for snapshot in line(metadata):
            epoch = self.epoch_of(snapshot)
            if epoch == NO_EPOCH:
                break
            if epoch is not None:
                found.append(epoch)
        return found[::-1]

    def foreign(self, metadata: Any) -> list[Any]:
        """Snapshots of other writers on the current line that changed rows, newest first."""
        return [s for s in line(metadata) if self.epoch_of(s) is None
                and (s.summary is None or s.summary.operation.value != REPLACE)]

    def rewind_point(self, metadata: Any, epoch: int, where: str) -> int | None:
        """The snapshot a rewind to ``epoch`` goes back to: the one that committed it; for
        ``-1`` the current one (the rewind empties the table from it), None when there is
        nothing to empty. Every snapshot after it must be ours: ``RewindRefused`` names the
        first of another writer (going back would remove its rows, or its changes)."""
        for snapshot in line(metadata):
            ours = self.epoch_of(snapshot)
            if ours is None:
                raise RewindRefused(
                    f"{where}: {described(snapshot)} was committed by another writer after "
                    f"epoch {epoch}; rolling back would remove it. Nothing was changed")
            if ours == epoch or (ours == NO_EPOCH and epoch == NO_EPOCH):
                return snapshot.snapshot_id if epoch != NO_EPOCH else _current(metadata)
            if ours < epoch:
                break
        if epoch == NO_EPOCH:
            return _current(metadata)
        raise RewindRefused(f"{where} holds no epoch {epoch} on its current line (its history "
                            "is gone or it never held it); rewind to -1 to fill it from the "
                            "start")


def _current(metadata: Any) -> int | None:
    snapshot = metadata.current_snapshot()
    return None if snapshot is None else snapshot.snapshot_id
