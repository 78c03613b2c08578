"""``eos ui``: the pipelines' DAGs in a local Airflow (``airflow standalone``: UI and API server,
scheduler, DAG processor, triggerer; SQLite metadata DB) next to the embedded Kafka broker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from eos.config import PROJECT_ROOT, PipelineConfig, list_pipelines, load_config, load_pipeline

AIRFLOW_HOME = PROJECT_ROOT / "airflow_home"  # gitignored
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"


def airflow_env(configs: list[PipelineConfig], home: Path = AIRFLOW_HOME,
                port: int = 8080) -> dict[str, str]:
    """The environment ``airflow standalone`` runs in; settings already in the env win."""
    port = int(os.environ.get("AIRFLOW__API__PORT") or port)
    masters = {config.spark.master for config in configs}
    master = os.environ.get("EOS_SPARK_MASTER") or (
        masters.pop() if len(masters) == 1 else "local[2]"
    )
    env = {
        **_spark_connect_connection(),
        # Without a spark_default connection, SparkSubmitOperator would submit to yarn.
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": master}),
        "AIRFLOW__API__PORT": str(port),
        # The API server (UI, REST API, the epochs view) listens on loopback only.
        "AIRFLOW__API__HOST": "127.0.0.1",
        # SQLite: wait for the lock instead of failing `airflow backfill create` while the
        # scheduler writes.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}?timeout=60",
        # LocalExecutor forks this many workers up front; the tasks here are few and Spark-heavy.
        "AIRFLOW__CORE__PARALLELISM": "4",
        # Task processes report to the API server; its default URL assumes port 8080.
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    # Every component (and every task) must run this interpreter: the project's venv.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _spark_connect_connection() -> dict[str, str]:
    """``spark_connect_default`` for the server ``eos spark start`` runs, if one does (its
    token goes into the child's environment only, never to the terminal)."""
    from eos import connect

    state = connect.read_state()
    if state is None:
        return {}
    return {"AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": connect.airflow_connection(state)}


def start_ui(pipeline_names: list[str] | None = None, home: Path = AIRFLOW_HOME,
             port: int = 8080) -> int:
    """Run Airflow in the foreground until Ctrl-C; return its exit code.

    The embedded broker is started with the named pipelines' topics (all pipelines when none is
    named) unless ``KAFKA_BOOTSTRAP_SERVERS`` names another broker, and the Spark Connect server
    when a pipeline computes on it; each is stopped afterwards only if this call started it.
    Every pipeline's DAG is shown, named or not.
    """
    from eos import broker, connect

    configs = ([load_pipeline(name) for name in pipeline_names] if pipeline_names
               else [load_config(path) for path in list_pipelines()])
    home.mkdir(parents=True, exist_ok=True)
    started_spark = False
    if needs_spark_server(configs):
        started_spark = connect.read_state() is None
        print("starting the Spark Connect server (eos spark start)..." if started_spark
              else "using the running Spark Connect server", flush=True)
        spark = connect.start()
        print(f"Spark Connect server at sc://{spark['host']}:{spark['port']} (pid {spark['pid']})")
    env = airflow_env(configs, home, port)

    started_broker = False
    if not os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        started_broker = broker.read_state() is None
        state = broker.start(topics=sorted({config.kafka.topic for config in configs}))
        print(f"embedded Kafka broker at {state['bootstrap']} (pid {state['pid']})")

    url = f"http://127.0.0.1:{env['AIRFLOW__API__PORT']}"
    print(f"Airflow UI: {url}  (AIRFLOW_HOME={home})")
    print(f"epochs view: Browse -> Exactly-once epochs ({url}/plugin/eos-epochs)")
    print(f"login: admin, password in {home / PASSWORDS_FILE} (written on the first start)")
    print("DAGs: " + ", ".join(config.dag_id for config in configs)
          + " (new DAGs start paused: unpause or trigger them in the UI); Ctrl-C stops")
    airflow = Path(sys.executable).parent / "airflow"
    # Airflow runs in a process group of its own, with SIGINT handled (a shell may have ignored
    # it); Ctrl-C or SIGTERM here stops that whole group (see _stop_group).
    proc = subprocess.Popen(
        [str(airflow) if airflow.exists() else "airflow", "standalone"], env=env,
        start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
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
            connect.stop()
    return code


def needs_spark_server(configs: list[PipelineConfig]) -> bool:
    """Whether a local Spark Connect server should run: a pipeline computes on Connect and
    no other server is named (``EOS_SPARK_REMOTE``)."""
    from eos.connect import REMOTE_ENV

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
