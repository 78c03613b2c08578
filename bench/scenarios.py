"""One function per measurement. Each returns plain dicts of seconds, counts and rates.

The exactly-once (EO) path is the library's one epoch loop, in-process on the shared session
exactly as the test suite runs it: ``eos.compute.epochs.run_epoch(config, run_id, spark=session)``
(begin -> precommit -> commit, each phase timed).
The at-least-once (ALO) baseline runs the same Spark read and aggregation
(``eos.compute.precommit.frames.epoch_frames`` with an empty state) over the same offset
ranges and appends the result straight to a Delta table: no epoch log, no staging, no commit
phase, no state carried.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bench.env import Env
from eos.compute.epochs import EpochResult, run_epoch, run_until_caught_up
from eos.core.config import PipelineConfig
from eos.core.plan import Plan
from eos.tools.servers.mock_cluster import DEFAULT_PARTITIONS

# The demo's shape of traffic: 1% deliberately late, 0.5% malformed, a little disorder.
TRAFFIC = {"interval_ms": 10, "disorder_ms": 2000, "late_fraction": 0.01,
           "late_delay_ms": 300_000, "bad_fraction": 0.005, "seed": 7}


def now() -> float:
    return time.perf_counter()


# --------------------------------------------------------------------------- producing


# The embedded broker is librdkafka's mock cluster, which keeps at most 5 MiB per partition
# (rdkafka_mock.c: mpart->max_size) and silently drops the oldest message sets beyond that:
# about 58,000 of these ~90-byte records per partition, 230,000 over the default 4 partitions.
# So the input is streamed: the benchmark produces one epoch's worth, runs that epoch, produces
# the next; and a bigger epoch needs a topic created with more partitions (``--partitions``,
# ``eos.tools.servers.broker.TopicSpec``).
RETAINED_PER_PARTITION = 50_000


def max_retained_events(partitions: int = DEFAULT_PARTITIONS) -> int:
    return RETAINED_PER_PARTITION * partitions


MAX_RETAINED_EVENTS = max_retained_events()  # 200,000 on a topic with the default partitions


def check_retained(records: int, partitions: int = DEFAULT_PARTITIONS) -> None:
    """Refuse epochs of more records than a topic of ``partitions`` on the embedded broker
    retains: the oldest would be dropped before the epoch reads them."""
    if records > max_retained_events(partitions):
        raise ValueError(f"epochs of {records:,} records: the embedded broker retains only "
                         f"about {max_retained_events(partitions):,} of these events in "
                         f"{partitions} partitions (raise --partitions)")


def generator(events: int, keys: int = 1000, **traffic: Any) -> Iterator[Any]:
    from eos.tools.generator import GeneratorSpec, generate

    return generate(GeneratorSpec(events=events, keys=keys, **{**TRAFFIC, **traffic}))


def send_chunk(env: Env, topic: str, records: Iterator[Any], count: int) -> float:
    """Produce the next ``count`` records of ``records``; return the seconds it took."""
    from eos.tools.produce import send

    started = now()
    summary = send(itertools.islice(records, count), count, topic, env.settings(),
                   progress=False)
    if summary.records != count:
        raise AssertionError(f"produced {summary.records} records, wanted {count}")
    return now() - started


def produce_topic(env: Env, topic: str, events: int, keys: int = 1000, **traffic: Any) -> dict:
    """Produce ``events`` generated events to ``topic`` (eos.tools.produce, idempotent producer)."""
    if events > MAX_RETAINED_EVENTS:
        raise ValueError(f"the embedded broker cannot retain {events:,} events; stream them")
    seconds = send_chunk(env, topic, generator(events, keys, **traffic), events)
    return {"events": events, "seconds": seconds, "rate": events / seconds}


# --------------------------------------------------------------------------- exactly-once


@dataclass
class EpochTiming:
    epoch: int
    records: int
    begin: float
    precommit: float
    commit: float
    read_parse: float = 0.0
    aggregate: float = 0.0  # windows job + late/quarantine job (both on the cached parse)
    staging_write: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    written_by: str | None = None  # who wrote the staged files: "driver" or "executors"

    @property
    def precommit_other(self) -> float:
        """Precommit wall time that is not data work: plan/state reads, checks, staging rows
        building, epoch-log append, Spark planning."""
        return max(0.0, self.precommit - self.read_parse - self.aggregate - self.staging_write)

    @property
    def total(self) -> float:
        return self.begin + self.precommit + self.commit


def epoch_timing(run: EpochResult) -> EpochTiming:
    """One run of the epoch loop as the benchmarks report it: its phases' seconds, and
    precommit's parts as precommit timed them."""
    ms = run.staged.timings_ms
    return EpochTiming(
        epoch=run.epoch, records=run.plan.records, begin=run.phases["begin"],
        precommit=run.phases["precommit"], commit=run.phases["commit"],
        read_parse=ms.get("read_parse", 0.0) / 1000,
        aggregate=ms.get("aggregate", 0.0) / 1000,
        staging_write=ms.get("staging_write", 0.0) / 1000,
        counts=dict(run.staged.counts), written_by=run.staged.written_by,
    )


