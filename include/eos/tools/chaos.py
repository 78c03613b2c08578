"""``eos chaos``: many epochs with faults injected at random points, recovered by rerunning.

Faults are real: a phase attempt with a crash armed runs in its own process (``eos begin |
precommit | commit`` with ``EOS_FAULTS``) and dies by SIGKILL; "two commit attempts at once" runs
two ``eos commit`` processes held at a barrier right before every sink write and before the
checkpoint append, then released together. Attempts without a fault run in-process on a shared
Spark session to keep the run short. Poison records (``poison.record``) are faults of the data:
two records whose numbers are their types' extremes, so that every sum over them leaves its
type's range; the epoch must commit anyway, with what docs/pipelines.md promises. After
every epoch the checkpoint and every sink must hold exactly that epoch; at the end the
independent audit counts records lost and doubled.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from eos.compute.precommit.stager import SparkStager
from eos.compute.session import local_session
from eos.core.config import PipelineConfig
from eos.core.errors import EXIT_TRANSIENT, ProtocolViolation
from eos.core.kafka import client_settings, is_embedded_broker
from eos.core.layout import tables_for
from eos.core.plan import plan_of
from eos.core.protocol import abort, begin, check_sinks, checkpointed_epoch, commit, precommit
from eos.core.sink import sinks_for
from eos.tools.audit.checks import check_offsets
from eos.tools.audit.report import Problem, ProblemKind
from eos.tools.audit.verify import audit
from eos.tools.chaos_changes import ConfigChanges
from eos.tools.generator import GeneratedRecord, GeneratorSpec, generate, generator_options
from eos.tools.produce import send
from eos.tools.servers import postgres_server

CONCURRENT_COMMITS = "commit.two_attempts_at_once"
BETWEEN_SINKS = "commit.between_sinks"
POISON = "poison.record"  # a fault of the data, not of a phase (``poison_records``)
CONFIG_CHANGE = "config.change"  # a change of the pipeline's file between epochs
RACE_POINTS = "sink.before_write:wait,checkpoint.before_write:wait"
RACE_ALONE_S = 15
PHASE_FAULTS = {
    "begin": ["begin.after_log"],
    "precommit": ["precommit.mid_read", "precommit.before_write", "precommit.after_write"],
    "commit": [BETWEEN_SINKS, "commit.before_checkpoint", "commit.after_checkpoint",
               CONCURRENT_COMMITS],
}


@dataclass
class ChaosReport:
    epochs: int = 0
    faults: Counter = field(default_factory=Counter)
    recoveries: int = 0
    records: int = 0
    lost: int = 0
    doubled: int = 0
    audit_ok: bool = False
    notes: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.audit_ok and not self.problems

    def render(self) -> str:
        lines = [f"epochs committed   {self.epochs}", f"records produced   {self.records}",
                 f"faults injected    {sum(self.faults.values())}"]
        lines += [f"  {point:<28} {n}" for point, n in sorted(self.faults.items())]
        lines += [f"recoveries         {self.recoveries}", f"records lost       {self.lost}",
                  f"records doubled    {self.doubled}",
                  f"audit (eos verify) {'OK' if self.audit_ok else 'FAILED'}"]
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"  - {p}" for p in self.problems[:20]]
        return "\n".join(lines)


def _cli(config: PipelineConfig, phase: str, epoch: int, run_id: str, env: dict[str, str]
         ) -> subprocess.Popen:
    args = [sys.executable, "-m", "eos.tools.cli", phase, "--config", str(config.source_path)]
    args += ["--run-id", run_id] if phase == "begin" else ["--epoch", str(epoch)]
    return subprocess.Popen(args, env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _inject(config: PipelineConfig, phase: str, point: str, epoch: int, run_id: str,
            faults_dir: str, depth: int = 1) -> int:
    """Run one faulty attempt (or two racing ones); the faults that took effect.

    ``commit.between_sinks`` crashes after the first sink; with ``depth`` k, k attempts run
    one after the other with the point armed k times: each finds the sinks before its crash
    committed and dies after the next one, so the last dies between sinks k and k+1."""
    env = {"EOS_FAULTS_DIR": faults_dir}
    try:
        if point == BETWEEN_SINKS:
            env["EOS_FAULTS"] = f"{point}:{depth}"
            return sum(_cli(config, phase, epoch, run_id, env).wait() != 0 for _ in range(depth))
        if point == CONCURRENT_COMMITS:
            # On a broker that fences, the loser of a Kafka sink's race stops there; the winner
            # then meets no partner at its later barriers and goes on alone after this long.
            env.update(EOS_FAULTS=RACE_POINTS, EOS_BARRIER_TIMEOUT_S=str(RACE_ALONE_S))
            racers = [_cli(config, phase, epoch, run_id, env) for _ in range(2)]
            outputs = [r.communicate() for r in racers]
            # A racer may lose transiently (it is retried below, like Airflow would); a crash
            # or a permanent error is a finding.
            bad = [(r.returncode, err[-500:]) for r, (_, err) in zip(racers, outputs, strict=True)
                   if r.returncode not in (0, EXIT_TRANSIENT)]
            if bad:
                raise ProtocolViolation(f"chaos: a racing commit failed: {bad}")
            return 1
        env["EOS_FAULTS"] = f"{point}:1"
        return int(_cli(config, phase, epoch, run_id, env).wait() != 0)
    finally:
        for name in os.listdir(faults_dir):
            os.unlink(os.path.join(faults_dir, name))


def _extreme(config: PipelineConfig, name: str) -> str | None:
    """The JSON text of field ``name``'s most extreme value, None for a field not a number."""
    ftype = config.event.fields[name].type
    if ftype.name == "decimal":
        precision, scale = ftype.precision or 38, ftype.scale or 0
        digits = "9" * (precision - scale) or "0"
        return digits + ("." + "9" * scale if scale else "")
    if ftype.name == "long":
        return str(2**62 + 1)  # two of them pass 2^63 - 1
    if ftype.name == "double":
        return "1.5e308"  # two of them pass the double range
    return None


