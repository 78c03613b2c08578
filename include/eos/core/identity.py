"""What a pipeline's offsets belong to: one topic on one Kafka cluster (docs/operating.md).

An offset means nothing without its topic and cluster: offset 750 of partition 0 of topic A is
not offset 750 of topic B, nor of a topic of the same name on another cluster. A plan records
the source it was planned on, a checkpoint the source its ``until`` offsets are of, and
``begin`` refuses to plan from offsets of another source than the configured one
(``SourceChanged``); ``eos move-source`` is the explicit way to move (``eos.core.move``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SourceIdentity:
    """A topic on a cluster. ``cluster_id`` None: not recorded (a plan or checkpoint written
    before identities were, or a cluster that reports none); only the topics are compared
    then."""

    topic: str
    cluster_id: str | None = None

    def same_as(self, other: SourceIdentity) -> bool:
        """Whether offsets of ``other`` are offsets of this source: the same topic, and the
        same cluster where both are known."""
        if self.topic != other.topic:
            return False
        return self.cluster_id is None or other.cluster_id is None or (
            self.cluster_id == other.cluster_id)

    def describe(self) -> str:
        """``topic 'a' on cluster 'xyz'`` (for messages and log lines)."""
        cluster = f"cluster '{self.cluster_id}'" if self.cluster_id else "an unrecorded cluster"
        return f"topic '{self.topic}' on {cluster}"

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "cluster_id": self.cluster_id}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SourceIdentity:
        return cls(str(data["topic"]), data.get("cluster_id"))
