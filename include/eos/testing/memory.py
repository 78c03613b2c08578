"""In-memory sinks: what a sink author's pipeline config puts on the outputs their sink does
not serve, and a reference implementation of the contract (``eos.sink``) that
``SinkContract`` passes.

- ``MemorySink`` (``{memory: NAME}``): a sink implementing only the two-phase-commit methods of
  ``eos.sink.Sink`` (``committed_epoch``, ``commit``, ``abort``, and ``check``, which a
  test can make refuse), fenced like a real one: a commit is one atomic check-and-write,
  idempotent, and of two racing attempts one writes.
- ``RewindableMemorySink`` (``{memory_rewind: NAME}``): the same plus ``SupportsRewind``;
  ``KeptMemorySink`` (``{memory_keep: NAME}``) cannot withdraw what it published (a topic).

A sink's state lives in ``STORES``, keyed by (pipeline, sink name): every instance of the sink
(``sinks_for`` builds new ones in each phase) sees the same store, as every client of a real
sink sees the same table or topic. Importing this module registers the three sink types.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eos.core.errors import CommitConflict, ProtocolViolation, RewindRefused, SinkCannotTake
from eos.core.outcomes import NO_EPOCH, Outcome
from eos.core.sink import Sink, SinkCommit, SupportsRewind, register

if TYPE_CHECKING:
    import pyarrow as pa

    from eos.core.config import PipelineConfig

__all__ = ["MEMORY_SINKS", "REWINDABLE_SINKS", "STORES", "KeptMemorySink", "MemorySink",
           "RewindableMemorySink", "Store", "at_once", "store"]

# -- sinks --------------------------------------------------------------------------------------


@dataclass
class Store:
    """What one memory sink holds for one pipeline, and what was done to it (for assertions)."""

    marker: int = NO_EPOCH  # the last epoch held
    rows: dict[int, pa.Table] = field(default_factory=dict)  # epoch -> its committed rows
    # (marker, rows) after every write, oldest first: version 0 is the empty sink.
    versions: list[tuple[int, dict[int, pa.Table]]] = field(
        default_factory=lambda: [(NO_EPOCH, {})])
    written: list[int] = field(default_factory=list)  # epochs commits wrote (a race: once)
    aborted: list[int] = field(default_factory=list)  # epochs abort was called for
    fenced: int = 0  # committed_epoch(fence=True) calls
    looked: int = 0  # committed_epoch(fence=False) calls
    rewinds: list[str] = field(default_factory=list)  # rewind ids applied
    # A test's hook, called by ``commit`` after its marker check and before its write: where a
    # barrier makes two attempts race.
    before_write: Callable[[int], None] | None = None
    # A test's poison: ``check`` refuses every epoch with this reason (what a sink that cannot
    # take the staged rows says before the seal).
    refuse: str | None = None
    checked: list[int] = field(default_factory=list)  # epochs ``check`` was called for
    lock: threading.Lock = field(default_factory=threading.Lock)

    def version(self) -> int:
        return len(self.versions) - 1


STORES: dict[tuple[str, str], Store] = {}
_stores_lock = threading.Lock()


def store(config: PipelineConfig, name: str) -> Store:
    """The store of sink ``name`` (``memory:a``) of ``config``'s pipeline."""
    with _stores_lock:
        return STORES.setdefault((config.name, name), Store())


class MemorySink(Sink):
    """``{memory: NAME}``: a sink in this process's memory. It implements the two-phase-commit
    methods and nothing else: its options, name and ``prepare`` are ``Sink``'s defaults."""

    kind = "memory"

    def committed_epoch(self, fence: bool = True) -> int:
        held = store(self.config, self.name)
        with held.lock:
            if fence:
                held.fenced += 1
            else:
                held.looked += 1
            return held.marker

    def commit(self, epoch: int, rows: pa.Table, plan_hash: str) -> SinkCommit:
        held = store(self.config, self.name)
        seen = self.committed_epoch()
        if seen >= epoch:
            return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows.num_rows)
        if not self.follows(seen, epoch):
            raise ProtocolViolation(f"sink {self.name} holds epoch {seen}; it cannot receive "
                                    f"epoch {epoch}")
        if held.before_write is not None:
            held.before_write(epoch)
        with held.lock:  # the write happens only if nobody wrote since the check (a fence)
            if held.marker != seen:
                if held.marker >= epoch:
                    return SinkCommit(self.name, Outcome.ALREADY_COMMITTED, rows.num_rows,
                                      raced=True)
                raise CommitConflict(f"sink {self.name} moved to epoch {held.marker} while "
                                     f"epoch {epoch} was being written")
            held.rows[epoch] = rows  # the rows and the marker: one step
            held.marker = epoch
            held.written.append(epoch)
            held.versions.append((epoch, dict(held.rows)))
            return SinkCommit(self.name, Outcome.COMMITTED, rows.num_rows, held.version())

    def check(self, epoch: int, rows: pa.Table) -> None:
        held = store(self.config, self.name)
        with held.lock:
            held.checked.append(epoch)
            if held.refuse is not None:
                raise SinkCannotTake(f"sink {self.name} cannot take epoch {epoch}: "
                                     f"{held.refuse}")

    def abort(self, epoch: int) -> None:
        held = store(self.config, self.name)
        with held.lock:
            held.aborted.append(epoch)  # a commit is one step: nothing is ever left prepared


class RewindableMemorySink(MemorySink, SupportsRewind):
    """``{memory_rewind: NAME}``: a memory sink a rewind can take back (its versions)."""

    kind = "memory_rewind"

    def rewind_target(self, epoch: int) -> int | None:
        held = store(self.config, self.name)
        with held.lock:
            for version in reversed(range(len(held.versions))):
                if held.versions[version][0] == epoch:
                    return version
        raise RewindRefused(f"sink {self.name} never held epoch {epoch}")

    def rewind(self, epoch: int, target: int | None, rewind_id: str,
               schema: pa.Schema) -> int | None:
        held = store(self.config, self.name)
        with held.lock:
            if rewind_id in held.rewinds:
                return None
            if self.withdraws and target is not None:
                held.rows = dict(held.versions[target][1])
            held.marker = epoch
            held.rewinds.append(rewind_id)
            held.versions.append((epoch, dict(held.rows)))
            return held.version()


class KeptMemorySink(RewindableMemorySink):
    """``{memory_keep: NAME}``: what it published stays published (a Kafka topic): a rewind
    moves its marker only, and needs the user's consent to republish."""

    kind = "memory_keep"
    withdraws = False


for _cls in (MemorySink, RewindableMemorySink, KeptMemorySink):
    register(_cls.kind, _cls)

MEMORY_SINKS = {"windows": [{"memory": "a"}], "late": [{"memory": "b"}],
                "quarantine": [{"memory": "c"}]}
REWINDABLE_SINKS = {"windows": [{"memory_rewind": "a"}], "late": [{"memory_rewind": "b"}],
                    "quarantine": [{"memory_rewind": "c"}]}


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Run ``calls`` in threads at the same time (the callers line them up with a barrier) and
    return their results in call order; the first error any of them raised is raised here."""
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as error:  # raised below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results