def eo_epoch(config: PipelineConfig, spark: Any, run_id: str) -> tuple[Plan, EpochTiming]:
    """One epoch through the exactly-once path (the epoch loop), timed phase by phase."""
    run = run_epoch(config, run_id, spark=spark)
    return run.plan, epoch_timing(run)


@dataclass
class EORun:
    epochs: list[EpochTiming]
    plans: list[Plan]
    empty: EpochTiming | None  # the epoch that found nothing left: pure fixed overhead
    peak_rss_mb: float | None = None

    def phase_seconds(self) -> dict[str, float]:
        keys = ("begin", "read_parse", "aggregate", "staging_write", "precommit_other", "commit")
        out = {k: sum(getattr(e, k) for e in self.epochs) for k in keys}
        out["total"] = sum(e.total for e in self.epochs)
        return out


def run_eo(env: Env, config: PipelineConfig, tag: str, max_epochs: int = 10_000) -> EORun:
    """Epochs until the pipeline has caught up (the epoch loop's ``run_until_caught_up``; it
    raises after ``max_epochs`` non-empty ones); the final empty epoch is kept apart."""
    env.sampler.reset()
    *full, last = run_until_caught_up(config, tag, spark=env.spark, limit=max_epochs)
    return EORun([epoch_timing(run) for run in full], [run.plan for run in full],
                 epoch_timing(last), env.sampler.peak_mb())


# --------------------------------------------------------------------------- at-least-once


@dataclass
class ALORun:
    seconds: float = 0.0
    read_parse: float = 0.0
    aggregate: float = 0.0
    write: float = 0.0
    output_rows: int = 0
    peak_rss_mb: float | None = None

    @property
    def other(self) -> float:
        """Spark planning and the empty state's DataFrame: neither read, aggregate nor write."""
        return max(0.0, self.seconds - self.read_parse - self.aggregate - self.write)

    def add(self, other: ALORun) -> None:
        self.seconds += other.seconds
        self.read_parse += other.read_parse
        self.aggregate += other.aggregate
        self.write += other.write
        self.output_rows += other.output_rows


def alo_epoch(env: Env, config: PipelineConfig, plan: Plan, path: str) -> ALORun:
    """The same Spark read + aggregation over the same range, appended straight to Delta."""
    return alo_run(env.spark, config, plan, path)


