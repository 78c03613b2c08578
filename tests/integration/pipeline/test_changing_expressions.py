"""An aggregating pipeline's filter and derived fields change between epochs: a filter that
fails on a record stops the epoch with the way out, the fixed filter (TRY_CAST) goes on with
nothing replayed, each checkpoint records the filter its epoch was computed with, and the
audit recomputes every epoch with its own. What the open windows depend on (group_by, the
window, the aggregations, a derived field's type) stays refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eos.compute.epochs import run_epoch
from eos.core import checkpoints
from eos.core.errors import ConfigError, ExpressionFailed
from eos.core.layout import tables_for
from eos.core.protocol import checkpointed_epoch
from eos.tools.generator import GeneratorSpec

from support.harness import finish_and_audit
from support.pageviews import PAGEVIEW_EVENT, produce
from support.pipelines import make_pipeline

MINUTES = GeneratorSpec(events=160, keys=4, users=10, interval_ms=20_000, disorder_ms=0,
                        seed=5, shape="pageviews")
# Epoch 0 reads offsets 0-9 of each partition, whose CASE gives '1'; epoch 1 reaches a page path.
STRICT = "CAST(CASE WHEN kafka_offset < 10 THEN '1' ELSE page END AS bigint) >= 0"
LENIENT = ("coalesce(TRY_CAST(CASE WHEN kafka_offset < 10 THEN '1' ELSE page END AS bigint) "
           ">= 0, revenue >= 0)")


def windowed(tmp_path: Path, topic: str, filter_text: str,
             select: dict[str, str] | None = None, group_by: str = "page") -> Any:
    """The pipeline ``changing`` of ``tmp_path`` (each call rewrites its one file)."""
    return make_pipeline(
        tmp_path, name="changing", base={"kafka": {"topic": topic}},
        event={**PAGEVIEW_EVENT, "filter": filter_text}, select=select,
        group_by=[group_by], window={"type": "tumbling", "size": "5m", "allowed_lateness": "0s"},
        aggregations={"views": "count(*)", "revenue": "sum(revenue)"}, max_records=40)


def filters(config: Any) -> dict[int, str | None]:
    return {c.epoch: c.config["event"].get("filter")
            for c in checkpoints.read_all(tables_for(config))}


def test_a_failing_filter_is_fixed_in_place_and_each_epoch_audited_with_its_own(
        tmp_path: Path, spark: Any) -> None:
    topic = produce(MINUTES)
    strict = windowed(tmp_path, topic, STRICT)
    run_epoch(strict, "strict-0", spark=spark)
    assert checkpointed_epoch(strict) == 0
    with pytest.raises(ExpressionFailed, match=r"epoch 1: .*CAST_INVALID_INPUT.*TRY_CAST"):
        run_epoch(strict, "strict-1", spark=spark)
    lenient = windowed(tmp_path, topic, LENIENT)  # was refused: "changed: event.filter"
    finish_and_audit(lenient, spark, "lenient", MINUTES.events)
    recorded = filters(lenient)
    assert recorded[0] == STRICT and {recorded[e] for e in recorded if e > 0} == {LENIENT}


LOWER, UPPER = "CAST(lower(page) AS string)", "CAST(upper(page) AS string)"


def test_a_derived_field_changes_its_expression_and_what_state_depends_on_is_refused(
        tmp_path: Path, spark: Any) -> None:
    topic = produce(MINUTES)

    def by_section(expression: str, group_by: str = "section") -> Any:
        return windowed(tmp_path, topic, "revenue >= 0", select={"section": expression},
                        group_by=group_by)

    run_epoch(by_section(LOWER), "lower-0", spark=spark)
    upper = by_section(UPPER)
    run_epoch(upper, "upper-1", spark=spark)
    for refused, changed in [(by_section("CAST(length(page) AS bigint)"), "select.section"),
                             (by_section(UPPER, group_by="page"), "group_by")]:
        with pytest.raises(ConfigError, match=f"changed: .*{changed}"):
            run_epoch(refused, "refused", spark=spark)
    finish_and_audit(upper, spark, "upper", MINUTES.events)
    views = {c.epoch: c.config["select"]["section"]
             for c in checkpoints.read_all(tables_for(upper))}
    assert views[0] == LOWER and {views[e] for e in views if e > 0} == {UPPER}