def poison_records(config: PipelineConfig, record: GeneratedRecord) -> list[GeneratedRecord]:
    """Two copies of a valid JSON ``record`` (same key and time: the same windows) whose number
    fields hold their type's extreme; none when the event is not JSON (the copies would not
    encode) or has no number field."""
    if config.event.format != "json" or record.value is None:
        return []
    event = json.loads(record.value)
    texts: dict[str, str] = {}
    for name, spec in config.event.fields.items():
        text = _extreme(config, name)
        if text is None or name == config.event.time.field:
            continue
        *parents, leaf = spec.path
        node = event
        for part in parents:
            node = node.setdefault(part, {})
        placeholder = f"@@poison-{len(texts)}@@"
        node[leaf], texts[placeholder] = placeholder, text
    if not texts:
        return []
    value = json.dumps(event, separators=(",", ":"))
    for placeholder, text in texts.items():  # exact numbers: JSON has no decimal type
        value = value.replace(f'"{placeholder}"', text)
    copy = GeneratedRecord(record.key, value.encode(), record.timestamp_ms, POISON)
    return [copy, copy]


def _poisoned(config: PipelineConfig, chunk: list[GeneratedRecord]) -> list[GeneratedRecord]:
    """``chunk`` with poison records after its first good record (unchanged without one)."""
    for i, record in enumerate(chunk):
        if record.kind == "good" and (poison := poison_records(config, record)):
            return [*chunk[: i + 1], *poison, *chunk[i + 1 :]]
    return chunk


def _check_invariants(config: PipelineConfig, epoch: int) -> list[Problem]:
    problems = []
    if checkpointed_epoch(config) != epoch:
        problems.append(Problem(ProblemKind.CHECKPOINT, f"after epoch {epoch}",
                                f"checkpoint at {checkpointed_epoch(config)}"))
    for name, held in check_sinks(config, epoch).items():
        if held != epoch:
            problems.append(Problem(ProblemKind.COMMITS, name, f"at {held} after epoch {epoch}"))
    tables = tables_for(config)
    problems += check_offsets([plan_of(tables, e) for e in range(epoch + 1)])
    return problems


def _menu(config: PipelineConfig, settings: dict[str, Any], report: ChaosReport
          ) -> dict[str, list[str]]:
    """The fault points of each phase this pipeline can take (a note in ``report`` for each
    left out)."""
    menu = {phase: list(points) for phase, points in PHASE_FAULTS.items()}
    has_kafka_sink = any("kafka" in spec for _, spec in config.sinks.by_output())
    if has_kafka_sink and is_embedded_broker(settings):
        menu["commit"].remove(CONCURRENT_COMMITS)
        report.notes.append(
            "two commit attempts at once: not injected; this pipeline has a Kafka sink and the "
            "embedded broker (librdkafka's mock cluster) does not fence transactional ids, so "
            "only Apache Kafka (`eos broker start --apache-kafka`, or KAFKA_BOOTSTRAP_SERVERS) "
            "can keep racing Kafka commits apart")
    return menu


