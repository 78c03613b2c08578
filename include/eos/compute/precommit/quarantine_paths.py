"""The path rules of the pipeline's sinks on Spark: a record whose value a sink cannot name a
path with is quarantined with the rule's reason, as a record that does not parse is, before any
window or row is computed from it (``eos.core.path_rules``).

Only records that parsed and that the filter keeps are judged, so a record the filter drops is
counted as dropped, not quarantined, and the expression a rule reads is only evaluated where
the pipeline would evaluate it anyway (CASE WHEN runs only the branch it takes). The escaped
length is counted as the rule counts it: one byte per character the sink keeps (all ASCII),
three per UTF-8 byte of every other.
"""

from __future__ import annotations

from typing import Any

from eos.core.config import PipelineConfig
from eos.core.path_rules import PathRule, rules_for
from eos.core.schema import REASON


def with_path_rules(F: Any, config: PipelineConfig, frame: Any, keep: Any,
                    values: dict[str, Any]) -> Any:
    """``frame`` with ``REASON`` set on each kept record breaking a rule of a sink of the
    pipeline's main output; ``values``: the Spark column of each output column a rule may
    read (a windows output's group fields, a rows output's selected columns and topic)."""
    rules = [r for r in rules_for(config, ("rows", "windows")) if r.column in values]
    if not rules:
        return frame
    judged = None
    for rule in rules:
        judged = _judge(F, rule, values[rule.column], judged)
    reason = F.when(F.col(REASON).isNull() & keep, judged).otherwise(F.col(REASON))
    return frame.withColumn(REASON, reason)


def _judge(F: Any, rule: PathRule, value: Any, chain: Any | None) -> Any:
    """``chain`` extended with the rule's two reasons, in the order ``PathRule.problem``
    tries them (its first broken rule names the record's reason)."""
    text = value.cast("string")
    size = F.octet_length(text)
    kept = F.length(F.regexp_replace(text, _outside(rule.kept), ""))
    escaped = size + (size - kept) * 2
    start = F if chain is None else chain
    if rule.empty_is_null:
        start = start.when(text == F.lit(""), F.lit(rule.empty))
    return start.when(escaped > F.lit(rule.max_bytes), F.lit(rule.too_long))


def _outside(kept: frozenset[str]) -> str:
    """A Java regular expression matching one character not in ``kept`` (ASCII only)."""
    assert all(ord(c) < 128 for c in kept), "a rule keeps ASCII characters only"
    ranges = "".join("\\" + c if not c.isalnum() else c for c in sorted(kept))
    return f"[^{ranges}]"
