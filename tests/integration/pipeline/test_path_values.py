"""A value a partitioned Delta table cannot name a directory with (too long once escaped, or
an empty string its readers take for a null) quarantines its record at precommit, with the
sink's reason, instead of halting the pipeline at the commit: in a pipeline without windows
(select computes the partition column; alike whether the driver collects the epoch or the
executors write it) and in an aggregating one (the group field partitions the windows). The
audit recomputes the same decision from Kafka and agrees; the epochs go on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eos.core.delta import read_table
from eos.core.path_rules import rules_for
from eos.tools.generator import GeneratorSpec

from support.harness import delta_path, finish_and_audit
from support.pageviews import PAGEVIEW_EVENT, produce
from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECORDS = GeneratorSpec(events=60, keys=4, users=10, interval_ms=20_000, disorder_ms=0,
                        seed=11, shape="pageviews")
# Every fifth record's page repeated past a directory's name, every fifth but one empty.
PART = ("CAST(CASE WHEN kafka_offset % 5 = 1 THEN repeat(page, 60) "
        "WHEN kafka_offset % 5 = 2 THEN '' ELSE page END AS string)")
PARTITIONED = {"delta": {"table": "target", "partition_by": ["part"]}}
QUARANTINE = [{"delta": "quarantine"}]


def _reasons(config: Any) -> dict[str, int]:
    held: dict[str, int] = {}
    for row in read_table(delta_path(config, "quarantine")).to_pylist():
        held[row["reason"]] = held.get(row["reason"], 0) + 1
    return held


@pytest.mark.parametrize("collect_rows", [50_000, 0], ids=["two-passes", "one-pass"])
def test_rows_a_partition_value_no_directory_holds_is_quarantined_and_audited(
        tmp_path: Path, spark: Any, collect_rows: int) -> None:
    config = make_pipeline(tmp_path, name="paths", base={"kafka": {"topic": produce(RECORDS)}},
                           event=PAGEVIEW_EVENT, select={"page": "page", "part": PART},
                           group_by=None, window=None, aggregations=None,
                           sinks={"rows": [PARTITIONED], "quarantine": QUARANTINE},
                           spark={"collect_rows": collect_rows}, max_records=30)
    finish_and_audit(config, spark, "paths", RECORDS.events)  # the audit decides alike

    (rule,) = rules_for(config, ("rows",))
    reasons = _reasons(config)
    assert reasons.get(rule.too_long, 0) > 0 and reasons.get(rule.empty, 0) > 0
    held = read_table(delta_path(config, "target")).to_pylist()
    assert held and all(r["part"] and rule.problem(r["part"]) is None for r in held)


def test_windows_a_group_value_no_directory_holds_is_quarantined_and_audited(
        tmp_path: Path, spark: Any) -> None:
    config = make_pipeline(
        tmp_path, name="paths", base={"kafka": {"topic": produce(RECORDS)}},
        event=PAGEVIEW_EVENT, select={"part": PART}, group_by=["part"],
        window={"type": "tumbling", "size": "5m", "allowed_lateness": "0s"},
        aggregations={"views": "count(*)"},
        sinks={"windows": [PARTITIONED], "late": [{"delta": "late"}],
               "quarantine": QUARANTINE}, max_records=30)
    finish_and_audit(config, spark, "paths", RECORDS.events)

    (rule,) = rules_for(config, ("windows",))
    reasons = _reasons(config)
    assert reasons.get(rule.too_long, 0) > 0 and reasons.get(rule.empty, 0) > 0
    held = read_table(delta_path(config, "target")).to_pylist()
    assert held and all(rule.problem(r["part"]) is None for r in held)
