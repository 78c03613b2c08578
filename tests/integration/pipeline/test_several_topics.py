"""A pipeline reading every topic a ``kafka.pattern`` matches, against a real broker, Spark and
Delta: two topics, then a third created mid-run; every record of the three is read once (the
audit recomputes every row from Kafka by its topic, partition and offset), and each quarantined
record's row names its topic."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from eos.compute.epochs import run_until_caught_up
from eos.core import checkpoints
from eos.core.delta import read_table
from eos.core.kafka import client_settings
from eos.core.layout import tables_for
from eos.tools.generator import GeneratorSpec, generate
from eos.tools.pipelines import unique_topic
from eos.tools.produce import send

from support.harness import delta_path, finish_and_audit
from support.pageviews import PAGEVIEW_EVENT
from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def spec(events: int, seed: int) -> GeneratorSpec:
    return GeneratorSpec(events=events, keys=4, users=20, interval_ms=25, disorder_ms=500,
                         bad_fraction=0.05, seed=seed, shape="pageviews")


def produce(topic: str, events: int, seed: int) -> None:
    send(generate(spec(events, seed)), events, topic, client_settings(), progress=False)


def test_two_topics_and_a_third_created_mid_run_are_each_read_once(
        tmp_path: Path, spark: Any) -> None:
    prefix = unique_topic("multi")
    produce(f"{prefix}-a", 400, 1)
    produce(f"{prefix}-b", 300, 2)
    produce(unique_topic("other"), 50, 3)  # not matched: never read
    event = {k: v for k, v in PAGEVIEW_EVENT.items() if k != "time"}
    config = make_pipeline(
        tmp_path, base={"kafka": {"pattern": f"^{re.escape(prefix)}-", "split_records": 200}},
        event=event, select={"page": "page", "topic": "kafka_topic"}, group_by=None,
        window=None, aggregations=None, max_records=300,
        sinks={"rows": [{"delta": "target"}], "quarantine": [{"delta": "quarantine"}]},
        spark={"master": "local[2]", "shuffle_partitions": 2})
    run_until_caught_up(config, "first", spark=spark)
    tables = tables_for(config)
    committed = checkpoints.last_checkpointed(tables, config.app_id)
    first = checkpoints.last(tables, committed)
    assert first is not None and {tp.topic for tp in first.until} == {f"{prefix}-a",
                                                                      f"{prefix}-b"}

    produce(f"{prefix}-c", 250, 4)  # created now: read from its log start
    produce(f"{prefix}-a", 100, 5)
    finish_and_audit(config, spark, "second", 400 + 300 + 250 + 100)
    rows = read_table(delta_path(config, "target")).to_pylist()
    coordinates = [(r["kafka_topic"], r["kafka_partition"], r["kafka_offset"]) for r in rows]
    assert len(coordinates) == len(set(coordinates))
    assert {r["topic"] for r in rows} == {f"{prefix}-{t}" for t in "abc"}
    assert all(r["topic"] == r["kafka_topic"] for r in rows)
    # A quarantined record's row says its topic too (the audit above matched each by it).
    quarantined = read_table(delta_path(config, "quarantine")).to_pylist()
    assert {q["kafka_topic"] for q in quarantined} == {f"{prefix}-{t}" for t in "abc"}
    where = [(q["kafka_topic"], q["partition"], q["offset"]) for q in quarantined]
    assert len(where) == len(set(where))
