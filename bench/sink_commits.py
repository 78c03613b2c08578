"""``python -m bench.sink_commits``: each sink type's commit of one epoch of window rows, next to
the Delta sink's, in one run.

One pipeline per size (``--rows``, default 10k and 100k window rows per epoch) sends its
``windows`` output to one sink of each type: Delta (local, and on the S3 store), Kafka (the
embedded broker: librdkafka's mock cluster), PostgreSQL (a server started here on 127.0.0.1 with
a generated password, PostgreSQL's default durability), files (Parquet, local and on the S3
store) and Iceberg (pyiceberg, a SQL catalog on SQLite, the warehouse local and on the S3
store). Every epoch is pre-committed as precommit stages one (``bench.scenarios``'s fabricated
epoch: Spark writes the rows, one staging commit), then each sink gets exactly what the protocol's
commit gives it (``eos.core.protocol.committing``): the sinks ``sinks_for`` builds, the epoch's
rows from the staged epoch (``epoch_outputs``), ``sink.check(N, rows)`` then
``sink.commit(N, rows, plan_hash)`` on the same object. The two calls are what is timed. Then
``eos.core.protocol.commit`` of the epoch finds every one of these sinks holding it (each asked
its own marker) and checkpoints it, so that the next epoch is a new one for every sink.

Every repetition is a new epoch, so every commit writes (asserted: ``COMMITTED`` with the
epoch's rows, the sink's own marker at N afterwards, and at the end each sink's rows read back:
every epoch's, once). ``--warmup`` epochs first (not counted), then ``--repeat`` counted ones;
the sinks take turns being first and the sizes alternate, so that neither always runs on a
warmer or a busier machine. The clients are the protocol's: a new sink object per epoch, a new
Kafka producer (``init_transactions``) and PostgreSQL connection per call, pooled Delta handles.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import scenarios as sc
from bench.env import Env, environment
from eos.core.config import PipelineConfig
from eos.core.outcomes import Outcome
from eos.core.sink import Sink, SupportsReadBack, sinks_for

KINDS = ("delta", "delta-s3", "kafka", "postgres", "files", "files-s3", "iceberg",
         "iceberg-s3")
BASELINE = "delta"
DSN_ENV = "EOS_BENCH_POSTGRES_DSN"  # the sinks' dsn_env: the generated password stays in here
# A window row as a Kafka record, generously (value ~200 B of JSON, key, headers, batch
# overhead): the mock keeps 5 MiB per partition and drops the oldest beyond, so the output
# topic gets the partitions every epoch of the run needs for the read-back at the end.
RECORD_BYTES = 400
MOCK_PARTITION_BYTES = 4 * 1024 * 1024  # of the mock's 5 MiB, with room


@dataclass(frozen=True)
class Places:
    """Where the sinks write: the work dir (local tables and files), the S3 prefix (None: no
    S3 sinks) and the PostgreSQL server's version (None: no server)."""

    workdir: Path
    s3: str | None = None
    postgres: str | None = None


@dataclass
class Timings:
    """One sink's counted commits of one size: ``check`` and ``commit`` seconds each."""

    check: list[float] = field(default_factory=list)
    commit: list[float] = field(default_factory=list)

    @property
    def total(self) -> list[float]:
        return [a + b for a, b in zip(self.check, self.commit, strict=True)]


def topic_of(rows: int) -> str:
    return f"bench-sink-commits-{rows}"


def partitions_for(rows: int, epochs: int) -> int:
    """The output topic's partitions on the embedded broker: room for every epoch's records."""
    return max(4, math.ceil(rows * epochs * RECORD_BYTES / MOCK_PARTITION_BYTES))


def sink_spec(kind: str, rows: int, places: Places) -> dict[str, Any]:
    """The pipeline config's entry of one sink of ``kind`` for the pipeline of ``rows``."""
    s3 = f"{places.s3}/r{rows}"
    specs: dict[str, dict[str, Any]] = {
        "delta": {"delta": "sink-delta"},
        "delta-s3": {"delta": f"{s3}/delta"},
        "kafka": {"kafka": topic_of(rows)},
        "postgres": {"postgres": {"table": f"bench.windows_{rows}", "dsn_env": DSN_ENV}},
        "files": {"files": {"path": str(places.workdir / "files" / f"r{rows}")}},
        "files-s3": {"files": {"path": f"{s3}/files"}},
        "iceberg": iceberg_spec(rows, places.workdir / "iceberg" / f"r{rows}", None),
        "iceberg-s3": iceberg_spec(rows, places.workdir / "iceberg-s3" / f"r{rows}",
                                   f"{s3}/iceberg"),
    }
    return specs[kind]


