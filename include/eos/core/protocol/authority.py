"""What every step of the protocol asks before it acts: the checkpoint table (the authority on
what is committed), each sink's own committed epoch, and whether a rewind is half done."""

from __future__ import annotations

from typing import Any

from eos.core import checkpoints, epochlog
from eos.core.checkpoints import Checkpoint
from eos.core.config import PipelineConfig
from eos.core.errors import ProtocolViolation
from eos.core.layout import tables_for
from eos.core.outcomes import NO_EPOCH
from eos.core.outputs import output_schema
from eos.core.rewind import check_none_unfinished
from eos.core.sink import Sink, sinks_for
from eos.core.tables import OpenTables

STAGE_ATTEMPTS = 5  # fenced staging writes re-decided after a concurrent fenced step


def checkpointed_epoch(config: PipelineConfig) -> int:
    """The last committed epoch of the pipeline, -1 if none: the checkpoint table's answer."""
    return checkpoints.last_checkpointed(tables_for(config), config.app_id)


def join_sinks(sinks: list[Sink], last: Checkpoint | None) -> list[Sink]:
    """``sinks`` with each one's ``joined_at`` set from the last checkpoint: a sink it lists
    keeps the epoch it joined at (``since``, 0 when not recorded: there from the start); a sink
    it does not list was added to the config since, and joins at the next epoch. Every
    checkpoint records each sink's ``since``, so the audit and the view know where it starts.
    A checkpoint that lists no sink at all (none configured) makes every sink join after it."""
    for sink in sinks:
        listed = last.sinks.get(sink.name) if last is not None else None
        if last is None:
            sink.joined_at = 0
        elif listed is not None:
            sink.joined_at = int(listed.get("since", 0)) if isinstance(listed, dict) else 0
        else:
            sink.joined_at = last.epoch + 1
    return sinks


def left_sinks(sinks: list[Sink], last: Checkpoint | None) -> list[str]:
    """The sinks the last checkpoint lists that the config no longer has: removed, recorded
    with the next checkpoint (they hold nothing after it)."""
    configured = {sink.name for sink in sinks}
    return sorted(set(last.sinks) - configured) if last is not None else []


_UNREAD: Any = object()  # ``check_sinks`` reads the last checkpoint itself


def check_sinks(config: PipelineConfig, committed: int, read_only: bool = False,
                last: Checkpoint | None = _UNREAD) -> dict[str, int]:
    """Each sink's own committed epoch, which must be ``committed`` or ``committed + 1``.

    A sink may be one ahead after a crash between sinks, or between the last sink and the
    checkpoint: the next commit attempt completes that epoch. Anything else (a sink behind the
    checkpoint, or two ahead) means the sink was changed outside the protocol, or its marker
    was lost: stop, do not guess.

    ``begin`` first creates what a sink needs (a table, a topic) and fences earlier writers
    where the sink can; ``read_only`` (``eos status``, the UI) does neither, so looking at a
    pipeline never disturbs a commit in flight.
    """
    held = {}
    if last is _UNREAD:  # a caller that read it already (``begin``) passes it: one read fewer
        last = checkpoints.last(tables_for(config), committed) if committed != NO_EPOCH else None
    sinks = join_sinks(sinks_for(config), last)
    for sink in sinks:
        if not read_only:
            sink.prepare(output_schema(config, sink.output))
        held[sink.name] = sink.committed_epoch(fence=not read_only)
    for sink in sinks:
        epoch = held[sink.name]
        if epoch in (committed, committed + 1):
            continue
        if epoch == NO_EPOCH and sink.joined_at == committed + 1:
            continue  # added to the config: it joins at the next epoch
        if sink.joined_at == committed + 1:
            raise ProtocolViolation(
                f"sink {sink.name} was added to the pipeline after epoch {committed} but "
                f"already holds epoch {epoch} of it (a sink removed earlier and added back?): "
                "a sink joins a running pipeline empty. Give it a new place (table, topic, "
                "path), or empty it, and run again")
        raise ProtocolViolation(
            f"sink {sink.name} holds epoch {epoch} but the last checkpoint is epoch "
            f"{committed}, and its first epoch is {sink.joined_at}; a sink may only be one "
            "epoch ahead of the checkpoint. Inspect the sink (was it rewritten, truncated, or "
            "its marker lost?) before going on"
        )
    return held


def check_no_rewind(tables: OpenTables) -> None:
    """No step of an epoch starts while a rewind is half done (its tables disagree). The epoch
    log is read at its latest version: it must be at least as new as the staging snapshot."""
    tables.refresh(tables.epochs)
    check_none_unfinished(epochlog.rewind_rows(tables))

