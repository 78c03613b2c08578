"""In-process stand-ins for everything the protocol core talks to besides its own Delta tables,
each written from scratch against the contract it stands in for (no Spark, no broker):

- ``MemorySink``, ``RewindableMemorySink``, ``KeptMemorySink`` (``{memory: NAME}``, ...) and
  their ``STORES``, ``at_once``: the sink author's kit's (``eos.testing.memory``), re-exported.
- ``MemoryStager``: the compute half of precommit (``eos.core.staging.Stager``) in pyarrow:
  the files ``eos.compute.precommit.write.write_epoch`` writes, from a trivial deterministic
  computation.
- ``MemorySource``: the planner's source (``eos.core.plan.Source``), offsets and cluster id set
  by the test.
- ``IN_MEMORY``: the sections of a pipeline on these stand-ins (``support.pipelines``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from eos.compute.writers import counts_by_kind, write_collected, write_table
from eos.core.aggregations import output_column, state_column
from eos.core.checkpoints import Checkpoint
from eos.core.config import PipelineConfig
from eos.core.config.kafka_source import topic_pattern
from eos.core.errors import ProtocolViolation, TopicMissing
from eos.core.plan import Plan
from eos.core.staging import WATERMARK, StagedFiles, attempt_dir
from eos.core.tables import OpenTables, group_column, read_epoch, staging_schema
from eos.core.topics import Marks, Offsets, TopicPartition, matching
from eos.testing.memory import (
    MEMORY_SINKS,
    REWINDABLE_SINKS,
    STORES,
    KeptMemorySink,
    MemorySink,
    RewindableMemorySink,
    Store,
    at_once,
    store,
)

__all__ = ["IN_MEMORY", "KEY", "MEMORY_SINKS", "REWINDABLE_SINKS", "SIZE_MS", "STORES",
           "KeptMemorySink", "MemorySink", "MemorySource", "MemoryStager",
           "RewindableMemorySink", "Store", "at_once", "log_plan", "log_rows", "run_epoch",
           "staged_rows", "store"]

# -- the source ---------------------------------------------------------------------------------


@dataclass
class MemorySource:
    """``eos.core.plan.Source`` whose offsets the test sets: partition -> (log start, high) of
    the pipeline's topic (``marks``; ``topic``, default the config's first named topic), and
    of any other topics (``others``: topic -> partition -> marks). A config's ``topics`` read
    those it names (one missing: ``TopicMissing``), its ``pattern`` those whose names match."""

    marks: dict[int, tuple[int, int]] = field(default_factory=lambda: {0: (0, 25), 1: (0, 15)})
    asked: int = 0
    cluster_id: str | None = "memory-cluster"  # the cluster id it reports (None: none)
    lock: threading.Lock = field(default_factory=threading.Lock)
    others: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    topic: str | None = None

    def produce(self, partition: int, records: int, topic: str | None = None) -> None:
        with self.lock:
            marks = self.marks if topic is None else self.others[topic]
            low, high = marks[partition]
            marks[partition] = (low, high + records)

    def truncate(self, partition: int, low: int) -> None:
        """Retention removed the records below ``low``."""
        with self.lock:
            self.marks[partition] = (low, max(low, self.marks[partition][1]))

    def _all(self, config: PipelineConfig) -> dict[str, dict[int, tuple[int, int]]]:
        main = self.topic or (config.kafka.named_topics or ["in-memory"])[0]
        return {main: self.marks, **self.others}

    def watermarks(self, config: PipelineConfig) -> Marks:
        with self.lock:
            self.asked += 1
            present = self._all(config)
            named = config.kafka.named_topics
            if named is None:
                assert config.kafka.pattern is not None
                named = matching(topic_pattern(config.kafka.pattern), list(present))
            missing = [t for t in named if t not in present]
            if missing:
                raise TopicMissing(f"topic '{missing[0]}' does not exist (memory source)")
            return {TopicPartition(t, p): m for t in named for p, m in present[t].items()}

    def describe(self, config: PipelineConfig) -> dict[str, Any]:
        return {"source": "memory"}

    def cluster(self, config: PipelineConfig) -> str | None:
        return self.cluster_id

    def offsets_at(self, config: PipelineConfig, ms: int, topics: list[str]) -> Offsets:
        """The record at offset o is timestamped o seconds (``MemoryStager``)."""
        with self.lock:
            present = self._all(config)
            return {TopicPartition(t, p): min(max(-(-ms // 1000), low), high)
                    for t in topics for p, (low, high) in present[t].items()}


# -- the stager ---------------------------------------------------------------------------------

SIZE_MS = 10_000  # the pipeline's tumbling window (IN_MEMORY)
NEVER_ENDS = 2**62  # the running total's window: always after the watermark, so always open
KEY, TOTAL = "k", "total"


def record(partition: int, offset: int) -> str:
    """What the stager makes of the record at (partition, offset): deterministic by design."""
    if offset % 10 == 9:
        return "quarantine"
    if offset % 10 == 8:
        return "late"
    return "counted"


@dataclass
class MemoryStager:
    """``eos.core.staging.Stager`` in pyarrow, writing what
    ``eos.compute.precommit.write.write_epoch`` writes (one attempt directory, one file per kind,
    the driver's offsets and watermark row; nothing committed) from a trivial computation, a
    pure function of the plan and N-1's state:

    - a record whose offset ends in 9 is quarantined, one ending in 8 is late, others count;
    - one ``output`` row: window [N * 10 s, (N + 1) * 10 s) of key ``k`` with the count;
    - one ``state`` row carrying the running total (N-1's state row's, plus N's count): it is
      read from staging by N-1's checkpointed plan hash, as Spark resumes;
    - ``offsets`` rows per range, the ``watermark`` row: wm(N) = (N + 1) * 10 s.

    ``during(plan)``, when set, runs after the files are written and before precommit decides
    whether to commit them: what happened while "Spark" computed (a zombie's rival, a rewind).
    """

    during: Callable[[Plan], None] | None = None
    staged: list[int] = field(default_factory=list)  # epochs this stager computed
    attempts: list[str] = field(default_factory=list)  # their directories' names

    def stage(self, config: PipelineConfig, tables: OpenTables, plan: Plan,
              previous: Checkpoint | None, timings: dict[str, float]) -> StagedFiles:
        self.staged.append(plan.epoch)
        schema = pa.schema([f for f in staging_schema(config) if f.name != "epoch"])
        key, n_state, n_out = group_column("key"), state_column("n", "n"), output_column("n")
        common = {"plan_hash": plan.hash}
        rows: list[dict[str, Any]] = []
        counted, max_event = 0, None
        for r in plan.ranges:
            for offset in range(r.start, r.until):
                what, at = record(r.partition, offset), offset * 1000
                max_event = at if max_event is None else max(max_event, at)
                where = {"topic": r.topic, "partition": r.partition, "offset": offset,
                         "kafka_timestamp_ms": at}
                if what == "quarantine":
                    rows.append({**common, **where, "kind": "quarantine",
                                 "reason": "offset ends in 9",
                                 "raw_value": f"p{r.partition}o{offset}".encode()})
                elif what == "late":
                    rows.append({**common, **where, "kind": "late", key: KEY, "event_ms": at,
                                 "window_start_ms": 0, "window_end_ms": SIZE_MS})
                else:
                    counted += 1
        start = plan.epoch * SIZE_MS
        rows.append({**common, "kind": "output", key: KEY, "window_start_ms": start,
                     "window_end_ms": start + SIZE_MS, n_out: counted})
        kind, value, base = self.open_row(config, tables, plan, previous, counted)
        rows.append({**common, "kind": kind, key: TOTAL, "window_start_ms": 0,
                     "window_end_ms": NEVER_ENDS, n_state: value})
        watermark = (plan.epoch + 1) * SIZE_MS
        protocol = [{**common, "kind": "offsets", "topic": r.topic, "partition": r.partition,
                     "offset": r.start, "until": r.until} for r in plan.ranges]
        protocol.append({**common, "kind": WATERMARK, "watermark_ms": watermark,
                         "max_event_ms": max_event, "filtered": 0, "state_base": base})
        directory = attempt_dir(plan.epoch)
        self.attempts.append(directory.rsplit("/", 1)[-1])
        files = write_collected(pa.Table.from_pylist(rows, schema=schema), tables.staging,
                                directory, schema)
        files.append(write_table(pa.Table.from_pylist(protocol, schema=schema), tables.staging,
                                 directory, "protocol", schema))
        counts = {k: 0 for k in ("output", "state", "late", "quarantine")}
        counts.update(counts_by_kind(files))
        counts.update({"offsets": len(plan.ranges), "filtered": 0})
        timings["aggregate"] = 0.0
        if self.during is not None:
            self.during(plan)
        return StagedFiles(files, counts, watermark, "driver")

    def open_row(self, config: PipelineConfig, tables: OpenTables, plan: Plan,
                 previous: Checkpoint | None, counted: int) -> tuple[str, int, int]:
        """The one open window N stages: (kind, value, N's state base). A snapshot every
        epoch here: the running total."""
        return "state", self.total(tables, previous) + counted, plan.epoch

    @staticmethod
    def total(tables: OpenTables, previous: Checkpoint | None) -> int:
        """N-1's running total, from its state row staged under its checkpointed plan hash."""
        if previous is None:
            return 0
        state = read_epoch(tables, tables.staging, previous.epoch,
                           filters=[("kind", "=", "state"), ("plan_hash", "=", previous.plan_hash)])
        if state is None or state.num_rows != 1:
            raise ProtocolViolation(f"the state of committed epoch {previous.epoch} is missing "
                                    "from staging")
        return state[state_column("n", "n")][0].as_py()


# -- the pipeline shape --------------------------------------------------------------------------

# The in-memory shape (``support.pipelines.make_pipeline(directory, base=IN_MEMORY)``): memory
# sinks, one key, ``count(*)``, a topic nobody contacts (plans come from a ``MemorySource``).
IN_MEMORY: dict[str, Any] = {
    "kafka": {"topic": "in-memory"},  # never contacted: plans come from a MemorySource
    "event": {"time": {"field": "ts", "format": "epoch_ms"}, "fields": {"key": "string"}},
    "group_by": ["key"],
    "window": {"type": "tumbling", "size": "10s"},
    "aggregations": {"n": "count(*)"},
    "epoch": {"max_records": 1000, "staging_retention": 2},
    "sinks": MEMORY_SINKS,
}


def run_epoch(config: PipelineConfig, source: MemorySource, stager: MemoryStager | None = None,
              run_id: str | None = None) -> Plan:
    """One epoch through the library's one loop (``eos.compute.epochs.run_epoch``, which imports
    no Spark when given a stager), planned from ``source`` and staged in-process."""
    from eos.compute.epochs import run_epoch as one_epoch

    return one_epoch(config, run_id, stager=stager or MemoryStager(), source=source).plan


def log_plan(config: PipelineConfig, epoch: int) -> Plan:
    """Log a plan for ``epoch`` directly (what a log holds after a rewind moved the checkpoint
    back past it): the scenarios where a plan exists for an epoch that is not next."""
    from eos.core import epochlog
    from eos.core.plan import PartitionRange
    from eos.core.tables import ensure_tables

    plan = Plan(config.name, config.kafka.topic, epoch, (PartitionRange(0, 0, 5),))
    with ensure_tables(config) as tables:
        assert epochlog.log_plan(tables, config.app_id, epoch, plan.to_json(), plan.hash, None,
                                 None)
    return plan


def staged_rows(config: PipelineConfig, epoch: int, plan_hash: str) -> list[dict[str, Any]] | None:
    """Epoch N's complete staged rows for ``plan_hash`` in a stable order, or None. Without
    its precommit row (who staged it, when, how long each step took): every other row is a
    pure function of the plan and N-1's state, and attempts compare equal on them."""
    from eos.core.staging import PRECOMMIT, staged_epoch
    from eos.core.tables import ensure_tables

    with ensure_tables(config) as tables:
        rows = staged_epoch(tables, epoch, plan_hash)
    if rows is None:
        return None
    return sorted((r for r in rows.to_pylist() if r["kind"] != PRECOMMIT), key=repr)


def log_rows(config: PipelineConfig, epoch: int | None = None,
             phase: str | None = None) -> list[dict[str, Any]]:
    """The epoch log's rows (of one epoch, of one phase), with those precommit and commit
    record in their own commits, in log order."""
    from eos.core.layout import tables_for
    from eos.core.pipeline_status import epoch_rows

    return [r for r in epoch_rows(tables_for(config), epoch)
            if phase is None or r["phase"] == phase]
