"""The checkpoint table: **the** authority on which epochs are committed (docs/design.md,
"The authority").

One row per committed epoch (epoch, plan hash, ``until`` per partition, watermark, row counts,
sink versions, time), appended as the last step of ``commit`` with ``txn(app id, N)`` through the
same fenced path as the Delta sinks. Epoch N is committed iff this table's ``txn`` version for the
pipeline is ``>= N``. Every phase, ``eos status``, the audit and the chaos run ask this module;
nothing else derives "is N committed".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from eos.core import epochlog
from eos.core.config import PipelineConfig
from eos.core.delta import FencedWrite, fenced_append, read_existing, read_table, scan, txn_version
from eos.core.identity import SourceIdentity
from eos.core.layout import Tables
from eos.core.tables import CHECKPOINTS_SCHEMA, handle
from eos.core.topics import Offsets, offsets_from_json, offsets_to_json

# The key of a checkpoint's details holding its epoch's precommit facts, copied from staging.
PRECOMMIT_FACTS = "precommit"
# The key of a precommit row's facts holding the schema view the epoch was computed with: the
# commit records it as the checkpoint's ``config`` (``eos.core.evolution``).
STAGED_VIEW = "view"

# A checkpoint's watermark before any event, and always without windows: minus infinity.
NO_WATERMARK = -(2**63)


@dataclass(frozen=True)
class Checkpoint:
    epoch: int
    plan_hash: str
    until: Offsets  # (topic, partition) -> where the next epoch starts
    watermark_ms: int | None
    rows: dict[str, int] = field(default_factory=dict)
    sinks: dict[str, Any] = field(default_factory=dict)
    committed_at: datetime | None = None
    config: dict[str, Any] = field(default_factory=dict)
    # What ``until`` is of: the topic and cluster N's plan read (None: not recorded, a row
    # written before identities were; the next epoch's plan records the configured source).
    source: SourceIdentity | None = None
    # Who committed N and how (``eos.core.protocol.committing``): the run, the task try, the
    # duration, each sink's outcome; and who staged it (``PRECOMMIT_FACTS``). None in rows
    # written before checkpoints carried it.
    details: dict[str, Any] | None = None

    def to_row(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "plan_hash": self.plan_hash,
            "until": offsets_to_json(self.until),
            "watermark_ms": self.watermark_ms,
            "rows": json.dumps(self.rows, sort_keys=True),
            "sinks": json.dumps(self.sinks, sort_keys=True, default=str),
            "committed_at": self.committed_at or datetime.now(UTC),
            "config": json.dumps(self.config, sort_keys=True),
            "source": json.dumps(self.source.to_dict(), sort_keys=True) if self.source else None,
            "details": (json.dumps(self.details, sort_keys=True, default=str)
                        if self.details is not None else None),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any], topic: str | None = None) -> Checkpoint:
        """A row as written; ``until`` of a row written when pipelines read one topic
        (``{"partition": offset}``) is keyed by the topic its ``source`` records, else by
        ``topic`` (its epoch's plan's: ``_from_row``)."""
        source = (SourceIdentity.from_dict(json.loads(row["source"])) if row.get("source")
                  else None)
        if source is not None and len(source.topics) == 1:
            topic = source.topics[0]
        return cls(
            epoch=row["epoch"], plan_hash=row["plan_hash"],
            until=offsets_from_json(row["until"], topic),
            watermark_ms=row["watermark_ms"], rows=json.loads(row["rows"]),
            sinks=json.loads(row["sinks"]), committed_at=row["committed_at"],
            config=json.loads(row.get("config") or "{}"), source=source,
            details=json.loads(row["details"]) if row.get("details") else None,
        )

    def log_rows(self) -> list[dict[str, Any]]:
        """N's ``precommitted`` and ``committed`` entries in the shape of epoch-log rows
        (``epochlog.carried_row``), read from this checkpoint: the commit records both here (the
        precommit's as staged with N's rows, ``eos.core.staging.PRECOMMIT``), in the commit it
        makes anyway, not in log appends of their own. Empty for a row written before
        checkpoints carried them (its log holds them)."""
        if self.details is None:
            return []
        commit = {k: v for k, v in self.details.items() if k != PRECOMMIT_FACTS}
        staged = self.details.get(PRECOMMIT_FACTS)
        return [*([epochlog.carried_row(self.epoch, epochlog.PRECOMMITTED, self.plan_hash,
                                        staged)] if staged else []),
                epochlog.carried_row(self.epoch, epochlog.COMMITTED, self.plan_hash, commit,
                                     self.committed_at)]


def _from_row(tables: Tables, row: dict[str, Any]) -> Checkpoint:
    """``Checkpoint.from_row``; a row that records no source (written before identities were)
    keys its offsets by the topic its epoch's logged plan read."""
    if row.get("source"):
        return Checkpoint.from_row(row)
    plan = epochlog.first_plan_row(tables, row["epoch"])
    return Checkpoint.from_row(row, None if plan is None else json.loads(plan["plan"])["topic"])


