"""The lines of a Kafka sink's epochs across rewinds (``eos.core.rewind``), as its markers keep
them.

Published records cannot be withdrawn, so a rewind to N writes only a marker saying N (carrying
the rewind's id). The replay then publishes epochs N+1.. again, each record headed
``eos-lineage: <rewind id>``: a consumer sees the rewind marker, then the replayed epochs a
second time, and can tell the two lines apart by that header. Every marker carries the list of
rewinds so far, so the current line survives the marker topic's compaction (it keeps the last
marker only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The longest lineage header value a record can carry: a rewind's id (``eos.core.rewind`` draws
# 12 hex digits of a uuid4), bounded by a whole uuid's 32 (what a record size check counts).
LONGEST_LINEAGE = 32


def line_of(marker: dict[str, Any] | None) -> dict[str, Any]:
    """What the next marker inherits from ``marker``: the current lineage (the last rewind's
    id) and every rewind so far ([id, to epoch], oldest first). Nothing before any rewind."""
    if not marker or not marker.get("rewinds"):
        return {}
    return {"lineage": marker["lineage"], "rewinds": marker["rewinds"]}


def rewind_fields(last: dict[str, Any] | None, epoch: int, rewind_id: str) -> dict[str, Any]:
    """The marker of a rewind to ``epoch`` after the marker ``last``: it names the rewind,
    starts its lineage, and adds it to the rewinds so far."""
    rewinds = [*line_of(last).get("rewinds", []), [rewind_id, epoch]]
    return {"epoch": epoch, "rewind": rewind_id, "lineage": rewind_id, "rewinds": rewinds}


def owner(rewinds: list[list[Any]], epoch: int) -> str | None:
    """The lineage that published ``epoch`` last: the latest rewind to before ``epoch`` (its
    replay republished it), or the original line (no header) if no rewind went below it."""
    found = None
    for rewind_id, to_epoch in rewinds:
        if epoch > to_epoch:
            found = rewind_id
    return found


def current_line(last: dict[str, Any] | None) -> Callable[[int, str | None], bool]:
    """Whether records of (epoch, lineage header) are on the line the marker ``last`` ends:
    epochs up to it, each of the lineage that published it last (a rewind supersedes the
    records before it)."""
    if last is None:
        return lambda epoch, lineage: False
    top, rewinds = int(last["epoch"]), line_of(last).get("rewinds", [])
    return lambda epoch, lineage: epoch <= top and lineage == owner(rewinds, epoch)


def committed_epochs(markers: list[dict[str, Any]]) -> list[int]:
    """The epochs of ``markers`` (oldest first) in order; a rewind marker of N drops the ones
    after N."""
    epochs: list[int] = []
    for marker in markers:
        if marker.get("rewind"):
            epochs = [e for e in epochs if e <= marker["epoch"]]
        else:
            epochs.append(marker["epoch"])
    return epochs
