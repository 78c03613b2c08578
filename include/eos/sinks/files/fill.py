"""A ``files`` sink filled with the epochs committed before it joined (``SupportsFill``).

A filled epoch is committed as the pipeline's epochs are, data files first, each whole, then a
manifest created only if absent, but its manifest is ``_eos/fill/<N:012d>.json``, beside the
pipeline's ``_eos/manifests``: ``committed_epoch`` and ``commits`` keep reading the pipeline's
alone, and the fill's manifests say how far the fill got (the first of them is its first
epoch). Of two fills at once exactly one creates an epoch's manifest; both wrote the same names
(``epoch-<N>-fill-part-...``: ``fill`` is no plan hash, which is hexadecimal) holding the same
rows, so the loser has nothing of its own to remove.

The read-back (``read_back``, the audit) reads the files of the fill's manifests with the
pipeline's. ``_eos/committed.json``, the readers' convenience, is rebuilt with them after each
filled epoch (a pipeline commit racing that rebuild may leave them out of it until the next
rebuild: the manifests are the truth). A rewind to N removes the filled epochs after N as it
removes the pipeline's, each manifest before its files, so what remains is claimed whole.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from eos.core.errors import SinkUnavailable
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.sink import SinkCommit, check_fill_order
from eos.sinks.files.layout import (
    MANIFEST,
    Manifest,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from eos.sinks.files.sink import FilesSink

FILLS = "_eos/fill"  # the fill's manifests
PLAN = "fill"  # in place of a plan hash in a filled epoch's file names


def fill_manifest_name(epoch: int) -> str:
    return f"{FILLS}/{epoch:012d}.json"


def fill_epochs(sink: FilesSink) -> list[int]:
    """The epochs the fill's manifests commit, oldest first."""
    try:
        names = sink.place.names(FILLS)
    except OSError as error:
        raise SinkUnavailable(f"sink {sink.name}: cannot list its fill's manifests: "
                              f"{error}") from None
    found = (MANIFEST.match(name.rsplit("/", 1)[-1]) for name in names)
    return sorted(int(m.group(1)) for m in found if m)


def filled(sink: FilesSink) -> tuple[int, int] | None:
    epochs = fill_epochs(sink)
    return (epochs[0], epochs[-1]) if epochs else None


def fill_manifests(sink: FilesSink, since: int = 0) -> list[Manifest]:
    """The fill's manifests of epoch ``since`` or later, oldest first."""
    found = []
    for epoch in fill_epochs(sink):
        if epoch < since:
            continue
        data = sink.place.read(fill_manifest_name(epoch))
        if data is None:
            raise SinkUnavailable(f"sink {sink.name}: the fill's manifest of epoch {epoch} "
                                  "vanished")
        found.append(Manifest.from_json(data))
    return found


def fill(sink: FilesSink, epoch: int, rows: pa.Table, first: int) -> SinkCommit:
    """``epoch``'s files and its fill manifest, once (see the module). The sink's ``check``
    first: this pipeline owns the directory and every row has a place."""
    sink.check(epoch, rows)
    held = fill_epochs(sink)
    if epoch in held:
        return SinkCommit(sink.name, Outcome.ALREADY_COMMITTED, rows.num_rows)
    last = held[-1] if held else NO_EPOCH
    check_fill_order(sink.name, last, epoch, first)
    try:
        return _publish(sink, epoch, rows, first)
    except OSError as error:  # a full disk, a lost mount, a store error: retry
        if epoch in fill_epochs(sink):  # another fill committed it meanwhile
            return SinkCommit(sink.name, Outcome.ALREADY_COMMITTED, rows.num_rows, raced=True)
        raise SinkUnavailable(f"sink {sink.name}: {error}") from None


def _publish(sink: FilesSink, epoch: int, rows: pa.Table, first: int) -> SinkCommit:
    """Data files first, each whole; then the fill's manifest, created only if absent."""
    form = sink.options.format
    manifest = sink.write_data(epoch, PLAN, rows)
    doc = json.loads(manifest.to_json(sink.config.name, sink.output, form))
    text = json.dumps({**doc, "fill_first": first}, indent=1).encode()
    if not sink.place.create(fill_manifest_name(epoch), text):
        return SinkCommit(sink.name, Outcome.ALREADY_COMMITTED, rows.num_rows, raced=True)
    sink._clean(epoch, manifest)  # what a crashed fill of the epoch left
    sink._write_committed()
    return SinkCommit(sink.name, Outcome.COMMITTED, rows.num_rows)


def drop_after(sink: FilesSink, epoch: int) -> None:
    """Remove the filled epochs after ``epoch``, newest first, each manifest before its files
    (a crash midway leaves a shorter run; the rewind's rerun goes on)."""
    for later in sorted((e for e in fill_epochs(sink) if e > epoch), reverse=True):
        data = sink.place.read(fill_manifest_name(later))
        listed = Manifest.from_json(data).files if data is not None else {}
        sink.place.delete(fill_manifest_name(later))
        for relative in listed:
            sink.place.delete(relative)
        sink._clean(later, None)