def chaos(config: PipelineConfig, epochs: int, seed: int, fault_rate: float = 0.5,
          events_per_epoch: int = 400, spark: Any = None,
          poison_rate: float = 0.3, change_rate: float = 0.0) -> ChaosReport:
    """``epochs`` epochs with faults at ``fault_rate``, poison records at ``poison_rate`` and,
    with ``change_rate``, configuration changes between epochs (``eos.tools.chaos_changes``,
    made on a copy of the pipeline's file), then the audit."""
    changes = ConfigChanges.copy_of(config) if change_rate > 0 else None
    with contextlib.ExitStack() as stack:
        if changes is not None:
            config = changes.config()
            stack.callback(changes.cleanup)
        # A pipeline with postgres sinks and no DSN for them: a local server for the run.
        stack.enter_context(postgres_server.serving(config, reuse=True))
        if spark is None and config.compute.mode == "connect":
            from eos.compute import connect

            spark = stack.enter_context(connect.session(config, connect.resolve_endpoint()))
        return _chaos(config, epochs, seed, fault_rate, events_per_epoch,
                      spark or local_session(config), poison_rate,
                      (changes, change_rate) if changes is not None else None)


def _send(chunk: list[GeneratedRecord], config: PipelineConfig,
          settings: dict[str, Any]) -> None:
    """The epoch's records to the pipeline's source topics, dealt in turn (one topic: all of
    them); a topic a change just added is created by its first record."""
    topics = config.kafka.topics or [config.kafka.sole_topic]
    for k, topic in enumerate(topics):
        part = chunk[k::len(topics)]
        send(part, len(part), topic, settings, progress=False)


def _chaos(config: PipelineConfig, epochs: int, seed: int, fault_rate: float,
           events_per_epoch: int, session: Any, poison_rate: float,
           changing: tuple[ConfigChanges, float] | None = None) -> ChaosReport:
    """Faulty attempts run as ``eos`` processes (on the pipeline's compute mode); fault-free ones
    run here on ``session``."""
    rng = random.Random(seed)
    poison_rng = random.Random(seed + 1)  # its own: a seed's phase faults stay what they were
    depth_rng = random.Random(seed + 2)  # which sinks a crash between sinks follows: its own too
    change_rng = random.Random(seed + 3)  # and which config changes are made
    report = ChaosReport()
    settings = client_settings(config.kafka.client)
    menu = _menu(config, settings, report)
    spec = GeneratorSpec(events=events_per_epoch * epochs, keys=30, interval_ms=25,
                         disorder_ms=1000, late_fraction=0.02, late_delay_ms=20_000,
                         bad_fraction=0.02, seed=seed, users=200, **generator_options(config))
    records = list(generate(spec))
    faults_dir = tempfile.mkdtemp(prefix="eos-chaos-")
    for i in range(epochs):
        chunk = records[i * events_per_epoch : (i + 1) * events_per_epoch]
        if poison_rng.random() < poison_rate and len(poisoned := _poisoned(config, chunk)) > len(
                chunk):
            chunk = poisoned
            report.faults[POISON] += 1
        run_id = f"chaos-{seed}-{i}"
        epoch = checkpointed_epoch(config) + 1
        if changing is not None and i > 0 and change_rng.random() < changing[1]:
            config = changing[0].change(change_rng, epoch)
            report.faults[CONFIG_CHANGE] += 1
        _send(chunk, config, settings)
        report.records += len(chunk)
        gaps = max(1, len(sinks_for(config)) - 1)  # where a crash between sinks can fall
        # The phases are called one by one, not through the epoch loop (eos.compute.epochs):
        # a fault goes between them, its attempt first (an ``eos`` process), then the attempt
        # that recovers, in this process.
        for phase in ("begin", "precommit", "commit"):
            if rng.random() < fault_rate:
                point = rng.choice(menu[phase])
                depth = depth_rng.randint(1, gaps)
                if taken := _inject(config, phase, point, epoch, run_id, faults_dir, depth):
                    report.faults[point] += taken
                    report.recoveries += 1
                    if phase == "precommit" and rng.random() < 0.5:
                        abort(config, epoch, reason=f"chaos: {point}")
            if phase == "begin":
                plan = begin(config, run_id=run_id)
                if plan.epoch != epoch:
                    raise ProtocolViolation(f"chaos: run {run_id} got epoch {plan.epoch}, "
                                            f"expected {epoch}")
            elif phase == "precommit":
                precommit(config, epoch, SparkStager(session))
            else:
                commit(config, epoch)
        report.problems += _check_invariants(config, epoch)
        report.epochs += 1
    if changing is not None:
        report.notes += [f"config changed before {made}" for made in changing[0].made]
    result = audit(config)
    report.audit_ok = result.ok
    report.problems += result.problems
    report.lost = result.lost
    report.doubled = result.doubled
    return report
