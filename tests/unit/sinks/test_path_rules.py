"""A Delta sink's path rules (``eos.core.path_rules``): the bound each rule puts on a string
partition value is exact where one column takes the whole name (a value at the bound is what
delta-rs writes, one byte more it cannot), never admits a combination of values the table
cannot hold, counts escaping as delta-rs does, and travels with an epoch's view without making
a sink added later a schema change."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from eos.core.evolution import comparable
from eos.core.path_rules import PATH_RULES, PathRule, escaped_bytes, path_problem_of
from eos.sinks.delta.sink import (
    _UNRESERVED,
    DATA_FILE_NAME,
    _encoded,
    partition_value_problems,
    path_rules,
)

pytestmark = pytest.mark.fast

ODD = ["a\x00b", "..", ".hidden", "tab\tnew\nline\x7f", "a\\b", "a=b%c", "Zürich 東京", "🦀/x",
       "plain-text_1.2~3"]


def test_escaping_is_counted_as_delta_rs_escapes() -> None:
    for text in ODD:
        assert escaped_bytes(text, _UNRESERVED) == len(_encoded(text))


def test_one_column_is_bounded_by_a_names_limit_exactly(tmp_path: Path) -> None:
    (rule,) = path_rules(str(tmp_path / "t"), "delta:t", ["key"], {"key": "string"})
    assert rule.max_bytes == 255 - len("key=")
    at, over = "x" * rule.max_bytes, "x" * (rule.max_bytes + 1)
    assert rule.problem(at) is None and rule.problem(over) == rule.too_long
    assert rule.problem("/" * (rule.max_bytes // 3)) is None  # '/' is %2F: three bytes
    assert rule.problem("/" * (rule.max_bytes // 3 + 1)) == rule.too_long
    rows = pa.table({"key": [at]})
    assert partition_value_problems(str(tmp_path / "t"), ["key"], rows) == []
    assert partition_value_problems(str(tmp_path / "t"), ["key"], pa.table({"key": [over]}))
    assert rule.problem("") == rule.empty and rule.problem(None) is None


@pytest.mark.parametrize("location", ["s3://bucket/" + "p" * 300 + "/t", "local"],
                         ids=["store", "local"])
def test_values_within_every_rule_always_fit_together(tmp_path: Path, location: str) -> None:
    """Two string columns and a long one on a store's key limit (1024) and a local path: any
    values within their rules make a path the table can hold."""
    where = str(tmp_path / ("d" * 200) / "t") if location == "local" else location
    types = {"a": "string", "b": "string", "n": "long"}
    rules = path_rules(where, "delta:t", ["a", "n", "b"], types)
    assert [r.column for r in rules] == ["a", "b"]
    chars = ["x", "/", "é", "日", "~"]
    generator = random.Random(7)
    for _ in range(200):
        values: dict[str, object] = {"n": -(2**63)}
        for rule in rules:
            text = ""
            while True:
                more = text + generator.choice(chars)
                if escaped_bytes(more, rule.kept) > rule.max_bytes:
                    break
                text = more
            values[rule.column] = text
        assert path_problem_of(rules, values) is None
        table = pa.table({"a": [values["a"]], "n": [values["n"]], "b": [values["b"]]})
        assert partition_value_problems(where, ["a", "n", "b"], table) == [], values


def test_the_first_broken_rule_names_the_reason_and_a_rule_survives_the_view() -> None:
    rules = [PathRule("delta:t", "a", 10, _UNRESERVED, True),
             PathRule("delta:u", "b", 5, _UNRESERVED, True)]
    assert path_problem_of(rules, {"a": "ok", "b": "x" * 6}) == rules[1].too_long
    assert path_problem_of(rules, {"a": "", "b": "x" * 6}) == rules[0].empty
    assert [PathRule.from_view(r.to_view()) for r in rules] == rules
    assert "delta:u" in rules[1].too_long and "'b'" in rules[1].too_long


def test_a_sink_added_with_rules_is_no_schema_change() -> None:
    view = {"event": {"fields": {"k": "string"}}, "select": {"k": "k"}}
    rules = [PathRule("delta:t", "k", 10, _UNRESERVED, True).to_view()]
    before, after = comparable(view, {**view, PATH_RULES: rules})
    assert before == after
    assert DATA_FILE_NAME.endswith(".parquet")
