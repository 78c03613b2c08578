"""Count and time every Delta Lake operation the library makes, phase by phase.

The per-epoch fixed overhead is mostly Delta bookkeeping: opening tables (log replay), reading
the epoch log and staging, small appends. This wraps the ``deltalake`` entry points the library
uses (in this process only, for the duration of a ``with``) so a phase can be explained as
"k table opens, m reads, n writes".
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from deltalake import DeltaTable


class OpCounter:
    def __init__(self) -> None:
        self.phase = "other"
        self.depth = 0  # only outermost calls count: a write that opens the table is one write
        self.ops: dict[str, dict[str, list[float]]] = {}

    def record(self, op: str, seconds: float) -> None:
        self.ops.setdefault(self.phase, {}).setdefault(op, []).append(seconds)

    @contextlib.contextmanager
    def in_phase(self, phase: str) -> Iterator[None]:
        previous, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = previous

    def summary(self, epochs: int = 1) -> dict[str, dict[str, tuple[float, float]]]:
        """phase -> op -> (calls per epoch, seconds per epoch)."""
        return {
            phase: {op: (len(times) / epochs, sum(times) / epochs) for op, times in ops.items()}
            for phase, ops in self.ops.items()
        }


def _timed(counter: OpCounter, op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        counter.depth += 1
        try:
            return fn(*args, **kwargs)
        finally:
            counter.depth -= 1
            if counter.depth == 0:
                counter.record(op, time.perf_counter() - started)

    return wrapper


@contextlib.contextmanager
def counting() -> Iterator[OpCounter]:
    import eos.core.delta
    import eos.core.epochlog

    counter = OpCounter()
    originals = {
        "__init__": DeltaTable.__dict__["__init__"],
        "is_deltatable": DeltaTable.__dict__["is_deltatable"],
        "create": DeltaTable.__dict__["create"],
        "to_pyarrow_table": DeltaTable.__dict__["to_pyarrow_table"],
        "delete": DeltaTable.__dict__["delete"],
        "history": DeltaTable.__dict__["history"],
    }
    # every module calling ``write_deltalake``: the fenced appends (sinks, checkpoints, plan
    # markers) and replace_epoch in eos.core.delta, the epoch log's plain appends
    writers = {eos.core.delta: eos.core.delta.write_deltalake,
               eos.core.epochlog: eos.core.epochlog.write_deltalake}
    try:
        DeltaTable.__init__ = _timed(counter, "open table", originals["__init__"])
        DeltaTable.is_deltatable = staticmethod(
            _timed(counter, "is_deltatable", originals["is_deltatable"].__func__))
        DeltaTable.create = classmethod(
            _timed(counter, "create", originals["create"].__func__))
        DeltaTable.to_pyarrow_table = _timed(counter, "read", originals["to_pyarrow_table"])
        DeltaTable.delete = _timed(counter, "delete", originals["delete"])
        DeltaTable.history = _timed(counter, "history", originals["history"])
        for module, fn in writers.items():
            module.write_deltalake = _timed(counter, "write", fn)
        yield counter
    finally:
        for name, original in originals.items():
            setattr(DeltaTable, name, original)
        for module, fn in writers.items():
            module.write_deltalake = fn