def alo_run(spark: Any, config: PipelineConfig, plan: Plan, path: str) -> ALORun:
    """``alo_epoch`` on a given Spark session (bench.dag_runs' baseline DAG uses Connect)."""
    import pyarrow.compute as pc
    from deltalake import write_deltalake

    from eos.compute.precommit.frames import epoch_frames
    from eos.compute.precommit.resume import resume_state
    from eos.core.outputs import window_rows
    from eos.core.tables import ensure_tables

    # ALO carries no state: every epoch starts from nothing, as if it were epoch 0. It collects
    # the windows to this process and appends them with delta-rs, as a job without a staging
    # protocol would.
    empty_state = resume_state(config, ensure_tables(config), None)
    timings: dict[str, float] = {}
    t0 = now()
    with epoch_frames(spark, config, plan, empty_state, timings) as frames:
        started = now()
        windows, side = frames.windows.toArrow(), frames.side.toArrow()
        timings["aggregate"] = (now() - started) * 1000
    t1 = now()
    as_output = windows.append_column("kind", pa.array(["output"] * windows.num_rows))
    write_deltalake(f"{path}/target", window_rows(config, as_output, plan.epoch), mode="append")
    if side.num_rows:
        quarantined = side.filter(pc.equal(side["kind"], "quarantine"))
        write_deltalake(f"{path}/quarantine", quarantined, mode="append")
    t2 = now()
    return ALORun(
        seconds=t2 - t0,
        read_parse=timings.get("read_parse", 0.0) / 1000,
        aggregate=timings.get("aggregate", 0.0) / 1000,
        write=t2 - t1,
        output_rows=windows.num_rows,
    )


@dataclass
class StatefulALO:
    """At-least-once *with state*: the fair baseline. Each epoch computes exactly what eos's
    precommit computes (the same stager: windows, watermark, late rows, quarantine, open
    windows carried from the epoch before as incremental state), makes the state durable in
    one Delta commit of its own table (as any stateful job must), appends the outputs straight
    to Delta tables and then records its offsets and where its state is (one row, as
    Structured Streaming's offset and commit logs do).

    What it leaves out is exactly the exactly-once protocol's work: no plan logged before the
    read, no epoch log, no check that the epoch is still next, no seal, no fenced sink write
    (``txn``) or check before it, no staging retention. A crash between the appends and the
    offsets row would replay the epoch into the tables: at-least-once."""

    config: PipelineConfig
    spark: Any
    previous: Any = None  # the last epoch's ``Checkpoint`` row (None before epoch 0)

    def epoch(self, plan: Plan) -> ALORun:
        from deltalake import write_deltalake

        from eos.compute.precommit.stager import SparkStager
        from eos.core import checkpoints, staging
        from eos.core.checkpoints import Checkpoint
        from eos.core.outputs import epoch_outputs
        from eos.core.tables import ensure_tables, staging_schema

        timings: dict[str, float] = {}
        t0 = now()
        with ensure_tables(self.config) as tables:
            staged = SparkStager(self.spark).stage(self.config, tables, plan, self.previous,
                                                   timings)
            t1 = now()
            version = staging.commit(tables.refreshed(tables.staging), staged.files, plan.epoch,
                                     staging_schema(self.config), self.config.app_id, plan.hash)
            if version is None:
                raise AssertionError(f"at-least-once epoch {plan.epoch} was not staged")
            rows = staging.staged_epoch(tables, plan.epoch, plan.hash, state=False)
            assert rows is not None
            watermark = self.previous.watermark_ms if self.previous is not None else None
            outputs = epoch_outputs(self.config, rows, plan.epoch, watermark, plan.topic)
            for output, table in outputs.items():
                if table.num_rows:
                    write_deltalake(f"{self.config.root}/alo-{output}", table, mode="append")
            checkpoint = Checkpoint(
                epoch=plan.epoch, plan_hash=plan.hash, until=plan.until,
                watermark_ms=staged.watermark_ms,
                rows={name: table.num_rows for name, table in outputs.items()},
                config=self.config.schema_view(), source=plan.source)
            checkpoints.append(tables, self.config.app_id, checkpoint)
        self.previous = checkpoint
        t2 = now()
        return ALORun(seconds=t2 - t0, read_parse=timings.get("read_parse", 0.0) / 1000,
                      aggregate=timings.get("aggregate", 0.0) / 1000, write=t2 - t1,
                      output_rows=outputs[next(iter(outputs))].num_rows)


