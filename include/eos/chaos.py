"""``eos chaos``: many epochs with crashes injected at random points, recovered by rerunning.

A phase attempt that has a fault armed runs in its own process (``eos begin|precommit|commit``
with ``EOS_FAULTS``), so the crash is a real SIGKILL; attempts without a fault run in-process on a
shared Spark session to keep the run short. After every epoch the invariants are checked; at the
end the independent audit counts records lost and doubled.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from deltalake import DeltaTable

from eos.audit import audit, check_offsets
from eos.commit import abort, commit
from eos.config import PipelineConfig
from eos.errors import ProtocolViolation
from eos.kafka import client_settings
from eos.plan import begin, plan_of
from eos.produce import GeneratorSpec, generate, send
from eos.stage import precommit, spark_session
from eos.tables import tables_for, txn_version

PHASE_FAULTS = {
    "begin": ["begin.after_log"],
    "precommit": ["precommit.mid_read", "precommit.before_write", "precommit.after_write"],
    "commit": ["commit.between_sinks", "commit.after_target"],
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
    problems: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"epochs committed   {self.epochs}", f"records produced   {self.records}",
                 f"faults injected    {sum(self.faults.values())}"]
        lines += [f"  {point:<22} {n}" for point, n in sorted(self.faults.items())]
        lines += [f"recoveries         {self.recoveries}", f"records lost       {self.lost}",
                  f"records doubled    {self.doubled}",
                  f"audit (eos verify) {'OK' if self.audit_ok else 'FAILED'}"]
        lines += [f"  - {p}" for p in self.problems[:20]]
        return "\n".join(lines)


def _crash_attempt(config: PipelineConfig, phase: str, epoch: int, run_id: str, point: str,
                   faults_dir: str) -> int:
    args = [sys.executable, "-m", "eos.cli", phase, "--config", str(config.source_path)]
    args += ["--run-id", run_id] if phase == "begin" else ["--epoch", str(epoch)]
    env = {**os.environ, "EOS_FAULTS": f"{point}:1", "EOS_FAULTS_DIR": faults_dir}
    return subprocess.run(args, env=env, capture_output=True, text=True, check=False).returncode


def _check_invariants(config: PipelineConfig, epoch: int) -> list[str]:
    tables = tables_for(config)
    problems = []
    for name, path in tables.sinks():
        version = txn_version(path, config.app_id)
        writes = sum(1 for h in DeltaTable(path).history() if h.get("operation") == "WRITE")
        if version != epoch or writes != epoch + 1:
            problems.append(f"after epoch {epoch}: {name} txn={version} writes={writes}")
    problems += check_offsets([plan_of(tables, e) for e in range(epoch + 1)])
    return problems


def chaos(config: PipelineConfig, epochs: int, seed: int, fault_rate: float = 0.5,
          events_per_epoch: int = 400, spark: Any = None) -> ChaosReport:
    rng = random.Random(seed)
    report = ChaosReport()
    session = spark or spark_session(config)
    settings = client_settings(config.kafka.client)
    spec = GeneratorSpec(events=events_per_epoch * epochs, keys=30, interval_ms=25,
                         disorder_ms=1000, late_fraction=0.02, late_delay_ms=20_000,
                         bad_fraction=0.02, seed=seed)
    records = list(generate(spec))
    faults_dir = tempfile.mkdtemp(prefix="eos-chaos-")
    for i in range(epochs):
        chunk = records[i * events_per_epoch : (i + 1) * events_per_epoch]
        send(chunk, len(chunk), config.kafka.topic, settings, progress=False)
        report.records += len(chunk)
        run_id = f"chaos-{seed}-{i}"
        epoch = txn_version(tables_for(config).target, config.app_id) + 1
        for phase in ("begin", "precommit", "commit"):
            if rng.random() < fault_rate:
                point = rng.choice(PHASE_FAULTS[phase])
                code = _crash_attempt(config, phase, epoch, run_id, point, faults_dir)
                if code != 0:
                    report.faults[point] += 1
                    report.recoveries += 1
                    if phase == "precommit" and rng.random() < 0.5:
                        abort(config, epoch, reason=f"chaos: {point}")
                for name in os.listdir(faults_dir):
                    os.unlink(os.path.join(faults_dir, name))
            if phase == "begin":
                plan = begin(config, run_id=run_id)
                if plan.epoch != epoch:
                    raise ProtocolViolation(f"chaos: run {run_id} got epoch {plan.epoch}, "
                                            f"expected {epoch}")
            elif phase == "precommit":
                precommit(config, epoch, spark=session)
            else:
                commit(config, epoch)
        report.problems += _check_invariants(config, epoch)
        report.epochs += 1
    result = audit(config)
    report.audit_ok = result.ok
    report.problems += result.problems
    report.lost = sum(1 for p in result.problems if "missing row" in p)
    report.doubled = sum(1 for p in result.problems if "duplicated" in p or "unexpected" in p)
    return report
