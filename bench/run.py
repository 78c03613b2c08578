"""The benchmark run: every scenario in order, medians over repetitions, one results dict."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import scenarios as sc
from bench.env import Env, environment
from bench.memory import rusage_peaks_mb
from bench.report import median

Log = Callable[[str], None]


@dataclass
class Options:
    events: list[int] = field(default_factory=lambda: [100_000, 1_000_000, 5_000_000])
    repeat: int = 3
    single_above: int = 2_000_000  # sizes above this run once (time budget)
    epoch_records: int = 200_000  # at most sc.max_retained_events(partitions)
    partitions: int = sc.DEFAULT_PARTITIONS  # of each size's topic (5 MiB per partition)
    keys: list[int] = field(default_factory=lambda: [100, 10_000, 100_000])
    key_events: int = 120_000
    key_epochs: int = 2
    commit_rows: list[int] = field(default_factory=lambda: [10_000, 100_000])
    commit_repeat: int = 5
    submit_repeat: int = 3
    empty_epochs: int = 10
    epochlog_epochs: list[int] = field(default_factory=lambda: [10, 100, 300])
    warmup_events: int = 50_000
    profile: bool = True
    workdir: str | None = None
    keep: bool = False

    @classmethod
    def quick(cls, **overrides: Any) -> Options:
        """The smallest mode: every figure, a few thousand events, one repetition."""
        base = cls(events=[5_000], repeat=1, epoch_records=2_500, keys=[100, 1_000],
                   key_events=4_000, key_epochs=1, commit_rows=[10_000, 100_000],
                   commit_repeat=1, submit_repeat=1,
                   empty_epochs=2, epochlog_epochs=[5, 20], warmup_events=2_000)
        for key, value in overrides.items():
            setattr(base, key, value)
        return base


def machine() -> dict[str, Any]:
    import confluent_kafka
    import deltalake
    import pyarrow
    import pyspark

    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            mem_gib = round(int(f.readline().split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "cores": os.cpu_count(), "memory_gib": mem_gib, "python": platform.python_version(),
        "platform": platform.platform(), "pyspark": pyspark.__version__,
        "deltalake": deltalake.__version__, "pyarrow": pyarrow.__version__,
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0], "java": _java_version(),
        "load_average_at_start": [round(x, 2) for x in load] if load else None,
    }


def _java_version() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    except OSError:
        return None
    first = (out.stderr or out.stdout).splitlines()
    return first[0] if first else None


def run(opts: Options, spark: Any = None, log: Log | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    log = log or (lambda msg: print(f"[{time.perf_counter() - started:6.1f}s] {msg}",
                                    file=sys.stderr, flush=True))
    results: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(), "options": asdict(opts), "sizes": [],
    }
    workdir = Path(opts.workdir) if opts.workdir else None
    topics = [f"{_topic(n)}:{opts.partitions}" for n in opts.events]
    with environment(workdir, spark=spark, keep=opts.keep, topics=topics) as env:
        results["machine"]["bootstrap"] = env.bootstrap
        log(f"bench: broker {env.bootstrap}, work dir {env.workdir}")
        _warmup(env, opts, log)
        runs: dict[int, dict[str, Any]] = {}
        profiled = _profile_size(opts) if opts.profile else None
        for n in opts.events:
            runs[n] = _size(env, opts, n, log, profile=n == profiled)
            if n == profiled:
                _profile(env, runs[n], results, log)
        fixed = _fixed_overhead(env, opts, runs, log)
        results["fixed"] = fixed
        for n in opts.events:
            results["sizes"].append(_summarise_size(runs[n], fixed))
        results["typical_epoch"] = _typical_epoch(runs, opts.epoch_records)
        results["commit"] = _commit_latency(env, opts, log)
        results["keys"] = _keys(env, opts, log)
        results["epochlog"] = _epochlog_growth(env, opts, log)
        results["memory"] = {"tree": env.sampler.overall_mb()}
        results["notes"] = env.notes
    results["memory"].update(rusage_peaks_mb())
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    results["machine"]["load_average_at_end"] = [round(x, 2) for x in load] if load else None
    results["seconds"] = round(time.perf_counter() - started, 1)
    log(f"bench: done in {results['seconds']:.0f}s")
    return results


# --------------------------------------------------------------------------- steps


def _warmup(env: Env, opts: Options, log: Log) -> None:
    """JIT, Python workers, first connections: paid once, not by the first measured size."""
    if not opts.warmup_events:
        return
    log(f"bench: warm-up ({opts.warmup_events:,} events)")
    sc.produce_topic(env, "bench-warmup", min(opts.warmup_events, sc.MAX_RETAINED_EVENTS))
    config = env.config("warmup", "bench-warmup", max_records=opts.epoch_records)
    eo = sc.run_eo(env, config, "warmup")
    sc.run_alo(env, config, eo.plans, str(env.workdir / "tables" / "warmup-alo"))
    sc.spark_read_only(env, config, eo.plans)


@dataclass
class Track:
    """One pipeline's measurements over a whole size: EO epochs, and over the very same ranges
    the ALO baseline, the Spark read stage alone and the bare consumer."""

    config: Any
    alo_path: str
    eo: sc.EORun = field(default_factory=lambda: sc.EORun([], [], None))
    alo: sc.ALORun = field(default_factory=sc.ALORun)
    read: float = 0.0
    bare: float = 0.0

    def epoch(self, env: Env, expected: int) -> None:
        plan, timing = sc.eo_epoch(self.config, env.spark, f"{self.config.name}-{timing_id()}")
        if plan.records != expected:
            raise AssertionError(f"{self.config.name}: epoch {plan.epoch} planned "
                                 f"{plan.records} records, {expected} were produced")
        self.eo.epochs.append(timing)
        self.eo.plans.append(plan)
        self.alo.add(sc.alo_epoch(env, self.config, plan, self.alo_path))
        self.read += sc.spark_read_only(env, self.config, [plan])
        self.bare += sc.bare_read(env, [plan])

    def finish(self, env: Env) -> None:
        """The epoch after the last one finds nothing: a sample of the fixed overhead."""
        plan, timing = sc.eo_epoch(self.config, env.spark, f"{self.config.name}-{timing_id()}")
        if plan.records:
            raise AssertionError(f"{self.config.name}: {plan.records} records left over")
        self.eo.empty = timing


_ids = iter(range(1 << 62))


def timing_id() -> int:
    return next(_ids)


def _topic(n: int) -> str:
    return f"bench-{n}"


def _size(env: Env, opts: Options, n: int, log: Log, profile: bool) -> dict[str, Any]:
    """Stream ``n`` events through every pipeline of this size, one epoch's worth at a time."""
    topic = _topic(n)
    reps = opts.repeat if n <= opts.single_above else 1
    chunk = opts.epoch_records
    sc.check_retained(chunk, opts.partitions)

    def track(kind: str, r: int) -> Track:
        name = f"{kind}-{n}-{r}"
        return Track(env.config(name, topic, max_records=chunk),
                     str(env.workdir / "tables" / f"{name}-alo"))

    library = [track("eo", r) for r in range(reps)]
    records = sc.generator(n)
    env.sampler.reset()
    produce_s, done, started = 0.0, 0, time.perf_counter()
    while done < n:
        count = min(chunk, n - done)
        produce_s += sc.send_chunk(env, topic, records, count)
        done += count
        for r in range(reps):
            library[r].epoch(env, count)
        log(f"bench: {n:,} events: {done:,} done ({time.perf_counter() - started:.0f}s)")
    for t in library:
        t.finish(env)
    peak = env.sampler.peak_mb()
    out = {"events": n, "reps": reps, "library": library,
           "produce": {"seconds": produce_s, "rate": n / produce_s}, "peak_rss_mb": peak}
    if profile:
        out["profile_plan"] = library[0].eo.plans[-1]  # still held by the broker
    for r, t in enumerate(library):
        log(f"bench: {n:,} events rep {r + 1}/{reps}: EO {t.eo.phase_seconds()['total']:.1f}s "
            f"in {len(t.eo.epochs)} epochs, ALO {t.alo.seconds:.1f}s, Spark read "
            f"{t.read:.1f}s, bare consumer {t.bare:.2f}s")
    return out


