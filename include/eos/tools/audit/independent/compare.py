"""The audit's second readers: Kafka through aiokafka, Delta through DuckDB's delta extension.

``eos verify`` recomputes the pipeline from Kafka and compares it with what the sinks hold, but
it reads Kafka with confluent-kafka and Delta with delta-rs, the libraries that wrote them: a
bug in either (a record skipped, a file of a table left out, a value decoded wrongly) would
show the audit the same wrong picture it showed the pipeline. So everything the audit reads is
read a second time here, by code that shares neither the libraries nor the decoders:

- **Kafka** (source ranges, Kafka sinks' output topics) with aiokafka, a pure-Python client
  (no librdkafka), ``isolation_level="read_committed"``, sink records decoded from JSON there
  and not by ``eos.sinks.records``: ``eos.tools.audit.independent.kafka``.
- **Delta** with DuckDB's delta extension (delta-kernel-rs underneath), at the table version
  delta-rs read: ``eos.tools.audit.independent.delta``. DuckDB's extensions are loaded from their
  wheels' files, never fetched: ``eos.tools.audit.independent.duckdb_extensions``.
- **PostgreSQL** with DuckDB's postgres extension, the same way:
``eos.tools.audit.independent.postgres``.

Rows are compared in a canonical form (``canonical_row``): times as integer microseconds since
the epoch (each reader has its own time zone habits), decimals by value, binary as bytes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def canonical(value: Any) -> Any:
    """One value as both readers can agree on it: a time as microseconds since the epoch (a
    naive one is UTC), binary as bytes, a float or decimal NaN as a marker (it equals nothing,
    itself included)."""
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        delta = aware - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if (isinstance(value, float) and math.isnan(value)) or (
            isinstance(value, Decimal) and value.is_nan()):
        return "NaN"
    if isinstance(value, dict):  # a struct: hashable, in name order
        return tuple(sorted((k, canonical(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(canonical(v) for v in value)
    return value


def canonical_row(row: dict[str, Any]) -> dict[str, Any]:
    return {name: canonical(value) for name, value in row.items()}


@dataclass(frozen=True)
class Disagreement:
    """A row one reader holds ``count`` more times than the other does."""

    reader: str  # the reader that holds it (more often)
    other: str
    row: tuple[tuple[str, Any], ...]
    count: int

    def __str__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.row)
        return f"{self.reader} reads {{{shown}}} {self.count} more time(s) than {self.other}"


def disagreements(first: tuple[str, Iterable[dict[str, Any]]],
                  second: tuple[str, Iterable[dict[str, Any]]]) -> list[Disagreement]:
    """Every row the two named readings do not hold equally often, compared whole (every
    column, canonical values); empty when they agree."""
    (a_name, a_rows), (b_name, b_rows) = first, second
    a, b = Counter(_key(r) for r in a_rows), Counter(_key(r) for r in b_rows)
    return ([Disagreement(a_name, b_name, row, n) for row, n in (a - b).items()]
            + [Disagreement(b_name, a_name, row, n) for row, n in (b - a).items()])


def _key(row: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(canonical_row(row).items()))
