"""Commit must succeed (docs/guarantees.md): every deterministic failure is found before the seal,
and values a sink format has no number for are written, not refused.

The state machine on real Delta tables with in-process sinks; the encodings and the audit's
reference as plain functions. The same rules against real Spark, Kafka and Delta are in
``tests/integration/pipeline/test_poison_values.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pytest

from eos.core import checkpoints
from eos.core.aggregations import output_column, state_column
from eos.core.config import PipelineConfig
from eos.core.errors import InjectedFault, SinkCannotTake
from eos.core.layout import tables_for
from eos.core.outcomes import Outcome
from eos.core.outputs import overflow_reason, overflow_rows
from eos.core.protocol import abort, begin, commit, precommit
from eos.core.tables import group_column, staging_schema
from eos.sinks.delta.sink import schema_conflicts
from eos.sinks.records import decode_value, encode_values

from support.memory import MemorySource, MemoryStager, run_epoch, store
from support.pipelines import IN_MEMORY, make_pipeline

SINKS = ["memory:a", "memory:b", "memory:c"]


def test_a_sink_that_cannot_take_an_epoch_refuses_it_before_the_seal(
        pipeline: PipelineConfig, source: MemorySource) -> None:
    plan = begin(pipeline, source=source)
    precommit(pipeline, plan.epoch, MemoryStager())
    store(pipeline, "memory:b").refuse = "a record over its size limit"
    with pytest.raises(SinkCannotTake, match="a record over its size limit"):
        commit(pipeline, plan.epoch)
    # No sink was written, not even the one checked before it: the epoch was never sealed,
    # so it can still be aborted, and a fixed sink commits it.
    assert [store(pipeline, n).written for n in SINKS] == [[], [], []]
    assert abort(pipeline, plan.epoch, "the sink was fixed") is Outcome.ABORTED
    store(pipeline, "memory:b").refuse = None
    run_epoch(pipeline, source)
    assert [store(pipeline, n).written for n in SINKS] == [[0], [0], [0]]


def test_a_sealed_epoch_is_not_checked_again_it_can_only_go_forward(
        pipeline: PipelineConfig, source: MemorySource, arm) -> None:
    plan = begin(pipeline, source=source)
    precommit(pipeline, plan.epoch, MemoryStager())
    arm("commit.after_seal:fail")
    with pytest.raises(InjectedFault):
        commit(pipeline, plan.epoch)
    assert store(pipeline, "memory:a").checked == [0]
    # After the seal nothing may turn the commit into a permanent failure.
    store(pipeline, "memory:a").refuse = "would have been refused before the seal"
    assert commit(pipeline, plan.epoch).outcome is Outcome.COMMITTED
    assert store(pipeline, "memory:a").checked == [0]
    assert checkpoints.last_checkpointed(tables_for(pipeline), pipeline.app_id) == 0


def test_json_values_write_the_doubles_json_has_no_number_for() -> None:
    rows = pa.table({"v": pa.array([math.inf, -math.inf, math.nan, 1.5, None], pa.float64())})
    values = encode_values(rows)
    assert values == [b'{"v":"Infinity"}', b'{"v":"-Infinity"}', b'{"v":"NaN"}',
                      b'{"v":1.5}', b'{"v":null}']
    back = [decode_value(v, rows.schema)["v"] for v in values]
    assert back[0] == math.inf and back[1] == -math.inf and math.isnan(back[2])
    assert back[3:] == [1.5, None]


def _long_sums(tmp_path: Path) -> PipelineConfig:
    return make_pipeline(
        tmp_path, base=IN_MEMORY,
        event={"time": {"field": "ts", "format": "epoch_ms"},
               "fields": {"key": "string", "amount": "long", "price": "decimal(38,9)",
                          "ratio": "double"}},
        aggregations={"total": "sum(amount)", "mean": "avg(price)", "ratios": "sum(ratio)"})


def test_a_window_whose_exact_sum_did_not_fit_is_flagged_once(tmp_path: Path) -> None:
    config = _long_sums(tmp_path)
    schema = pa.schema([f for f in staging_schema(config) if f.name != "epoch"])
    n_total, n_mean = state_column("total", "n"), state_column("mean", "n")
    base = {"kind": "output", "plan_hash": "h", "window_start_ms": 0, "window_end_ms": 10_000}
    rows = pa.Table.from_pylist([
        {**base, group_column("key"): "poison", output_column("total"): None, n_total: 2,
         output_column("mean"): 1.0, n_mean: 1},
        {**base, group_column("key"): "plain", output_column("total"): 5, n_total: 1},
        {**base, group_column("key"): "empty", output_column("total"): None, n_total: 0},
        {**base, "kind": "state", group_column("key"): "open", n_total: 3},
    ], schema=schema)
    (flag,) = overflow_rows(config, rows, 7).to_pylist()
    assert flag["reason"] == overflow_reason("total", "sum", "amount", "long", 0, 10_000)
    assert flag["reason"].startswith("overflow: total = sum(amount) does not fit long in window "
                                     "[1970-01-01T00:00:00.000+00:00")
    assert flag["raw_key"] == b'{"key":"poison"}' and flag["raw_key_bytes"] == 16
    assert (flag["partition"], flag["offset"], flag["raw_value"], flag["epoch"]) == (
        None, None, None, 7)


def test_a_delta_table_of_another_schema_is_named_before_the_seal() -> None:
    table = pa.schema([pa.field("k", pa.string()), pa.field("n", pa.string()),
                       pa.field("must", pa.int64(), nullable=False)])
    rows = pa.schema([pa.field("k", pa.large_string()), pa.field("n", pa.int64()),
                      pa.field("extra", pa.int64())])
    assert schema_conflicts(table, rows) == [
        "column 'n' is string in the table, int64 in the output",
        "column 'must' is required and the output has no such column"]


def _delta_windows(tmp_path: Path) -> PipelineConfig:
    return make_pipeline(tmp_path, base=IN_MEMORY, sinks={"windows": [{"delta": "target"}],
                                          "late": [{"memory": "b"}],
                                          "quarantine": [{"memory": "c"}]})


def test_a_delta_table_that_conflicts_is_refused_at_begin(tmp_path: Path,
                                                          source: MemorySource) -> None:
    from deltalake import write_deltalake

    config = _delta_windows(tmp_path)
    write_deltalake(f"{config.root}/target", pa.table({"n": pa.array(["not a count"])}))
    with pytest.raises(SinkCannotTake, match="column 'n' is string in the table, int64 in the "
                                             "output"):
        begin(config, source=source)


def test_a_delta_table_changed_after_begin_is_refused_before_the_seal(
        tmp_path: Path, source: MemorySource) -> None:
    from deltalake import write_deltalake

    config = _delta_windows(tmp_path)
    plan = begin(config, source=source)
    precommit(config, plan.epoch, MemoryStager())
    write_deltalake(f"{config.root}/target", pa.table({"n": pa.array(["not a count"])}),
                    mode="overwrite", schema_mode="overwrite")
    with pytest.raises(SinkCannotTake, match="cannot take epoch 0"):
        commit(config, plan.epoch)
    assert abort(config, plan.epoch, "table fixed") is Outcome.ABORTED  # never sealed
