"""Task ``begin``: decide epoch N's offset ranges and log them before anything reads data.

A plan is the checkpoint barrier: epoch N reads ``[from, until)`` per partition and epoch N+1
starts exactly where N ends. A rerun must read the same records, so a logged plan is reused,
never recomputed.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from eos import epochlog, faults
from eos.config import PipelineConfig
from eos.errors import DataLoss, ProtocolViolation
from eos.kafka import client_settings, redact, topic_watermarks
from eos.phaselog import log_phase, timed
from eos.tables import NO_EPOCH, Tables, ensure_tables, read_epoch, txn_version


@dataclass(frozen=True)
class PartitionRange:
    partition: int
    start: int  # "from", inclusive
    until: int  # exclusive

    @property
    def records(self) -> int:
        return self.until - self.start


@dataclass(frozen=True)
class Plan:
    pipeline: str
    topic: str
    epoch: int
    ranges: tuple[PartitionRange, ...]
    clock_ms: int | None = None  # wall clock read once at plan time; only with an idle timeout

    @property
    def hash(self) -> str:
        """Identifies what the epoch reads; staged rows carry it so stale writes are detectable."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Plan:
        data = json.loads(text)
        data["ranges"] = tuple(PartitionRange(**r) for r in data["ranges"])
        return cls(**data)

    def describe_ranges(self) -> str:
        return " ".join(f"p{r.partition}:[{r.start},{r.until})" for r in self.ranges)


def cap_fairly(available: dict[int, int], budget: int) -> dict[int, int]:
    """Split ``budget`` records over partitions by water-filling: no partition starves another."""
    taken = dict.fromkeys(available, 0)
    active = sorted(p for p, n in available.items() if n > 0)
    remaining = budget
    while remaining > 0 and active:
        share = max(1, remaining // len(active))
        for p in list(active):
            take = min(share, available[p] - taken[p], remaining)
            taken[p] += take
            remaining -= take
            if taken[p] == available[p]:
                active.remove(p)
            if remaining == 0:
                break
    return taken


def last_committed_epoch(config: PipelineConfig, tables: Tables) -> int:
    """The target's ``txn`` version. Side sinks commit first: one epoch ahead, never behind."""
    committed = txn_version(tables.target, config.app_id)
    for name, path in tables.sinks()[:-1]:
        version = txn_version(path, config.app_id)
        if version not in (committed, committed + 1):
            raise ProtocolViolation(
                f"sink '{name}' has committed epoch {version} but the target {committed}: "
                "side sinks may only be one epoch ahead; inspect the tables before going on"
            )
    return committed


def committed_offsets(tables: Tables, epoch: int) -> dict[int, int]:
    """``until`` per partition of committed epoch ``epoch``, from its staged ``offsets`` rows."""
    if epoch == NO_EPOCH:
        return {}
    staged = read_epoch(tables.staging, epoch, ["kind", "partition", "until"]).to_pylist()
    offsets = {r["partition"]: r["until"] for r in staged if r["kind"] == "offsets"}
    if not offsets and not any(r["kind"] == "state" for r in staged):
        raise ProtocolViolation(
            f"staging holds no offsets for committed epoch {epoch}; it must be kept as the "
            "resume point (was it pruned or deleted by hand?)"
        )
    return offsets


def new_plan(config: PipelineConfig, tables: Tables, epoch: int) -> Plan:
    """Ranges from the committed offsets to the high watermarks, capped by ``max_records``."""
    settings = client_settings(config.kafka.client)
    topic = config.kafka.topic
    marks = topic_watermarks(settings, topic)
    committed = committed_offsets(tables, epoch - 1)
    starts: dict[int, int] = {}
    for partition, (low, high) in marks.items():
        default = low if config.kafka.start == "earliest" else high
        start = committed.get(partition, default)
        if start < low:
            raise DataLoss(
                f"topic '{topic}' partition {partition}: epoch {epoch} must read from offset "
                f"{start} but the log now starts at {low} (retention or truncation removed "
                f"{low - start} records); refusing to skip them"
            )
        if start > high:
            raise DataLoss(
                f"topic '{topic}' partition {partition}: committed offset {start} is beyond the "
                f"high watermark {high}; the partition was truncated or recreated"
            )
        starts[partition] = start
    available = {p: marks[p][1] - starts[p] for p in marks}
    taken = cap_fairly(available, config.epoch.max_records)
    ranges = tuple(PartitionRange(p, starts[p], starts[p] + taken[p]) for p in sorted(marks))
    clock = int(time.time() * 1000) if config.window.idle_timeout is not None else None
    log_phase("begin.watermarks", epoch=epoch, kafka=redact(settings), watermarks=marks)
    return Plan(config.name, topic, epoch, ranges, clock)


def begin(config: PipelineConfig, run_id: str | None = None) -> Plan:
    """Return the plan of the epoch this run processes, logging a new one only if none exists."""
    with timed() as took:
        tables = ensure_tables(config)
        committed = last_committed_epoch(config, tables)
        plan, how = _existing_plan(tables, committed, run_id)
        if plan is None:
            fresh = new_plan(config, tables, committed + 1)
            epochlog.append(
                tables, fresh.epoch, epochlog.PLANNED, run_id=run_id,
                plan_hash=fresh.hash, plan=fresh.to_json(),
            )
            faults.hit("begin.after_log")
            # Racing planners each append; the first plan logged wins for everyone.
            plan = Plan.from_json(epochlog.first_plan_row(tables, fresh.epoch)["plan"])
            how = "planned" if plan == fresh else "reused (a concurrent plan won)"
        elif run_id and not how.startswith("reused (this run"):
            # Bind this run to the epoch it adopted, so clearing it later finds the same epoch.
            epochlog.append(
                tables, plan.epoch, epochlog.PLANNED, run_id=run_id,
                plan_hash=plan.hash, plan=plan.to_json(),
            )
    log_phase(
        "begin", epoch=plan.epoch, plan_hash=plan.hash, how=how, committed_epoch=committed,
        records=plan.records, ranges=plan.describe_ranges(), run_id=run_id, duration_ms=took["ms"],
    )
    return plan


def _existing_plan(tables: Tables, committed: int, run_id: str | None) -> tuple[Plan | None, str]:
    if run_id:
        row = epochlog.plan_row_for_run(tables, run_id)
        if row is not None:
            return Plan.from_json(row["plan"]), "reused (this run's epoch)"
    row = epochlog.first_plan_row(tables, committed + 1)
    if row is not None:
        return Plan.from_json(row["plan"]), "reused (logged plan)"
    return None, ""


def plan_of(tables: Tables, epoch: int) -> Plan:
    row = epochlog.first_plan_row(tables, epoch)
    if row is None:
        raise ProtocolViolation(f"epoch {epoch} has no plan in the epoch log; run begin first")
    return Plan.from_json(row["plan"])


def plan_summary(plan: Plan) -> dict[str, Any]:
    return {"epoch": plan.epoch, "plan_hash": plan.hash, "records": plan.records,
            "ranges": plan.describe_ranges()}
