"""``python -m bench.dag_runs``: exactly-once as deployed, as Airflow DAG runs under a real
scheduler, next to the at-least-once baseline, in one run.

A real ``airflow standalone`` (scheduler with the LocalExecutor, which forks every task from the
scheduler after the home's ``config/airflow_local_settings.py`` preloaded the task modules; DAG
processor,
API server, triggerer; tests/support/airflow_standalone.py starts it) and one Spark Connect
server serve:

- **exactly-once**: the pipeline's DAG (the documented DAG file, ``environment.DAG_FILE``:
  begin -> precommit -> commit),
  one manually triggered run per epoch;
- **exactly-once, one task**: the same pipeline with ``compute.tasks: one`` (its own tables,
  the same records): the three phases in one task;
- **at-least-once as a DAG** (``bench/dags/bench_alo.py``, ``alo_task`` here): one task reading
  what its consumer group's committed offsets say is new, the same Spark read and aggregation
  on the same Connect server, appended to Delta, offsets committed to Kafka;
- **at-least-once with state as a DAG** (``bench_alo_state``, ``alo_state_task`` here), the fair
  baseline: one task computing what eos's precommit computes (``bench.scenarios.StatefulALO``:
  the same stager, the state carried in a staging table of its own), the outputs appended to
  Delta and its offsets row after, from where its own last offsets row left off;
- **exactly-once in-process** and **at-least-once in-process**: the epoch loop
  (``bench.scenarios.eo_epoch``, a pipeline with tables of its own) and
  ``bench.scenarios.alo_run``, over exactly the ranges the exactly-once DAG run planned, on a
  Connect session of this process: the same work without Airflow, so the gap between the DAG
  runs splits into what Airflow costs each way and what the protocol costs.

Each epoch: ``--epoch-records`` records produced, then one run of each, one after the other (the
machine has two cores), the two in-process runs last, taking turns too (epoch i starts with the
first of them when i is even). The four DAG runs take turns in each place (epoch i starts at
way i mod 4): whatever a run leaves behind on the
shared Connect server and JVM (JIT, GC, cleanup) lands on the next one, and a fixed order would
charge it to the same way every epoch (none was seen when measured: the seconds by place,
printed too, did not differ beyond the noise, docs/benchmarks.md). Counted epochs in a multiple
of four give each way each place equally often. Warm-up epochs run first and are not
counted (the pipeline's Connect session and the Python workers start). A run's seconds are
Airflow's (its ``end_date`` minus ``start_date``); the seconds from the trigger request to the
run seen done are printed beside.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import scenarios as sc
from bench.env import Env, environment
from eos.airflow.environment import DAG_FILE, DAG_FILE_NAME, write_once
from eos.core.config import PipelineConfig

REPO = Path(__file__).resolve().parents[1]  # the checkout: bench/ and tests/support
TOPIC = "bench-dag-runs"
ALO_DAG, ALO_STATE_DAG = "bench_alo", "bench_alo_state"
ALO_CONFIG_ENV, ALO_STATE_CONFIG_ENV = "EOS_BENCH_ALO_CONFIG", "EOS_BENCH_ALO_STATE_CONFIG"
RUN_TIMEOUT_S = 600.0
IDLE_SLEEP_S = "0.2"  # docker-compose.yaml's [scheduler] scheduler_idle_sleep_time
POLL_S = 0.5
EO, EO_ONE, ALO, ALO_STATE = ("exactly-once DAG run", "exactly-once DAG run, one task",
                              "at-least-once DAG run", "at-least-once with state DAG run")
EO_IN_PROCESS, ALO_IN_PROCESS = "exactly-once in-process", "at-least-once in-process"
DAG_WAYS = (EO, EO_ONE, ALO, ALO_STATE)  # the ways run as DAG runs, in turns (``turns``)
IN_PROCESS_WAYS = (EO_IN_PROCESS, ALO_IN_PROCESS)
WAYS = (*DAG_WAYS, *IN_PROCESS_WAYS)


# -- the baseline DAG's task ------------------------------------------------------------------

def alo_task(config_path: str) -> dict[str, Any]:
    """One at-least-once epoch (the body of ``bench/dags/bench_alo.py``'s task)."""
    import confluent_kafka as ck

    from eos.compute import connect
    from eos.core.config import load_config
    from eos.core.kafka import client_settings, consumer, topic_watermarks

    config = load_config(config_path)
    settings = client_settings(config.kafka.client)
    topic = config.kafka.topic
    c = consumer(settings, group=f"bench-alo-{config.name}")
    try:
        marks = topic_watermarks(settings, topic)
        asked = [ck.TopicPartition(topic, p) for p in sorted(marks)]
        committed = {tp.partition: tp.offset for tp in c.committed(asked, timeout=30)}
        plan = alo_plan(config, marks, committed)
        seconds = 0.0
        if plan.records:
            with connect.session(config, connect.resolve_endpoint()) as spark:
                seconds = sc.alo_run(spark, config, plan, str(config.tables.root)).seconds
        # After the append: a crash between the two reads the range again (at least once).
        c.commit(offsets=[ck.TopicPartition(topic, r.partition, r.until) for r in plan.ranges],
                 asynchronous=False)
    finally:
        c.close()
    return {"records": plan.records, "seconds": seconds}


def alo_plan(config: PipelineConfig, marks: dict[int, tuple[int, int]],
             committed: dict[int, int], epoch: int = 0) -> Any:
    """From each partition's committed offset (its log start if none) up to the high watermark,
    capped fairly at ``epoch.max_records`` as the exactly-once plan is."""
    from eos.core.plan import PartitionRange, Plan, cap_fairly

    start = {p: committed[p] if committed.get(p, -1) >= 0 else low
             for p, (low, _) in marks.items()}
    taken = cap_fairly({p: marks[p][1] - start[p] for p in marks}, config.epoch.max_records)
    return Plan(config.name, config.kafka.topic, epoch,
                tuple(PartitionRange(p, start[p], start[p] + n)
                      for p, n in sorted(taken.items()) if n))


def alo_state_task(config_path: str) -> dict[str, Any]:
    """One at-least-once epoch *with state* (the body of ``bench/dags/bench_alo.py``'s
    ``bench_alo_state`` task): the next epoch from where its own last offsets row left off,
    through ``bench.scenarios.StatefulALO`` (the state carried in its staging table)."""
    from eos.compute import connect
    from eos.core import checkpoints
    from eos.core.config import load_config
    from eos.core.kafka import client_settings, topic_watermarks
    from eos.core.tables import ensure_tables

    config = load_config(config_path)
    with ensure_tables(config) as tables:
        committed = checkpoints.last_checkpointed(tables, config.app_id)
        previous = checkpoints.last(tables, committed)
    marks = topic_watermarks(client_settings(config.kafka.client), config.kafka.topic)
    until = {tp.partition: offset for tp, offset in previous.until.items()} if previous else {}
    plan = alo_plan(config, marks, until, committed + 1)
    seconds = 0.0
    if plan.records:
        with connect.session(config, connect.resolve_endpoint()) as spark:
            seconds = sc.StatefulALO(config, spark, previous).epoch(plan).seconds
    return {"records": plan.records, "seconds": seconds}


# -- the benchmark ----------------------------------------------------------------------------

@dataclass
class Figures:
    """Seconds per measured epoch, each way; records per measured epoch."""

    records: list[int] = field(default_factory=list)
    seconds: dict[str, list[float]] = field(default_factory=lambda: {w: [] for w in WAYS})
    waited: dict[str, list[float]] = field(default_factory=lambda: {w: [] for w in DAG_WAYS})
    tasks: list[dict[str, float]] = field(default_factory=list)  # the three-task runs
    one_task: list[dict[str, float]] = field(default_factory=list)  # the one-task runs
    # (way, place) -> seconds: place 0 is the first DAG run of its epoch
    by_place: dict[tuple[str, int], list[float]] = field(default_factory=dict)


def turns(epoch: int) -> tuple[str, ...]:
    """The order of the DAG runs in ``epoch``: each way first every third epoch."""
    first = epoch % len(DAG_WAYS)
    return DAG_WAYS[first:] + DAG_WAYS[:first]


def _airflow_harness() -> Any:
    """tests/support/airflow_standalone.py: the suite's real ``airflow standalone`` (one way to
    start one, shared with the tests rather than written twice)."""
    tests = str(REPO / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from support import airflow_standalone

    return airflow_standalone


def _dags_folder(workdir: Path) -> Path:
    """The documented DAG file (the lines a deployment writes) and the baseline's, alone in a
    folder of their own."""
    folder = workdir / "dags"
    folder.mkdir(parents=True, exist_ok=True)
    write_once(folder / DAG_FILE_NAME, DAG_FILE)
    shutil.copy(REPO / "bench" / "dags" / "bench_alo.py", folder)
    return folder


def _seconds(run: dict[str, Any]) -> float:
    return (datetime.fromisoformat(run["end_date"])
            - datetime.fromisoformat(run["start_date"])).total_seconds()


def run_dag(airflow: Any, dag_id: str) -> tuple[dict[str, Any], float]:
    """Trigger one run and wait for it: the run as the REST API gives it, and the seconds from
    the trigger request to the run seen done."""
    started = time.perf_counter()
    run = airflow.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None})
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}"
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        run = airflow.api("GET", path)
        if run["state"] == "success":
            return run, time.perf_counter() - started
        if run["state"] == "failed":
            raise RuntimeError(f"{dag_id} run {run['dag_run_id']} failed:\n"
                               + _airflow_harness().summarize(airflow, dag_id))
        time.sleep(POLL_S)
    raise TimeoutError(f"{dag_id} run {run['dag_run_id']} not done in {RUN_TIMEOUT_S:.0f}s")


