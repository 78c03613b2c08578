"""The Delta sink's table options on real delta-rs tables (no Spark, no broker): ``log_retention``
becomes the table's ``delta.logRetentionDuration``, on creation or on the next commit of a table
created without it, and bounds the table's Delta log while every row and the ``txn`` fence stay.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from eos.core.config import PipelineConfig
from eos.core.maintenance import LOG_RETENTION
from eos.core.outcomes import Outcome
from eos.core.sink import sinks_for
from eos.sinks.delta.sink import DeltaSink, DeltaSinkOptions
from eos.tools.pipelines import write_pipeline


def rows(epoch: int) -> pa.Table:
    return pa.table({"epoch": pa.array([epoch], pa.int64()), "n": pa.array([1], pa.int64())})


def target_sink(config: PipelineConfig) -> DeltaSink:
    sink = sinks_for(config)[0]
    assert isinstance(sink, DeltaSink)
    return sink


def commit_epochs(sink: DeltaSink, epochs: range) -> None:
    for epoch in epochs:
        assert sink.commit(epoch, rows(epoch), "h").outcome is Outcome.COMMITTED, epoch


def test_log_retention_is_the_table_property_from_creation_or_the_next_commit(
        tmp_path: Path) -> None:
    plain = write_pipeline(tmp_path, name="p")
    commit_epochs(target_sink(plain), range(2))
    path = target_sink(plain).path
    assert LOG_RETENTION not in DeltaTable(path).metadata().configuration

    bounded = write_pipeline(tmp_path, name="p", sinks={
        "windows": [{"delta": {"table": "target", "log_retention": "2h"}}],
        "late": [{"delta": {"table": "late", "log_retention": "3h"}}]})
    sink = target_sink(bounded)
    commit_epochs(sink, range(2, 3))
    assert DeltaTable(path).metadata().configuration[LOG_RETENTION] == "interval 7200 seconds"
    assert sink.commit(2, rows(2), "h").outcome is Outcome.ALREADY_COMMITTED
    assert sink.commits() == [0, 1, 2]

    late = sinks_for(bounded)[1]
    assert late.commit(0, rows(0), "h").outcome is Outcome.COMMITTED
    created = DeltaTable(late.path, version=0).metadata().configuration
    assert created[LOG_RETENTION] == "interval 10800 seconds"


def test_a_log_retention_keeps_the_sink_log_bounded_and_the_fence(tmp_path: Path) -> None:
    """delta-rs checkpoints every 100 commits and then deletes the commit files older than the
    retention: the log of a table written once per epoch stays bounded. The retention here is
    0 s, below the option's 1 h floor (which guards against racing attempts; none race here)."""
    config = write_pipeline(tmp_path)
    sink = DeltaSink(config, "windows", DeltaSinkOptions.model_construct(
        table="target", log_retention=0))
    commit_epochs(sink, range(130))
    log = os.listdir(Path(sink.path) / "_delta_log")
    commits = [f for f in log if f.endswith(".json")]
    assert len(commits) < 40, sorted(log)
    assert any(f.endswith(".checkpoint.parquet") for f in log)
    table = DeltaTable(sink.path)
    assert sorted(table.to_pyarrow_table()["epoch"].to_pylist()) == list(range(130))
    assert sink.committed_epoch() == 129
    assert sink.commit(129, rows(129), "h").outcome is Outcome.ALREADY_COMMITTED
    assert sink.commit(130, rows(130), "h").outcome is Outcome.COMMITTED
