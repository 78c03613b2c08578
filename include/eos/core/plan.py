"""Plans: epoch N's offset ranges, decided before anything reads data (``protocol.begin``).

A plan is the checkpoint barrier: epoch N reads ``[from, until)`` per partition and epoch N+1
starts exactly where N ends (the ``until`` recorded in N's checkpoint). A rerun must read the
same records, so a logged plan is reused, never recomputed.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from eos.core import epochlog
from eos.core.config import PipelineConfig
from eos.core.config.kafka_source import topic_pattern
from eos.core.config.positions import StartPosition
from eos.core.errors import (
    DataLoss,
    EosError,
    MoveRefused,
    ProtocolViolation,
    SourceChanged,
    StartRefused,
    TopicVanished,
)
from eos.core.identity import SourceIdentity
from eos.core.kafka import client_settings, input_watermarks, offsets_for_time, redact
from eos.core.layout import Tables
from eos.core.phaselog import log_phase
from eos.core.topics import Marks, Offsets, TopicPartition, topics_of

if TYPE_CHECKING:
    from eos.core.checkpoints import Checkpoint

K = TypeVar("K", int, TopicPartition)


@dataclass(frozen=True)
class PartitionRange:
    partition: int
    start: int  # "from", inclusive
    until: int  # exclusive
    # The topic read; in a plan of one topic the JSON leaves it out (the plan's ``topic``), so
    # plans logged before pipelines read several topics keep their form and hash.
    topic: str = ""

    @property
    def records(self) -> int:
        return self.until - self.start

    @property
    def key(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class Plan:
    pipeline: str
    # The plan's topic when it reads one ("" when several: each range names its own).
    topic: str
    epoch: int
    ranges: tuple[PartitionRange, ...]
    clock_ms: int | None = None  # wall clock read once at plan time; only with an idle timeout
    # The cluster ``topic`` was planned on (``eos.core.identity``); None: not recorded (a plan
    # logged before identities were). Left out of the JSON when None, so such a plan keeps
    # the hash it was logged and staged with.
    cluster_id: str | None = None

    def __post_init__(self) -> None:
        """A range without a topic is of the plan's one topic."""
        if self.topic and any(not r.topic for r in self.ranges):
            object.__setattr__(self, "ranges", tuple(
                r if r.topic else replace(r, topic=self.topic) for r in self.ranges))

    @classmethod
    def of(cls, pipeline: str, epoch: int, ranges: list[PartitionRange],
           clock_ms: int | None, cluster: str | None, topics: list[str]) -> Plan:
        """A plan of ``ranges`` over ``topics`` (those of its ranges, or the one topic of a
        source without partitions to read)."""
        one = topics[0] if len(topics) == 1 else ""
        return cls(pipeline, one, epoch, tuple(ranges), clock_ms, cluster)

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics the plan reads."""
        return tuple(topics_of(r.key for r in self.ranges)) or (
            (self.topic,) if self.topic else ())

    @property
    def source(self) -> SourceIdentity:
        """What this plan's offsets belong to."""
        return SourceIdentity(self.topics, self.cluster_id)

    @property
    def until(self) -> Offsets:
        """Where the next epoch starts: the checkpoint's offsets."""
        return {r.key: r.until for r in self.ranges}

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
        if self.topic:
            for r in data["ranges"]:
                del r["topic"]
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Plan:
        data = json.loads(text)
        data["ranges"] = tuple(PartitionRange(**r) for r in data["ranges"])
        return cls(**data)

    def describe_ranges(self, sep: str = " ") -> str:
        """``p0:[0,500) p1:[0,480)`` (``a/p0:[0,500)`` when the plan reads several topics); a
        phase line joins them with ``,`` (one ``k=v`` token)."""
        prefix = (lambda r: "") if self.topic else (lambda r: f"{r.topic}/")
        return sep.join(f"{prefix(r)}p{r.partition}:[{r.start},{r.until})" for r in self.ranges)