def _figures(n: int, tracks: list[Track]) -> dict[str, Any]:
    phases = [t.eo.phase_seconds() for t in tracks]
    eo = {k: median(p[k] for p in phases) for k in phases[0]}
    alo = {k: median(getattr(t.alo, k) for t in tracks)
           for k in ("read_parse", "aggregate", "write", "other")}
    alo["total"] = median(t.alo.seconds for t in tracks)
    read_s, bare_s = median(t.read for t in tracks), median(t.bare for t in tracks)
    return {
        "eo": eo, "alo": alo, "eo_rate": n / eo["total"], "alo_rate": n / alo["total"],
        "ratio": alo["total"] / eo["total"],
        "eo_precommit": median(sum(e.precommit for e in t.eo.epochs) for t in tracks),
        "eo_read_parse_rate": n / eo["read_parse"],
        "read_rate": n / read_s, "bare_rate": n / bare_s, "read_ratio": bare_s / read_s,
        "empty": median(t.eo.empty.total for t in tracks if t.eo.empty is not None),
    }


def _summarise_size(run: dict[str, Any], fixed: dict[str, Any]) -> dict[str, Any]:
    n = run["events"]
    tracks: list[Track] = run["library"]
    figures = _figures(n, tracks)
    epochs = len(tracks[0].eo.epochs)
    startup = fixed.get("submit_startup")
    submit_total = figures["eo"]["total"] + epochs * startup if startup is not None else None
    return {
        "events": n, "reps": run["reps"], "epochs": epochs, "produce_rate": run["produce"]["rate"],
        **figures,
        "eo_submit_startup": epochs * startup if startup is not None else None,
        "eo_submit_rate": n / submit_total if submit_total else None,
        "ratio_submit": figures["alo"]["total"] / submit_total if submit_total else None,
        "peak_rss_mb": run["peak_rss_mb"],
        "samples": {
            "eo_total": [t.eo.phase_seconds()["total"] for t in tracks],
            "alo_total": [t.alo.seconds for t in tracks],
            "spark_read": [t.read for t in tracks], "bare": [t.bare for t in tracks],
            "eo_epochs": [[asdict(e) for e in t.eo.epochs] for t in tracks],
        },
    }


