"""``python -m bench.state_scale``: one epoch on top of 1M (and 10M) open windows.

The goal: "an epoch with 1M open windows completes with the driver's peak RSS under 2 GiB"
(docs/benchmarks.md has the figures), and what the state costs per epoch. A pipeline
with one-day windows (nothing closes during the run) runs epoch 0 for real; then epoch 0's
staged state is *replaced* by ``--windows`` open windows (distinct keys in the same day window,
in a separate process so this process, the PySpark driver, never holds them); then epoch 1 runs
for real on ``--epoch-records`` new events and is measured: precommit and its parts, commit, the
state rows it read (epoch 0's) and wrote (epoch 1's), and the peak RSS of the driver (this
Python process and the Spark JVM, sampled by ``bench.memory.DriverSampler``). The audit
afterwards would not hold (the injected windows have no events in Kafka), so none is run; the
epoch's own checks (plan, staging, fenced commits) do.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

from bench import scenarios as sc
from bench.env import Env, environment
from bench.memory import DriverSampler
from eos.core.config import load_config

DAY_MS = 86_400_000


def inject_state(config_path: str, windows: int) -> None:
    """Replace epoch 0's staged open windows by ``windows`` fabricated ones (keys ``s0000000``..,
    the day window of the generator's events, three events of 12.5 each), keeping its watermark
    and offsets rows: one staging commit, as precommit writes it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from eos.compute.precommit.resume import state_columns
    from eos.core import checkpoints
    from eos.core.delta import replace_epoch
    from eos.core.tables import ensure_tables, read_epoch, staging_schema
    from eos.tools.generator import BASE_TIME_MS

    config = load_config(config_path)
    tables = ensure_tables(config)
    staged = read_epoch(tables, tables.staging, 0)
    kept = staged.filter(pc.not_equal(staged["kind"], "state"))
    schema = staging_schema(config)
    start = BASE_TIME_MS - BASE_TIME_MS % DAY_MS
    ids = pa.array(range(windows), pa.int64())
    dec = pa.decimal128(38, 9)
    state = {
        "g__key": pc.binary_join_element_wise("s", pc.utf8_lpad(pc.cast(ids, pa.string()), 7,
                                                                 "0"), ""),
        "window_start_ms": pa.repeat(pa.scalar(start, pa.int64()), windows),
        "window_end_ms": pa.repeat(pa.scalar(start + DAY_MS, pa.int64()), windows),
        "s__count__n": pa.repeat(pa.scalar(3, pa.int64()), windows),
        "s__sum__sum": pa.repeat(pa.scalar(37.5, pa.float64()), windows).cast(dec),
        "s__sum__n": pa.repeat(pa.scalar(3, pa.int64()), windows),  # an exact sum's count
        "s__min__v": pa.repeat(pa.scalar(12.5, pa.float64()), windows).cast(dec),
        "s__max__v": pa.repeat(pa.scalar(12.5, pa.float64()), windows).cast(dec),
        "s__avg__sum": pa.repeat(pa.scalar(37.5, pa.float64()), windows).cast(dec),
        "s__avg__n": pa.repeat(pa.scalar(3, pa.int64()), windows),
    }
    assert set(state) == set(state_columns(config)), state_columns(config)
    plan_hash = checkpoints.read(tables, 0).plan_hash
    columns = []
    for field in schema:
        if field.name in state:
            columns.append(state[field.name].cast(field.type))
        elif field.name == "kind":
            columns.append(pa.repeat(pa.scalar("state"), windows))
        elif field.name == "plan_hash":
            columns.append(pa.repeat(pa.scalar(plan_hash), windows))
        elif field.name == "epoch":
            columns.append(pa.repeat(pa.scalar(0, pa.int64()), windows))
        else:
            columns.append(pa.nulls(windows, field.type))
    fabricated = pa.Table.from_arrays(columns, schema=schema)
    replace_epoch(tables.staging, pa.concat_tables([kept.cast(schema), fabricated]), 0)


