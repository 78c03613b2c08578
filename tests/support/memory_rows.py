"""The in-memory stand-ins of ``support.memory`` for a pipeline without windows: its sections
(``STATELESS_IN_MEMORY``) and ``RowStager``, the compute half of its precommit in pyarrow."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from eos.compute.writers import counts_by_kind, write_collected, write_table
from eos.core.checkpoints import Checkpoint
from eos.core.config import PipelineConfig
from eos.core.plan import Plan
from eos.core.staging import WATERMARK, StagedFiles, attempt_dir
from eos.core.tables import ROW_TOPIC, OpenTables, row_column, staging_schema

from support.memory import IN_MEMORY

NEG_INF = -(2**63)  # the watermark a pipeline without windows stages (it never has one)

# A stateless pipeline on memory sinks: rows -> a, quarantine -> c.
STATELESS_IN_MEMORY: dict[str, Any] = {
    **IN_MEMORY, "group_by": None, "window": None, "aggregations": None,
    "event": {"fields": {"key": "string"}},
    "select": {"key": "CAST(upper(key) AS string)", "at": "CAST(kafka_offset * 1000 AS bigint)"},
    "sinks": {"rows": [{"memory": "a"}], "quarantine": [{"memory": "c"}]},
}


@dataclass
class RowStager:
    """``eos.core.staging.Stager`` for a pipeline without windows, in pyarrow: the files
    ``eos.compute.precommit.write.write_epoch`` writes for one, from a trivial computation of
    the plan alone (no state): the record at an offset ending in 9 is quarantined, every other
    one is a row (key ``p<partition>``, ``at`` its offset in seconds), timestamped its offset
    in seconds. ``key`` and ``timestamp`` (of partition and offset) give other keys and Kafka
    timestamps."""

    staged: list[int] = field(default_factory=list)
    key: Callable[[int, int], str] | None = None
    timestamp: Callable[[int, int], int] | None = None

    def stage(self, config: PipelineConfig, tables: OpenTables, plan: Plan,
              previous: Checkpoint | None, timings: dict[str, float]) -> StagedFiles:
        self.staged.append(plan.epoch)
        schema = pa.schema([f for f in staging_schema(config) if f.name != "epoch"])
        common = {"plan_hash": plan.hash}
        rows: list[dict[str, Any]] = []
        for r in plan.ranges:
            for offset in range(r.start, r.until):
                at = self.timestamp(r.partition, offset) if self.timestamp else offset * 1000
                where = {**common, "topic": r.topic, "partition": r.partition, "offset": offset,
                         "kafka_timestamp_ms": at}
                if offset % 10 == 9:
                    rows.append({**where, "kind": "quarantine", "reason": "offset ends in 9",
                                 "raw_value": b"x"})
                else:
                    rows.append({**where, "kind": "output", ROW_TOPIC: plan.topic,
                                 row_column("key"): (self.key(r.partition, offset) if self.key
                                                     else f"P{r.partition}"),
                                 row_column("at"): offset * 1000})
        protocol = [{**common, "kind": "offsets", "topic": r.topic, "partition": r.partition,
                     "offset": r.start, "until": r.until} for r in plan.ranges]
        protocol.append({**common, "kind": WATERMARK, "watermark_ms": NEG_INF,
                         "max_event_ms": None, "filtered": 0, "state_base": plan.epoch})
        directory = attempt_dir(plan.epoch)
        files = write_collected(pa.Table.from_pylist(rows, schema=schema), tables.staging,
                                directory, schema)
        files.append(write_table(pa.Table.from_pylist(protocol, schema=schema), tables.staging,
                                 directory, "protocol", schema))
        counts = {k: 0 for k in ("output", "state", "late", "quarantine")}
        counts.update(counts_by_kind(files))
        counts.update({"offsets": len(plan.ranges), "filtered": 0})
        timings["aggregate"] = 0.0
        return StagedFiles(files, counts, NEG_INF, "driver")
