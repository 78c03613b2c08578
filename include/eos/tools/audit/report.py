"""What the audit found: the kinds of problem it reports, and the report ``eos verify`` prints
and records."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class ProblemKind(StrEnum):
    MISSING = "missing row"  # a record's effect the sink does not hold: lost
    DUPLICATED = "duplicated row"  # an expected row held more than once: doubled
    UNEXPECTED = "unexpected row"  # a row no record explains
    WRONG_VALUES = "wrong values"  # a window whose aggregates disagree with its records
    COMMITS = "commits"  # a sink's commits are not exactly one per epoch
    CHECKPOINT = "checkpoint"  # the checkpoint table disagrees with the recomputation
    OFFSETS = "offsets"  # committed ranges are not contiguous
    NOTHING = "nothing committed"
    # The independent reader (eos.tools.audit.independent.compare) read something else than the
    # pipeline's
    # own library did: one of them is wrong, so nothing the audit concluded can be trusted.
    READERS_DISAGREE = "readers disagree"
    SECOND_READER = "independent reader failed"  # it could not read what the audit read
    # Every epoch asked for read records the source no longer holds (retention): nothing to
    # vouch for, which is not a pass.
    NOT_AUDITABLE = "not auditable"


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    where: str
    detail: str
    count: int = 1

    def __str__(self) -> str:
        return f"{self.where}: {self.kind} {self.detail}" + (
            f" (x{self.count})" if self.count != 1 else "")



@dataclass
class AuditReport:
    pipeline: str
    committed_epoch: int
    records: int = 0
    problems: list[Problem] = field(default_factory=list)
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # sink -> (expected, got)
    # sink -> why it was not audited (its type cannot be read back, a shared table)
    unaudited: dict[str, str] = field(default_factory=dict)
    # What was read twice (the source, a sink) -> the independent reader and rows it read;
    # what was read once only -> why (no independent reader for it here).
    second_readings: dict[str, tuple[str, int]] = field(default_factory=dict)
    single_reader: dict[str, str] = field(default_factory=dict)
    # Ranges of the source that no epoch read, acknowledged as lost by an operator
    # (``eos.core.loss``): part of every verdict, so an OK never hides them.
    acknowledged_lost: list[str] = field(default_factory=list)
    first_epoch: int = 0  # the first epoch compared (``eos verify --since/--last``)
    # Committed ranges the source no longer holds (retention deleted them after the epoch
    # read them): named here, their epochs (and windows that may hold their records) left out.
    not_auditable: list[str] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)  # sink -> rows left out for them
    filled: dict[str, tuple[int, int]] = field(default_factory=dict)  # sink -> eos fill's epochs

    @property
    def ok(self) -> bool:
        return not self.problems

    def count(self, *kinds: ProblemKind) -> int:
        return sum(p.count for p in self.problems if p.kind in kinds)

    @property
    def disagreeing(self) -> int:
        """Rows (or records) the two readers of one sink or of the source do not agree on."""
        return self.count(ProblemKind.READERS_DISAGREE)

    @property
    def lost(self) -> int:
        return self.count(ProblemKind.MISSING, ProblemKind.WRONG_VALUES)

    @property
    def doubled(self) -> int:
        return self.count(ProblemKind.DUPLICATED, ProblemKind.UNEXPECTED)

    def render(self) -> str:
        lines = [f"audit of pipeline '{self.pipeline}': epochs {self.first_epoch}.."
                 f"{self.committed_epoch}, {self.records} records re-read from Kafka"]
        for sink, (want, got) in self.counts.items():
            lines.append(f"  {sink:<28} expected {want:>8}  committed {got:>8}")
        for sink, why in self.unaudited.items():
            lines.append(f"  {sink:<28} not audited: {why}")
        for sink, (first, last) in self.filled.items():
            lines.append(f"  {sink:<28} filled with epochs {first}..{last} (eos fill)")
        for what, (reader, rows) in self.second_readings.items():
            lines.append(f"  {what:<28} read again by {reader}: {rows} rows")
        for what, why in self.single_reader.items():
            lines.append(f"  {what:<28} read by one reader only: {why}")
        for lost in self.acknowledged_lost:
            lines.append(f"  acknowledged loss {lost}")
        for gone in self.not_auditable:
            lines.append(f"  not auditable: {gone}")
        for sink, rows in self.left_out.items():
            lines.append(f"  {sink:<28} {rows} rows not audited: they depend on deleted records")
        if self.ok and self.not_auditable:
            lines.append(f"verdict: OK WHERE AUDITABLE - every record the source still holds "
                         f"counted exactly once in every sink; {len(self.not_auditable)} "
                         "committed range(s) were deleted by retention and could not be "
                         "audited (listed above)")
        elif self.ok and self.acknowledged_lost:
            lines.append(f"verdict: OK WITH ACKNOWLEDGED LOSS - every record of the committed "
                         f"ranges counted exactly once in every sink; "
                         f"{len(self.acknowledged_lost)} range(s) of the source were never read "
                         "and were acknowledged as lost (listed above)")
        elif self.ok:
            lines.append("verdict: OK - every record counted exactly once in every sink")
        else:
            lines.append(f"verdict: FAILED - {len(self.problems)} problem(s)")
            lines.extend(f"  - {p}" for p in self.problems[:50])
        return "\n".join(lines)
