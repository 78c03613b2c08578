"""The ``eos`` command: thin argument parsing over the library; errors become one clear line."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from eos import __version__
from eos.core.config import PIPELINES_DIR_ENV
from eos.core.errors import ConfigError, EosError, exit_code
from eos.core.kafka import broker_state_path


def _pipeline_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--pipeline", help="pipeline name: NAME.yaml in the pipelines directory "
                       "(--pipelines-dir, $EOS_PIPELINES_DIR, else ./pipelines)")
    group.add_argument("--config", help="path to a pipeline config file")


def _config(args: argparse.Namespace):
    from eos.core.config import load_pipeline

    return load_pipeline(args.pipeline, args.config)


def cmd_broker(args: argparse.Namespace) -> int:
    from eos.tools.servers import broker
    if args.action == "fetch":
        return _fetch_apache_kafka()
    if args.action == "start":
        topics = list(args.topic or [])
        if args.apache_kafka:
            from eos.tools.servers import apache_kafka
            if apache_kafka.missing():
                _fetch_apache_kafka()
            state = broker.start(topics=topics, kind=apache_kafka.KIND)
            print(f"Apache Kafka {state['version']} running at {state['bootstrap']} (pid "
                  f"{state['pid']}), SASL/SCRAM user {state['client']['sasl.username']!r}")
            print(f"clients on this machine find it, and its credentials, through "
                  f"{broker_state_path()} (readable by this user only)")
            return 0
        state = broker.start(topics=topics)
        print(f"embedded broker running at {state['bootstrap']} (pid {state['pid']})")
        print(f"clients find it through {broker_state_path()}; other tools can use "
              f"KAFKA_BOOTSTRAP_SERVERS={state['bootstrap']}")
        return 0
    if args.action == "stop":
        print("broker stopped" if broker.stop() else "no broker eos started was running")
        return 0
    state = broker.status()
    if state is None:
        print("no embedded broker is running (start one with `eos broker start`)")
        return 1
    print(json.dumps(state, indent=2))
    return 0 if state["reachable"] else 1


def _fetch_apache_kafka() -> int:
    """Fetch Apache Kafka's pinned jars once, with a progress bar; quiet when all are there."""
    from tqdm import tqdm

    from eos.tools.servers import apache_kafka
    absent = apache_kafka.missing()
    if not absent:
        print(f"Apache Kafka {apache_kafka.VERSION}: every jar is in {apache_kafka.cache_dir()}")
        return 0
    with tqdm(total=len(absent), unit="jar", desc=f"Apache Kafka {apache_kafka.VERSION}",
              disable=None) as bar:
        where = apache_kafka.fetch(report=lambda jar: bar.update(1))
    print(f"Apache Kafka {apache_kafka.VERSION}: {len(absent)} jars fetched and checked "
          f"(SHA-256) into {where}")
    return 0


def cmd_spark(args: argparse.Namespace) -> int:
    from eos.tools.servers import spark_server
    if args.action == "start":
        conf = dict(item.split("=", 1) for item in args.conf or [])
        master, properties = args.master, None
        if args.workers:
            from eos.tools.servers import spark_cluster
            cluster = spark_cluster.start(workers=args.workers)
            master, properties = cluster["master"], spark_cluster.connect_properties()
            conf = {**spark_cluster.connect_conf(cluster), **conf}
            print(f"Spark standalone cluster running at {master} ({args.workers} workers, one "
                  "core each)")
        state = spark_server.start(port=args.port, master=master,
                                   driver_memory=args.driver_memory,
                                   session_timeout=args.session_timeout, conf=conf,
                                   properties=properties)
        print(f"Spark Connect server running at sc://{state['host']}:{state['port']} "
              f"(pid {state['pid']}, master {state['master']})")
        print(f"token: {state['token_file']} (owner-only); log: {state['log']}; "
              "stop it with `eos spark stop`")
        return 0
    if args.action == "stop":
        from eos.tools.servers import spark_cluster
        print("Spark Connect server stopped" if spark_server.stop()
              else "no Spark Connect server was running")
        if spark_cluster.stop():
            print("Spark standalone cluster stopped")
        return 0
    state = spark_server.status()
    if state is None:
        print("no Spark Connect server is running (start one with `eos spark start`)")
        return 1
    print(json.dumps(state, indent=2))
    return 0 if state["healthy"] else 1


