"""Protocol commands of the ``eos`` CLI: run epochs, inspect them, verify them."""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable

from eos.core.config import PipelineConfig


def _config(args: argparse.Namespace) -> PipelineConfig:
    from eos.core.config import load_pipeline

    return load_pipeline(args.pipeline, args.config)


def cmd_run(args: argparse.Namespace) -> int:
    from eos.compute.epochs import run_epoch

    config = _config(args)
    session = uuid.uuid4().hex[:8]
    for i in range(args.epochs):
        # A commit that fails transiently is run again, as the DAG's commit task is retried.
        line = run_epoch(config, run_id=f"cli-{session}-{i}", commit_retries=3).summary()
        rows = line["rows"]
        print(
            f"epoch {line['epoch']:>4}  plan {line['plan_hash']}  records {line['records']:>8}  "
            f"output {rows.get('windows', 0):>6}  late {rows.get('late', 0):>5}  "
            f"quarantine {rows.get('quarantine', 0):>5}  {line['outcome']}  {line['seconds']}s",
            flush=True,
        )
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from eos.core.pipeline_status import pipeline_status, render

    print(render(pipeline_status(_config(args), limit=args.limit)))
    return 0


def cmd_phase(args: argparse.Namespace) -> int:
    """Run one phase by hand: what an operator does to recover without Airflow."""
    from eos.compute.spark import run_precommit
    from eos.core.protocol import abort, begin, commit, recover

    config = _config(args)
    if args.command == "begin":
        plan = begin(config, run_id=args.run_id)
        print(json.dumps({"epoch": plan.epoch, "plan_hash": plan.hash,
                          "ranges": plan.describe_ranges()}))
    elif args.command == "precommit":
        print(run_precommit(config, args.epoch).line)
    elif args.command == "commit":
        print(json.dumps(commit(config, args.epoch).summary()))
    elif args.command == "recover":
        epoch, outcome = recover(config)
        print(json.dumps({"epoch": epoch, "outcome": str(outcome)}))
    else:
        print(abort(config, args.epoch, reason=args.reason))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from eos.tools.audit.verify import verify

    report = verify(_config(args), since=args.since, last=args.last)
    print(report.render())
    return 0 if report.ok else 1


def cmd_rewind(args: argparse.Namespace) -> int:
    """Rewind to a committed epoch; the next runs replay the later ones (``eos.core.rewind``)."""
    from eos.core.outcomes import Outcome
    from eos.core.rewind import rewind

    config = _config(args)
    result = rewind(config, args.to_epoch, republish=args.republish, run_id=args.run_id)
    plan = result.plan
    if result.outcome is Outcome.NOTHING_TO_REWIND or plan is None:
        print(f"'{config.name}': epoch {args.to_epoch} is the last committed epoch; "
              "nothing to rewind")
    else:
        print(f"'{config.name}' rewound from epoch {plan.from_epoch} to {plan.to_epoch} "
              f"(rewind {plan.rewind_id}); the next runs replay epochs {plan.to_epoch + 1}.."
              f"{plan.from_epoch} from their logged plans"
              + (f"; republishing to {', '.join(plan.republish)}" if plan.republish else ""))
    print(json.dumps(result.summary()))
    return 0


def cmd_acknowledge_loss(args: argparse.Namespace) -> int:
    """Acknowledge the ranges the source lost and plan past them (``eos.core.loss``)."""
    from eos.core.loss import acknowledge_loss

    config = _config(args)
    done = acknowledge_loss(config, run_id=args.run_id)
    for lost in done.lost:
        print(f"acknowledged as lost: {lost.describe()}")
    print(f"epoch {done.plan.epoch} reads {done.plan.describe_ranges()}")
    print(json.dumps(done.summary()))
    return 0


def cmd_fill(args: argparse.Namespace) -> int:
    """Fill a sink added to a running pipeline with the epochs before it (``eos.core.fill``)."""
    from eos.core.fill import fill_sink

    done = fill_sink(_config(args), args.sink, args.source)
    print(f"{done.sink}: epochs {done.first}..{done.until - 1} from {done.source}: "
          f"{len(done.written)} written ({done.rows} rows), {len(done.already)} held already")
    print(json.dumps(done.summary()))
    return 0


