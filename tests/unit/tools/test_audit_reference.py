"""The audit's reference (``eos.tools.audit.reference.aggregate``) follows the pipeline's rules for
values
at the edges: an exact sum that overflows its type is null and named, a double sum may be
infinite, and the exact sum decides, not the order of additions."""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from eos.core.config import PipelineConfig
from eos.tools.audit.checks import compare_rows, latest_rows, row_identity, value_differences
from eos.tools.audit.reference import aggregate
from eos.tools.audit.report import AuditReport, ProblemKind
from eos.tools.pipelines import write_pipeline


def _sums(tmp_path: Path) -> PipelineConfig:
    return write_pipeline(
        tmp_path, kafka={"topic": "never-read"}, group_by=["key"],
        event={"time": {"field": "ts", "format": "epoch_ms"},
               "fields": {"key": "string", "amount": "long", "price": "decimal(38,9)",
                          "ratio": "double"}},
        window={"type": "tumbling", "size": "10s"},
        aggregations={"total": "sum(amount)", "mean": "avg(price)", "ratios": "sum(ratio)"})


def test_the_audit_reference_follows_the_same_rules(tmp_path: Path) -> None:
    config = _sums(tmp_path)
    big = 2**62 + 1

    def event(amount: int, price: str, ratio: float) -> dict:
        return {"key": "k", "amount": amount, "price": Decimal(price), "ratio": ratio}

    values, overflowed = aggregate(config, [event(big, "6" + "0" * 28, 1.5e308),
                                            event(big, "6" + "0" * 28, 1.5e308)])
    assert values == {"total": None, "mean": None, "ratios": math.inf}
    assert overflowed == ["total", "mean"]
    # The exact sum decides, not the order of additions: this one fits a double.
    values, overflowed = aggregate(config, [event(1, "1", 1.5e308), event(-1, "1", 1.5e308),
                                            event(0, "1", -1.5e308)])
    assert (values["total"], values["ratios"], overflowed) == (0, 1.5e308, [])
    wrong = value_differences(config, {"total": 1, "mean": 1.0, "ratios": math.nan},
                              {"total": 1, "mean": 1.0, "ratios": math.nan})
    assert wrong == []
    assert value_differences(config, {"total": 1, "mean": 1.0, "ratios": math.inf},
                             {"total": 1, "mean": 1.0, "ratios": 1e308}) == [
        "ratios=1e+308, expected inf"]



def test_a_decimal_sum_is_exact_past_pythons_default_28_digits(tmp_path: Path) -> None:
    """A decimal(38,9) sum has up to 38 digits: the reference keeps every one, as Spark does
    (Python's default decimal context would round it to 28 and call the pipeline wrong)."""
    config = write_pipeline(
        tmp_path, kafka={"topic": "never-read"}, group_by=["key"],
        event={"time": {"field": "ts", "format": "epoch_ms"},
               "fields": {"key": "string", "price": "decimal(38,9)"}},
        window={"type": "tumbling", "size": "10s"}, aggregations={"total": "sum(price)"})
    prices = ["64899948928417271662936078896.788433063", "0.000022974", "3.211544937"]
    values, overflowed = aggregate(config, [{"key": "k", "price": Decimal(p)} for p in prices])
    assert values == {"total": Decimal("64899948928417271662936078900.000000974")}
    assert overflowed == []


def test_an_upserting_sink_is_expected_to_hold_each_keys_latest_row(tmp_path: Path) -> None:
    """``SupportsReadBack.kept_by``: per key, the row of the last epoch that wrote it; a sink
    still holding an older epoch's row (an upsert lost) is a missing row and an unexpected
    one."""
    config = _sums(tmp_path)
    minute = datetime(2026, 1, 1, tzinfo=UTC)

    def row(key: str, epoch: int, total: int) -> dict[str, object]:
        return {"key": key, "window_start": minute, "window_end": minute, "total": total,
                "epoch": epoch}

    committed = [row("a", 0, 1), row("b", 0, 2), row("a", 2, 5), row("a", 1, 3)]
    expected = latest_rows(committed, ("key", "window_start"))
    assert sorted((r["key"], r["epoch"], r["total"]) for r in expected) == [
        ("a", 2, 5), ("b", 0, 2)]
    identity = row_identity(config, "windows")
    report = AuditReport(config.name, committed_epoch=2)
    compare_rows(report, "postgres:s.t", Counter(map(identity, expected)),
                 Counter(map(identity, [row("a", 1, 3), row("b", 0, 2)])))
    assert sorted(p.kind for p in report.problems) == sorted(
        [ProblemKind.MISSING, ProblemKind.UNEXPECTED])