def run_alo(env: Env, config: PipelineConfig, plans: list[Plan], path: str) -> ALORun:
    env.sampler.reset()
    total = ALORun()
    for plan in plans:
        total.add(alo_epoch(env, config, plan, path))
    total.peak_rss_mb = env.sampler.peak_mb()
    return total


# --------------------------------------------------------------------------- read stage


def spark_read_only(env: Env, config: PipelineConfig, plans: list[Plan]) -> float:
    """Seconds for Spark to read the same ranges through ``eos_kafka`` and count them."""
    from eos.compute.precommit.read import read_ranges

    seconds = 0.0
    for plan in plans:
        t0 = now()
        n = read_ranges(env.spark, config, plan).count()
        seconds += now() - t0
        if n != plan.records:
            raise AssertionError(f"spark read {n} records for a plan of {plan.records}")
    return seconds


def bare_consume(settings: dict[str, Any], topic: str, partition: int, start: int,
                 until: int) -> int:
    """The ceiling: a plain confluent-kafka consumer reading ``[start, until)`` in batches.

    It asks for at most the records still missing, so it never waits out a poll timeout at the
    end of the range; it only counts records (no copying into columns, no Arrow)."""
    import confluent_kafka as ck

    from eos.core.kafka import consumer

    if until <= start:
        return 0
    c = consumer(settings, group=f"bench-bare-{topic}")
    seen, last = 0, start - 1
    try:
        c.assign([ck.TopicPartition(topic, partition, start)])
        while last < until - 1:
            batch = c.consume(num_messages=min(10_000, until - 1 - last), timeout=1.0)
            for m in batch:
                if m.error() is not None:
                    continue
                offset = m.offset()
                if offset >= until:
                    last = until - 1
                    break
                seen += 1
                last = offset
    finally:
        c.close()
    return seen


def bare_read(env: Env, plans: list[Plan]) -> float:
    """Seconds for one plain consumer (one process, one core) to read the same ranges."""
    settings = env.settings()
    seconds = 0.0
    for plan in plans:
        t0 = now()
        n = sum(bare_consume(settings, plan.topic, r.partition, r.start, r.until)
                for r in plan.ranges)
        seconds += now() - t0
        if n != plan.records:
            raise AssertionError(f"bare consumer read {n} records for a plan of {plan.records}")
    return seconds


# --------------------------------------------------------------------------- commit latency


def _fabricated_windows(n_rows: int, size_ms: int) -> pa.Table:
    """``n_rows`` merged windows of the clicks aggregations (three events of 12.5 each), in
    the columns ``eos.compute.precommit.frames.epoch_frames`` returns."""
    from decimal import Decimal

    from eos.tools.generator import BASE_TIME_MS

    dec = pa.decimal128(38, 9)
    starts = pa.array([BASE_TIME_MS + (i % 60) * size_ms for i in range(n_rows)], pa.int64())
    value = pa.array([Decimal("12.5")] * n_rows, dec)
    total = pa.array([Decimal("37.5")] * n_rows, dec)
    three = pa.array([3] * n_rows, pa.int64())
    return pa.table({
        "g__key": pa.array([f"k{i:07d}" for i in range(n_rows)], pa.string()),
        "window_start_ms": starts,
        "window_end_ms": pc.add(starts, size_ms),
        "s__count__n": three, "s__sum__sum": total, "s__min__v": value, "s__max__v": value,
        "s__avg__sum": total, "s__avg__n": three,
        "o__count": three, "o__sum": total, "o__min": value, "o__max": value,
        "o__avg": pa.array([12.5] * n_rows, pa.float64()),
    })


def _empty_side() -> pa.Table:
    """No late or quarantined rows."""
    return pa.schema([("kind", pa.string())]).empty_table()