def iceberg_spec(rows: int, local: Path, warehouse: str | None) -> dict[str, Any]:
    """An iceberg sink on a SQL catalog on SQLite in ``local``, its warehouse there too or at
    ``warehouse`` (the S3 store)."""
    local.mkdir(parents=True, exist_ok=True)
    table = f"bench.windows_{rows}" + ("_s3" if warehouse else "")  # a sink name each
    return {"iceberg": {"catalog": "bench", "table": table,
                        "catalog_properties": {"type": "sql",
                                               "uri": f"sqlite:///{local}/catalog.db",
                                               "warehouse": warehouse or str(local / "wh")}}}


def pipeline(env: Env, rows: int, kinds: Sequence[str], places: Places) -> PipelineConfig:
    """The pipeline of ``rows``-row epochs, its windows going to one sink of each kind, every
    one of them prepared as ``begin`` prepares them (tables, topics created)."""
    from eos.core.protocol import check_sinks

    config = env.config(f"sink-commits-{rows}", f"bench-sink-commits-in-{rows}",
                        sinks={"windows": [sink_spec(k, rows, places) for k in kinds]})
    check_sinks(config, -1)
    return config


def windows_sinks(config: PipelineConfig, kinds: Sequence[str]) -> dict[str, Sink]:
    """New sink objects, as the protocol builds them for each commit, by kind."""
    found = [s for s in sinks_for(config) if s.output == "windows"]
    if len(found) != len(kinds):
        raise AssertionError(f"{len(found)} windows sinks for {len(kinds)} kinds")
    return dict(zip(kinds, found, strict=True))


def staged_rows(config: PipelineConfig, epoch: int) -> tuple[str, Any]:
    """The plan hash and the windows rows of staged epoch N, read as the protocol's commit reads
    them: staging without the state, the outputs against wm(N-1)."""
    from eos.core import checkpoints
    from eos.core.outputs import epoch_outputs
    from eos.core.plan import plan_of
    from eos.core.staging import staged_epoch
    from eos.core.tables import ensure_tables

    with ensure_tables(config) as tables:
        plan = plan_of(tables, epoch)
        staged = staged_epoch(tables, epoch, plan.hash, state=False)
        if staged is None:
            raise AssertionError(f"epoch {epoch} of {config.name} is not staged")
        previous = checkpoints.last(tables, epoch - 1)
        outputs = epoch_outputs(config, staged, epoch,
                                previous.watermark_ms if previous else None)
    return plan.hash, outputs["windows"]


HELD_WAIT_S = 10.0  # how long a committed epoch may take to be visible unfenced


def timed_commit(sink: Sink, epoch: int, rows: Any, plan_hash: str) -> tuple[float, float]:
    """``check`` then ``commit`` of one sink, as the protocol calls them (same object, same
    rows); seconds of each. Raises unless the sink wrote the epoch and holds it."""
    started = sc.now()
    sink.check(epoch, rows)
    checked = sc.now()
    done = sink.commit(epoch, rows, plan_hash)
    committed = sc.now()
    if done.outcome is not Outcome.COMMITTED or done.rows != rows.num_rows:
        raise AssertionError(f"{sink.name}: epoch {epoch} {done.outcome}, {done.rows} rows")
    # Unfenced, a read_committed reader sees a transaction once its markers reach the
    # partitions, which Apache Kafka writes after the commit returns: a moment later.
    deadline = sc.now() + HELD_WAIT_S
    while (held := sink.committed_epoch(fence=False)) != epoch and sc.now() < deadline:
        time.sleep(0.05)
    if held != epoch:
        raise AssertionError(f"{sink.name} holds epoch {held} after committing {epoch}")
    return checked - started, committed - checked