def last_checkpointed(tables: Tables, app_id: str) -> int:
    """The last committed epoch of the pipeline (-1 if none): the checkpoint ``txn`` version,
    as of the phase's snapshot of the table (``OpenTables``: opened once per phase)."""
    return txn_version(tables.checkpoints, app_id, handle(tables, tables.checkpoints))


def append(tables: Tables, app_id: str, checkpoint: Checkpoint) -> FencedWrite:
    """Record epoch N as committed, exactly once even when two commit attempts race.

    Fenced through the phase's snapshot of the table, the one ``last_checkpointed`` answered
    from: if another attempt checkpointed N since, this append is refused (see
    ``fenced_append``)."""
    data = pa.Table.from_pylist([checkpoint.to_row()], schema=CHECKPOINTS_SCHEMA)
    return fenced_append(tables.checkpoints, data, app_id, checkpoint.epoch,
                         fault_point="checkpoint.before_write",
                         snapshot=handle(tables, tables.checkpoints), op="checkpoint")


def read_all(tables: Tables) -> list[Checkpoint]:
    """Every checkpoint row, by epoch (the audit checks there is exactly one per epoch)."""
    rows = read_table(tables.checkpoints).to_pylist()
    return sorted((_from_row(tables, r) for r in rows), key=lambda c: c.epoch)


def read_since(tables: Tables, epoch: int) -> list[Checkpoint]:
    """Checkpoints of epochs ``>= epoch``, by epoch (none if the table does not exist yet)."""
    read = read_existing(tables.checkpoints, filters=[("epoch", ">=", int(epoch))])
    rows = [] if read is None else read.to_pylist()
    return sorted((_from_row(tables, r) for r in rows), key=lambda c: c.epoch)


def read(tables: Tables, epoch: int) -> Checkpoint | None:
    table = handle(tables, tables.checkpoints)
    rows = [] if table is None else scan(table, filters=[("epoch", "=", int(epoch))]).to_pylist()
    return _from_row(tables, rows[0]) if rows else None


def last(tables: Tables, committed: int) -> Checkpoint | None:
    """The checkpoint of the last committed epoch (None before the first): what the next epoch
    starts from (``until``), what it was computed with (``config``), its plan hash. A phase
    reads it once and passes it on."""
    if committed < 0:
        return None
    checkpoint = read(tables, committed)
    if checkpoint is None:
        from eos.core.errors import ProtocolViolation

        raise ProtocolViolation(
            f"the checkpoint table's txn says epoch {committed} is committed but holds no row "
            "for it"
        )
    return checkpoint


def _changes(before: Any, after: Any, where: str = "") -> list[str]:
    """Dotted paths where two JSON-like values differ, with both values."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [change for key in sorted(set(before) | set(after))
                for change in _changes(before.get(key), after.get(key),
                                       f"{where}.{key}" if where else str(key))]
    return [] if before == after else [f"{where or 'config'}: {before!r} -> {after!r}"]


def schema_changes(checkpoint: Checkpoint | None, config: PipelineConfig) -> list[str]:
    """What changed in the config's schema view since ``checkpoint``'s epoch was computed."""
    if checkpoint is None or not checkpoint.config:
        return []
    from eos.core.evolution import comparable

    # The filter and the select's expressions may change (``eos.core.evolution``).
    before, after = comparable(checkpoint.config, config.schema_view(), config)
    return _changes(before, after)


def check_schema_view(checkpoint: Checkpoint | None, config: PipelineConfig) -> None:
    """Refuse to go on when what committed rows mean (the config's schema view: parsing,
    grouping, windows, aggregations) changed since the last committed epoch (``checkpoint``):
    its open windows' state and every committed row were computed under the old one."""
    changes = schema_changes(checkpoint, config)
    if checkpoint is not None and changes:
        committed = checkpoint.epoch
        from eos.core.errors import ConfigError

        if config.stateless:
            from eos.core.evolution import refusal

            raise ConfigError(refusal(config, changes, committed))
        raise ConfigError(
            f"pipeline '{config.name}' committed epochs 0..{committed} with another schema; "
            f"changed: {'; '.join(changes)}. Its state and committed rows mean the old config: "
            "give the changed pipeline a new name (and tables), or replay it from the start "
            "(eos rewind --to-epoch -1)"
        )
