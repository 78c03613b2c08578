"""What every step of the protocol asks before it acts: the checkpoint table (the authority on
what is committed), each sink's own committed epoch, and whether a rewind is half done."""

from __future__ import annotations

from eos.core import checkpoints, epochlog
from eos.core.config import PipelineConfig
from eos.core.errors import ProtocolViolation
from eos.core.layout import tables_for
from eos.core.outputs import output_schema
from eos.core.rewind import check_none_unfinished
from eos.core.sink import sinks_for
from eos.core.tables import OpenTables

STAGE_ATTEMPTS = 5  # fenced staging writes re-decided after a concurrent fenced step


def checkpointed_epoch(config: PipelineConfig) -> int:
    """The last committed epoch of the pipeline, -1 if none: the checkpoint table's answer."""
    return checkpoints.last_checkpointed(tables_for(config), config.app_id)


def check_sinks(config: PipelineConfig, committed: int, read_only: bool = False
                ) -> dict[str, int]:
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
    for sink in sinks_for(config):
        if not read_only:
            sink.prepare(output_schema(config, sink.output))
        held[sink.name] = sink.committed_epoch(fence=not read_only)
    for name, epoch in held.items():
        if epoch not in (committed, committed + 1):
            raise ProtocolViolation(
                f"sink {name} holds epoch {epoch} but the last checkpoint is epoch {committed}; "
                "a sink may only be one epoch ahead of the checkpoint. Inspect the sink (was it "
                "rewritten, truncated, or its marker lost?) before going on"
            )
    return held


def check_no_rewind(tables: OpenTables) -> None:
    """No step of an epoch starts while a rewind is half done (its tables disagree). The epoch
    log is read at its latest version: it must be at least as new as the staging snapshot."""
    tables.refresh(tables.epochs)
    check_none_unfinished(epochlog.rewind_rows(tables))