def cmd_store(args: argparse.Namespace) -> int:
    from eos.tools.servers import object_store
    if args.action == "start":
        state = object_store.start(bucket=args.bucket)
        print(f"embedded object store (SeaweedFS S3) running at {state['endpoint']} "
              f"(pid {state['pid']}), bucket {state['bucket']}")
        print(f"keys: {object_store.home()} (owner-only); export them for a shell with "
              "`eval \"$(eos store env)\"`; stop it with `eos store stop`")
        return 0
    if args.action == "stop":
        print("embedded object store stopped" if object_store.stop()
              else "no embedded object store was running")
        return 0
    if args.action == "env":
        for name, value in object_store.env().items():
            print(f"export {name}={shlex.quote(value)}")
        return 0
    state = object_store.status()
    if state is None:
        print("no embedded object store is running (start one with `eos store start`)")
        return 1
    healthy = object_store.healthy()
    print(json.dumps({**state, "healthy": healthy}, indent=2))
    return 0 if healthy else 1


def cmd_produce(args: argparse.Namespace) -> int:
    from eos.core.kafka import client_settings
    from eos.tools.generator import GeneratorSpec, generator_options
    from eos.tools.produce import continue_after, produce

    config = _config(args)
    settings = client_settings(config.kafka.client)
    start_ms = (continue_after(settings, config.kafka.sole_topic, args.interval_ms)
                if args.start_at is None else args.start_at)
    spec = GeneratorSpec(
        events=args.events,
        keys=args.keys,
        users=args.users,
        interval_ms=args.interval_ms,
        disorder_ms=args.disorder_ms,
        late_fraction=args.late_fraction,
        bad_fraction=args.bad_fraction,
        seed=args.seed,
        start_ms=start_ms,
        **(generator_options(config, args.shape) if config.event.format == "json" else {}),
    )
    if config.event.format != "json":
        from eos.core.extras import require_format

        require_format(config.event.format)
    if config.event.format == "avro":
        summary = _produce_avro(args, spec, config, settings)
    else:
        summary = produce(spec, config.kafka.sole_topic, settings, args.rate)
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(summary.kinds.items()))
    rate = summary.records / summary.seconds if summary.seconds else 0.0
    print(
        f"produced {summary.records} records to '{config.kafka.sole_topic}' in "
        f"{summary.seconds:.1f}s "
        f"({rate:,.0f} rec/s): {kinds}; arrival times from {_iso_ms(start_ms)}"
    )
    return 0


def _produce_avro(args: argparse.Namespace, spec: Any, config: Any,
                  settings: dict[str, Any]) -> Any:
    """Avro through the pipeline's registry (``eos.tools.produce_avro``): the writer schema is
    derived from its declared event; version 2 from record ``--evolve-at`` (default: halfway)."""
    from eos.tools.produce_avro import produce_avro

    if args.shape is not None:
        raise ConfigError(f"--shape is for JSON pipelines; '{config.name}' reads Avro, whose "
                          "records are shaped by its declared fields")
    evolve_at = spec.events // 2 if args.evolve_at is None else args.evolve_at
    return produce_avro(spec, config, settings, None if evolve_at < 0 else evolve_at, args.rate)