def measure(env: Env, windows: int, epoch_records: int, log: Any = print,
            collect_rows: int | None = None, snapshot_every: int | None = None) -> dict[str, Any]:
    """Epoch 0, the injected state, then epoch 1 measured (``collect_rows``: the pipeline's
    ``spark.collect_rows``, else the config's default; ``snapshot_every``: the pipeline's
    ``epoch.state_snapshot_every``, 1 for a snapshot every epoch, else the default: epoch 1
    stages its changes)."""
    name = (f"state-{windows}" + ("" if collect_rows is None else f"-c{collect_rows}")
            + ("" if snapshot_every is None else f"-s{snapshot_every}"))
    config = env.config(name, f"bench-{name}", window="1d", lateness="0s",
                        max_records=epoch_records)
    if collect_rows is not None:
        config = config.model_copy(update={
            "spark": config.spark.model_copy(update={"collect_rows": collect_rows})})
    if snapshot_every is not None:
        config = config.model_copy(update={
            "epoch": config.epoch.model_copy(update={"state_snapshot_every": snapshot_every})})
    records = sc.generator(2 * epoch_records, keys=1000)
    sc.send_chunk(env, config.kafka.topic, records, epoch_records)
    sc.eo_epoch(config, env.spark, f"{name}-0")
    log(f"bench.state_scale: injecting {windows:,} open windows")
    started = time.perf_counter()
    child = multiprocessing.get_context("spawn").Process(
        target=inject_state, args=(str(config.source_path), windows))
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"injecting the state failed (exit {child.exitcode})")
    injected_s = time.perf_counter() - started
    sc.send_chunk(env, config.kafka.topic, records, epoch_records)
    log(f"bench.state_scale: epoch 1 on {windows:,} open windows")
    with DriverSampler() as sampler:
        plan, timing = sc.eo_epoch(config, env.spark, f"{name}-1")
    if plan.records != epoch_records:
        raise AssertionError(f"epoch 1 read {plan.records} records, wanted {epoch_records}")
    staged = staged_bytes(config, 1)
    return {"windows": windows, "records": plan.records, "inject_s": injected_s,
            "mode": "snapshot" if timing.counts.get("change") is None else "changes",
            "state_written": timing.counts.get("state"),
            "change_written": timing.counts.get("change", 0), "staged_mb": staged / 2**20,
            "begin_s": timing.begin, "precommit_s": timing.precommit,
            "read_parse_s": timing.read_parse, "aggregate_s": timing.aggregate,
            "staging_write_s": timing.staging_write, "precommit_other_s": timing.precommit_other,
            "commit_s": timing.commit, "total_s": timing.total,
            "written_by": timing.written_by, **sampler.peaks_mb()}


