"""Where a source is first read from: a new pipeline's ``kafka.start`` and the position an
operator gives ``eos move-source``. One value type for both, so the two accept the same words.

``earliest`` is the log start, ``latest`` the end (the high watermark), ``timestamp:<t>`` the
first record whose Kafka timestamp is at or after ``t`` (milliseconds since the epoch, or an
ISO-8601 time with its zone), ``offsets:<p>=<o>,...`` one offset per partition. Which offsets
those are is decided once, when the first epoch on the source is planned, and recorded in that
plan: a rerun reads the same range whatever the log holds by then."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

POSITIONS = ("earliest", "latest", "timestamp:<ms or ISO-8601>", "offsets:<p>=<o>,...")
_OFFSETS = re.compile(r"^\d+=\d+(,\d+=\d+)*$")
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T.*(Z|[+-]\d{2}:?\d{2})$")


@dataclass(frozen=True)
class StartPosition:
    """Where a source is read from: ``earliest``, ``latest``, ``timestamp`` (the first record
    at or after ``timestamp_ms``) or ``offsets`` (one per partition)."""

    kind: str
    timestamp_ms: int | None = None
    offsets: dict[int, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> StartPosition:
        """``earliest``, ``latest``, ``timestamp:<ms>`` or ``timestamp:<ISO-8601 with zone>``,
        ``offsets:<p>=<o>,...``; a ``ValueError`` naming the accepted forms otherwise."""
        kind, _, value = str(text).strip().partition(":")
        if kind in ("earliest", "latest") and not value:
            return cls(kind)
        if kind == "timestamp" and (ms := _timestamp_ms(value)) is not None:
            return cls(kind, timestamp_ms=ms)
        if kind == "offsets" and _OFFSETS.match(value):
            pairs = [pair.split("=") for pair in value.split(",")]
            offsets = {int(p): int(o) for p, o in pairs}
            if len(offsets) == len(pairs):
                return cls(kind, offsets=offsets)
        hint = (" (an ISO-8601 time names its zone: Z or +hh:mm)"
                if kind == "timestamp" and value else "")
        raise ValueError(f"unknown start position {text!r}{hint}; one of: "
                         f"{', '.join(POSITIONS)}")

    def describe(self) -> str:
        if self.kind == "timestamp":
            return f"timestamp:{self.timestamp_ms}"
        if self.kind == "offsets":
            return "offsets:" + ",".join(f"{p}={o}" for p, o in sorted(self.offsets.items()))
        return self.kind

    def first_guess(self, partition: int, low: int, high: int) -> int:
        """Where this position starts ``partition`` (log start ``low``, end ``high``) without
        asking the broker: exact for ``earliest``, ``latest`` and ``offsets``; the log start
        for ``timestamp`` (an upper bound of the backlog, for ``eos status``)."""
        if self.kind == "latest":
            return high
        if self.kind == "offsets":
            return min(max(self.offsets.get(partition, low), low), high)
        return low


def _timestamp_ms(value: str) -> int | None:
    """Milliseconds since the epoch from digits or an ISO-8601 time that names its zone (a
    time without one would mean different instants on different machines)."""
    if value.isdigit():
        return int(value)
    if not _ISO.match(value):
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None