def checkpoint(config: PipelineConfig, epoch: int, sinks: dict[str, Sink], rows: int) -> None:
    """The protocol's commit of N: every sink measured holds N (it skips them), the protocol's
    own outputs and the checkpoint are written. The next epoch is then a new one for all."""
    from eos.core.protocol import commit

    result = commit(config, epoch)
    held = set(result.skipped)
    if result.outcome is not Outcome.COMMITTED or result.rows.get("windows") != rows or any(
            s.name not in held for s in sinks.values()):
        raise AssertionError(f"{config.name}: commit of epoch {epoch}: {result.summary()}")


def one_epoch(env: Env, config: PipelineConfig, kinds: Sequence[str], epoch: int,
              rows: int) -> dict[str, tuple[float, float]]:
    """Stage epoch N of ``rows`` windows, commit it to every sink (in a turn that rotates with
    N), checkpoint it."""
    sc.stage_fabricated_epoch(config, env.spark, epoch, rows)
    plan_hash, windows = staged_rows(config, epoch)
    if windows.num_rows != rows:
        raise AssertionError(f"epoch {epoch} staged {windows.num_rows} windows, not {rows}")
    sinks = windows_sinks(config, kinds)
    turn = epoch % len(kinds)
    seconds = {k: timed_commit(sinks[k], epoch, windows, plan_hash)
               for k in [*kinds[turn:], *kinds[:turn]]}
    checkpoint(config, epoch, sinks, rows)
    return seconds


def verify(config: PipelineConfig, kinds: Sequence[str], epochs: int, rows: int) -> None:
    """Every sink holds every epoch's rows once: its commits are 0..epochs-1 and what it reads
    back is ``epochs * rows`` rows."""
    for kind, sink in windows_sinks(config, kinds).items():
        assert isinstance(sink, SupportsReadBack), kind
        held = len(sink.read_back())
        if sink.commits() != list(range(epochs)) or held != epochs * rows:
            raise AssertionError(f"{kind}: {held} rows, commits {sink.commits()}; wanted "
                                 f"{epochs} epochs of {rows}")


def measure(env: Env, sizes: Sequence[int], kinds: Sequence[str], places: Places,
            repeat: int, warmup: int, log: Any = print) -> dict[int, dict[str, Timings]]:
    """``warmup`` then ``repeat`` epochs per size, sizes alternating; the counted ones' seconds
    by size and sink kind."""
    configs = {n: pipeline(env, n, kinds, places) for n in sizes}
    out = {n: {k: Timings() for k in kinds} for n in sizes}
    for epoch in range(warmup + repeat):
        for n in sizes if epoch % 2 == 0 else list(reversed(sizes)):
            seconds = one_epoch(env, configs[n], kinds, epoch, n)
            counted = epoch >= warmup
            for kind, (check, commit) in seconds.items():
                if counted:
                    out[n][kind].check.append(check)
                    out[n][kind].commit.append(commit)
            log(f"bench.sink_commits: {n:,} rows, epoch {epoch}"
                f"{'' if counted else ' (warm-up)'}: "
                + ", ".join(f"{k} {sum(s):.3f}s" for k, s in seconds.items()))
    for n, config in configs.items():
        log(f"bench.sink_commits: reading back {n:,}-row epochs from every sink")
        verify(config, kinds, warmup + repeat, n)
    return out


