"""``eos demo``: the main job on the embedded default, end to end, from a clean slate.

Starts the embedded broker, produces sample events, runs epochs until the pipeline has caught up
(through real Airflow DAG runs by default, or ``--via cli``), then prints a summary of the
committed tables and the verdict of the independent audit.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eos.core.config import DATA_DIR_ENV, PipelineConfig
from eos.core.errors import DataLoss
from eos.core.kafka import client_settings, local_broker
from eos.core.storage import filesystem, is_remote
from eos.tools.generator import GeneratorSpec, generator_options
from eos.tools.produce import produce
from eos.tools.servers import broker

if TYPE_CHECKING:
    from eos.tools.servers.schema_registry import SchemaRegistryServer


def reset(config: PipelineConfig) -> None:
    """A demo starts clean: a fresh broker (empty topic) and no tables."""
    broker.stop()
    if is_remote(config.root):
        store, path = filesystem(config.root)
        store.delete_dir_contents(path, missing_dir_ok=True)
    else:
        shutil.rmtree(config.root, ignore_errors=True)
    broker.start(topics=[config.kafka.sole_topic])


def on_embedded_store(config: PipelineConfig) -> PipelineConfig:
    """``config`` with every table on the embedded object store (started if needed): its
    ``AWS_*`` variables go into this process's environment, so the Spark Connect server, the
    Airflow tasks and every client started from here inherit them. The derived YAML is written
    to the data directory and made the pipelines directory the DAG file reads."""
    import yaml

    from eos.core.config import PIPELINES_DIR_ENV, data_dir, load_config
    from eos.tools.servers import object_store
    state = object_store.start()
    variables = object_store.env()
    os.environ.update(variables)
    print(f"      embedded object store (SeaweedFS S3) at {state['endpoint']}: tables under "
          f"s3://{state['bucket']}/{config.name}", flush=True)
    _restart_spark_without(variables)
    data = yaml.safe_load(Path(str(config.source_path)).read_text())
    data["tables"] = {**(data.get("tables") or {}), "root": f"s3://{state['bucket']}/{config.name}"}
    directory = data_dir() / "demo-pipelines"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / Path(str(config.source_path)).name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    os.environ[PIPELINES_DIR_ENV] = str(directory)
    return load_config(path)


def _restart_spark_without(variables: dict[str, str],
                           names: tuple[str, ...] = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID"),
                           ) -> None:
    """Stop a running Spark Connect server that was not started with these ``names`` of
    ``variables`` (the store's endpoint and key: every store start makes new ones; a Schema
    Registry's credentials): its Python workers, which write the staging files and decode the
    records, would go without them. The demo then starts one that has them (and stops it at the
    end). The values are compared, never printed."""
    from eos.compute import connect
    from eos.tools.servers import spark_server
    state = connect.read_state()
    if state is None:
        return
    try:
        raw = Path(f"/proc/{int(state['pid'])}/environ").read_bytes()
    except OSError:
        return  # cannot tell (no /proc): leave it
    if not raw:
        return  # mid-exec (or gone): cannot tell
    have = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    if all(have.get(name.encode()) == variables[name].encode() for name in names):
        return
    print(f"      stopping the Spark Connect server (pid {state['pid']}): it was started "
          f"without {', '.join(f'${n}' for n in names)} as this demo sets it", flush=True)
    spark_server.stop()


def run_until_caught_up(config: PipelineConfig, via: str, max_epochs: int) -> list[dict]:
    from eos.compute.epochs import run_epoch

    lines: list[dict[str, Any]] = []
    runner = _airflow_runner(config) if via == "airflow" else None
    session = time.strftime("%Y%m%dT%H%M%S")
    for i in range(max_epochs):
        line = runner(i) if runner else run_epoch(config, run_id=f"demo-{session}-{i}").summary()
        lines.append(line)
        rows = line["rows"]
        made = (f"{rows.get('rows', 0):>5} rows" if config.stateless else
                f"{rows.get('windows', 0):>5} windows, {rows.get('late', 0):>4} late")
        print(f"  epoch {line['epoch']:>3}: {line['records']:>7} records -> {made}, "
              f"{rows.get('quarantine', 0):>4} quarantined  ({line['seconds']}s)", flush=True)
        if line["records"] == 0:
            break
    return lines


def _airflow_runner(config: PipelineConfig):
    from eos.airflow.dag_runs import DagRunner

    runner = DagRunner(config)
    print(f"      Airflow home {runner.home} (SQLite); task logs: {runner.home / 'dag-runs.log'}",
          flush=True)
    return runner.run_next


def summary(config: PipelineConfig) -> str:
    """The status, then what each sink holds, read back the way its consumers read it."""
    from eos.core.pipeline_status import pipeline_status, render
    from eos.core.sink import SupportsReadBack, sinks_for

    lines = [render(pipeline_status(config)), ""]
    for sink in sinks_for(config):
        if not isinstance(sink, SupportsReadBack):
            lines.append(f"{sink.name} ({sink.output}): cannot be read back")
            continue
        rows = sink.read_back()
        lines.append(f"{sink.name} ({sink.output}): {len(rows)} rows")
        if sink.output == "windows":
            lines += _windows_view(config, rows)
        if sink.output == "quarantine" and rows:
            reasons = Counter(r["reason"] for r in rows)
            lines += [f"  reason x{n}: {reason}" for reason, n in reasons.most_common(6)]
        if sink.kind == "kafka":
            lines += _kafka_view(sink)
    return "\n".join(lines)


def _windows_view(config: PipelineConfig, rows: list[dict[str, Any]]) -> list[str]:
    """How many groups and windows, and how many events the ``count(*)`` column adds up to."""
    groups = {tuple(r.get(g) for g in config.group_by) for r in rows}
    windows = {(r.get("window_start"), r.get("window_end")) for r in rows}
    grouped = f"({', '.join(config.group_by)})" if config.group_by else "(no group_by)"
    line = f"  {len(groups)} groups of {grouped}, {len(windows)} windows"
    counts = [out for out, spec in config.aggregations.items()
              if spec.function == "count" and spec.field is None]
    if counts:
        total = sum(r.get(counts[0]) or 0 for r in rows)
        if config.windows.type == "hopping":
            per_event = config.windows.size // config.windows.slide
            line += f", {total} (event, window) pairs aggregated (each event is in {per_event})"
        else:
            line += f", {total} events aggregated"
    return [line]


def _kafka_view(sink: Any) -> list[str]:
    """What a ``read_committed`` consumer of the output topic sees: a few records as they are."""
    import confluent_kafka as ck

    from eos.core.kafka import consumer
    from eos.core.outputs import output_schema

    topic = sink.options.topic
    schema = output_schema(sink.config, sink.output)
    c = consumer(sink._settings(), group="eos-demo-view", **{"auto.offset.reset": "earliest"})
    lines = [f"  a read_committed consumer of '{topic}' sees, for example:"]
    try:
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        for _ in range(3):
            message = c.poll(5.0)
            if message is None or message.error():
                break
            headers = {k: v.decode() for k, v in message.headers() or []}
            key = message.key()
            lines.append(f"    key={key.decode() if key is not None else None} headers={headers}")
            value = message.value()
            if sink.options.format == "avro":
                lines.append(f"      value=Avro, schema id {int.from_bytes(value[1:5], 'big')}"
                             f", {len(value)} bytes: {sink.avro_values().decode(value, schema)}")
            else:
                lines.append(f"      value={value.decode()}")
    finally:
        c.close()
    return lines


# Events the demo produces by default, per shape: what the embedded broker retains in full
# (librdkafka's mock cluster keeps ~5 MiB per partition; a pageview is about twice a click).
# A pipeline publishing every row to a Kafka topic needs that topic to hold them all too: a
# row record (its value, key and headers) is about three clicks.
DEMO_EVENTS = {"clicks": 200_000, "pageviews": 100_000, "avro": 100_000, "rows_to_kafka": 50_000}


def _rows_to_kafka(config: PipelineConfig) -> bool:
    """Whether the pipeline publishes one record per accepted event to a Kafka topic."""
    return config.stateless and any("kafka" in spec for spec in config.sinks.rows or [])


def demo_spec(config: PipelineConfig, events: int | None = None) -> GeneratorSpec:
    """The demo's sample events, in the shape ``config`` reads (``eos.tools.produce.shape_for``):
    pageviews for 50 pages by 500 users, or clicks over 200 keys; both with some disorder, 1%
    late by 3 to 6 minutes and 0.5% bad records."""
    if config.event.format == "avro":  # shaped by the declared fields: 8 groups, 500 ids
        return GeneratorSpec(events=events or DEMO_EVENTS["avro"], keys=8, users=500,
                             interval_ms=10, disorder_ms=3000, late_fraction=0.01,
                             late_delay_ms=180_000, bad_fraction=0.005, seed=1)
    options = generator_options(config)
    shape = options["shape"]
    keys = 50 if shape == "pageviews" else 200
    default = DEMO_EVENTS["rows_to_kafka" if _rows_to_kafka(config) else shape]
    return GeneratorSpec(events=events or default, keys=keys, users=500,
                         interval_ms=10, disorder_ms=3000,
                         late_fraction=0.01, late_delay_ms=180_000, bad_fraction=0.005, seed=1,
                         **options)


def _check_retained(settings: dict[str, Any], topic: str, produced: int) -> None:
    """Fail now, not at the audit, if the broker already dropped some of what was produced."""
    from eos.core.kafka import topic_watermarks

    marks = topic_watermarks(settings, topic)
    dropped = sum(low for low, _ in marks.values())
    if dropped:
        raise DataLoss(
            f"the broker kept only {produced - dropped} of the {produced} records produced to "
            f"'{topic}' (the embedded broker retains about 5 MiB per partition); run the demo "
            f"with fewer --events or point KAFKA_BOOTSTRAP_SERVERS at a real broker")


def _check_outputs_retained(config: PipelineConfig) -> None:
    """Fail before the audit, saying why, if the broker dropped the oldest records of a Kafka
    sink's topic (a sink never deletes: its log start moved only by the broker's retention)."""
    from eos.core.kafka import topic_watermarks
    from eos.core.sink import sinks_for

    for sink in sinks_for(config):
        if sink.kind != "kafka":
            continue
        settings = sink._settings()  # type: ignore[attr-defined]
        if sum(low for low, _ in topic_watermarks(settings, sink.options.topic).values()):
            raise DataLoss(
                f"the broker no longer holds the oldest records of '{sink.options.topic}' (the "
                "embedded broker retains about 5 MiB per partition); run the demo with fewer "
                "--events or point KAFKA_BOOTSTRAP_SERVERS at a real broker")


def demo(config: PipelineConfig, events: int | None, via: str, max_epochs: int = 50) -> int:
    """The whole demo; the Spark Connect server is stopped at the end if the demo started it,
    the broker keeps running (with the demo's topic) so ``eos status``/``verify`` work after."""
    from eos.compute import connect
    from eos.tools.servers import spark_server
    from eos.tools.ui import needs_spark_server

    registry = start_registry(config)
    started_spark = needs_spark_server([config]) and connect.read_state() is None
    try:
        with _postgres(config):
            return _demo(config, events, via, max_epochs)
    finally:
        if registry is not None:
            registry.stop()
            print(f"stopped the Schema Registry stand-in at {registry.url}", flush=True)
        if started_spark and spark_server.stop():
            print("stopped the Spark Connect server the demo started", flush=True)
        state = local_broker()
        if state is not None:
            print(f"the embedded broker keeps running at {state['bootstrap']} (pid "
                  f"{state['pid']}) so `{here('eos status')}` and `{here('eos verify')}` can "
                  f"read it; stop it with `{here('eos broker stop')}`", flush=True)
        if is_remote(config.root):
            _store_epilogue(config)


@contextlib.contextmanager
def _postgres(config: PipelineConfig) -> Iterator[None]:
    """For a pipeline with ``postgres`` sinks, a local PostgreSQL server of the demo's own
    (``eos.tools.servers.postgres_server``: Debian's postgresql, 127.0.0.1, a generated password in
    the sinks' ``dsn_env`` and Airflow connection variables, never printed). It stops with
    the demo, its tables with it: the other sinks' tables stay."""
    from eos.tools.servers import postgres_server
    with postgres_server.serving(config) as server:
        if server is not None:
            names = sorted({o.dsn_env for _, s in config.sinks.by_output()
                            for k, o in s.items() if k == "postgres" and o.dsn_env})
            print(f"      PostgreSQL server (Debian's postgresql) at {server.host}:{server.port}"
                  f", database {server.database}; its DSN is in "
                  f"{', '.join('$' + n for n in names)} for what the demo starts", flush=True)
        try:
            yield
        finally:
            if server is not None:
                print("stopped the PostgreSQL server the demo started (its tables went with "
                      "it)", flush=True)


def start_registry(config: PipelineConfig) -> SchemaRegistryServer | None:
    """For an Avro pipeline, the Schema-Registry-compatible stand-in
    (``eos.tools.servers.schema_registry``: not Confluent's server, which does not install here) at
    ``schema_registry.url``, which must be on 127.0.0.1 or localhost. Its credentials are made
    here and put in this process's environment under ``schema_registry.auth_env``, so the
    producer, the Spark Connect server the demo starts, the epochs and the audit all read them
    there; they are never printed. It stops with the demo (its schemas live in memory)."""
    from urllib.parse import urlsplit

    from eos.core.errors import ConfigError
    from eos.tools.servers.schema_registry import SchemaRegistryServer

    registry = config.event.schema_registry
    if registry is None:
        return None
    where = urlsplit(registry.url)
    if where.hostname not in ("127.0.0.1", "localhost") or where.scheme != "http":
        raise ConfigError(f"the demo starts a Schema Registry stand-in on this machine; "
                          f"schema_registry.url {registry.url} is not http://127.0.0.1:PORT")
    if registry.auth_env is None:
        raise ConfigError("the demo hands its Schema Registry stand-in's credentials over in "
                          "the environment: set schema_registry.auth_env")
    server = SchemaRegistryServer("eos-demo", secrets.token_urlsafe(18))
    server.port = where.port or 80
    os.environ[registry.auth_env] = server.user_info
    _restart_spark_without({registry.auth_env: server.user_info}, (registry.auth_env,))
    server.start()
    print(f"      Schema Registry stand-in (eos.tools.servers.schema_registry) at {server.url}; "
          f"its credentials are in ${registry.auth_env} for what the demo starts", flush=True)
    return server


def here(command: str) -> str:
    """``command`` as a person can run it in another shell: with the data directory the demo
    used when it was set for it (``./dev`` sets ``EOS_DATA_DIR``), where the broker's and the
    store's state files are; a shell without it would look elsewhere."""
    explicit = os.environ.get(DATA_DIR_ENV, "").strip()
    return f"EOS_DATA_DIR={shlex.quote(explicit)} {command}" if explicit else command


def _store_epilogue(config: PipelineConfig) -> None:
    """How to read the demo's tables on the embedded store afterwards (it keeps running)."""
    from eos.tools.servers import object_store
    state = object_store.status()
    if state is None:
        return
    print(f"the embedded object store keeps running at {state['endpoint']} (pid {state['pid']}) "
          f"with the tables under {config.root}; read them with `eval \"$(eos store env)\"` "
          f"then `{here(f'eos status --config {config.source_path}')}`; stop it with "
          f"`{here('eos store stop')}`",
          flush=True)


def _demo(config: PipelineConfig, events: int | None, via: str, max_epochs: int) -> int:
    from eos.tools.audit.verify import audit
    from eos.tools.ui import needs_spark_server

    print(f"[1/4] starting the embedded broker and clearing {config.root}", flush=True)
    reset(config)
    if needs_spark_server([config]):
        from eos.tools.servers import spark_server
        state = spark_server.start(port=0)  # its own, stopped at the end: any free port
        print(f"      Spark Connect server at sc://{state['host']}:{state['port']} "
              f"(pid {state['pid']}; log {state['log']})", flush=True)
    spec = demo_spec(config, events)
    settings = client_settings(config.kafka.client)
    if config.event.format == "avro":
        from eos.tools.produce_avro import produce_avro

        print(f"[2/4] producing {spec.events} Avro events to '{config.kafka.sole_topic}' "
              "through the "
              f"registry (writer schema version 2 from event {spec.events // 2})", flush=True)
        done = produce_avro(spec, config, settings, evolve_at=spec.events // 2)
    else:
        print(f"[2/4] producing {spec.events} {spec.shape} events to '{config.kafka.sole_topic}'",
              flush=True)
        done = produce(spec, config.kafka.sole_topic, settings)
    print(f"      {done.records} records in {done.seconds:.1f}s: {dict(done.kinds)}", flush=True)
    _check_retained(settings, config.kafka.sole_topic, done.records)
    print(f"[3/4] running epochs ({'Airflow DAG runs' if via == 'airflow' else 'eos run'}, "
          f"at most {config.epoch.max_records} records each)", flush=True)
    run_until_caught_up(config, via, max_epochs)
    _check_outputs_retained(config)
    print("[4/4] summary and independent audit", flush=True)
    print(summary(config))
    report = audit(config)
    print(report.render())
    return 0 if report.ok else 1
