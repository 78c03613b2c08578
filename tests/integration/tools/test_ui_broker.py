"""After the demo, `eos ui` may start a new embedded broker (the demo's was stopped, or the
machine restarted): the pipelines whose epochs were read from the gone one move to the new
broker's topic from its start, recorded as a move, and their next run plans instead of
stopping on ``SourceChanged``. A real cluster is never moved for the operator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eos.compute.epochs import run_epoch
from eos.core.errors import SourceChanged
from eos.core.layout import tables_for
from eos.core.plan import plan_and_move
from eos.core.protocol import begin
from eos.tools.generator import GeneratorSpec
from eos.tools.servers import broker
from eos.tools.ui import follow_new_embedded_broker

from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration]

SPEC = GeneratorSpec(events=600, keys=10, interval_ms=50, seed=5)


def test_a_pipeline_of_a_gone_embedded_broker_goes_on_from_the_new_ones_start(
        tmp_path: Path, kafka: str, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    config = make_pipeline(tmp_path, records=SPEC)
    run_epoch(config, "before", spark=spark)
    # The demo's broker is gone; `eos ui` started another one (a new cluster, an empty topic).
    fresh = broker.start([f"{config.kafka.topic}:4"], base=tmp_path / "new-broker")
    try:
        monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", fresh["bootstrap"])
        with pytest.raises(SourceChanged):
            begin(config, run_id="stuck")  # what the next run met before
        line = follow_new_embedded_broker(config)
        assert line is not None and f"pipeline '{config.name}'" in line, line
        assert "goes on from this broker's topic start" in line
        plan = begin(config, run_id="after")
        assert plan.epoch == 1 and all(r.start == 0 for r in plan.ranges)
        _, move = plan_and_move(tables_for(config), 1)
        assert move is not None and move["position"] == "earliest", move  # recorded
        assert follow_new_embedded_broker(config) is None  # once moved, nothing to do
    finally:
        broker.stop(base=tmp_path / "new-broker")