def _typical_epoch(runs: dict[int, dict[str, Any]], records: int) -> dict[str, Any]:
    """Median of every full epoch (``records`` records) of every size, phase by phase."""
    full = [e for r in runs.values() for t in r["library"] for e in t.eo.epochs
            if e.records == records]
    if not full:
        return {}
    keys = ("begin", "read_parse", "aggregate", "staging_write", "precommit_other", "commit",
            "total")
    return {"records": records, "epochs": len(full),
            **{k: median(getattr(e, k) for e in full) for k in keys}}


def _fixed_overhead(env: Env, opts: Options, runs: dict[int, dict[str, Any]],
                    log: Log) -> dict[str, Any]:
    """Everything but the data work: epochs that find nothing to read, in-process and as
    production runs them (spark-submit), with the Delta operations each phase makes."""
    from bench.deltaops import counting

    config = runs[min(runs)]["library"][-1].config  # caught up: every further epoch is empty
    log(f"bench: fixed overhead: {opts.empty_epochs} empty epochs in-process, "
        f"{opts.submit_repeat} spark-submit probes")
    samples = [t.eo.empty for r in runs.values() for t in r["library"]
               if t.eo.empty is not None]
    from eos.compute.epochs import run_epoch

    with counting() as ops:
        # The epoch loop, each phase inside its own counting phase.
        probes = [sc.epoch_timing(run_epoch(config, f"empty-{i}", spark=env.spark,
                                            in_phase=ops.in_phase))
                  for i in range(opts.empty_epochs)]
    samples += probes
    fixed: dict[str, Any] = {
        "samples": len(samples),
        "begin": median(e.begin for e in samples),
        "precommit": median(e.precommit for e in samples),
        "commit": median(e.commit for e in samples),
        "total": median(e.total for e in samples),
        "precommit_spark_jobs": median(e.read_parse + e.aggregate for e in samples),
        "precommit_staging_write": median(e.staging_write for e in samples),
        "delta_ops": ops.summary(max(1, len(probes))),
        "spark_start_inprocess": env.spark_start_s,
        "first_vs_last": {
            "first": median(e.total for e in probes[:3]) if probes else None,
            "last": median(e.total for e in probes[-3:]) if probes else None,
        },
    }
    if opts.submit_repeat:
        submit = sc.spark_submit(config, opts.submit_repeat)
        fixed["submit"] = {k: median(v) for k, v in submit.items()}
        fixed["submit_samples"] = submit
        empty_submit = fixed["submit"]["empty"]
        fixed["submit_startup"] = max(0.0, empty_submit - fixed["precommit"])
        fixed["total_submit"] = fixed["begin"] + empty_submit + fixed["commit"]
    return fixed