def stage_fabricated_epoch(config: PipelineConfig, spark: Any, epoch: int, n_rows: int) -> None:
    """Pre-commit epoch N holding exactly ``n_rows`` closed windows (output rows), as precommit
    stages them: plan in the epoch log, the rows written as files by Spark and committed into
    staging in one Delta commit, with N-1's state carried over."""
    from eos.compute.precommit.frames import Frames
    from eos.compute.precommit.resume import resume_state
    from eos.compute.precommit.watermark import epoch_watermark
    from eos.compute.precommit.write import write_epoch
    from eos.core import checkpoints, epochlog
    from eos.core import staging as staging_files
    from eos.core.plan import PartitionRange
    from eos.core.tables import ensure_tables, staging_schema
    from eos.tools.generator import BASE_TIME_MS

    tables = ensure_tables(config)
    plan = Plan(config.name, config.kafka.topic, epoch, (PartitionRange(0, 0, 0),))
    epochlog.append(tables, epoch, epochlog.PLANNED, plan_hash=plan.hash, plan=plan.to_json())
    state = resume_state(config, tables, checkpoints.read(tables, epoch - 1))
    size = config.window.size
    windows, side = (_frame(spark, t) for t in (_fabricated_windows(n_rows, size),
                                                  pa.table({"kind": pa.array([], pa.string())})))
    # Every window closed: the max event time is far past the last window's end.
    max_event = BASE_TIME_MS + 1000 * size
    watermark, max_event_all = epoch_watermark(config, plan, state, max_event)
    frames = Frames(windows, side, max_event, 0, watermark_ms=watermark,
                    max_event_all_ms=max_event_all)
    staged = write_epoch(config, tables, plan, state, frames, {})
    staging_files.commit(tables.refresh(tables.staging), staged.files, epoch,
                         staging_schema(config), config.app_id, plan.hash)


