"""Source identity (a checkpoint's offsets belong to one topic on one cluster) and
``eos move-source``, end to end: real Spark, the embedded broker, Delta tables, the audit.

The defect this guards against: a pipeline whose ``kafka.topic`` was changed (same name, same
tables) planned the new topic from the old topic's per-partition offsets, so the first records
of each partition of the new topic were never read, and ``eos verify`` still said OK (the
audit re-reads what the plans name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eos.airflow.epochs_html import Links, pipeline_page
from eos.compute.epochs import run_until_caught_up
from eos.core import epochlog
from eos.core.errors import SourceChanged
from eos.core.kafka import client_settings, topic_watermarks
from eos.core.layout import tables_for
from eos.core.pipeline_status import pipeline_status
from eos.core.plan import plan_of
from eos.core.protocol import begin, checkpointed_epoch
from eos.tools.audit.verify import audit
from eos.tools.generator import BASE_TIME_MS, GeneratorSpec, generate
from eos.tools.pipelines import unique_topic, write_pipeline
from eos.tools.produce import send

from support.harness import eos_cli

pytestmark = [pytest.mark.integration]

SPEC_A = GeneratorSpec(events=2000, keys=20, interval_ms=20, seed=5)
# Topic B holds more records per partition than A's committed offsets, so planning B from A's
# offsets reads a suffix of B without failing: the silent skip. Its events follow A's in time.
SPEC_B = GeneratorSpec(events=5000, keys=20, interval_ms=20, seed=6,
                       start_ms=BASE_TIME_MS + SPEC_A.events * SPEC_A.interval_ms + 60_000)


def test_a_pipeline_moved_to_another_topic_counts_each_of_its_records_once(
        tmp_path: Path, kafka: str, spark: Any) -> None:
    kafka_a = {"topic": unique_topic("move-a"), "read_timeout": "30s"}
    config = write_pipeline(tmp_path, kafka=kafka_a, epoch={"max_records": 1500})
    settings = client_settings(config.kafka.client)
    send(generate(SPEC_A), SPEC_A.events, config.kafka.topic, settings, progress=False)
    before = run_until_caught_up(config, "on-a", spark=spark)
    assert len(before) >= 3 and checkpointed_epoch(config) == before[-1].epoch

    topic_b = unique_topic("move-b")
    send(generate(SPEC_B), SPEC_B.events, topic_b, settings, progress=False)
    moved = write_pipeline(tmp_path, name=config.name, kafka={**kafka_a, "topic": topic_b},
                           epoch={"max_records": 1500})
    assert moved.root == config.root  # the same pipeline, its tables, another topic

    # begin refuses to read topic B from topic A's offsets, naming both and the way out.
    with pytest.raises(SourceChanged) as refused:
        begin(moved, "refused")
    message = str(refused.value)
    assert config.kafka.topic in message and topic_b in message
    assert "eos move-source" in message

    out = eos_cli(moved, "move-source", "--from", "earliest")
    assert out.returncode == 0, out.stdout + out.stderr
    assert topic_b in out.stdout

    after = run_until_caught_up(moved, "on-b", spark=spark)
    assert after[-1].plan.records == 0  # lag 0
    marks = topic_watermarks(settings, topic_b)
    assert {r.partition: r.until for r in after[-1].plan.ranges} == {
        p: high for p, (_, high) in marks.items()}

    # Every record of topic B is planned exactly once, from its log start.
    tables = tables_for(moved)
    first_b = before[-1].epoch + 1
    plans_b = [plan_of(tables, e) for e in range(first_b, checkpointed_epoch(moved) + 1)]
    assert {p.topic for p in plans_b} == {topic_b}
    assert {r.partition: r.start for r in plans_b[0].ranges} == {
        p: low for p, (low, _) in marks.items()}
    assert sum(p.records for p in plans_b) == SPEC_B.events
    moves = [r for r in epochlog.rows(tables, first_b) if r["phase"] == epochlog.MOVED]
    assert len(moves) == 1 and moves[0]["epoch"] == first_b
    # The epochs view shows where the pipeline moved.
    page = pipeline_page(pipeline_status(moved, with_lag=False), Links(""), 0.0)
    assert page.count("moved from topic") == 1 and f"to topic &#39;{topic_b}&#39;" in page

    report = audit(moved)
    assert report.ok, report.render()
    assert report.records == SPEC_A.events + SPEC_B.events
    verify = eos_cli(moved, "verify")
    assert verify.returncode == 0 and "verdict: OK" in verify.stdout, verify.stdout


