"""``eos ui``: the pipelines' DAGs in a local Airflow (``airflow standalone``: UI and API server,
scheduler, DAG processor, triggerer; SQLite metadata DB) next to the embedded Kafka broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from eos.airflow.environment import PASSWORDS_FILE, airflow_env, airflow_home
from eos.core.config import PipelineConfig, list_pipelines, load_config, load_pipeline
from eos.core.extras import require
from eos.core.kafka import local_broker

STANDALONE_LOG = "standalone.log"  # under AIRFLOW_HOME: Airflow's own output


def start_ui(pipeline_names: list[str] | None = None, home: Path | None = None,
             port: int = 8080) -> int:
    """Run Airflow in the foreground until Ctrl-C; return its exit code. Its home is ``home``,
    else ``$AIRFLOW_HOME``, else ``~/airflow`` (``airflow_home()``).

    The embedded broker is started with the named pipelines' topics (all pipelines when none is
    named) unless ``KAFKA_BOOTSTRAP_SERVERS`` names another broker, and the Spark Connect server
    when a pipeline computes on it; each is stopped afterwards only if this call started it.
    Every pipeline's DAG is shown, named or not.
    """
    require("airflow", "eos ui")
    from eos.compute import connect
    from eos.tools.servers import broker, spark_server
    configs = ([load_pipeline(name) for name in pipeline_names] if pipeline_names
               else [load_config(path) for path in list_pipelines()])
    home = home or airflow_home()
    home.mkdir(parents=True, exist_ok=True)
    started_spark = False
    if needs_spark_server(configs):
        started_spark = connect.read_state() is None
        print("starting the Spark Connect server (eos spark start)..." if started_spark
              else "using the running Spark Connect server", flush=True)
        spark = spark_server.start()
        print(f"Spark Connect server at sc://{spark['host']}:{spark['port']} (pid {spark['pid']})")
    env = airflow_env(configs, home, port)

    started_broker = False
    if not os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        started_broker = local_broker() is None
        state = broker.start(topics=sorted({topic for config in configs
                                            for topic in config.kafka.named_topics or []}))
        print(f"embedded Kafka broker at {state['bootstrap']} (pid {state['pid']})")
        if started_broker:
            for config in configs:
                if (line := follow_new_embedded_broker(config)) is not None:
                    print(line)

    url = f"http://127.0.0.1:{env['AIRFLOW__API__PORT']}"
    print(f"Airflow UI: {url}  (AIRFLOW_HOME={home})")
    print(f"epochs view: Browse -> Exactly-once epochs ({url}/plugin/eos-epochs)")
    print(f"login: admin, password in {home / PASSWORDS_FILE} (written on the first start)")
    print("DAGs: " + ", ".join(config.dag_id for config in configs)
          + " (new DAGs start paused: unpause or trigger them in the UI); Ctrl-C stops")
    # Airflow's own lines (every component's info logs) go to a file, not this terminal: the
    # lines above are what a person needs, and an error of Airflow's is shown when it exits.
    log_path = home / STANDALONE_LOG
    print(f"Airflow's own log: {log_path}", flush=True)
    airflow = Path(sys.executable).parent / "airflow"
    # Airflow runs in a process group of its own, with SIGINT handled (a shell may have ignored
    # it); Ctrl-C or SIGTERM here stops that whole group (see _stop_group).
    with log_path.open("ab") as airflow_log:
        proc = subprocess.Popen(
            [str(airflow) if airflow.exists() else "airflow", "standalone"], env=env,
            stdout=airflow_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        code = 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _stop_group(proc)
        if started_broker:
            broker.stop()
        if started_spark:
            spark_server.stop()
    if code:
        print(f"airflow standalone exited with code {code}; the end of its log "
              f"({log_path}):\n{_tail(log_path)}", file=sys.stderr)
    return code


def _tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file."""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def follow_new_embedded_broker(config: PipelineConfig) -> str | None:
    """A pipeline whose committed epochs were read from an embedded broker that is gone (it
    stopped, or the machine restarted: librdkafka's mock cluster keeps records in memory, so
    they went with it) cannot go on from its offsets on the broker just started: its next run
    would stop with ``SourceChanged``. The records of the gone broker can never be read again,
    so the pipeline moves to this broker's topic from its start, as ``eos move-source --from
    earliest`` does (recorded in the epoch log, audited as a move); what it committed stays.
    Returns the line that says so, or None when nothing needed moving (a real cluster is never
    moved here: that is an operator's decision)."""
    from eos.core import checkpoints, epochlog
    from eos.core.errors import EosError
    from eos.core.kafka import MOCK_CLUSTER_PREFIX, client_settings, cluster_id
    from eos.core.layout import tables_for
    from eos.core.move import StartPosition, move_source
    from eos.core.plan import Plan, committed_source

    if not config.kafka.named_topics:
        return None
    try:
        tables = tables_for(config)
        committed = checkpoints.last_checkpointed(tables, config.app_id)
        old = committed_source(tables, checkpoints.last(tables, committed))
        now = cluster_id(client_settings(config.kafka.client), config.kafka.named_topics[0])
        planned = epochlog.first_plan_row(tables, committed + 1)
    except EosError:
        return None
    if planned is not None and Plan.from_json(planned["plan"]).cluster_id == now:
        return None  # already moved here (the next epoch is planned on this broker)
    gone = old is not None and old.cluster_id is not None and old.cluster_id.startswith(
        MOCK_CLUSTER_PREFIX)
    if not gone or old is None or now is None or old.cluster_id == now:
        return None
    try:
        move_source(config, StartPosition.parse("earliest"), run_id="eos-ui")
    except EosError as error:
        return (f"pipeline '{config.name}': its epochs were read from an embedded broker that "
                f"is gone; it could not move to this one ({error}): run `eos move-source "
                f"--pipeline {config.name} --from earliest` before its next run")
    return (f"pipeline '{config.name}': its committed epochs were read from an embedded broker "
            "that is gone (its records went with it); it goes on from this broker's topic "
            "start (a move, recorded in its epoch log)")


def needs_spark_server(configs: list[PipelineConfig]) -> bool:
    """Whether a local Spark Connect server should run: a pipeline computes on Connect and
    no other server is named (``EOS_SPARK_REMOTE``)."""
    from eos.compute.connect import REMOTE_ENV

    return (any(c.compute.mode == "connect" for c in configs)
            and not os.environ.get(REMOTE_ENV))


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGINT every Airflow process, as Ctrl-C in a terminal would; escalate if any is left.

    Escalation is needed: in Airflow 3.1 the scheduler can hang on exit waiting for its
    LocalExecutor workers, which ignore SIGINT and survive SIGTERM.
    """
    for sig, grace_s in ((signal.SIGINT, 30.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        deadline = time.monotonic() + grace_s
        try:
            os.killpg(proc.pid, sig)
            while time.monotonic() < deadline:
                proc.poll()  # reap the group leader
                os.killpg(proc.pid, 0)
                time.sleep(0.5)
        except ProcessLookupError:
            break
    proc.poll()