def _frame(spark: Any, table: pa.Table) -> Any:
    """A DataFrame of an Arrow table, empty ones too (Spark Connect cannot infer their schema)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame(table, schema=from_arrow_schema(table.schema))


def commit_latency(env: Env, n_rows: int, reps: int) -> dict[str, list[float]]:
    """Time ``eos.core.protocol.commit`` of epochs of ``n_rows`` output rows, the three sink
    appends alone (the same rows, ``fenced_append`` to scratch tables, as the sinks do them),
    and the commit of the same epochs by a pipeline whose windows also go to a transactional
    Kafka sink (``kafka``: init_transactions, marker read, one transaction, then the Delta
    sinks)."""
    from eos.core.delta import fenced_append
    from eos.core.outputs import (
        QUARANTINE_SCHEMA,
        late_rows,
        late_schema,
        quarantine_rows,
        window_rows,
    )
    from eos.core.outputs import windows_schema as target_schema
    from eos.core.staging import staged_epoch
    from eos.core.tables import ensure_tables

    config = env.config(f"commit-{n_rows}", f"bench-commit-{n_rows}")
    scratch = env.workdir / "tables" / f"commit-{n_rows}-appends"
    from deltalake import DeltaTable

    for name, schema in (("late", late_schema(config)), ("quarantine", QUARANTINE_SCHEMA),
                         ("target", target_schema(config))):
        DeltaTable.create(str(scratch / name), schema=schema, mode="ignore")
    commits, appends = [], []
    for epoch in range(reps):
        commits.append(_timed_commit(config, env.spark, epoch, n_rows))
        from eos.core.plan import plan_of

        tables = ensure_tables(config)
        staged = staged_epoch(tables, epoch, plan_of(tables, epoch).hash)
        data = {"late": late_rows(config, staged, epoch, 0),
                "quarantine": quarantine_rows(staged, epoch),
                "target": window_rows(config, staged, epoch)}
        t0 = now()
        for name in ("late", "quarantine", "target"):
            fenced_append(str(scratch / name), data[name], config.app_id, epoch)
        appends.append(now() - t0)
    return {"commit": commits, "appends": appends, "kafka": _kafka_commits(env, n_rows, reps)}


def _kafka_commits(env: Env, n_rows: int, reps: int) -> list[float]:
    from eos.core.protocol import check_sinks

    sinks = {"windows": [{"kafka": f"bench-commit-out-{n_rows}"}, {"delta": "target"}]}
    config = env.config(f"commit-kafka-{n_rows}", f"bench-commit-{n_rows}", sinks=sinks)
    check_sinks(config, -1)  # creates the topics, as begin does: not part of the timed commits
    return [_timed_commit(config, env.spark, epoch, n_rows) for epoch in range(reps)]


def _timed_commit(config: PipelineConfig, spark: Any, epoch: int, n_rows: int) -> float:
    """Stage a fabricated epoch of ``n_rows`` windows, then time ``eos.core.protocol.commit`` of
    it (no begin, no precommit: not an epoch of the loop)."""
    from eos.core.protocol import commit

    stage_fabricated_epoch(config, spark, epoch, n_rows)
    t0 = now()
    result = commit(config, epoch)
    took = now() - t0
    if result.rows.get("windows") != n_rows:
        raise AssertionError(f"commit promoted {result.rows} rows, wanted {n_rows}")
    return took


# --------------------------------------------------------------------------- spark-submit


def spark_submit(config: PipelineConfig, reps: int) -> dict[str, list[float]]:
    """What ``compute.mode: submit`` pays per epoch to start Spark:
    ``eos.compute.spark.submit_precommit`` (spark-submit of ``eos/compute/app.py``) on a
    caught-up pipeline.

    * ``committed``: an already committed epoch: JVM + Python driver start and exit, no session.
    * ``empty``: a new, empty epoch (the epoch loop on ``compute.mode: submit``, its precommit
      phase): the same plus SparkSession creation, an empty Spark job and the staging write;
      ``session`` is the SparkSession creation time the app itself logs.
    """
    from eos.compute.spark import submit_precommit
    from eos.core.protocol import checkpointed_epoch

    submit = config.model_copy(
        update={"compute": config.compute.model_copy(update={"mode": "submit"})})
    out: dict[str, list[float]] = {"committed": [], "empty": [], "session": [],
                                   "empty_inside": []}
    for i in range(reps):
        last = checkpointed_epoch(config)
        t0 = now()
        submit_precommit(config, last)
        out["committed"].append(now() - t0)
        run = run_epoch(submit, f"submit-{i}")
        if run.plan.records:
            raise AssertionError("spark-submit probe expects a caught-up pipeline")
        out["empty"].append(run.phases["precommit"])
        durations = run.staged.timings_ms
        out["session"].append(durations.get("spark_start", 0.0) / 1000)
        out["empty_inside"].append(durations.get("total", 0.0) / 1000)
    return out


# --------------------------------------------------------------------------- fixed overhead


def empty_epochs(env: Env, config: PipelineConfig, count: int, tag: str) -> list[EpochTiming]:
    """``count`` epochs on a caught-up pipeline: everything but the data work."""
    out = []
    for i in range(count):
        plan, timing = eo_epoch(config, env.spark, f"{tag}-{i}")
        if plan.records:
            raise AssertionError("empty-epoch probe expects a caught-up pipeline")
        out.append(timing)
    return out


# --------------------------------------------------------------------------- state size


def key_scaling(env: Env, keys: int, events: int, epochs: int, rep: int,
                topic: str) -> dict[str, Any]:
    """State grows with the number of keys: one 1-hour window that never closes, so after each
    epoch the state holds one row per distinct key seen. Returns the last epoch's figures."""
    config = env.config(f"keys-{keys}-{rep}", topic, window="1h", lateness="0s",
                        max_records=max(1, events // epochs))
    run = run_eo(env, config, f"keys-{keys}-{rep}")
    if sum(e.records for e in run.epochs) != events:
        raise AssertionError(f"state-size run read {sum(e.records for e in run.epochs)} of "
                             f"{events} events: did the broker drop some?")
    last = run.epochs[-1]
    return {
        "keys": keys, "events": events, "epochs": len(run.epochs),
        "state_rows": last.counts.get("state", 0) + last.counts.get("change", 0),
        "precommit": last.precommit, "read_parse": last.read_parse,
        "aggregate": last.aggregate, "staging_write": last.staging_write,
        "precommit_other": last.precommit_other, "commit": last.commit, "begin": last.begin,
    }
