"""The audit's verdicts: one row per ``eos verify``, so the last verdict can be shown beside the
epochs (``eos status``, the Airflow UI's epochs view) without running the audit again.

Only the audit writes here and the protocol never reads it: a verdict describes the sinks, it
never decides anything about an epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
from deltalake import write_deltalake

from eos.core.delta import read_existing
from eos.core.layout import Tables
from eos.core.tables import TS


@dataclass(frozen=True)
class AuditVerdict:
    """What one ``eos verify`` found."""

    at: datetime  # when it finished
    ok: bool
    committed_epoch: int
    records: int
    problems: int
    duration_ms: float
    report: str


AUDITS_SCHEMA = pa.schema(
    [
        ("at", TS),
        ("ok", pa.bool_()),
        ("committed_epoch", pa.int64()),
        ("records", pa.int64()),
        ("problems", pa.int64()),
        ("duration_ms", pa.float64()),
        ("report", pa.string()),  # what ``eos verify`` printed
    ]
)


def record(tables: Tables, verdict: AuditVerdict) -> None:
    """Append one verdict (the table is created by the first)."""
    row = {"at": verdict.at, "ok": verdict.ok, "committed_epoch": verdict.committed_epoch,
           "records": verdict.records, "problems": verdict.problems,
           "duration_ms": verdict.duration_ms, "report": verdict.report}
    write_deltalake(tables.audits, pa.Table.from_pylist([row], schema=AUDITS_SCHEMA),
                    mode="append")


def latest(tables: Tables) -> AuditVerdict | None:
    """The most recent verdict, None if the pipeline was never verified."""
    read = read_existing(tables.audits)
    rows = [] if read is None else read.to_pylist()
    return AuditVerdict(**max(rows, key=lambda r: r["at"])) if rows else None
