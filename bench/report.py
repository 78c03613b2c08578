"""Turning measurements into the printed tables, the goals, the JSON and the scaling plot."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# Every figure the benchmark promises; the smoke test checks each one is printed with a value.
FIGURES = (
    "events",
    "epochs",
    "EO begin (s)",
    "EO precommit: Spark start-up via spark-submit (s)",
    "EO precommit: Kafka read+parse (s)",
    "EO precommit: aggregate (s)",
    "EO precommit: staging write (s)",
    "EO precommit: other (s)",
    "EO commit (s)",
    "EO total, in-process (s)",
    "EO events/s, in-process",
    "EO events/s, spark-submit per epoch",
    "ALO total (s)",
    "ALO events/s",
    "EO/ALO throughput, in-process",
    "EO/ALO throughput, spark-submit per epoch",
    "Spark read stage alone (events/s)",
    "bare consumer (events/s)",
    "read stage / bare consumer",
    "peak RSS, process tree (MiB)",
    "fixed overhead per epoch, in-process (s)",
    "fixed overhead per epoch, spark-submit (s)",
    "spark-submit start-up per epoch (s)",
    "commit latency, 10k output rows (s)",
    "commit latency, 100k output rows (s)",
    "peak RSS, this process (ru_maxrss, MiB)",
    "peak RSS, largest child (ru_maxrss, MiB)",
)
NA = "n/a"


def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def fmt(value: Any, kind: str = "s") -> str:
    if value is None:
        return NA
    if kind == "int":
        return f"{int(value):,}"
    if kind == "count":
        return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
    if kind == "rate":
        return f"{value:,.0f}"
    if kind == "x":
        return f"{value:.2f}x"
    if kind == "pct":
        return f"{100 * value:.1f}%"
    if kind == "mb":
        return f"{value:,.0f}"
    if kind == "us":
        return f"{value:.2f}"
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    """A table of strings, Markdown or aligned text (the first column left, the others right:
    they are figures)."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    if markdown:
        lines = ["| " + " | ".join(header) + " |",
                 "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(header))) + " |"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                       for i, (h, w) in enumerate(zip(header, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)


def main_table(results: dict[str, Any], markdown: bool = False) -> str:
    sizes = results["sizes"]
    fixed = results.get("fixed", {})
    per_size = [
        ("events", lambda s: fmt(s["events"], "int")),
        ("repetitions", lambda s: str(s["reps"])),
        ("epochs", lambda s: str(s["epochs"])),
        ("EO begin (s)", lambda s: fmt(s["eo"]["begin"])),
        ("EO precommit: Spark start-up via spark-submit (s)",
         lambda s: fmt(s.get("eo_submit_startup"))),
        ("EO precommit: Kafka read+parse (s)", lambda s: fmt(s["eo"]["read_parse"])),
        ("EO precommit: aggregate (s)", lambda s: fmt(s["eo"]["aggregate"])),
        ("EO precommit: staging write (s)", lambda s: fmt(s["eo"]["staging_write"])),
        ("EO precommit: other (s)", lambda s: fmt(s["eo"]["precommit_other"])),
        ("EO commit (s)", lambda s: fmt(s["eo"]["commit"])),
        ("EO total, in-process (s)", lambda s: fmt(s["eo"]["total"])),
        ("EO events/s, in-process", lambda s: fmt(s["eo_rate"], "rate")),
        ("EO events/s, spark-submit per epoch", lambda s: fmt(s.get("eo_submit_rate"), "rate")),
        ("ALO read+parse (s)", lambda s: fmt(s["alo"]["read_parse"])),
        ("ALO aggregate (s)", lambda s: fmt(s["alo"]["aggregate"])),
        ("ALO Delta append (s)", lambda s: fmt(s["alo"]["write"])),
        ("ALO other (s)", lambda s: fmt(s["alo"]["other"])),
        ("ALO total (s)", lambda s: fmt(s["alo"]["total"])),
        ("ALO events/s", lambda s: fmt(s["alo_rate"], "rate")),
        ("EO/ALO throughput, in-process", lambda s: fmt(s["ratio"], "x")),
        ("EO/ALO throughput, spark-submit per epoch", lambda s: fmt(s.get("ratio_submit"), "x")),
        ("EO read+parse stage (events/s)", lambda s: fmt(s["eo_read_parse_rate"], "rate")),
        ("Spark read stage alone (events/s)", lambda s: fmt(s["read_rate"], "rate")),
        ("bare consumer (events/s)", lambda s: fmt(s["bare_rate"], "rate")),
        ("read stage / bare consumer", lambda s: fmt(s["read_ratio"], "pct")),
        ("peak RSS, process tree (MiB)", lambda s: fmt(s["peak_rss_mb"], "mb")),
    ]
    header = ["figure", *[f"{s['events']:,} ev" for s in sizes]]
    rows = [[label, *[get(s) for s in sizes]] for label, get in per_size]
    out = [table(header, rows, markdown)]

    commit = results.get("commit", {})
    memory = results.get("memory", {})
    submit = fixed.get("submit", {})
    single = [
        ("fixed overhead per epoch, in-process (s)", fmt(fixed.get("total"))),
        ("  of which begin / precommit / commit (s)",
         " / ".join(fmt(fixed.get(k)) for k in ("begin", "precommit", "commit"))),
        ("fixed overhead per epoch, spark-submit (s)", fmt(fixed.get("total_submit"))),
        ("spark-submit start-up per epoch (s)", fmt(fixed.get("submit_startup"))),
        ("  spark-submit of an empty epoch (s)", fmt(submit.get("empty"))),
        ("  spark-submit of a committed epoch, no session (s)", fmt(submit.get("committed"))),
        ("  SparkSession creation inside spark-submit (s)", fmt(submit.get("session"))),
        ("  first SparkSession in this process (s)", fmt(fixed.get("spark_start_inprocess"))),
        ("commit latency, 10k output rows (s)", fmt(commit.get("10000", {}).get("commit"))),
        ("  three sink appends alone, 10k rows (s)",
         fmt(commit.get("10000", {}).get("appends"))),
        ("commit latency, 100k output rows (s)", fmt(commit.get("100000", {}).get("commit"))),
        ("  three sink appends alone, 100k rows (s)",
         fmt(commit.get("100000", {}).get("appends"))),
        ("commit latency with a Kafka sink too, 10k rows (s)",
         fmt(commit.get("10000", {}).get("kafka"))),
        ("commit latency with a Kafka sink too, 100k rows (s)",
         fmt(commit.get("100000", {}).get("kafka"))),
        ("peak RSS, this process (ru_maxrss, MiB)", fmt(memory.get("self"), "mb")),
        ("peak RSS, largest child (ru_maxrss, MiB)", fmt(memory.get("children"), "mb")),
        ("peak RSS, whole process tree, sampled (MiB)", fmt(memory.get("tree"), "mb")),
    ]
    out.append(table(["figure", "value"], [list(r) for r in single], markdown))
    return "\n\n".join(out)


def goals_table(results: dict[str, Any], markdown: bool = False) -> str:
    sizes = results["sizes"]
    fixed = results.get("fixed", {})
    commit = results.get("commit", {}).get("100000", {}).get("commit")
    per = ", ".join
    rows = [
        ["EO throughput >= 0.95x ALO (in-process)",
         per(f"{fmt(s['ratio'], 'x')} @ {s['events']:,}" for s in sizes)],
        ["  same, with spark-submit per epoch",
         per(f"{fmt(s.get('ratio_submit'), 'x')} @ {s['events']:,}" for s in sizes)],
        ["commit of 100k rows <= 1 s", f"{fmt(commit)} s"],
        ["read stage >= 50% of bare consumer",
         per(f"{fmt(s['read_ratio'], 'pct')} @ {s['events']:,}" for s in sizes)],
        ["per-epoch fixed overhead (reported)",
         f"{fmt(fixed.get('total'))} s in-process, {fmt(fixed.get('total_submit'))} s with "
         "spark-submit"],
    ]
    return table(["goal", "measured"], rows, markdown)


def keys_table(results: dict[str, Any], markdown: bool = False) -> str:
    rows = [
        [fmt(k["keys"], "int"), fmt(k["state_rows"], "int"), fmt(k["precommit"]),
         fmt(k["read_parse"]), fmt(k["aggregate"]), fmt(k["staging_write"]),
         fmt(k["precommit_other"]), fmt(k["commit"])]
        for k in results.get("keys", [])
    ]
    header = ["keys", "open-window rows staged", "precommit (s)", "read+parse", "aggregate",
              "staging write", "other", "commit (s)"]
    return table(header, rows, markdown)


def hotpath_table(results: dict[str, Any], markdown: bool = False) -> str:
    hot = results.get("hotpath", {})
    rows = [[name, fmt(v["cpu_us"], "us"), fmt(v["wall_us"], "us")]
            for name, v in hot.items() if not name.startswith("_")]
    return table(["plain Python, one core", "CPU us/record", "wall us/record"], rows, markdown)


def render(results: dict[str, Any], markdown: bool = False) -> str:
    parts = [
        "== exactly-once (EO) vs at-least-once (ALO), medians ==", main_table(results, markdown),
        "== goals ==", goals_table(results, markdown),
    ]
    if results.get("notes"):
        parts += ["== notes ==", "\n".join(f"- {note}" for note in results["notes"])]
    typical = results.get("typical_epoch")
    if typical:
        keys = ("begin", "read_parse", "aggregate", "staging_write", "precommit_other", "commit",
                "total")
        fixed = results.get("fixed", {})
        empty = {"begin": fixed.get("begin"), "commit": fixed.get("commit"),
                 "total": fixed.get("total"),
                 "read_parse": None, "aggregate": None, "staging_write": None,
                 "precommit_other": None}
        rows = [[f"{typical['records']:,} records (median of {typical['epochs']})",
                 *[fmt(typical[k]) for k in keys]],
                ["empty epoch (fixed overhead)", *[fmt(empty[k]) for k in keys]]]
        header = ["one epoch, in-process (s)", "begin", "read+parse", "aggregate",
                  "staging write", "precommit other", "commit", "total"]
        parts += ["== one epoch, phase by phase ==", table(header, rows, markdown)]
    if results.get("keys"):
        parts += ["== state size vs keys (last epoch of each run) ==",
                  keys_table(results, markdown)]
    if results.get("epochlog"):
        rows = [[fmt(e["epochs"], "int") + (" (compacted)" if "compaction_s" in e else ""),
                 fmt(e["files"], "int"), fmt(e["first_plan_row"]),
                 fmt(e.get("compaction_s")) if "compaction_s" in e else ""]
                for e in results["epochlog"]]
        header = ["epochs logged", "log files", "first_plan_row (s)", "compaction (s)"]
        parts += ["== epoch log growth ==", table(header, rows, markdown)]
    ops = results.get("fixed", {}).get("delta_ops")
    if ops:
        kinds = ("open table", "is_deltatable", "read", "write", "delete")
        rows = [[phase, *[fmt(ops[phase].get(k, (0, 0))[0], "count") for k in kinds],
                 fmt(sum(v[1] for v in ops[phase].values()))]
                for phase in ("begin", "precommit", "commit") if phase in ops]
        header = ["Delta calls per empty epoch", *kinds, "seconds"]
        parts += ["== Delta Lake operations behind the fixed overhead ==",
                  table(header, rows, markdown)]
    if results.get("hotpath"):
        parts += ["== per-record cost of the Python stages ==", hotpath_table(results, markdown)]
    if results.get("split_overhead"):
        s = results["split_overhead"]
        parts += ["== Spark per-split cost ==",
                  f"{s['records']:,} records read in {s['few_splits']} splits: {fmt(s['few_s'])} s;"
                  f" in {s['many_splits']} splits: {fmt(s['many_s'])} s -> "
                  f"{fmt(s['per_split_s'])} core-seconds per split"]
    if results.get("fusion"):
        f = results["fusion"]
        rows = [["two Python stages: eos_kafka + mapInArrow(parse_records)",
                 fmt(f["two_stages"]), fmt(f["records"] / f["two_stages"], "rate")],
                ["library: parse inside the reader", fmt(f["library"]),
                 fmt(f["records"] / f["library"], "rate")]]
        parts += [f"== Spark read+parse of {f['records']:,} records (count, no cache) ==",
                  table(["variant", "seconds", "events/s"], rows, markdown)]
    return "\n\n".join(parts)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = results["sizes"]
    xs = [s["events"] for s in sizes]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    series = [
        ("bare consumer (read only)", "bare_rate", ":"),
        ("Spark read stage alone", "read_rate", "--"),
        ("ALO: read, aggregate, append", "alo_rate", "-"),
        ("EO, in-process", "eo_rate", "-"),
        ("EO, spark-submit per epoch", "eo_submit_rate", "-."),
    ]
    for label, key, style in series:
        ys = [s.get(key) for s in sizes]
        if all(y is not None for y in ys):
            left.plot(xs, ys, style, marker="o", label=label)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("events")
    left.set_ylabel("events per second")
    left.set_title("Throughput vs input size (2 cores, local[2])")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    keys = results.get("keys", [])
    if keys:
        kx = [k["keys"] for k in keys]
        right.plot(kx, [k["precommit"] for k in keys], marker="o", label="precommit (s)")
        right.plot(kx, [k["staging_write"] for k in keys], marker="s", label="staging write (s)")
        right.plot(kx, [k["aggregate"] for k in keys], marker="^", label="aggregate (s)")
        right.set_xscale("log")
        right.set_xlabel("distinct keys (state rows ~ keys)")
        right.set_ylabel("seconds, last epoch")
        right.set_title(f"State size: {keys[0]['events']:,} events, {keys[0]['epochs']} epochs")
        right.grid(True, which="both", alpha=0.3)
        right.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
