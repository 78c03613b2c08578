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

A fill (``eos fill``, ``eos.sinks.iceberg.fill``) marks its snapshots with the app id and
``#fill`` (``Mark.fill``): not the pipeline's epochs, but not another writer's either, so a
rewind rolls back over them (taking them back) and the audit reads their rows.

**Expiry.** Expiring snapshots (pyiceberg's ``expire_snapshots``, Spark's) can remove every
snapshot of ours from the line: another writer appends after our last epoch, then everything
older than its snapshot expires. So each commit of ours (an epoch, a rewind) also sets the
table property ``eos.epoch.<app id>.<sink>`` in the same catalog commit: a JSON object of the
epoch, the id of the snapshot that committed it and that snapshot's sequence number. Table
properties outlive every snapshot. The property is read only when the line holds no marker of
ours (a marker on the line is what the table holds: a later commit, or a rollback someone
made without eos), and believed only when its snapshot is gone *from the line's past*: the
snapshot is not in the metadata at all (expired) and no snapshot on the line is older than it
(by sequence number; a format-1 table has none to compare). A snapshot still kept but off the
line, or a line reaching back before it, is a rollback someone made: the line says -1, as
before. A table written before the property has none: its summaries alone, as before.

Pure functions over pyiceberg's ``TableMetadata``: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from eos.core.errors import RewindRefused
from eos.core.outcomes import NO_EPOCH

__all__ = ["EPOCH", "PIPELINE", "REWIND", "SINK", "Kept", "Mark"]

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
class Kept:
    """What the table property says the sink holds: ``epoch``, committed by snapshot
    ``snapshot`` of sequence number ``sequence`` (0 on a format-1 table)."""

    epoch: int
    snapshot: int
    sequence: int

    @classmethod
    def of(cls, snapshot: Any, epoch: int) -> Kept:
        return cls(epoch, int(snapshot.snapshot_id), int(snapshot.sequence_number or 0))

    @classmethod
    def parse(cls, text: str | None) -> Kept | None:
        """The property's value read back; None for none, or for a value not of ours (edited
        by hand): the line's markers alone then, as for a table written before the property."""
        if text is None:
            return None
        try:
            found = json.loads(text)
            return cls(int(found["epoch"]), int(found["snapshot"]), int(found["sequence"]))
        except (ValueError, TypeError, KeyError):
            return None

    def text(self) -> str:
        return json.dumps({"epoch": self.epoch, "snapshot": self.snapshot,
                           "sequence": self.sequence})


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

    @property
    def fill(self) -> Mark:
        """The mark of this sink's fill (``eos fill``, ``eos.sinks.iceberg.fill``): the app id
        with ``FILL_SUFFIX``, so a filled epoch's snapshot never reads as the pipeline's."""
        from eos.core.delta import FILL_SUFFIX

        return Mark(self.pipeline + FILL_SUFFIX, self.sink)

    def filled_by(self, snapshot: Any) -> bool:
        """Whether ``snapshot`` is one of this sink's fill: the pipeline's own writing, which
        a rewind may roll back over and the audit reads as the pipeline's rows."""
        return self.fill.epoch_of(snapshot) is not None

    @property
    def property_name(self) -> str:
        """The table property that keeps the epoch this sink holds."""
        return f"{EPOCH}.{self.pipeline}.{self.sink}"

    def kept_property(self, snapshot: Any, epoch: int) -> dict[str, str]:
        """The property once ``snapshot`` (the commit's own, as staged) holds ``epoch``."""
        return {self.property_name: Kept.of(snapshot, epoch).text()}

    def kept(self, metadata: Any) -> Kept | None:
        return Kept.parse(metadata.properties.get(self.property_name))

    def held(self, metadata: Any) -> int:
        """The newest epoch of ours on the current line; with no marker of ours there, the
        property's epoch when its snapshot expired from the line's past; ``-1`` otherwise."""
        if metadata.current_snapshot() is None:
            return NO_EPOCH  # never written, or its branch removed (expiry keeps the current)
        for snapshot in line(metadata):
            epoch = self.epoch_of(snapshot)
            if epoch is not None:
                return epoch
        kept = self.kept(metadata)
        if kept is None or metadata.snapshot_by_id(kept.snapshot) is not None:
            return NO_EPOCH  # none, or its snapshot is kept off the line: rolled back
        if any((s.sequence_number or 0) < kept.sequence for s in line(metadata)):
            return NO_EPOCH  # the line goes back before it without passing it: rolled back
        return kept.epoch

    def epochs(self, metadata: Any) -> list[int]:
        """The epochs of ours on the current line, oldest first, after the newest emptying;
        with no marker left there (expired), the epoch held, when it is one. Expiry shortens
        the run from its start, never from its end."""
        found = []
        for snapshot in line(metadata):
            epoch = self.epoch_of(snapshot)
            if epoch == NO_EPOCH:
                break
            if epoch is not None:
                found.append(epoch)
        if not found and (held := self.held(metadata)) != NO_EPOCH:
            return [held]
        return found[::-1]

    def foreign(self, metadata: Any) -> list[Any]:
        """Snapshots of other writers on the current line that changed rows, newest first."""
        return [s for s in line(metadata) if self.epoch_of(s) is None and not self.filled_by(s)
                and (s.summary is None or s.summary.operation.value != REPLACE)]

    def rewind_point(self, metadata: Any, epoch: int, where: str) -> int | None:
        """The snapshot a rewind to ``epoch`` goes back to: the one that committed it; for
        ``-1`` the current one (the rewind empties the table from it), None when there is
        nothing to empty. Every snapshot after it must be ours: ``RewindRefused`` names the
        first of another writer (going back would remove its rows, or its changes)."""
        for snapshot in line(metadata):
            ours = self.epoch_of(snapshot)
            if ours is None and self.filled_by(snapshot):
                continue  # a filled epoch: the rollback takes it back with its marker
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