def render(figures: dict[int, dict[str, Timings]], places: Places,
           partitions: dict[int, int], broker_kind: str = "mock") -> str:
    """The table (sizes, then sinks), with what each sink ran against."""
    some = next(iter(next(iter(figures.values())).values()))
    lines = [f"check + commit of one epoch's window rows, median of {len(some.total)} "
             "commits (new epochs), the spread min-max; / Delta: the time over the local "
             "Delta sink's in this run", "",
             "| rows | sink | check + commit (s) | min-max (s) | of which check (s) | "
             "rows/s | / Delta |", "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for rows, by_kind in figures.items():
        base = statistics.median(by_kind[BASELINE].total) if BASELINE in by_kind else None
        for kind, t in by_kind.items():
            mid = statistics.median(t.total)
            ratio = f"{mid / base:.2f}x" if base else "-"
            lines.append(f"| {rows:,} | {kind} | {mid:.3f} | {min(t.total):.3f}-"
                         f"{max(t.total):.3f} | {statistics.median(t.check):.3f} | "
                         f"{rows / mid:,.0f} | {ratio} |")
    kinds = list(next(iter(figures.values())))
    return "\n".join([*lines, "", *notes(kinds, places, partitions, broker_kind)])


def notes(kinds: Sequence[str], places: Places, partitions: dict[int, int],
          broker_kind: str = "mock") -> list[str]:
    out = []
    if "kafka" in kinds:
        broker = ("Apache Kafka 4.1.0 on this machine (one KRaft node, SASL/SCRAM, log on local "
                  "disk)" if broker_kind == "apache-kafka" else
                  "the embedded broker, librdkafka's mock cluster (in memory, one broker, a "
                  "test double, not a Kafka server)")
        out.append(f"kafka: {broker}; output topic of "
                   + ", ".join(f"{p} partitions ({n:,} rows)" for n, p in partitions.items()))
    if "postgres" in kinds:
        out.append(f"postgres: PostgreSQL {places.postgres} on 127.0.0.1, its default "
                   "durability (fsync, synchronous_commit on), COPY in one transaction")
    if any(k.startswith("iceberg") for k in kinds):
        out.append("iceberg: pyiceberg's SQL catalog on SQLite on local disk, one snapshot "
                   "(an append) per epoch")
    if any(k.endswith("-s3") for k in kinds):
        out.append("-s3: the embedded S3 store (SeaweedFS's S3 gateway) on 127.0.0.1")
    return out


@contextlib.contextmanager
def places(workdir: Path, kinds: Sequence[str]) -> Iterator[Places]:
    """What the sinks need, started for the run: the S3 store (unless ``AWS_ENDPOINT_URL``
    names one) and a PostgreSQL server, its DSN in ``DSN_ENV`` for the run only."""
    with contextlib.ExitStack() as stack:
        s3 = None
        if any(k.endswith("-s3") for k in kinds):
            from bench.storage import store

            bucket = stack.enter_context(store())
            s3 = f"s3://{bucket}/bench-sink-commits-{uuid.uuid4().hex[:6]}"
        version = stack.enter_context(postgres()) if "postgres" in kinds else None
        yield Places(workdir, s3, version)


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A PostgreSQL server (``eos.tools.servers.postgres_server``, as the demo's), durable; its DSN
    in
    this process's environment while it runs. Yields its major version."""
    from eos.tools.servers.postgres_server import missing_reason, postgres_server, server_bin

    reason, bindir = missing_reason(), server_bin()
    if reason is not None or bindir is None:
        raise SystemExit(f"bench.sink_commits: {reason} (or leave postgres out of --sinks)")
    with postgres_server(durable=True) as server:
        os.environ[DSN_ENV] = (f"host={server.host} port={server.port} user={server.user} "
                               f"password={server.password} dbname={server.database}")
        try:
            yield bindir.parent.name
        finally:
            os.environ.pop(DSN_ENV, None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sink_commits",
                                description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000],
                   help="window rows per epoch (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=5, help="counted epochs per size")
    p.add_argument("--warmup", type=int, default=1, help="epochs per size before counting")
    p.add_argument("--sinks", nargs="+", choices=KINDS, default=list(KINDS),
                   help="sink kinds (default: all; delta, the baseline, is always included)")
    p.add_argument("--workdir", type=Path, help="keep tables here instead of a temp dir")
    p.add_argument("--apache-kafka", action="store_true",
                   help="the Kafka sink on Apache Kafka itself (eos broker start --apache-kafka) "
                        "instead of the embedded mock cluster")
    args = p.parse_args(argv)
    kinds = [BASELINE, *(k for k in args.sinks if k != BASELINE)]
    epochs = args.warmup + args.repeat
    partitions = {n: partitions_for(n, epochs) for n in args.rows}
    topics = [f"{topic_of(n)}:{partitions[n]}" for n in args.rows] if "kafka" in kinds else []
    kind = "apache-kafka" if args.apache_kafka else "mock"
    with environment(args.workdir, topics=topics, broker_kind=kind) as env, \
            places(env.workdir, kinds) as where:
        figures = measure(env, args.rows, kinds, where, args.repeat, args.warmup,
                          log=lambda msg: print(msg, file=sys.stderr))
        for note in env.notes:
            print(f"bench.sink_commits: {note}", file=sys.stderr)
    print("\n" + render(figures, where, partitions, kind))
    return 0


if __name__ == "__main__":
    sys.exit(main())
