"""Values a sink writes into a path, and the records whose values no path can hold.

A Delta table partitioned by a column names a directory after each value (``col=value``,
escaped). A value too long for a name or a path, or one the table's readers would take for
something else (an empty string reads back as a null), cannot be written, and a sink finding
that at commit time could only stop the pipeline. So such a record is decided at precommit,
before the seal, like a record that does not parse: it is quarantined with the reason, and the
other records of the epoch go on. The decision is a function of the record and the pipeline's
config alone (``PathRule``): the compute applies it on Spark (``eos.compute.precommit``), the
audit applies it again to its own recomputation, and both name the same reason.

A sink states its rules through ``SupportsPathRules``: one ``PathRule`` per string column it
names paths with, a bound on that column's escaped bytes computed so that any combination of
values within the bounds fits (the path's budget shared between its string columns; numbers,
dates and times at their widest). A sink's ``check`` before the seal stays the last guard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eos.core.config import PipelineConfig

__all__ = ["PATH_RULES", "PathRule", "escaped_bytes", "path_problem_of", "rules_for",
           "rules_of_view"]

#: The key of an epoch's schema view holding the path rules it was computed with: a sink added
#: or moved changes them between epochs, and the audit applies each epoch's own.
PATH_RULES = "path_rules"


@dataclass(frozen=True)
class PathRule:
    """A sink names a path with ``column``'s value: at most ``max_bytes`` once escaped (each
    character of ``kept`` as it is, every other UTF-8 byte as ``%XX``); ``empty_is_null``: an
    empty string reads back as a null, so it cannot be stored as itself."""

    sink: str
    column: str
    max_bytes: int
    kept: frozenset[str]
    empty_is_null: bool

    @property
    def too_long(self) -> str:
        """The reason a quarantined record carries when the value is too long (fixed text:
        the compute and the audit must name the same one)."""
        return (f"sink {self.sink} partitions by {self.column!r}, whose value would take more "
                f"than the {self.max_bytes} bytes its directory's name may hold once escaped")

    @property
    def empty(self) -> str:
        """The reason for an empty string in a column whose readers take it for a null."""
        return (f"sink {self.sink} partitions by {self.column!r}, whose value is an empty "
                "string: readers of the table would take it for a null")

    def to_view(self) -> dict[str, Any]:
        """The rule as an epoch's schema view records it (``PipelineConfig.schema_view``)."""
        return {"sink": self.sink, "column": self.column, "max_bytes": self.max_bytes,
                "kept": "".join(sorted(self.kept)), "empty_is_null": self.empty_is_null}

    @classmethod
    def from_view(cls, data: dict[str, Any]) -> PathRule:
        return cls(str(data["sink"]), str(data["column"]), int(data["max_bytes"]),
                   frozenset(str(data["kept"])), bool(data["empty_is_null"]))

    def problem(self, value: Any) -> str | None:
        """Why ``value`` cannot name the path (None: it can); a null always can."""
        if not isinstance(value, str):
            return None
        if self.empty_is_null and value == "":
            return self.empty
        if escaped_bytes(value, self.kept) > self.max_bytes:
            return self.too_long
        return None


def escaped_bytes(text: str, kept: frozenset[str]) -> int:
    """Bytes of ``text`` once escaped: one per character of ``kept``, three (``%XX``) per
    UTF-8 byte of any other."""
    return sum(1 if c in kept else 3 * len(c.encode("utf-8", "surrogatepass")) for c in text)


def path_problem_of(rules: list[PathRule], values: dict[str, Any]) -> str | None:
    """The first rule ``values`` (a row's columns by name) break, as its reason; None: none."""
    for rule in rules:
        problem = rule.problem(values.get(rule.column))
        if problem is not None:
            return problem
    return None


def rules_for(config: PipelineConfig, outputs: tuple[str, ...]) -> list[PathRule]:
    """The path rules of every sink of ``outputs`` (``SupportsPathRules``), in commit order."""
    from eos.core.sink import SupportsPathRules, sinks_for

    return [rule for sink in sinks_for(config)
            if sink.output in outputs and isinstance(sink, SupportsPathRules)
            for rule in sink.path_rules()]


def rules_of_view(view: dict[str, Any] | None, config: PipelineConfig,
                  outputs: tuple[str, ...]) -> list[PathRule]:
    """The path rules an epoch was computed with: its checkpoint's view's (none recorded: none,
    the epoch was computed before it had any), or without a view the config's."""
    if view is None:
        return rules_for(config, outputs)
    return [PathRule.from_view(r) for r in view.get(PATH_RULES) or []]
