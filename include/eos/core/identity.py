"""What a pipeline's offsets belong to: topics on one Kafka cluster (docs/operating.md).

An offset means nothing without its topic and cluster: offset 750 of partition 0 of topic A is
not offset 750 of topic B, nor of a topic of the same name on another cluster. Offsets are keyed
by topic and partition (``eos.core.topics``); a plan records the cluster and topics it was
planned on, a checkpoint the source its ``until`` offsets are of. ``begin`` goes on when the
configured source continues the committed one (the same cluster, every committed topic still
read: topics may join, as partitions do) and refuses otherwise (``SourceChanged``);
``eos move-source`` is the explicit way to move (``eos.core.move``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SourceIdentity:
    """Topics on a cluster. ``cluster_id`` None: not recorded (a plan or checkpoint written
    before identities were, or a cluster that reports none); only the topics are compared
    then."""

    topics: tuple[str, ...]
    cluster_id: str | None = None

    @classmethod
    def of(cls, topic: str, cluster_id: str | None = None) -> SourceIdentity:
        """One topic on a cluster."""
        return cls((topic,), cluster_id)

    def same_cluster(self, other: SourceIdentity) -> bool:
        """The same cluster, where both are known."""
        return self.cluster_id is None or other.cluster_id is None or (
            self.cluster_id == other.cluster_id)

    def same_as(self, other: SourceIdentity) -> bool:
        """Whether ``other`` is this source: the same topics on the same cluster."""
        return set(self.topics) == set(other.topics) and self.same_cluster(other)

    def continues(self, earlier: SourceIdentity) -> bool:
        """Whether offsets of ``earlier`` go on in this source: the same cluster, every topic
        of ``earlier`` still read (topics may have joined; they start at their log start)."""
        return set(earlier.topics) <= set(self.topics) and self.same_cluster(earlier)

    def describe(self) -> str:
        """``topic 'a' on cluster 'xyz'`` (for messages and log lines)."""
        cluster = f"cluster '{self.cluster_id}'" if self.cluster_id else "an unrecorded cluster"
        names = ", ".join(f"'{t}'" for t in self.topics) or "(none)"
        return f"{'topic' if len(self.topics) == 1 else 'topics'} {names} on {cluster}"

    def to_dict(self) -> dict[str, Any]:
        """``{"topic": t}`` for one topic (the form written before pipelines read several),
        else ``{"topics": [...]}``; with ``cluster_id``."""
        if len(self.topics) == 1:
            return {"topic": self.topics[0], "cluster_id": self.cluster_id}
        return {"topics": list(self.topics), "cluster_id": self.cluster_id}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SourceIdentity:
        topics = data["topics"] if "topics" in data else [data["topic"]]
        return cls(tuple(str(t) for t in topics), data.get("cluster_id"))