def cap_fairly(available: dict[K, int], budget: int) -> dict[K, int]:
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
    """What the planner asks of the input (``new_plan``): its topic-partitions and their offsets
    now. Kafka in production (``KafkaSource``); another implementation plans without a broker
    (the fast tests' in-process source)."""

    def watermarks(self, config: PipelineConfig) -> Marks:
        """(log start, high watermark) per partition of every topic of the pipeline's input
        (``kafka.topic``/``topics``, or every topic ``kafka.pattern`` matches), asked now."""
        ...

    def describe(self, config: PipelineConfig) -> dict[str, Any]:
        """What the ``begin.watermarks`` log line names as where the watermarks came from."""
        ...

    def cluster(self, config: PipelineConfig) -> str | None:
        """The id of the cluster the watermarks are of, asked now (``eos.core.identity``)."""
        ...

    def offsets_at(self, config: PipelineConfig, ms: int, topics: list[str]) -> Offsets:
        """Per partition of ``topics``, the first offset of a record timestamped ``>= ms``
        (else the high watermark): where ``kafka.start`` or ``eos move-source --from
        timestamp:<t>`` starts."""
        ...


@dataclass(frozen=True)
class KafkaSource:
    """The pipeline's topics on its Kafka cluster (``eos.core.kafka``): the default source.
    ``settings``: client settings already resolved (None: resolved from the config per call).
    The last ``watermarks`` answer's cluster id is what ``cluster`` reports (one metadata
    request answers both)."""

    settings: dict[str, Any] | None = None
    _cluster: dict[str, str | None] = field(default_factory=dict, compare=False)

    def _settings(self, config: PipelineConfig) -> dict[str, Any]:
        return self.settings if self.settings is not None else client_settings(config.kafka.client)

    def watermarks(self, config: PipelineConfig) -> Marks:
        pattern = None if config.kafka.pattern is None else topic_pattern(config.kafka.pattern)
        cluster, marks = input_watermarks(self._settings(config), config.kafka.named_topics,
                                          pattern)
        self._cluster["id"] = cluster
        return marks

    def describe(self, config: PipelineConfig) -> dict[str, Any]:
        return {"kafka": redact(self._settings(config))}

    def cluster(self, config: PipelineConfig) -> str | None:
        if "id" not in self._cluster:
            self.watermarks(config)
        return self._cluster["id"]

    def offsets_at(self, config: PipelineConfig, ms: int, topics: list[str]) -> Offsets:
        return {TopicPartition(t, p): o for t in topics
                for p, o in offsets_for_time(self._settings(config), t, ms).items()}


def first_offset(config: PipelineConfig, committed: Offsets, low: int, high: int,
                 partition: int = 0) -> int:
    """Where a partition the checkpoint does not know yet starts, as far as can be told without
    the broker (``eos status``): ``kafka.start`` only for a brand-new pipeline (no checkpoint:
    ``committed`` is empty). A partition or topic that appears after the first epoch
    (partitions were added, a topic joined the list or matched the pattern) starts at its log
    start, as Spark's Kafka source does: every record it holds was produced after the pipeline
    started, and starting at its end would skip them silently."""
    if committed:
        return low
    return config.kafka.start_position.first_guess(partition, low, high)


def position_starts(position: StartPosition, config: PipelineConfig, source: Source,
                    marks: Marks, refused: type[EosError] = MoveRefused) -> Offsets:
    """The start offset of every partition of the source for ``position`` (``marks``: log
    start and high watermark per partition); ``refused`` for offsets the log does not hold."""
    if position.kind == "earliest":
        return {tp: low for tp, (low, _) in marks.items()}
    if position.kind == "latest":
        return {tp: high for tp, (_, high) in marks.items()}
    if position.kind == "timestamp":
        assert position.timestamp_ms is not None
        found = source.offsets_at(config, position.timestamp_ms, topics_of(marks))
        return {tp: min(max(found.get(tp, high), low), high) for tp, (low, high) in marks.items()}
    return given_offsets(position, config, marks, refused)


