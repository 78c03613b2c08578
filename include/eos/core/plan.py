"""Plans: epoch N's offset ranges, decided before anything reads data (``protocol.begin``).

A plan is the checkpoint barrier: epoch N reads ``[from, until)`` per partition and epoch N+1
starts exactly where N ends (the ``until`` recorded in N's checkpoint). A rerun must read the
same records, so a logged plan is reused, never recomputed.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from eos.core import epochlog
from eos.core.config import PipelineConfig
from eos.core.config.positions import StartPosition
from eos.core.errors import (
    DataLoss,
    EosError,
    MoveRefused,
    ProtocolViolation,
    SourceChanged,
    StartRefused,
)
from eos.core.identity import SourceIdentity
from eos.core.kafka import (
    client_settings,
    cluster_id,
    offsets_for_time,
    redact,
    topic_watermarks,
)
from eos.core.layout import Tables
from eos.core.phaselog import log_phase

if TYPE_CHECKING:
    from eos.core.checkpoints import Checkpoint


@dataclass(frozen=True)
class PartitionRange:
    partition: int
    start: int  # "from", inclusive
    until: int  # exclusive

    @property
    def records(self) -> int:
        return self.until - self.start


@dataclass(frozen=True)
class Plan:
    pipeline: str
    topic: str
    epoch: int
    ranges: tuple[PartitionRange, ...]
    clock_ms: int | None = None  # wall clock read once at plan time; only with an idle timeout
    # The cluster ``topic`` was planned on (``eos.core.identity``); None: not recorded (a plan
    # logged before identities were). Left out of the JSON when None, so such a plan keeps
    # the hash it was logged and staged with.
    cluster_id: str | None = None

    @property
    def source(self) -> SourceIdentity:
        """What this plan's offsets belong to."""
        return SourceIdentity(self.topic, self.cluster_id)

    @property
    def hash(self) -> str:
        """Identifies what the epoch reads; staged rows carry it so stale writes are detectable."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)

    def to_json(self) -> str:
        data = asdict(self)
        if data["cluster_id"] is None:
            del data["cluster_id"]
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Plan:
        data = json.loads(text)
        data["ranges"] = tuple(PartitionRange(**r) for r in data["ranges"])
        return cls(**data)

    def describe_ranges(self, sep: str = " ") -> str:
        """``p0:[0,500) p1:[0,480)``; a phase line joins them with ``,`` (one ``k=v`` token)."""
        return sep.join(f"p{r.partition}:[{r.start},{r.until})" for r in self.ranges)


def cap_fairly(available: dict[int, int], budget: int) -> dict[int, int]:
    """Split ``budget`` records over partitions by water-filling: no partition starves another."""
    taken = dict.fromkeys(available, 0)
    active = sorted(p for p, n in available.items() if n > 0)
    remaining = budget
    while remaining > 0 and active:
        share = max(1, remaining // len(active))
        for p in list(active):
            take = min(share, available[p] - taken[p], remaining)
            taken[p] += take
            remaining -= take
            if taken[p] == available[p]:
                active.remove(p)
            if remaining == 0:
                break
    return taken


class Source(Protocol):
    """What the planner asks of the input (``new_plan``): its partitions and their offsets now.
    Kafka in production (``KafkaSource``); another implementation plans without a broker (the
    fast tests' in-process source)."""

    def watermarks(self, config: PipelineConfig) -> dict[int, tuple[int, int]]:
        """(log start, high watermark) per partition of the pipeline's input, asked now."""
        ...

    def describe(self, config: PipelineConfig) -> dict[str, Any]:
        """What the ``begin.watermarks`` log line names as where the watermarks came from."""
        ...

    def identity(self, config: PipelineConfig) -> SourceIdentity:
        """The topic and cluster the watermarks are of, asked now (``eos.core.identity``)."""
        ...

    def offsets_at(self, config: PipelineConfig, ms: int) -> dict[int, int]:
        """Per partition, the first offset of a record timestamped ``>= ms`` (else the high
        watermark): where ``kafka.start`` or ``eos move-source --from timestamp:<t>``
        starts."""
        ...


@dataclass(frozen=True)
class KafkaSource:
    """The pipeline's topic on its Kafka cluster (``eos.core.kafka``): the default source.
    ``settings``: client settings already resolved (None: resolved from the config per call)."""

    settings: dict[str, Any] | None = None

    def _settings(self, config: PipelineConfig) -> dict[str, Any]:
        return self.settings if self.settings is not None else client_settings(config.kafka.client)

    def watermarks(self, config: PipelineConfig) -> dict[int, tuple[int, int]]:
        return topic_watermarks(self._settings(config), config.kafka.topic)

    def describe(self, config: PipelineConfig) -> dict[str, Any]:
        return {"kafka": redact(self._settings(config))}

    def identity(self, config: PipelineConfig) -> SourceIdentity:
        topic = config.kafka.topic
        return SourceIdentity(topic, cluster_id(self._settings(config), topic))

    def offsets_at(self, config: PipelineConfig, ms: int) -> dict[int, int]:
        return offsets_for_time(self._settings(config), config.kafka.topic, ms)


def first_offset(config: PipelineConfig, committed: dict[int, int], low: int, high: int,
                 partition: int = 0) -> int:
    """Where a partition the checkpoint does not know yet starts, as far as can be told without
    the broker (``eos status``): ``kafka.start`` only for a brand-new pipeline (no checkpoint:
    ``committed`` is empty). A partition that appears after the first epoch (partitions were
    added to the topic) starts at its log start, as Spark's Kafka source does: every record it
    holds was produced after the pipeline started, and starting at its end would skip them
    silently."""
    if committed:
        return low
    return config.kafka.start_position.first_guess(partition, low, high)


def position_starts(position: StartPosition, config: PipelineConfig, source: Source,
                    marks: dict[int, tuple[int, int]],
                    refused: type[EosError] = MoveRefused) -> dict[int, int]:
    """The start offset of every partition of the source for ``position`` (``marks``: log
    start and high watermark per partition); ``refused`` for offsets the log does not hold."""
    if position.kind == "earliest":
        return {p: low for p, (low, _) in marks.items()}
    if position.kind == "latest":
        return {p: high for p, (_, high) in marks.items()}
    if position.kind == "timestamp":
        assert position.timestamp_ms is not None
        found = source.offsets_at(config, position.timestamp_ms)
        return {p: min(max(found.get(p, high), low), high) for p, (low, high) in marks.items()}
    if set(position.offsets) != set(marks):
        raise refused(
            f"offsets given for partitions {sorted(position.offsets)}, and topic "
            f"'{config.kafka.topic}' has partitions {sorted(marks)}: give one offset for "
            "each partition")
    outside = [f"partition {p}: {o} not in [{marks[p][0]}, {marks[p][1]}]"
               for p, o in sorted(position.offsets.items())
               if not marks[p][0] <= o <= marks[p][1]]
    if outside:
        raise refused(f"offsets outside topic '{config.kafka.topic}''s log (log start, "
                      f"high watermark): {'; '.join(outside)}")
    return dict(position.offsets)


def default_source(config: PipelineConfig, source: Source | None) -> Source:
    """``source``, else the pipeline's topic (its settings resolved once, for every request
    and the log line)."""
    return source if source is not None else KafkaSource(client_settings(config.kafka.client))


def check_same_source(config: PipelineConfig, committed: SourceIdentity | None,
                      configured: SourceIdentity) -> None:
    """Refuse to plan ``configured`` from offsets of ``committed`` (the last checkpoint's
    source; None: not recorded, a checkpoint written before identities were: adopted)."""
    if committed is None or committed.same_as(configured):
        return
    raise SourceChanged(
        f"pipeline '{config.name}': its committed offsets are of {committed.describe()}, and "
        f"its config now reads {configured.describe()}; offsets of one topic or cluster mean "
        "nothing in another, so no epoch is planned. To move the pipeline to the configured "
        f"source, run `eos move-source --pipeline {config.name} --from earliest|latest|"
        "timestamp:<ms or ISO-8601>|offsets:<p>=<o>,...`; or restore the config's old kafka section"
    )


def committed_source(tables: Tables, last: Checkpoint | None) -> SourceIdentity | None:
    """The source the last checkpoint's (``last``: a ``Checkpoint`` or None) offsets are of:
    the one it records, else (a checkpoint written before identities were) the topic its
    epoch's logged plan read, cluster not recorded; None before the first checkpoint."""
    if last is None or last.source is not None:
        return None if last is None else last.source
    row = epochlog.first_plan_row(tables, last.epoch)
    return None if row is None else SourceIdentity(Plan.from_json(row["plan"]).topic)


def new_plan(config: PipelineConfig, epoch: int, committed: dict[int, int],
             source: Source | None = None, *, since: SourceIdentity | None = None) -> Plan:
    """Ranges from the committed offsets (``until`` per partition in the checkpoint of epoch
    N-1; empty before the first epoch; a partition not in it starts at ``first_offset``) to
    the high watermarks, capped by ``max_records``.
    The watermarks are ``source``'s (default: the topic's, ``KafkaSource``); ``since``, the
    source the committed offsets are of, must be the one ``source`` names
    (``check_same_source``)."""
    source = default_source(config, source)
    identity = source.identity(config)
    check_same_source(config, since, identity)
    marks = source.watermarks(config)
    if committed:  # a partition added since starts at its log start (``first_offset``)
        starts = {p: committed.get(p, low) for p, (low, _) in marks.items()}
    else:  # a brand-new pipeline: where ``kafka.start`` says, decided once, in this plan
        starts = position_starts(config.kafka.start_position, config, source, marks,
                                 refused=StartRefused)
    return plan_from(config, epoch, starts, marks, identity, source)


def plan_from(config: PipelineConfig, epoch: int, starts: dict[int, int],
              marks: dict[int, tuple[int, int]], identity: SourceIdentity,
              source: Source) -> Plan:
    """The plan of ``epoch`` reading ``identity``'s partitions from ``starts`` to the high
    watermarks ``marks`` (asked of ``source``), capped by ``max_records``."""
    topic = identity.topic
    for partition, (low, high) in marks.items():
        start = starts[partition]
        if start < low:
            raise DataLoss(
                f"topic '{topic}' partition {partition}: epoch {epoch} must read from offset "
                f"{start} but the log now starts at {low} (retention or truncation removed "
                f"{low - start} records); refusing to skip them"
            )
        if start > high:
            raise DataLoss(
                f"topic '{topic}' partition {partition}: committed offset {start} is beyond the "
                f"high watermark {high}; the partition was truncated or recreated"
            )
    available = {p: marks[p][1] - starts[p] for p in marks}
    taken = cap_fairly(available, config.epoch.max_records)
    ranges = tuple(PartitionRange(p, starts[p], starts[p] + taken[p]) for p in sorted(marks))
    clock = (int(time.time() * 1000)
             if config.window is not None and config.window.idle_timeout is not None else None)
    log_phase("begin.watermarks", epoch=epoch, **source.describe(config), watermarks=marks)
    return Plan(config.name, topic, epoch, ranges, clock, identity.cluster_id)


def plan_of(tables: Tables, epoch: int) -> Plan:
    return plan_and_move(tables, epoch)[0]


def plan_and_move(tables: Tables, epoch: int) -> tuple[Plan, dict[str, Any] | None]:
    """``epoch``'s logged plan and, when it is the first on a new source, the move its row
    carries (``eos.core.move``)."""
    row = epochlog.first_plan_row(tables, epoch)
    if row is None:
        raise ProtocolViolation(f"epoch {epoch} has no plan in the epoch log; run begin first")
    return Plan.from_json(row["plan"]), epochlog.move_of(row)


def plan_summary(plan: Plan) -> dict[str, Any]:
    """What ``begin`` hands the rest of its DAG run: ``ranges`` for people (the log line),
    ``offsets`` for programs (the asset events' extra: topic, partition, [start, until))."""
    return {"epoch": plan.epoch, "plan_hash": plan.hash, "records": plan.records,
            "ranges": plan.describe_ranges(),
            "offsets": [{"topic": plan.topic, **asdict(r)} for r in plan.ranges]}