def task_seconds(airflow: Any, dag_id: str, run_id: str) -> dict[str, float]:
    """Each task's seconds, ``span``: from the first task's start to the last one's end (the
    time between tasks is the scheduler's hand-off), and each hand-off apart (``HOPS``: from a
    task's end to the next one's start)."""
    items = airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
    tis = items["task_instances"]
    out = {ti["task_id"]: _seconds(ti) for ti in tis}
    starts = {ti["task_id"]: datetime.fromisoformat(ti["start_date"]) for ti in tis}
    ends = {ti["task_id"]: datetime.fromisoformat(ti["end_date"]) for ti in tis}
    out["span"] = (max(ends.values()) - min(starts.values())).total_seconds()
    for hop, (before, after) in HOPS.items():
        if before in ends and after in starts:
            out[hop] = (starts[after] - ends[before]).total_seconds()
    return out


# The scheduler's hand-offs of a three-task run: the tasks each one lies between.
HOPS = {"begin -> precommit": ("begin", "precommit"),
        "precommit -> commit": ("precommit", "commit")}


def wait_parsed(airflow: Any, dag_ids: list[str]) -> None:
    harness = _airflow_harness()

    def parsed() -> bool:
        errors = airflow.api("GET", "/api/v2/importErrors")["import_errors"]
        if errors:
            raise RuntimeError(f"DAG import errors: {errors}")
        known = {d["dag_id"] for d in airflow.api("GET", "/api/v2/dags")["dags"]}
        return set(dag_ids) <= known

    harness.wait_for(f"the DAG processor to parse {dag_ids}", parsed, harness.PARSE_TIMEOUT_S,
                     airflow.problem)
    for dag_id in dag_ids:
        airflow.api("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False})


def measure(env: Env, base: Path, epochs: int, warmup: int, chunk: int,
            log: Any) -> Figures:
    """``warmup + epochs`` epochs of ``chunk`` records each way; the last ``epochs`` counted."""
    from eos.compute import connect
    from eos.core.layout import tables_for
    from eos.core.plan import plan_of

    harness = _airflow_harness()
    pipelines = env.workdir / "pipelines"
    pipelines.mkdir(parents=True, exist_ok=True)
    eo = env.config("dagruns", TOPIC, max_records=chunk, compute={"mode": "connect"})
    eo = eo.model_copy(update={"source_path": shutil.copy(str(eo.source_path), pipelines)})
    one = env.config("dagruns-one", TOPIC, max_records=chunk,
                     compute={"mode": "connect", "tasks": "one"})
    one = one.model_copy(update={"source_path": shutil.copy(str(one.source_path), pipelines)})
    alo = env.config("dagruns-alo", TOPIC, max_records=chunk, compute={"mode": "connect"})
    alo_state = env.config("dagruns-alo-state", TOPIC, max_records=chunk,
                           compute={"mode": "connect"})
    alo_path = str(env.workdir / "tables" / "dagruns-inprocess")
    eo_here = env.config("dagruns-eo-inprocess", TOPIC, max_records=chunk,
                         compute={"mode": "connect"})
    records = sc.generator((warmup + epochs) * chunk)
    figures = Figures()
    extra = {"AIRFLOW__CORE__DAGS_FOLDER": str(_dags_folder(env.workdir)),
             "EOS_PIPELINES_DIR": str(pipelines),
             "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                         os.environ.get("PYTHONPATH")])),
             ALO_CONFIG_ENV: str(alo.source_path),
             ALO_STATE_CONFIG_ENV: str(alo_state.source_path),
             # The scheduler's idle loop as docker-compose.yaml deploys it (Airflow's default:
             # 1 s); the local SQLite Airflow keeps the default (eos.airflow.environment).
             "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": IDLE_SLEEP_S,
             "EOS_FAULTS": ""}  # the harness arms a commit crash for the tests: none here
    log("starting airflow standalone (scheduler, DAG processor, API server, triggerer)")
    home = env.workdir / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    with harness.running_airflow(home, [eo, one], base,
                                 extra_env=extra) as airflow, \
            connect.session(alo, connect.resolve_endpoint(base)) as spark:
        wait_parsed(airflow, [eo.dag_id, one.dag_id, ALO_DAG, ALO_STATE_DAG])
        dags = {EO: eo.dag_id, EO_ONE: one.dag_id, ALO: ALO_DAG, ALO_STATE: ALO_STATE_DAG}
        for i in range(warmup + epochs):
            counted = i >= warmup
            sc.send_chunk(env, TOPIC, records, chunk)
            order = turns(i)
            runs = {way: run_dag(airflow, dags[way]) for way in order}
            eo_run, one_run = runs[EO][0], runs[EO_ONE][0]
            plan = plan_of(tables_for(eo), i)
            if plan_of(tables_for(one), i).ranges != plan.ranges:
                raise AssertionError(f"epoch {i}: the two exactly-once pipelines planned "
                                     "different ranges")
            line = {way: _seconds(run) for way, (run, _) in runs.items()}
            here = IN_PROCESS_WAYS if i % 2 == 0 else IN_PROCESS_WAYS[::-1]
            for way in here:
                line[way] = (eo_in_process(spark, eo_here, plan, f"dag-runs-{i}")
                             if way == EO_IN_PROCESS
                             else sc.alo_run(spark, alo, plan, alo_path).seconds)
            log(f"epoch {i}{'' if counted else ' (warm-up)'}: {plan.records:,} records; "
                + ", ".join(f"{w} {line[w]:.2f}s" for w in (*order, *here)))
            if not counted:
                continue
            figures.records.append(plan.records)
            for place, way in enumerate(order):
                figures.by_place.setdefault((way, place), []).append(line[way])
            for way, seconds in line.items():
                figures.seconds[way].append(seconds)
            for way, (_, waited) in runs.items():
                figures.waited[way].append(waited)
            figures.tasks.append(task_seconds(airflow, eo.dag_id, eo_run["dag_run_id"]))
            figures.one_task.append(task_seconds(airflow, one.dag_id, one_run["dag_run_id"]))
            # precommit's phase line as logged (Airflow's "Done. Returned value was: ..."
            # repeats it: not printed twice)
            log("\n".join(line for line in harness.task_log(
                airflow, eo.dag_id, eo_run["dag_run_id"], "precommit")
                if line.startswith("phase=")))
    return figures


def eo_in_process(spark: Any, eo: PipelineConfig, plan: Any, run_id: str) -> float:
    """Seconds of one exactly-once epoch in this process (begin, precommit, commit), checked to
    read ``plan``'s ranges."""
    planned, timing = sc.eo_epoch(eo, spark, run_id)
    if planned.ranges != plan.ranges:
        raise AssertionError(f"epoch {plan.epoch}: the in-process exactly-once pipeline planned "
                             "other ranges than the DAG run's")
    return timing.total


def render(f: Figures) -> str:
    events = sum(f.records)
    alo, fair = sum(f.seconds[ALO]), sum(f.seconds[ALO_STATE])
    inprocess = sum(f.seconds[ALO_IN_PROCESS])
    lines = [f"{len(f.records)} epochs of {statistics.median(f.records):,.0f} records "
             "(warm-up apart), Spark Connect, Airflow LocalExecutor", "",
             "| way | seconds per epoch (median) | trigger to done (median) | events/s "
             "| / ALO with state DAG run | / ALO DAG run | / ALO in-process |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for way in WAYS:
        total = sum(f.seconds[way])
        waited = (f"{statistics.median(f.waited[way]):.2f}" if way in f.waited else "-")
        lines.append(f"| {way} | {statistics.median(f.seconds[way]):.2f} | {waited} | "
                     f"{events / total:,.0f} | {fair / total:.2f}x | {alo / total:.2f}x | "
                     f"{inprocess / total:.2f}x |")
    med = {way: statistics.median(f.seconds[way]) for way in WAYS}
    lines += ["", "| median s | exactly-once (one task) | at-least-once | difference |",
              "| --- | ---: | ---: | ---: |"]
    for name, eo_way, alo_way in (("in-process", EO_IN_PROCESS, ALO_IN_PROCESS),
                                  ("DAG run", EO_ONE, ALO)):
        lines.append(f"| {name} | {med[eo_way]:.2f} | {med[alo_way]:.2f} | "
                     f"{med[eo_way] - med[alo_way]:+.2f} |")
    airflow_eo, airflow_alo = med[EO_ONE] - med[EO_IN_PROCESS], med[ALO] - med[ALO_IN_PROCESS]
    lines.append(f"| DAG run - in-process (Airflow's share) | {airflow_eo:.2f} | "
                 f"{airflow_alo:.2f} | {airflow_eo - airflow_alo:+.2f} |")
    phases = ("begin", "precommit", "commit")
    median = {k: statistics.median(t.get(k, 0.0) for t in f.tasks)
              for k in (*phases, "span", *HOPS)}
    outside = median["span"] - sum(median[k] for k in phases)
    one = statistics.median(t.get("epoch", 0.0) for t in f.one_task)
    lines += ["", "| exactly-once run (median s) | begin | precommit | commit "
              "| between tasks | " + " | ".join(HOPS) + " |",
              "| --- | ---: | ---: | ---: | ---: |" + " ---: |" * len(HOPS),
              "| " + " | ".join(["three tasks", *(f"{median[k]:.2f}" for k in phases),
                                 f"{outside:.2f}", *(f"{median[h]:.2f}" for h in HOPS)])
              + " |",
              f"| one task | {one:.2f} (the three phases) | | | 0 |" + " 0 |" * len(HOPS)]
    places = range(len(DAG_WAYS))
    lines += ["", "| DAG run (median s) by place in its epoch | "
              + " | ".join(("first", "second", "third", "fourth")[p] for p in places) + " |",
              "| --- |" + " ---: |" * len(places)]
    for way in DAG_WAYS:
        cells = [f"{statistics.median(f.by_place[way, p]):.2f}" if (way, p) in f.by_place
                 else "-" for p in places]
        lines.append(f"| {way} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.dag_runs",
                                description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=8,
                   help="counted epochs (a multiple of 4: each DAG run in each place as often)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--epoch-records", type=int, default=200_000)
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--workdir", type=Path)
    args = p.parse_args(argv)
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    from eos.tools.servers import spark_server
    try:
        sc.check_retained(2 * args.epoch_records, args.partitions)
    except ValueError as error:
        p.error(str(error))
    with environment(args.workdir, topics=(f"{TOPIC}:{args.partitions}",),
                     with_spark=False) as env:
        base = Path(os.environ["EOS_DATA_DIR"])
        log("starting a Spark Connect server")
        spark_server.start(base=base, port=0)
        try:
            figures = measure(env, base, args.epochs, args.warmup, args.epoch_records, log)
        finally:
            spark_server.stop(base)
    print("\n" + render(figures), flush=True)
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