def cmd_move_source(args: argparse.Namespace) -> int:
    """Move the pipeline to its configured source from a start position (``eos.core.move``)."""
    from eos.core.move import move_source

    config = _config(args)
    moved = move_source(config, args.start, run_id=args.run_id)
    from eos.core.identity import SourceIdentity

    old, new = moved.move["from"], SourceIdentity.from_dict(moved.move["to"])
    print(f"'{config.name}' moved from "
          + (SourceIdentity.from_dict(old).describe() if old else "an unrecorded source")
          + f" to {new.describe()} at {moved.move['position']}: epoch {moved.plan.epoch} reads "
          f"{moved.plan.describe_ranges()}")
    print(json.dumps(moved.summary()))
    return 0


def _start_position(text: str):
    from eos.core.move import StartPosition

    try:
        return StartPosition.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def cmd_demo(args: argparse.Namespace) -> int:
    from eos.core.config import load_pipeline
    from eos.tools.demo import demo

    config = load_pipeline(args.pipeline if args.config is None else None, args.config)
    if args.storage == "s3":
        from eos.tools.demo import on_embedded_store

        config = on_embedded_store(config)
    return demo(config, events=args.events, via=args.via)


def cmd_chaos(args: argparse.Namespace) -> int:
    from eos.tools.chaos import chaos

    report = chaos(_config(args), epochs=args.epochs, seed=args.seed, fault_rate=args.fault_rate,
                   events_per_epoch=args.events_per_epoch, poison_rate=args.poison_rate,
                   change_rate=args.change_rate)
    print(report.render())
    return 0 if report.ok else 1


def cmd_ui(args: argparse.Namespace) -> int:
    from eos.tools.ui import start_ui

    return start_ui(args.pipeline or None, port=args.port)


def register(sub: argparse._SubParsersAction, pipeline_args: Callable) -> None:
    """Every command of this module, in the order ``eos --help`` lists them."""
    _register_tools(sub, pipeline_args)
    _register_epochs(sub, pipeline_args)
    _register_history(sub, pipeline_args)


def _register_tools(sub: argparse._SubParsersAction, pipeline_args: Callable) -> None:
    """The tools around a pipeline: the Airflow UI, the chaos run, the demo."""
    p = sub.add_parser("ui", help="Airflow standalone with this project's DAGs and the broker")
    p.add_argument("--pipeline", action="append", help="pipelines whose topics to create")
    p.add_argument("--port", type=int, default=8080)
    p.set_defaults(func=cmd_ui)

    p = sub.add_parser("chaos", help="epochs with random injected crashes, then an audit")
    pipeline_args(p)
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fault-rate", type=float, default=0.3, help="chance a phase attempt crashes")
    p.add_argument("--events-per-epoch", type=int, default=400)
    p.add_argument("--poison-rate", type=float, default=0.3,
                   help="chance an epoch's records include two whose numbers are their types' "
                        "extremes (sums overflow: null and flagged, or ±Infinity)")
    p.add_argument("--changes", dest="change_rate", type=float, nargs="?", const=0.25,
                   default=0.0, metavar="RATE",
                   help="change the pipeline's config between epochs too (a sink added or "
                        "removed, the filter edited, a source topic added; on a copy of its "
                        "file), each epoch with chance RATE (default 0.25)")
    p.set_defaults(func=cmd_chaos)

    p = sub.add_parser("demo", help="the main job: broker, sample events, epochs, audit")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--pipeline", default="pageviews")
    group.add_argument("--config")
    p.add_argument("--events", type=int, default=None,
                   help="events to produce (default: 100,000 pageviews or 200,000 clicks; "
                        "50,000 for a pipeline publishing every row to Kafka)")
    p.add_argument("--via", choices=["airflow", "cli"], default="airflow")
    p.add_argument("--storage", choices=["local", "s3"], default="local",
                   help="s3: every table on the embedded object store (eos store), "
                        "s3://eos/<pipeline>")
    p.set_defaults(func=cmd_demo)