def _commit_latency(env: Env, opts: Options, log: Log) -> dict[str, Any]:
    out = {}
    for rows in opts.commit_rows:
        log(f"bench: commit latency, {rows:,} output rows")
        samples = sc.commit_latency(env, rows, max(1, opts.commit_repeat))
        out[str(rows)] = {k: median(v) for k, v in samples.items()}
        out[str(rows)]["samples"] = samples
    return out


def _keys(env: Env, opts: Options, log: Log) -> list[dict[str, Any]]:
    out = []
    for keys in opts.keys:
        topic = f"bench-keys-{keys}"
        sc.produce_topic(env, topic, opts.key_events, keys=keys, disorder_ms=0, late_fraction=0.0,
                         bad_fraction=0.0)
        samples = [sc.key_scaling(env, keys, opts.key_events, opts.key_epochs, r, topic)
                   for r in range(max(1, opts.repeat))]
        row = {k: (median(s[k] for s in samples) if isinstance(samples[0][k], float)
                   else samples[0][k]) for k in samples[0]}
        log(f"bench: {keys:,} keys: {row['state_rows']:,} state rows, precommit "
            f"{row['precommit']:.2f}s")
        out.append(row)
    return out


def _epochlog_growth(env: Env, opts: Options, log: Log) -> list[dict[str, Any]]:
    """What reading the epoch log costs after many epochs: begin, precommit and commit all read
    it. Each epoch appends three rows (planned, precommitted, committed), one file each."""
    from deltalake import DeltaTable

    from eos.core import epochlog
    from eos.core.layout import tables_for
    from eos.core.maintenance import maintain
    from eos.core.tables import ensure_tables

    if not opts.epochlog_epochs:
        return []
    config = env.config("epochlog", "bench-epochlog")
    ensure_tables(config).handle(tables_for(config).epochs)  # creates the log
    # Plain ``Tables``: every read opens the log, as a phase's first read of it does.
    tables = tables_for(config)
    out, done = [], 0
    for target in sorted(opts.epochlog_epochs):
        log(f"bench: epoch log with {target} epochs")
        for epoch in range(done, target):
            for phase in (epochlog.PLANNED, epochlog.PRECOMMITTED, epochlog.COMMITTED):
                epochlog.append(tables, epoch, phase, plan_hash="0" * 16, plan="{}")
        done = target
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            epochlog.first_plan_row(tables, target - 1)
            times.append(time.perf_counter() - t0)
        files = len(DeltaTable(tables.epochs).file_uris())
        out.append({"epochs": target, "files": files, "first_plan_row": statistics.median(times)})
    # What the library's maintenance (run by commit every epoch.maintenance_every epochs) does
    # to the same read; retention 0 so that the vacuum deletes what compaction replaced.
    t0 = time.perf_counter()
    maintain(tables, retention_hours=0)
    compaction = time.perf_counter() - t0
    times = []
    for _ in range(5):
        t1 = time.perf_counter()
        epochlog.first_plan_row(tables, done - 1)
        times.append(time.perf_counter() - t1)
    out.append({"epochs": done, "files": len(DeltaTable(tables.epochs).file_uris()),
                "first_plan_row": statistics.median(times), "compaction_s": compaction})
    return out


def _profile_size(opts: Options) -> int:
    """Profile on the smallest size of at least 100k events (or the largest there is)."""
    big = [n for n in opts.events if n >= 100_000]
    return min(big) if big else max(opts.events)


def _profile(env: Env, run: dict[str, Any], results: dict[str, Any], log: Log) -> None:
    from bench import hotpath

    track: Track = run["library"][0]
    plans = [run["profile_plan"]]
    reps = max(1, min(run["reps"], 3))
    log(f"bench: per-record costs, plain Python, on the last {plans[0].records:,} records")
    results["hotpath"] = hotpath.per_record(env, track.config, plans, reps=reps)
    results["hotpath_records"] = results["hotpath"].pop("_records")
    batches = results["hotpath"].pop("_batches")
    results["parse_profile"] = hotpath.profile_parse(track.config, batches)
    log("bench: Spark read+parse, two Python stages vs one")
    results["fusion"] = hotpath.spark_fusion(env, track.config, plans, reps=reps)
    split = max(100, plans[0].records // 40)
    log("bench: Spark per-split overhead")
    results["split_overhead"] = hotpath.spark_split_overhead(env, track.config, plans, split,
                                                            reps=reps)
