"""Where precommit's time goes, per record, in plain Python on the benchmark's own data.

Spark runs the reader (``eos.compute.reader.read_split``) and the parser
(``eos.compute.formats.json.Parser.parse_batch``) in Python workers; here both run directly,
single-threaded, on the same Kafka ranges, so their per-record cost can be set against a bare
consumer and against the Spark stage that wraps them.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from bench.env import Env
from bench.scenarios import bare_consume
from eos.core.config import PipelineConfig
from eos.core.plan import Plan


def _cpu_wall(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.process_time() - c0, time.perf_counter() - w0, out


def _read_all(reader: Callable[..., Iterator[pa.RecordBatch]], settings: dict[str, Any],
              plans: list[Plan]) -> list[pa.RecordBatch]:
    from eos.compute.splits import splits_of

    batches: list[pa.RecordBatch] = []
    for plan in plans:  # one split, as a Python worker reads its share of an epoch
        ranges = [{"partition": r.partition, "start": r.start, "until": r.until}
                  for r in plan.ranges]
        for split in splits_of(ranges, max(1, plan.records)):
            batches.extend(reader(plan.topic, split, settings, 60.0))
    return batches


def per_record(env: Env, config: PipelineConfig, plans: list[Plan], reps: int) -> dict[str, Any]:
    """µs per record (CPU and wall) of each piece of the read+parse stage, median of ``reps``."""
    import msgspec

    from eos.compute.formats.json import Parser
    from eos.compute.reader import read_split

    settings = env.settings()
    records = sum(p.records for p in plans)
    batches = _read_all(read_split, settings, plans)  # imports and first connection
    parser = Parser(config.event)
    timings: dict[str, list[tuple[float, float]]] = {}

    def measure(name: str, fn: Callable[[], Any]) -> Any:
        cpu, wall, out = _cpu_wall(fn)
        timings.setdefault(name, []).append((cpu, wall))
        return out

    for _ in range(reps):
        measure("bare consumer (count only)", lambda: [
            bare_consume(settings, p.topic, r.partition, r.start, r.until)
            for p in plans for r in p.ranges])
        measure("reader.read_split", lambda: _read_all(read_split, settings, plans))
        measure("parse.Parser.parse_batch", lambda: [parser.parse_batch(b) for b in batches])
    values = [v for b in batches for v in b.column("value").to_pylist()]
    stamps = [t for b in batches for t in b.column("timestamp_ms").to_pylist()]
    typed = parser.decoder.decode
    generic = msgspec.json.Decoder().decode
    documents = []  # the values the typed decoder takes, to time the decoders alone
    for v in values:
        try:
            typed(v)
        except (TypeError, ValueError, ArithmeticError, RecursionError, msgspec.DecodeError):
            continue
        documents.append(v)
    for _ in range(reps):
        measure("  Parser.parse, record by record", lambda: [
            parser.parse(v, t) for v, t in zip(values, stamps, strict=True)])
        measure("  the parser's typed msgspec decoder alone", lambda: list(map(typed, documents)))
        measure("  msgspec generic decode (a dict per record)",
                lambda: list(map(generic, documents)))
    out = {}
    for name, samples in timings.items():
        cpu = statistics.median(c for c, _ in samples)
        wall = statistics.median(w for _, w in samples)
        out[name] = {"cpu_us": cpu / records * 1e6, "wall_us": wall / records * 1e6,
                     "wall_s": wall}
    out["_records"] = records
    out["_batches"] = batches
    return out


def profile_parse(config: PipelineConfig, batches: list[pa.RecordBatch], top: int = 8) -> str:
    """cProfile of ``Parser.parse_batch`` on real batches: the functions with most own time."""
    from eos.compute.formats.json import Parser

    parser = Parser(config.event)
    profiler = cProfile.Profile()
    profiler.enable()
    for batch in batches:
        parser.parse_batch(batch)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def spark_fusion(env: Env, config: PipelineConfig, plans: list[Plan],
                 reps: int) -> dict[str, float]:
    """Spark read+parse of the same ranges (``count()``, no cache): parsing in a second Python
    stage (``mapInArrow``, what the library did before) against the library, which parses
    inside the reader (``eos.compute.reader``'s ``parse_event`` option)."""
    from eos.compute.precommit.read import parse_records, read_ranges
    from eos.core.schema import ddl, parsed_schema

    spark = env.spark

    def timed(build: Callable[[Plan], Any]) -> float:
        started = time.perf_counter()
        for plan in plans:
            if build(plan).count() != plan.records:
                raise AssertionError("read+parse lost records")
        return time.perf_counter() - started

    samples: dict[str, list[float]] = {"two_stages": [], "library": []}
    for _ in range(reps):
        samples["two_stages"].append(timed(lambda p: read_ranges(spark, config, p).mapInArrow(
            parse_records(config.event), ddl(parsed_schema(config.event)))))
        samples["library"].append(timed(lambda p: read_ranges(spark, config, p, parse=True)))
    records = sum(p.records for p in plans)
    return {"records": records, **{k: statistics.median(v) for k, v in samples.items()}}


def spark_split_overhead(env: Env, config: PipelineConfig, plans: list[Plan], small: int,
                         reps: int) -> dict[str, float]:
    """Spark read-only time for the same ranges cut into few or many splits."""
    from bench.scenarios import spark_read_only

    records = sum(p.records for p in plans)
    few = env.config(config.name + "-few", config.kafka.topic, split_records=1_000_000)
    many = env.config(config.name + "-many", config.kafka.topic, split_records=small)

    def splits(cfg: PipelineConfig) -> int:
        size = cfg.kafka.split_records
        return sum(-(-r.records // size) for p in plans for r in p.ranges if r.records)

    out: dict[str, list[float]] = {"few": [], "many": []}
    for _ in range(reps):
        out["few"].append(spark_read_only(env, few, plans))
        out["many"].append(spark_read_only(env, many, plans))
    few_s, many_s = statistics.median(out["few"]), statistics.median(out["many"])
    extra = splits(many) - splits(few)
    return {"records": records, "few_splits": splits(few), "many_splits": splits(many),
            "few_s": few_s, "many_s": many_s,
            # 2 cores work on splits in parallel: core-seconds per extra split
            "per_split_s": 2 * (many_s - few_s) / extra if extra else 0.0}