def _iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _start_at(text: str) -> int | None:
    from eos.tools.produce import parse_start

    try:
        return parse_start(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eos", description="Exactly-once micro-batches from Kafka: one Airflow DAG run per "
                    "checkpoint epoch, every sink committed in a two-phase commit"
    )
    parser.add_argument("--version", action="version", version=f"eos {__version__}")
    parser.add_argument("--pipelines-dir", metavar="DIR",
                        help="where --pipeline NAME and the DAGs find pipelines (default: "
                             "$EOS_PIPELINES_DIR, else ./pipelines)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("broker", help="the broker on this machine: librdkafka's mock cluster "
                       "(the embedded default) or Apache Kafka (--apache-kafka)")
    p.add_argument("action", choices=["start", "stop", "status", "fetch"],
                   help="fetch: download Apache Kafka's pinned jars once (Maven Central)")
    p.add_argument("--apache-kafka", action="store_true",
                   help="start Apache Kafka itself (single node, KRaft, SASL/SCRAM, ACLs, "
                        "127.0.0.1 only) instead of the embedded mock cluster")
    p.add_argument("--topic", action="append",
                   help="create this topic at start: NAME or NAME:PARTITIONS (default 4; the "
                        "embedded broker keeps 5 MiB per partition) (repeatable)")
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("spark", help="the long-lived Spark Connect server (compute.mode: connect)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--port", type=int, default=15002)
    p.add_argument("--master", default=None, help="default: $EOS_SPARK_MASTER or local[2]")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--session-timeout", default="15min",
                   help="an abandoned session (its client died) is closed after this idle time")
    p.add_argument("--conf", action="append", help="key=value, a server-wide Spark setting")
    p.add_argument("--workers", type=int, default=0,
                   help="first start a standalone cluster of this many workers (one core each, "
                        "from the pyspark wheel) and run the server on it")
    p.set_defaults(func=cmd_spark)

    p = sub.add_parser("store", help="the embedded object store (SeaweedFS's S3 gateway) for "
                       "tables on s3://; `env` prints the AWS_* exports, its secret included, "
                       "for your shell")
    p.add_argument("action", choices=["start", "stop", "status", "env"])
    p.add_argument("--bucket", default="eos", help="created at start (default eos)")
    p.set_defaults(func=cmd_store)

    _add_produce(sub)
    _register_protocol_commands(sub)
    return parser


def _add_produce(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("produce", help="produce deterministic sample events")
    _pipeline_args(p)
    p.add_argument("--events", type=int, required=True)
    p.add_argument("--shape", choices=["clicks", "pageviews"], default=None,
                   help="event shape; default: the one the pipeline's event fields read "
                        "(pageviews for the pageviews pipeline, else clicks)")
    p.add_argument("--keys", type=int, default=100, help="distinct keys (clicks) or pages")
    p.add_argument("--users", type=int, default=500, help="distinct users (pageviews)")
    p.add_argument("--interval-ms", type=int, default=10, help="event-time step between events")
    p.add_argument("--disorder-ms", type=int, default=0)
    p.add_argument("--late-fraction", type=float, default=0.0)
    p.add_argument("--bad-fraction", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rate", type=float, default=0.0, help="records per second, 0 = unthrottled")
    p.add_argument("--start-at", type=_start_at, default=None, metavar="WHEN",
                   help="arrival (and event) time of the first event: continue (default: after "
                        "the last record on the topic, so a second batch is not all late), base "
                        "(2026-01-01T00:00:00Z, the fixed start a fresh topic gets), epoch ms, "
                        "or an ISO-8601 instant")
    p.add_argument("--evolve-at", type=int, default=None, metavar="N",
                   help="Avro pipelines: records from the N-th on are written with writer "
                        "schema version 2 (finer decimals, a new optional field); default "
                        "halfway, -1 never")
    p.set_defaults(func=cmd_produce)


def _register_protocol_commands(sub: argparse._SubParsersAction) -> None:
    """Commands of the exactly-once core (run, status, ...; eos.tools.commands) and of its
    pipeline files (validate, schema, reference; eos.tools.validate)."""
    from eos.tools.commands import register
    from eos.tools.validate import register as register_file_commands

    register(sub, _pipeline_args)
    register_file_commands(sub, build_parser)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.pipelines_dir:
        # Through the environment, so the processes eos starts (Airflow, spark-submit) agree.
        os.environ[PIPELINES_DIR_ENV] = str(os.path.abspath(args.pipelines_dir))
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except EosError as error:
        print(f"eos: error: {type(error).__name__}: {error}", file=sys.stderr)
        return exit_code(error)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
