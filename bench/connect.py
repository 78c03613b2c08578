"""``python -m bench.connect``: what a long-lived Spark Connect server would save per epoch.

Production starts Spark for every epoch (``spark-submit`` of ``spark_apps/precommit.py``). The
pyspark wheel also ships the Spark Connect server (``jars/spark-connect_2.13-*.jar``), so a
long-lived server could run every epoch's Spark work while each Airflow task stays a short Python
process that connects to it. This probe starts such a server and runs empty epochs, each in a
fresh Python process as an Airflow task would (begin -> precommit -> commit, the library's own
functions), and times them against ``spark-submit`` of the same empty epoch.

One change is needed for the library to run on Spark Connect, applied here on the client session
only: ``eos.stage.compute_epoch`` calls ``spark.createDataFrame(state.windows)``, and Connect
cannot infer a schema from an empty Arrow table, so the schema must be passed explicitly.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from bench import scenarios as sc
from bench.env import environment
from bench.report import median

STATE_DDL = ("key string, window_start_ms bigint, count bigint, sum decimal(38,9), "
             "min decimal(38,9), max decimal(38,9)")

CLIENT = textwrap.dedent("""
    import sys, time
    started = time.perf_counter()
    from pyspark.sql import SparkSession
    from eos.config import load_config
    from eos.protocol import begin, commit, precommit
    from eos.reader import KafkaRangeDataSource
    spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
    spark.dataSource.register(KafkaRangeDataSource)
    create = spark.createDataFrame  # Connect cannot infer a schema from an empty Arrow table
    spark.createDataFrame = lambda data, schema=None: create(
        data, schema=schema or (sys.argv[3] if data.num_rows == 0 else None))
    config = load_config(sys.argv[2])
    plan = begin(config)
    result = precommit(config, plan.epoch, spark=spark)
    commit(config, plan.epoch)
    print(f"epoch={plan.epoch} records={plan.records} outcome={result.outcome} "
          f"seconds={time.perf_counter() - started:.3f}")
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, log: Path) -> tuple[subprocess.Popen, float]:
    submit = Path(sys.executable).parent / "spark-submit"
    cmd = [str(submit) if submit.exists() else "spark-submit", "--master", "local[2]",
           "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
           "--conf", f"spark.connect.grpc.binding.port={port}",
           "--conf", "spark.sql.shuffle.partitions=2",
           "--conf", "spark.sql.session.timeZone=UTC", "--conf", "spark.ui.enabled=false",
           "--conf", f"spark.pyspark.python={sys.executable}", "spark-internal"]
    started = time.perf_counter()
    server = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT,
                              env={**os.environ, "PYSPARK_PYTHON": sys.executable},
                              start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"Spark Connect server exited; see {log}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, time.perf_counter() - started
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError(f"Spark Connect server did not listen within 120s; see {log}")


def probe(repeat: int) -> dict[str, object]:
    from eos.protocol import begin

    out: dict[str, object] = {}
    with environment() as env:
        config = env.config("connect", "bench-connect")
        sc.produce_topic(env, "bench-connect", 1000)
        sc.run_eo(env, config, "connect-catch-up")  # caught up: every further epoch is empty
        submit = sc.spark_submit(config, repeat)
        port = free_port()
        server, up = start_server(port, env.workdir / "connect-server.log")
        try:
            fresh = []
            for _ in range(repeat + 1):  # the first one also warms the server up
                t0 = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-c", CLIENT, f"sc://127.0.0.1:{port}",
                     str(config.source_path), STATE_DDL],
                    capture_output=True, text=True, check=False)
                if done.returncode != 0 or "outcome=staged" not in done.stdout:
                    raise RuntimeError(f"Connect client failed: {done.stderr[-2000:]}")
                fresh.append(time.perf_counter() - t0)
            if begin(config).records:
                raise AssertionError("expected empty epochs only")
        finally:
            os.killpg(server.pid, 15)
            server.wait(60)
        out = {
            "server_start_s": up,
            "connect_epoch_s": median(fresh[1:]), "connect_first_epoch_s": fresh[0],
            "submit_empty_precommit_s": median(submit["empty"]),
            "submit_committed_s": median(submit["committed"]),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.connect", description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    r = probe(args.repeat)
    print(f"Spark Connect server start-up (once):                 {r['server_start_s']:.2f} s")
    print(f"empty epoch, fresh Python process + Connect (median): {r['connect_epoch_s']:.2f} s "
          f"(first: {r['connect_first_epoch_s']:.2f} s)")
    print(f"empty epoch precommit via spark-submit (median):      "
          f"{r['submit_empty_precommit_s']:.2f} s")
    print(f"spark-submit of a committed epoch, no session:        "
          f"{r['submit_committed_s']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
