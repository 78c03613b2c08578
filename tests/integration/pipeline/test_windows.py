"""Declared schemas, group-by, every aggregation and every window type, end to end.

Real broker, real Spark, real Delta. Ground truth is the audit's plain-Python recomputation
(``eos.tools.audit.reference.Replay``: its own windowing and aggregation code, DuckDB for the
filter, exact distinct counts for the HLL sketches), fed by a plain Kafka consumer; each test also
checks that the data really exercised what it names (late pairs, quarantined records,
multi-epoch windows), so a pipeline that dropped everything could not pass.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from eos.compute.epochs import run_until_caught_up
from eos.core.aggregations import aggregations_for, lifts_all
from eos.core.config import PipelineConfig
from eos.core.delta import read_table
from eos.core.errors import ConfigError
from eos.core.kafka import client_settings
from eos.core.protocol import begin
from eos.tools.audit.checks import row_identity, value_differences
from eos.tools.audit.verify import audit
from eos.tools.pipelines import unique_topic, write_pipeline

from support.harness import delta_path
from support.pageviews import (
    AGGREGATIONS,
    MESSY,
    ORDERLY,
    WINDOWS,
    pageview_pipeline,
    produce,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

def committed(config: PipelineConfig, table: str) -> list[dict[str, Any]]:
    return read_table(delta_path(config, table)).to_pylist()


@pytest.mark.parametrize("aggregations", sorted(AGGREGATIONS))
@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_every_aggregation_per_window_type_equals_the_audit(tmp_path: Path, kafka: str,
                                                            spark: Any, window: str,
                                                            aggregations: str) -> None:
    """Both ways Spark merges an epoch: aggregating its events first (``every``: two functions
    do not lift) and lifting each event to its state (``lifting``)."""
    config = pageview_pipeline(tmp_path, window, produce(MESSY),
                               epoch={"max_records": 700, "staging_retention": 2},
                               aggregations=AGGREGATIONS[aggregations])
    assert lifts_all(aggregations_for(config)) == (aggregations == "lifting")
    plans = run_until_caught_up(config, window, spark=spark)
    report = audit(config)
    assert report.ok, report.render()

    assert len(plans) >= 5
    windows, late = committed(config, "target"), committed(config, "late")
    quarantined = committed(config, "quarantine")
    assert report.counts["delta:target"] == (len(windows), len(windows)) and windows
    assert late and quarantined, "the data must exercise late and malformed records"
    # A window fed by several epochs: its state crossed at least one staging boundary.
    spans = Counter((row["page"], row["country"], row["window_start"]) for row in windows)
    assert max(spans.values()) == 1, "each window is emitted once"
    assert {row["epoch"] for row in windows} != {plans[-1].epoch}
    reasons = {row["reason"].split(":")[0] for row in quarantined}
    assert len(reasons) >= 3, reasons
    if window == "hopping":  # an event sits in size/slide = 3 windows
        assert {row["window_end"] - row["window_start"] for row in windows} == {
            windows[0]["window_end"] - windows[0]["window_start"]}
    if window == "session":
        gap = timedelta(milliseconds=config.window.gap)
        assert any(row["window_end"] - row["window_start"] > gap
                   for row in windows), "some session spans several events"


def _windows_without_epoch(config: PipelineConfig) -> dict[tuple, dict[str, Any]]:
    identity = row_identity(config, "windows")
    rows = {}
    for row in committed(config, "target"):
        row = {**row, "epoch": 0}
        assert identity(row) not in rows
        rows[identity(row)] = row
    return rows


@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_one_three_or_ten_epochs_give_the_same_windows(tmp_path: Path, kafka: str, spark: Any,
                                                        window: str) -> None:
    """docs/pipelines.md: with no late records, any split of the same records into epochs gives the
    same output (doubles and sketches within their tolerance, everything else exactly).

    An epoch cap splits partitions at different event times, so the lateness covers the whole
    stream; the empty epoch at the end emits everything (idle timeout 0 after the last)."""
    topic = produce(ORDERLY)
    results = []
    window_spec = {**WINDOWS[window], "allowed_lateness": "10m", "idle_timeout": "0ms"}
    for epochs in (1, 3, 10):
        (tmp_path / str(epochs)).mkdir()
        config = pageview_pipeline(tmp_path / str(epochs), window, topic, window=window_spec,
                                   epoch={"max_records": -(-ORDERLY.events // epochs)})
        runs = run_until_caught_up(config, f"split{epochs}", spark=spark)
        assert len([run for run in runs if run.plan.records]) == epochs
        assert committed(config, "late") == []
        results.append(_windows_without_epoch(config))
    one, *others = results
    assert len(one) > 10
    for other in others:
        assert other.keys() == one.keys()
        for key, row in one.items():
            assert value_differences(config, row, other[key]) == [], key


HOSTILE = [
    # (record, what becomes of it)
    (b'{"ts": 1767225600000, "k": "a", "d": 1e-12, "m": "1.5"}', "kept"),
    (b'{"ts": 1767225600001, "k": "a", "d": 1e20, "m": "2"}', "kept"),
    (b'{"ts": 1767225600002, "k": "a", "d": -0.0, "m": "0"}', "kept"),
    (b'{"ts": 1767225600003, "k": "a", "d": NaN, "m": "1"}', "malformed JSON"),
    (b'{"ts": 1767225600004, "k": "a", "d": Infinity, "m": "1"}', "malformed JSON"),
    (b'{"ts": 1767225600005, "k": "a", "d": 1, "e": 1.0000000001, "m": "1"}', "'e'"),
    (b'{"ts": 1767225600006, "k": {"x": 1}, "d": 1, "m": "1"}', "'k'"),
    (b'{"ts": "yesterday", "k": "a", "d": 1, "m": "1"}', "'ts'"),
]


def test_hostile_values_are_kept_exactly_or_quarantined_with_the_field(
        tmp_path: Path, kafka: str, spark: Any) -> None:
    topic = unique_topic("hostile")
    import confluent_kafka as ck

    producer = ck.Producer(client_settings())
    for i, (record, _) in enumerate(HOSTILE):
        producer.produce(topic, value=record, timestamp=1767225600000 + i)
    assert producer.flush(30) == 0
    event = {"time": {"field": "ts", "format": "epoch_ms"},
             "fields": {"k": "string", "d": "double",
                        "e": {"path": "e", "type": "decimal(10,9)", "optional": True}}}
    config = write_pipeline(
        tmp_path, kafka={"topic": topic}, group_by=["k"], event=event,
        window={"type": "tumbling", "size": "1s", "idle_timeout": "0ms"},
        aggregations={"n": "count(*)", "total": "sum(d)", "smallest": "min(d)",
                      "largest": "max(d)"})
    run_until_caught_up(config, "hostile", spark=spark)
    assert audit(config).ok
    (window,) = committed(config, "target")
    assert (window["n"], window["total"], window["smallest"], window["largest"]) == (
        3, 1e20, -0.0, 1e20)
    assert str(window["smallest"]) == "-0.0"  # doubles stay doubles, sign of zero included
    reasons = {row["raw_value"]: row["reason"] for row in committed(config, "quarantine")}
    for record, what in HOSTILE:
        if what == "kept":
            assert record not in reasons
        else:
            assert what in reasons[record], (record, reasons[record])

    # The schema view is recorded with the commits: changing what rows mean is refused.
    changed = write_pipeline(tmp_path, name=config.name, kafka={"topic": topic},
                             group_by=["k"], event=event,
                             window={"type": "tumbling", "size": "2s"},
                             aggregations={"n": "count(*)"},
                             tables={"root": str(config.root)})
    with pytest.raises(ConfigError) as refused:
        begin(changed, run_id="changed")
    message = str(refused.value)
    assert "window.size: 1000 -> 2000" in message and "aggregations.total" in message
    assert "new name" in message