def staged_bytes(config: Any, epoch: int) -> int:
    """The bytes of epoch N's committed staging files (its add actions' sizes)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from eos.core.delta import open_table
    from eos.core.layout import tables_for

    staging = open_table(tables_for(config).staging)
    actions = pa.table(staging.get_add_actions(flatten=True))
    mine = actions.filter(pc.equal(pc.cast(actions["partition.epoch"], pa.int64()), epoch))
    return int(pc.sum(mine["size_bytes"]).as_py() or 0)


ROWS = [("open windows before the epoch", "windows", "{:,}"),
        ("staged open windows as", "mode", "{}"),
        ("snapshot rows written (kind state)", "state_written", "{:,}"),
        ("change rows written (kind change)", "change_written", "{:,}"),
        ("staged bytes of the epoch (MiB)", "staged_mb", "{:.2f}"),
        ("events in the epoch", "records", "{:,}"),
        ("staged by (spark.collect_rows)", "written_by", "{}"),
        ("epoch total (s)", "total_s", "{:.2f}"),
        ("  begin (s)", "begin_s", "{:.2f}"),
        ("  precommit (s)", "precommit_s", "{:.2f}"),
        ("    read+parse (s)", "read_parse_s", "{:.2f}"),
        ("    aggregate + state merge (s)", "aggregate_s", "{:.2f}"),
        ("    staging write (s)", "staging_write_s", "{:.2f}"),
        ("    other: state read, staging rows (s)", "precommit_other_s", "{:.2f}"),
        ("  commit (s)", "commit_s", "{:.2f}"),
        ("peak RSS, Python driver process (MiB)", "python", "{:,.0f}"),
        ("peak RSS, Spark JVM: driver + local executors (MiB)", "jvm", "{:,.0f}"),
        ("peak RSS, driver: sum of both peaks (MiB)", "driver", "{:,.0f}")]


def render(results: list[dict[str, Any]]) -> str:
    head = "| figure | " + " | ".join(f"{r['windows']:,} windows, {r['mode']}"
                                      for r in results) + " |"
    lines = [head, "| --- |" + " ---: |" * len(results)]
    for label, key, fmt in ROWS:
        cells = [fmt.format(r[key]) if r.get(key) is not None else "n/a" for r in results]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.state_scale",
                                description=__doc__.split("\n")[0])
    p.add_argument("--windows", type=int, nargs="+", default=[1_000_000],
                   help="open windows before the measured epoch (default 1000000)")
    p.add_argument("--epoch-records", type=int, default=100_000,
                   help="events in the measured epoch (default 100000)")
    p.add_argument("--collect-rows", type=int, nargs="+", default=[None],
                   help="spark.collect_rows values to run each size with (default: the "
                        "config's); 0 = the executors write")
    p.add_argument("--snapshot-every", type=int, nargs="+", default=[None],
                   help="epoch.state_snapshot_every values to run each size with (default: "
                        "the config's, so the epoch stages changes); 1 = a snapshot every "
                        "epoch")
    p.add_argument("--plot", type=Path, help="also draw open windows vs epoch time (SVG)")
    p.add_argument("--workdir", type=Path, help="keep tables here instead of a temp dir")
    args = p.parse_args(argv)
    results = []
    with environment(args.workdir) as env:
        for windows in args.windows:
            for collect_rows in args.collect_rows:
                for every in args.snapshot_every:
                    results.append(measure(env, windows, args.epoch_records,
                                           log=lambda msg: print(msg, file=sys.stderr),
                                           collect_rows=collect_rows, snapshot_every=every))
    print("\n" + render(results))
    print("\n" + ratios(results))
    if args.plot:
        args.plot.write_text(plot(results, args.epoch_records))
        print(f"\nplotted: {args.plot}")
    return 0


def ratios(results: list[dict[str, Any]]) -> str:
    """Each mode's epoch time at its largest state over the same at its smallest."""
    lines = []
    for mode in sorted({r["mode"] for r in results}):
        mine = sorted((r for r in results if r["mode"] == mode), key=lambda r: r["windows"])
        if len(mine) >= 2:
            small, large = mine[0], mine[-1]
            lines.append(f"{mode}: epoch on {large['windows']:,} open windows / on "
                         f"{small['windows']:,}: {large['total_s']:.2f} s / "
                         f"{small['total_s']:.2f} s = {large['total_s'] / small['total_s']:.2f}x"
                         f"; precommit {large['precommit_s'] / small['precommit_s']:.2f}x")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], records: int) -> str:
    """Open windows (log scale) vs epoch time, one line per mode, as a small SVG."""
    import math

    width, height, left, bottom = 640, 360, 60, 40
    xs = [math.log10(r["windows"]) for r in results]
    top_s = max(r["total_s"] for r in results) * 1.1
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1

    def point(r: dict[str, Any]) -> tuple[float, float]:
        x = left + (math.log10(r["windows"]) - x0) / (x1 - x0) * (width - left - 20)
        y = height - bottom - r["total_s"] / top_s * (height - bottom - 20)
        return x, y

    colors = {"snapshot": "#c0392b", "changes": "#2471a3"}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="12">',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - 10}" '
             f'y2="{height - bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="10" x2="{left}" y2="{height - bottom}" stroke="black"/>',
             f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle">open windows '
             f'before the epoch (log scale); epoch of {records:,} events</text>',
             f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" '
             'text-anchor="middle">epoch time (s)</text>']
    for windows in sorted({r["windows"] for r in results}):
        x, _ = point({"windows": windows, "total_s": 0})
        parts.append(f'<text x="{x:.0f}" y="{height - bottom + 15}" text-anchor="middle">'
                     f'{windows:,}</text>')
    for k in range(5):
        value = top_s * k / 4
        y = height - bottom - value / top_s * (height - bottom - 20)
        parts.append(f'<text x="{left - 6}" y="{y + 4:.0f}" text-anchor="end">{value:.1f}'
                     '</text>')
    for i, mode in enumerate(sorted({r["mode"] for r in results})):
        mine = sorted((r for r in results if r["mode"] == mode), key=lambda r: r["windows"])
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in map(point, mine))
        color = colors.get(mode, "black")
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                     'stroke-width="2"/>')
        parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>'
                  for x, y in map(point, mine)]
        parts.append(f'<text x="{left + 10}" y="{20 + 16 * i}" fill="{color}">{mode}</text>')
    return "\n".join([*parts, "</svg>"]) + "\n"


if __name__ == "__main__":
    sys.exit(main())
