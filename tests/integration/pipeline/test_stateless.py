"""A pipeline without windows against a real broker, Spark and Delta: every valid page view is
one row, with every Kafka metadata field, in a Delta table, a Kafka topic and a files sink; a
crash between sinks is completed by a rerun; the audit recomputes every value with DuckDB."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from eos.compute.epochs import run_until_caught_up
from eos.core.delta import read_table
from eos.core.errors import InjectedFault
from eos.core.kafka import client_settings
from eos.core.layout import tables_for
from eos.core.pipeline_status import epoch_rows
from eos.tools.pipelines import unique_topic

from support.harness import delta_path, finish_and_audit
from support.pageviews import MESSY, ORDERLY, PAGEVIEW_EVENT, pageview_pipeline, produce
from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SELECT = {
    "page": "CAST(upper(page) AS string)",
    "revenue": "revenue",
    "revenue_x2": "CAST(revenue_f * 2 AS double)",
    "slow": "duration > 1000",
    "key": "kafka_key",
    "at": "kafka_timestamp",
    "at_type": "kafka_timestamp_type",
    "topic": "kafka_topic",
    "where": "CAST(concat(kafka_partition, ':', kafka_offset) AS string)",
}
# Records with keys the generator never makes: none, and bytes that are not UTF-8.
KEYED = [(b"k1", 1_700_000_000_000), (None, 1_700_000_000_001),
         (b"\xff\xfeA", 1_700_000_000_002)]
VALUE = (b'{"page": "/x", "user": {"country": "FR", "id": "u"}, "revenue": 1.5, '
         b'"duration_ms": 2000, "ts": "2026-01-01T00:00:00Z"}')


def _produce_keyed(topic: str) -> None:
    producer = ck.Producer(client_settings())
    for key, at in KEYED:
        producer.produce(topic, key=key, value=VALUE, timestamp=at, partition=0)
    assert producer.flush(30) == 0


def _pipeline(tmp_path: Path, topic: str) -> Any:
    event = {k: v for k, v in PAGEVIEW_EVENT.items() if k != "time"}  # no event time
    sinks = {"rows": [{"delta": "target"}, {"kafka": unique_topic("rows")},
                      {"files": {"path": str(tmp_path / "rows-files")}}],
             "quarantine": [{"delta": "quarantine"}]}
    return make_pipeline(tmp_path, base={"kafka": {"topic": topic, "split_records": 4000}},
                         event={**event, "filter": "revenue >= 0 and kafka_offset >= 0"},
                         select=SELECT, group_by=None, window=None, aggregations=None,
                         sinks=sinks, max_records=1000,
                         # epochs of 1,000 records written by the executors, the last by the
                         # driver: both staging paths
                         spark={"master": "local[2]", "shuffle_partitions": 2,
                                "collect_rows": 500})


def test_every_accepted_record_once_in_every_sink_after_a_crash_between_sinks(
        tmp_path: Path, spark: Any, arm: Any) -> None:
    topic = produce(MESSY)
    _produce_keyed(topic)
    config = _pipeline(tmp_path, topic)
    assert config.stateless and config.event.time.format == "none"
    arm("commit.between_sinks:fail")
    with pytest.raises(InjectedFault):
        run_until_caught_up(config, "crash", spark=spark)
    arm("")
    finish_and_audit(config, spark, "rerun", MESSY.events + len(KEYED))
    writers = {json.loads(row["details"])["written_by"]
               for row in epoch_rows(tables_for(config)) if row["phase"] == "precommitted"}
    assert writers == {"driver", "executors"}

    rows = read_table(delta_path(config, "target")).to_pylist()
    assert len({(r["kafka_partition"], r["kafka_offset"]) for r in rows}) == len(rows)
    assert all(r["where"] == f"{r['kafka_partition']}:{r['kafka_offset']}"
               and r["topic"] == r["kafka_topic"] == topic and r["at_type"] == "CreateTime"
               for r in rows)
    keyed = sorted((r for r in rows if r["at"] in {at for _, at in KEYED}),
                   key=lambda r: r["at"])
    assert [(r["key"], r["page"], r["slow"]) for r in keyed] == [
        ("k1", "/X", True), (None, "/X", True), ("\ufffd\ufffdA", "/X", True)]
    assert any(r["key"] is not None for r in rows if r["at"] not in {at for _, at in KEYED})


def test_an_aggregating_pipeline_reads_metadata_and_groups_derived_fields(
        tmp_path: Path, spark: Any) -> None:
    """The metadata in a windowed pipeline's filter and derived fields (its select) grouped and
    aggregated: Spark and the audit's DuckDB keep the same records (even offsets of keyed
    records, about half) and compute the same windows."""
    spec = replace(ORDERLY, events=1200)
    topic = produce(spec)
    event = {**PAGEVIEW_EVENT, "filter": "revenue >= 0 and kafka_offset % 2 = 0 and "
                                         "kafka_key is not null and "
                                         "kafka_timestamp_type = 'CreateTime'"}
    select = {"section": "CAST(substring(page, 1, 3) AS string)",
              "cents": "CAST(revenue * 100 AS bigint)", "late_key": "kafka_key > 'k'"}
    config = pageview_pipeline(
        tmp_path, "tumbling", topic, event=event, select=select, group_by=["section"],
        aggregations={"views": "count(*)", "cents": "sum(cents)", "top": "max(cents)",
                      "high_keys": "count_distinct(late_key)"})
    finish_and_audit(config, spark, "metadata", spec.events)
    windows = read_table(delta_path(config, "target")).to_pylist()
    views = sum(r["views"] for r in windows)
    assert spec.events // 4 < views <= spec.events // 2 + 8
    sections = {r["section"] for r in windows}
    assert len(sections) > 1 and all(1 <= len(section) <= 3 for section in sections)


def test_one_pass_stages_what_two_passes_stage(tmp_path: Path, spark: Any) -> None:
    """An epoch the executors write is staged in one pass over its records (no cached input,
    the filter's drops counted by the write): the same rows, kinds and counts as the two
    passes (cache, count, collect) a small epoch takes, on records that parse, are filtered
    out and are quarantined."""
    import pyarrow.compute as pc

    from eos.compute.precommit.rows import one_pass
    from eos.compute.precommit.stager import SparkStager
    from eos.core.protocol import begin, precommit
    from eos.core.staging import PRECOMMIT, staged_epoch

    topic = produce(replace(MESSY, events=800))
    _produce_keyed(topic)
    staged = {}
    for collect in (0, 100_000):
        config = make_pipeline(
            tmp_path / f"c{collect}", base={"kafka": {"topic": topic}},
            event={**{k: v for k, v in PAGEVIEW_EVENT.items() if k != "time"},
                   "filter": "revenue >= 0"},
            select=SELECT, group_by=None, window=None, aggregations=None,
            sinks={"rows": [{"delta": "target"}], "quarantine": [{"delta": "quarantine"}]},
            spark={"master": "local[2]", "shuffle_partitions": 2, "collect_rows": collect})
        plan = begin(config, run_id="r0")
        assert one_pass(config, plan) is (collect == 0)
        result = precommit(config, plan.epoch, SparkStager(spark))
        rows = staged_epoch(tables_for(config), plan.epoch, plan.hash)
        assert rows is not None
        # Without the precommit row (who staged it and when): not a computed row.
        rows = rows.filter(pc.not_equal(rows["kind"], PRECOMMIT))
        rows = rows.drop_columns(["plan_hash"]).sort_by(
            [("kind", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
        staged[collect] = (rows, result.counts)
    (one, one_counts), (two, two_counts) = staged[0], staged[100_000]
    assert one_counts == two_counts and one_counts["filtered"] > 0
    assert one_counts["quarantine"] > 0 and one_counts["output"] > 0
    assert one.equals(two), [name for name in one.column_names
                             if not pc.all(pc.equal(one[name], two[name])).as_py()]
