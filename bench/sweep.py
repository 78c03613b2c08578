"""``python -m bench.sweep``: exactly-once against a fair at-least-once baseline, epoch size by
epoch size, in one run (the figures: docs/benchmarks.md).

Three ways run every epoch, one after the other, on the same offset ranges of the same topic:

- **eos**: the whole exactly-once epoch (``eos.compute.epochs.run_epoch``: plan, stage, seal,
  fenced sink commits, checkpoint), in-process on one Spark session;
- **ALO with state** (``bench.scenarios.StatefulALO``): the same compute and the same state
  carried between epochs, the state made durable, the outputs appended, the offsets recorded
  after: everything but the protocol's own work. The difference is what exactly-once costs;
- **plain ALO** (``bench.scenarios.alo_run``, the older baseline): the same read and
  aggregation from an empty state every epoch, open windows appended as they are, no late rows.
  It computes a different answer and is kept as a third line only.

Each epoch size gets warm-up epochs (not counted) and then counted ones; medians per size, and
per way a least-squares line ``seconds = fixed + per_record x records`` over every counted
epoch of every size: the fixed cost of an epoch and the cost of a record.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import scenarios as sc
from bench.report import table

Log = Callable[[str], None]
WAYS = ("eos", "alo_state", "alo_plain")
LABELS = {"eos": "eos (exactly-once)", "alo_state": "ALO with state", "alo_plain": "plain ALO"}
DEFAULT_SIZES = (50_000, 100_000, 200_000, 400_000, 1_000_000)
QUICK = {"sizes": (2_000, 6_000), "epochs": 2, "warmup": 1}


@dataclass
class Sample:
    """One counted epoch: its records and each way's seconds."""

    records: int
    seconds: dict[str, float]


@dataclass
class Fit:
    """``seconds = fixed + per_record x records``, least squares over the counted epochs."""

    fixed: float
    per_record: float

    @classmethod
    def of(cls, points: Sequence[tuple[int, float]]) -> Fit:
        xs, ys = [float(x) for x, _ in points], [y for _, y in points]
        if len(set(xs)) < 2:
            raise ValueError("a line needs epochs of at least two sizes")
        slope, intercept = statistics.linear_regression(xs, ys)
        return cls(fixed=intercept, per_record=slope)


@dataclass
class Sweep:
    samples: list[Sample] = field(default_factory=list)

    def sizes(self) -> list[int]:
        return sorted({s.records for s in self.samples})

    def seconds(self, way: str, records: int) -> list[float]:
        return [s.seconds[way] for s in self.samples if s.records == records]

    def median(self, way: str, records: int) -> float:
        return statistics.median(self.seconds(way, records))

    def ratio(self, records: int, way: str = "alo_state") -> float:
        """eos's rate over ``way``'s at this size (medians): 1.0 is as fast."""
        return self.median(way, records) / self.median("eos", records)

    def fit(self, way: str) -> Fit:
        return Fit.of([(s.records, s.seconds[way]) for s in self.samples])


def run(env: Any, sizes: Sequence[int], epochs: int, warmup: int, partitions: int,
        log: Log, topic: str = "bench-sweep") -> Sweep:
    """Per size: ``warmup`` epochs then ``epochs`` counted ones, each produced, then run by
    eos, by the ALO with state and by the plain ALO on eos's plan (the same ranges)."""
    sc.check_retained(max(sizes), partitions)
    eo = env.config("sweep-eo", topic, max_records=max(sizes))
    alo = sc.StatefulALO(env.config("sweep-alo", topic, max_records=max(sizes)), env.spark)
    plain = str(env.workdir / "tables" / "sweep-plain")
    records = sc.generator(sum(sizes) * (epochs + warmup), keys=1000)
    result = Sweep()
    for size in sizes:
        for n in range(warmup + epochs):
            sc.send_chunk(env, topic, records, size)
            plan, seconds = _epoch(env, eo, alo, plain, f"sweep-{size}-{n}", n)
            if plan.records != size:
                raise AssertionError(f"epoch {plan.epoch} planned {plan.records:,} records, "
                                     f"{size:,} were produced")
            counted = n >= warmup
            if counted:
                result.samples.append(Sample(size, seconds))
            log(f"{size:,} records, epoch {plan.epoch}{'' if counted else ' (warm-up)'}: "
                + ", ".join(f"{way} {seconds[way]:.2f}s" for way in WAYS))
    return result


