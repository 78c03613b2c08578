"""``python -m bench.rewind``: what a rewind and its replay cost, next to the first run.

Runs ``--epochs`` epochs of ``--records`` records each (the clicks shape, the three Delta sinks,
Spark in-process), then rewinds to the middle epoch and to -1 (a full replay): each rewind is
timed (reading every table's history, checking files, the restores, the log rows) and every
rewound epoch is replayed, each timed against its first run. ``eos verify`` must be OK after
each replay.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.env import Env, environment


def measure(env: Env, epochs: int, records: int, log: Any = print) -> dict[str, Any]:
    from eos.core.rewind import rewind
    from eos.tools.audit.verify import audit
    from eos.tools.generator import GeneratorSpec
    from eos.tools.produce import produce

    topic = f"bench-rewind-{uuid.uuid4().hex[:8]}"
    config = env.config("rewind", topic, max_records=records)
    produce(GeneratorSpec(events=epochs * records, keys=200, interval_ms=20, disorder_ms=500,
                          seed=3), topic, env.settings(), progress=False)
    first = [_epoch(config, env.spark, f"first-{i}") for i in range(epochs)]
    log(f"bench.rewind: {epochs} epochs run, median {statistics.median(first):.2f} s")
    rewinds = []
    for target in (epochs // 2 - 1, -1):
        started = time.perf_counter()
        done = rewind(config, target)
        rewind_s = time.perf_counter() - started
        replayed = [_epoch(config, env.spark, f"replay{target}-{i}")
                    for i in range(epochs - 1 - target)]
        report = audit(config)
        rewinds.append({"to_epoch": target, "rewound": epochs - 1 - target,
                        "rewind_s": rewind_s, "tables": len(done.versions),
                        "replay_median_s": statistics.median(replayed),
                        "verified": report.ok})
        log(f"bench.rewind: rewind to {target} in {rewind_s:.2f} s, replayed "
            f"{len(replayed)} epochs, verify {'OK' if report.ok else 'FAILED'}")
    return {"epochs": epochs, "records": records, "first_median_s": statistics.median(first),
            "rewinds": rewinds}


def _epoch(config: Any, spark: Any, run_id: str) -> float:
    """The seconds of one epoch of the epoch loop."""
    from eos.compute.epochs import run_epoch

    return run_epoch(config, run_id, spark=spark).seconds


def render(result: dict[str, Any]) -> str:
    lines = [f"{result['epochs']} epochs of {result['records']:,} records; first run: "
             f"{result['first_median_s']:.2f} s per epoch (median)", "",
             "| rewind to | epochs rewound | tables restored | rewind (s) | replay per epoch "
             "(s, median) | replay / first run | eos verify |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in result["rewinds"]:
        lines.append(f"| {r['to_epoch']} | {r['rewound']} | {r['tables']} | "
                     f"{r['rewind_s']:.2f} | {r['replay_median_s']:.2f} | "
                     f"{r['replay_median_s'] / result['first_median_s']:.2f}x | "
                     f"{'OK' if r['verified'] else 'FAILED'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rewind", description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--records", type=int, default=5000, help="records per epoch")
    p.add_argument("--workdir", type=Path, help="keep tables here instead of a temp dir")
    args = p.parse_args(argv)
    with environment(args.workdir) as env:
        result = measure(env, args.epochs, args.records,
                         log=lambda msg: print(msg, file=sys.stderr))
    print("\n" + render(result))
    return 0 if all(r["verified"] for r in result["rewinds"]) else 1


if __name__ == "__main__":
    sys.exit(main())
