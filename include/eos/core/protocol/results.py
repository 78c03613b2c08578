"""What a protocol step reports: ``precommit``'s ``StageResult`` (it crosses processes as JSON)
and ``commit``'s ``CommitResult``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from eos.core.outcomes import Outcome
from eos.core.sink import SinkCommit


@dataclass
class StageResult:
    """What ``precommit`` did. It crosses processes (spark-submit writes it as JSON for the
    task that launched it: ``to_payload`` / ``from_payload``)."""

    epoch: int
    plan_hash: str
    outcome: Outcome
    counts: dict[str, int] = field(default_factory=dict)
    watermark_ms: int | None = None
    staging_version: int | None = None
    written_by: str | None = None  # "driver" or "executors": who wrote the staged files
    timings_ms: dict[str, float] = field(default_factory=dict)
    line: str = ""  # the phase line precommit logged (what ``eos precommit`` prints)

    def to_payload(self) -> dict[str, Any]:
        return {**asdict(self), "outcome": self.outcome.value}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> StageResult:
        return cls(**{**payload, "outcome": Outcome(payload["outcome"])})


@dataclass
class CommitResult:
    """What ``commit`` did: each sink's write (or that it held N already) and the checkpoint."""

    epoch: int
    plan_hash: str
    outcome: Outcome
    sinks: list[SinkCommit] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # by output
    checkpoint_version: int | None = None
    pruned_before: int | None = None
    maintenance: dict[str, Any] | None = None
    duration_ms: float = 0.0
    delta_versions: dict[str, int | None] = field(default_factory=dict)  # Delta sinks written

    @property
    def versions(self) -> dict[str, int | None]:
        """The version each sink wrote in this attempt (sinks it skipped are absent)."""
        return {s.sink: s.version for s in self.sinks if s.outcome is Outcome.COMMITTED}

    @property
    def skipped(self) -> list[str]:
        """Sinks that already held the epoch (an earlier attempt, or a race lost)."""
        return [s.sink for s in self.sinks if s.outcome is Outcome.ALREADY_COMMITTED]

    def summary(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "plan_hash": self.plan_hash, "outcome": str(self.outcome),
                "rows": self.rows, "sinks": {s.sink: sink_summary(s) for s in self.sinks},
                "checkpoint_version": self.checkpoint_version}


def sink_summary(done: SinkCommit, since: int = 0) -> dict[str, Any]:
    """One sink's part of an epoch's record; ``since``, the epoch it joined at, only when
    it joined a running pipeline (a sink there from the start holds every epoch)."""
    return {"outcome": str(done.outcome), "version": done.version, "rows": done.rows,
            "raced": done.raced, **({"since": since} if since else {})}