def _epoch(env: Any, eo: Any, alo: sc.StatefulALO, plain: str, run_id: str,
           n: int) -> tuple[Any, dict[str, float]]:
    """eos plans the epoch (its begin, timed as its own); then the three ways run on that plan,
    in an order rotated each epoch, so none always reads the ranges first or last."""
    from eos.compute.epochs import run_epoch
    from eos.core.protocol import begin

    started = sc.now()
    plan = begin(eo, run_id=run_id)
    planned = sc.now() - started

    def eos() -> float:  # run_epoch's begin finds the logged plan: not counted twice
        run = run_epoch(eo, run_id, spark=env.spark)
        if run.plan.hash != plan.hash:
            raise AssertionError(f"epoch {plan.epoch} ran another plan than it logged")
        return planned + run.phases["precommit"] + run.phases["commit"]

    ways: dict[str, Callable[[], float]] = {
        "eos": eos, "alo_state": lambda: alo.epoch(plan).seconds,
        "alo_plain": lambda: sc.alo_run(env.spark, eo, plan, plain).seconds}
    order = WAYS[n % len(WAYS):] + WAYS[:n % len(WAYS)]
    return plan, {way: ways[way]() for way in order}


def render(sweep: Sweep, markdown: bool = False) -> str:
    """Per size the medians and eos's ratio over each baseline; then the fitted lines."""
    head = ("records per epoch", "epochs", *(f"{LABELS[w]}, s" for w in WAYS),
            "eos / ALO with state", "eos / plain ALO")
    rows = [head]
    for size in sweep.sizes():
        rows.append((f"{size:,}", str(len(sweep.seconds("eos", size))),
                     *(_spread(sweep.seconds(w, size)) for w in WAYS),
                     f"{sweep.ratio(size):.2f}x", f"{sweep.ratio(size, 'alo_plain'):.2f}x"))
    fits = {w: sweep.fit(w) for w in WAYS}
    fit_rows = [("fitted line", *(LABELS[w] for w in WAYS)),
                ("fixed s per epoch", *(f"{fits[w].fixed:.3f}" for w in WAYS)),
                ("us per record", *(f"{fits[w].per_record * 1e6:.2f}" for w in WAYS))]
    eo, fair = fits["eos"], fits["alo_state"]
    verdict = (f"exactly-once over ALO with state: fixed cost {eo.fixed - fair.fixed:+.3f} s "
               f"per epoch, per-record cost ratio {eo.per_record / fair.per_record:.3f}")
    if {200_000, 400_000} <= set(sweep.sizes()):
        verdict += (f"; ratio at 400k {sweep.ratio(400_000):.2f}x vs at 200k "
                    f"{sweep.ratio(200_000):.2f}x")
    return "\n\n".join([table(rows[0], rows[1:], markdown),
                         table(fit_rows[0], fit_rows[1:], markdown), verdict])


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def plot(sweep: Sweep) -> str:
    """Seconds per epoch against records per epoch, each way's epochs and fitted line (SVG)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    top = max(sweep.sizes())
    xs = [s.records for s in sweep.samples]
    for way, colour in zip(WAYS, ("tab:blue", "tab:orange", "tab:gray"), strict=True):
        ax.scatter(xs, [s.seconds[way] for s in sweep.samples], s=10, color=colour, alpha=0.5)
        fit = sweep.fit(way)
        ax.plot([0, top], [fit.fixed, fit.fixed + fit.per_record * top], color=colour,
                label=f"{LABELS[way]}: {fit.fixed:.2f} s + {fit.per_record * 1e6:.2f} us/record")
    ax.xaxis.set_major_formatter(lambda x, _pos: f"{x / 1000:,.0f}k")
    ax.set_xlabel("records per epoch")
    ax.set_ylabel("seconds per epoch")
    ax.set_title("Epoch time by epoch size (one run, 2 cores)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    out = io.StringIO()
    fig.savefig(out, format="svg", bbox_inches="tight")
    plt.close(fig)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    from bench.env import environment

    p = argparse.ArgumentParser(prog="python -m bench.sweep", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", help="records per epoch (default 50k to 1M)")
    p.add_argument("--epochs", type=int, help="counted epochs per size (default 12)")
    p.add_argument("--warmup", type=int, help="warm-up epochs per size (default 2)")
    p.add_argument("--partitions", type=int, default=32, help="the topic's partitions")
    p.add_argument("--quick", action="store_true", help="smoke test: two small sizes")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--plot", type=Path, help="also draw seconds against epoch size (SVG)")
    p.add_argument("--workdir", type=Path, help="keep tables here")
    args = p.parse_args(argv)
    sizes = args.sizes or (QUICK["sizes"] if args.quick else DEFAULT_SIZES)
    epochs = args.epochs or (QUICK["epochs"] if args.quick else 12)
    warmup = args.warmup if args.warmup is not None else (QUICK["warmup"] if args.quick else 2)
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    with environment(args.workdir, topics=[f"bench-sweep:{args.partitions}"]) as env:
        for note in env.notes:
            log(note)
        result = run(env, sizes, epochs, warmup, args.partitions, log)
    print(render(result, markdown=args.markdown), flush=True)
    if args.plot:
        args.plot.write_text(plot(result))
        print(f"\nplotted: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