def given_offsets(position: StartPosition, config: PipelineConfig, marks: Marks,
                  refused: type[EosError]) -> Offsets:
    """``offsets:<p>=<o>,...``: one offset per partition of the one topic read."""
    topics = topics_of(marks)
    if len(topics) != 1:
        raise refused(f"offsets:<p>=<o>,... names partitions of one topic, and "
                      f"{config.kafka.describe()} is {len(topics)} topics ({', '.join(topics)}):"
                      " start from earliest, latest or a timestamp instead")
    topic = topics[0]
    partitions = {tp.partition: m for tp, m in marks.items()}
    if set(position.offsets) != set(partitions):
        raise refused(
            f"offsets given for partitions {sorted(position.offsets)}, and topic "
            f"'{topic}' has partitions {sorted(partitions)}: give one offset for "
            "each partition")
    outside = [f"partition {p}: {o} not in [{partitions[p][0]}, {partitions[p][1]}]"
               for p, o in sorted(position.offsets.items())
               if not partitions[p][0] <= o <= partitions[p][1]]
    if outside:
        raise refused(f"offsets outside topic '{topic}''s log (log start, "
                      f"high watermark): {'; '.join(outside)}")
    return {TopicPartition(topic, p): o for p, o in position.offsets.items()}


def default_source(config: PipelineConfig, source: Source | None) -> Source:
    """``source``, else the pipeline's topics (its settings resolved once, for every request
    and the log line)."""
    return source if source is not None else KafkaSource(client_settings(config.kafka.client))


def check_same_source(config: PipelineConfig, committed: SourceIdentity | None,
                      configured: SourceIdentity) -> None:
    """Refuse to plan ``configured`` from offsets of ``committed`` (the last checkpoint's
    source; None: not recorded, a checkpoint written before identities were: adopted) unless
    it continues it (``SourceIdentity.continues``). A committed topic the broker no longer
    has, which the config still reads (it matches the pattern), is ``TopicVanished``: records
    after its committed offsets may never have been read, and eos does not skip them."""
    if committed is None or configured.continues(committed):
        return
    gone = [t for t in committed.topics if t not in configured.topics]
    pattern = config.kafka.pattern
    if committed.same_cluster(configured) and pattern is not None and gone and all(
            topic_pattern(pattern).match(t) for t in gone):
        raise TopicVanished(
            f"pipeline '{config.name}': topic(s) {', '.join(gone)} matched by '{pattern}' "
            "hold committed offsets and are no longer on the broker; records after those "
            "offsets may never have been read, so no epoch is planned. Recreate the topic, or "
            f"move the pipeline (`eos move-source --pipeline {config.name} --from ...`)")
    if topics_left(config, committed, configured):
        return
    raise SourceChanged(
        f"pipeline '{config.name}': its committed offsets are of {committed.describe()}, and "
        f"its config now reads {configured.describe()}; offsets of one topic or cluster mean "
        "nothing in another, so no epoch is planned. To move the pipeline to the configured "
        f"source, run `eos move-source --pipeline {config.name} --from earliest|latest|"
        "timestamp:<ms or ISO-8601>|offsets:<p>=<o>,...`; or restore the config's old kafka section"
    )


def topics_left(config: PipelineConfig, committed: SourceIdentity,
                configured: SourceIdentity) -> bool:
    """Whether ``configured`` continues ``committed`` with topics taken out of the config on
    purpose: the same cluster, at least one committed topic still read, and every topic no
    longer read also no longer named (``kafka.topics``) nor matched (``kafka.pattern``). The
    other topics go on from their committed offsets; the ones that left keep theirs in every
    checkpoint after (``carried_offsets``), so a topic put back resumes where it stopped.
    Replacing every topic is a move of the source (``eos move-source``), not a leave."""
    if not committed.same_cluster(configured):
        return False
    kept = set(committed.topics) & set(configured.topics)
    gone = set(committed.topics) - set(configured.topics)
    named = set(config.kafka.named_topics or [])
    pattern = topic_pattern(config.kafka.pattern) if config.kafka.pattern else None
    still_read = {t for t in gone if t in named or (pattern is not None and pattern.match(t))}
    return bool(kept) and bool(gone) and not still_read


def carried_offsets(committed: Offsets, since: SourceIdentity | None, plan: Plan) -> Offsets:
    """The committed offsets of topics ``plan`` does not read (they left the config,
    ``topics_left``): carried into its checkpoint, so that a topic put back later resumes
    where it stopped instead of at its log start (which would read its records twice). Only
    while the plan goes on in the source they are of (``since``: the same cluster, a topic in
    common): after a move to other topics or another cluster they mean nothing."""
    if since is None or not since.same_cluster(plan.source) \
            or not set(since.topics) & set(plan.topics):
        return {}
    read = set(plan.topics)
    return {tp: offset for tp, offset in committed.items() if tp.topic not in read}