def _register_epochs(sub: argparse._SubParsersAction, pipeline_args: Callable) -> None:
    """Running epochs, whole or phase by phase, and the status they leave."""
    p = sub.add_parser("run", help="run K epochs: begin -> precommit (compute.mode) -> commit")
    pipeline_args(p)
    p.add_argument("--epochs", type=int, default=1)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("status", help="the epoch log, committed offsets and lag")
    pipeline_args(p)
    p.add_argument("--limit", type=int, default=20, help="most recent epochs to show")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("begin", help="plan (or reuse the plan of) the next epoch")
    pipeline_args(p)
    p.add_argument("--run-id", default=None)
    p.set_defaults(func=cmd_phase)
    p = sub.add_parser("recover", help="commit the epoch after the last checkpoint if staged")
    pipeline_args(p)
    p.set_defaults(func=cmd_phase)
    for name, helptext in (("precommit", "stage epoch N (on compute.mode)"),
                           ("commit", "promote staged epoch N (idempotent)"),
                           ("abort", "discard staged epoch N")):
        p = sub.add_parser(name, help=helptext)
        pipeline_args(p)
        p.add_argument("--epoch", type=int, required=True)
        if name == "abort":
            p.add_argument("--reason", default="aborted by hand")
        p.set_defaults(func=cmd_phase)


def _register_history(sub: argparse._SubParsersAction, pipeline_args: Callable) -> None:
    """Changing what was committed (rewind, move-source) and auditing it (verify)."""
    p = sub.add_parser("rewind", help="go back to committed epoch N; the next runs replay N+1..")
    pipeline_args(p)
    p.add_argument("--to-epoch", type=int, required=True,
                   help="the last epoch that stays committed; -1 replays from the start")
    p.add_argument("--republish", action="store_true",
                   help="rewind even sinks that cannot withdraw records (Kafka topics): their "
                        "consumers see the replayed epochs again")
    p.add_argument("--run-id", default=None, help="recorded with the rewind in the epoch log")
    p.set_defaults(func=cmd_rewind)

    p = sub.add_parser("move-source", help="move the pipeline to its configured kafka source "
                       "(another topic or cluster): the next epoch reads it from --from")
    pipeline_args(p)
    p.add_argument("--from", dest="start", type=_start_position, required=True,
                   metavar="POSITION",
                   help="earliest (the log start), latest (the end: only new records), "
                        "timestamp:<ms or ISO-8601 with zone> (the first record at or after), or "
                        "offsets:<p>=<o>,... (one per partition)")
    p.add_argument("--run-id", default=None, help="recorded with the move in the epoch log")
    p.set_defaults(func=cmd_move_source)

    p = sub.add_parser("acknowledge-loss", help="after DataLoss: acknowledge the ranges the "
                       "source lost (retention, a truncated or recreated partition); the next "
                       "epoch starts those partitions at their log start, recorded in the epoch "
                       "log and reported by eos verify")
    pipeline_args(p)
    p.add_argument("--run-id", default=None,
                   help="recorded with the acknowledgment in the epoch log")
    p.set_defaults(func=cmd_acknowledge_loss)

    p = sub.add_parser("fill", help="fill a sink added to a running pipeline with the epochs "
                       "committed before it joined, from another sink of its output that holds "
                       "them; each epoch once (rerun to finish an interrupted fill)")
    pipeline_args(p)
    p.add_argument("--sink", required=True, help="the sink to fill, e.g. delta:second")
    p.add_argument("--from", dest="source", default=None, metavar="SINK",
                   help="the sink the rows come from (default: the first of the output that "
                        "holds them)")
    p.set_defaults(func=cmd_fill)

    p = sub.add_parser("verify", help="audit committed tables against Kafka from scratch")
    pipeline_args(p)
    span = p.add_mutually_exclusive_group()
    span.add_argument("--since", type=int, default=None, metavar="EPOCH",
                      help="audit epochs EPOCH..the last committed (default: every epoch)")
    span.add_argument("--last", type=int, default=None, metavar="N",
                      help="audit the last N committed epochs")
    p.set_defaults(func=cmd_verify)
