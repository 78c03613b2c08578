"""``python -m bench.deltalog``: what a table's Delta log length costs each read and write.

Every delta-rs open, ``update_incremental`` and write lists the table's ``_delta_log``
directory, so a table that gets a commit per epoch gets slower per epoch with the history it
keeps, however small its data (``bench.overhead`` with unbounded logs: begin + commit of an
empty epoch grows from 0.12 s at 100 epochs logged to 0.38 s at 1,000). This
builds tables of one-row appends with ``--commits`` commits, compacted as maintenance does, and
times the calls a phase makes on them, then the same after the cleanup that
``epoch.log_retention`` gives the protocol tables (a Delta checkpoint, then ``cleanup_metadata``
with no retention). Medians of ``--repeat`` calls, in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from eos.core.maintenance import log_retention_property


def _median_ms(call: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def _row(epoch: int) -> pa.Table:
    return pa.table({"epoch": pa.array([epoch], pa.int64()), "phase": ["committed"]})


def measure(path: str, repeat: int) -> dict[str, float]:
    """The calls a phase makes on a small protocol table, timed on ``path`` as it is now."""
    table = DeltaTable(path)
    files = len(os.listdir(os.path.join(path, "_delta_log")))
    return {
        "log files": files,
        "open": _median_ms(lambda: DeltaTable(path), repeat),
        "update_incremental": _median_ms(table.update_incremental, repeat),
        "append (handle)": _median_ms(lambda: write_deltalake(table, _row(-1), mode="append"),
                                      repeat),
        "delete (nothing)": _median_ms(lambda: table.delete("epoch < -1"), repeat),
    }


def run(commits: list[int], repeat: int) -> list[tuple[int, str, dict[str, float]]]:
    out = []
    for n in commits:
        path = tempfile.mkdtemp(prefix=f"deltalog-{n}-")
        for epoch in range(n):
            write_deltalake(path, _row(epoch), mode="append")
        DeltaTable(path).optimize.compact()  # maintenance compacts the protocol tables
        out.append((n, "kept (30-day default)", measure(path, repeat)))
        table = DeltaTable(path)
        table.alter.set_table_properties({"delta.logRetentionDuration":
                                          log_retention_property(0)})
        table.create_checkpoint()
        table.cleanup_metadata()
        out.append((n, "cleaned up", measure(path, repeat)))
    return out


def render(rows: list[tuple[int, str, dict[str, float]]]) -> str:
    names = [k for k in rows[0][2] if k != "log files"]
    lines = ["| commits | log | files in _delta_log | " + " | ".join(f"{k} (ms)" for k in names)
             + " |", "| ---: | --- | ---: |" + " ---: |" * len(names)]
    for n, label, figures in rows:
        lines.append(f"| {n:,} | {label} | {figures['log files']:.0f} | "
                     + " | ".join(f"{figures[k]:.2f}" for k in names) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.deltalog",
                                description=__doc__.split("\n")[0])
    p.add_argument("--commits", type=int, nargs="+", default=[10, 100, 1000, 3000])
    p.add_argument("--repeat", type=int, default=15)
    args = p.parse_args(argv)
    print(render(run(args.commits, args.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
