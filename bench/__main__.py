"""``python -m bench``: run the benchmarks and print the tables (progress goes to stderr)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.report import plot, render
from bench.run import Options, run


def parse_args(argv: list[str]) -> argparse.Namespace:
    defaults = Options()
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="The cost of exactly-once, phase by phase, and how it scales.",
    )
    p.add_argument("--events", type=int, nargs="+", default=defaults.events,
                   help="input sizes (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=defaults.repeat,
                   help="repetitions per size; medians are reported (default: %(default)s)")
    p.add_argument("--single-above", type=int, default=defaults.single_above,
                   help="sizes above this run once (default: %(default)s)")
    p.add_argument("--epoch-records", type=int, default=defaults.epoch_records,
                   help="epoch.max_records of the benchmark pipeline (default: %(default)s)")
    p.add_argument("--partitions", type=int, default=defaults.partitions,
                   help="partitions of each size's topic; the embedded broker keeps 5 MiB per "
                        "partition, ~50,000 of these records (default: %(default)s)")
    p.add_argument("--keys", type=int, nargs="+", default=defaults.keys,
                   help="distinct keys for the state-size runs (default: %(default)s)")
    p.add_argument("--key-events", type=int, default=defaults.key_events,
                   help="events per state-size run (default: %(default)s)")
    p.add_argument("--commit-rows", type=int, nargs="+", default=defaults.commit_rows,
                   help="output rows per epoch for the commit latency (default: %(default)s)")
    p.add_argument("--commit-repeat", type=int, default=defaults.commit_repeat,
                   help="commits timed per row count (default: %(default)s)")
    p.add_argument("--warmup-events", type=int, default=defaults.warmup_events,
                   help="events run once before measuring (default: %(default)s)")
    p.add_argument("--submit-repeat", type=int, default=defaults.submit_repeat,
                   help="spark-submit start-up probes (default: %(default)s)")
    p.add_argument("--empty-epochs", type=int, default=defaults.empty_epochs,
                   help="empty epochs for the fixed overhead (default: %(default)s)")
    p.add_argument("--epochlog-epochs", type=int, nargs="*", default=defaults.epochlog_epochs,
                   help="epoch-log sizes to time reads at (default: %(default)s)")
    p.add_argument("--no-profile", action="store_true", help="skip the per-record profile")
    p.add_argument("--quick", action="store_true",
                   help="smallest mode: 5,000 events, one repetition, every figure")
    p.add_argument("--json", type=Path, help="also write every measurement to this JSON file")
    p.add_argument("--plot", type=Path, help="write the scaling plot (PNG) here")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--workdir", help="keep tables here instead of a temp dir")
    p.add_argument("--keep", action="store_true", help="keep the temp dir")
    return p.parse_args(argv)


def options_from(args: argparse.Namespace, argv: list[str]) -> Options:
    given = {a.split("=")[0] for a in argv if a.startswith("--")}
    fields = {
        "events": "--events", "repeat": "--repeat", "single_above": "--single-above",
        "epoch_records": "--epoch-records", "partitions": "--partitions", "keys": "--keys",
        "key_events": "--key-events",
        "commit_rows": "--commit-rows", "commit_repeat": "--commit-repeat",
        "warmup_events": "--warmup-events", "submit_repeat": "--submit-repeat",
        "empty_epochs": "--empty-epochs", "epochlog_epochs": "--epochlog-epochs",
    }
    chosen = {name: getattr(args, name) for name, flag in fields.items()
              if not args.quick or flag in given}
    opts = Options.quick(**chosen) if args.quick else Options(**chosen)
    opts.profile = not args.no_profile
    opts.workdir = args.workdir
    opts.keep = args.keep
    return opts


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    results = run(options_from(args, argv))
    print(render(results, markdown=args.markdown))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, default=str))
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