def committed_source(tables: Tables, last: Checkpoint | None) -> SourceIdentity | None:
    """The source the last checkpoint's (``last``: a ``Checkpoint`` or None) offsets are of:
    the one it records, else (a checkpoint written before identities were) the topic its
    epoch's logged plan read, cluster not recorded; None before the first checkpoint."""
    if last is None or last.source is not None:
        return None if last is None else last.source
    row = epochlog.first_plan_row(tables, last.epoch)
    return None if row is None else SourceIdentity(Plan.from_json(row["plan"]).topics)


def new_plan(config: PipelineConfig, epoch: int, committed: Offsets,
             source: Source | None = None, *, since: SourceIdentity | None = None) -> Plan:
    """Ranges from the committed offsets (``until`` per topic-partition in the checkpoint of
    epoch N-1; empty before the first epoch; a partition or topic not in it starts at its log
    start, ``first_offset``) to the high watermarks, capped by ``max_records``.
    The watermarks are ``source``'s (default: the topics', ``KafkaSource``); ``since``, the
    source the committed offsets are of, must go on in the one ``source`` answers for
    (``check_same_source``); with it, the pipeline is not new even when no offsets were
    committed (a pattern that matched nothing yet): ``kafka.start`` is not applied again."""
    source = default_source(config, source)
    marks = source.watermarks(config)
    identity = SourceIdentity(tuple(topics_of(marks) or (config.kafka.named_topics or [])),
                              source.cluster(config))
    check_same_source(config, since, identity)
    if committed or since is not None:  # a partition or topic added since: at its log start
        starts = {tp: committed.get(tp, low) for tp, (low, _) in marks.items()}
    else:  # a brand-new pipeline: where ``kafka.start`` says, decided once, in this plan
        starts = position_starts(config.kafka.start_position, config, source, marks,
                                 refused=StartRefused)
    return plan_from(config, epoch, starts, marks, identity, source)


def plan_from(config: PipelineConfig, epoch: int, starts: Offsets, marks: Marks,
              identity: SourceIdentity, source: Source) -> Plan:
    """The plan of ``epoch`` reading ``identity``'s partitions from ``starts`` to the high
    watermarks ``marks`` (asked of ``source``), capped by ``max_records``."""
    for tp, (low, high) in marks.items():
        start = starts[tp]
        if start < low:
            raise DataLoss(
                f"topic '{tp.topic}' partition {tp.partition}: epoch {epoch} must read from "
                f"offset {start} but the log now starts at {low} (retention or truncation "
                f"removed {low - start} records); refusing to skip them. If they are gone for "
                f"good, acknowledge the loss: `eos acknowledge-loss --pipeline {config.name}` "
                "(recorded, and reported by eos verify)"
            )
        if start > high:
            raise DataLoss(
                f"topic '{tp.topic}' partition {tp.partition}: committed offset {start} is "
                f"beyond the high watermark {high}; the partition was truncated or recreated. "
                f"To go on from its log start, acknowledge the loss: `eos acknowledge-loss "
                f"--pipeline {config.name}`"
            )
    available = {tp: marks[tp][1] - starts[tp] for tp in marks}
    taken = cap_fairly(available, config.epoch.max_records)
    ranges = [PartitionRange(tp.partition, starts[tp], starts[tp] + taken[tp], tp.topic)
              for tp in sorted(marks)]
    clock = (int(time.time() * 1000)
             if config.window is not None and config.window.idle_timeout is not None else None)
    log_phase("begin.watermarks", epoch=epoch, **source.describe(config),
              watermarks=_by_topic(marks))
    return Plan.of(config.name, epoch, ranges, clock, identity.cluster_id, list(identity.topics))


def _by_topic(marks: Marks) -> dict[str, dict[int, tuple[int, int]]] | dict[int, tuple[int, int]]:
    """The watermarks as a log line shows them: by partition for one topic, else by topic."""
    if len(topics_of(marks)) <= 1:
        return {tp.partition: m for tp, m in marks.items()}
    nested: dict[str, dict[int, tuple[int, int]]] = {}
    for tp, m in sorted(marks.items()):
        nested.setdefault(tp.topic, {})[tp.partition] = m
    return nested


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
            "offsets": [asdict(r) for r in plan.ranges]}
