"""Lake-friendly output of a pipeline without windows, against a real broker, Spark and Delta:
date and timestamp select columns in every sink (Delta, Kafka JSON and Avro, files, PostgreSQL),
a Delta table partitioned by the event's date (Hive directories on disk), a select that gains a
column between epochs, and changes refused before the seal that the pipeline goes on after
once the config is fixed. The audit recomputes every value with DuckDB."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from eos.compute.epochs import run_epoch
from eos.core.delta import read_table
from eos.core.errors import ConfigError, ExpressionFailed, SinkCannotTake
from eos.core.protocol import begin, checkpointed_epoch
from eos.tools.generator import GeneratorSpec
from eos.tools.pipelines import unique_topic
from eos.tools.servers.schema_registry import SchemaRegistryServer

from support.harness import delta_path, finish_and_audit
from support.pageviews import PAGEVIEW_EVENT, produce
from support.pipelines import make_pipeline
from support.postgres import PostgresServer, missing_reason, postgres_server
from support.registry_formats import AUTH_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# A record an hour apart: the events span five days, each with its UTC offset ("+05:30", "Z").
DAYS = GeneratorSpec(events=120, keys=4, users=10, interval_ms=3_600_000,
                     disorder_ms=7_200_000, seed=21, shape="pageviews")
SELECT = {"page": "page", "event_date": "CAST(to_timestamp(ts) AS date)",
          "event_at": "CAST(to_timestamp(ts) AS timestamp)",
          "arrived": "CAST(timestamp_millis(kafka_timestamp) AS timestamp)"}
EVENT = {**PAGEVIEW_EVENT, "fields": {**PAGEVIEW_EVENT["fields"], "ts": "string"}}
DSN_ENV = "EOS_TEST_POSTGRES_DSN"


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    if missing_reason() is not None:
        pytest.skip(str(missing_reason()))
    with postgres_server() as running:
        yield running


def _pipeline(tmp_path: Path, topic: str, select: dict[str, str], rows: list[Any],
              **sections: Any) -> Any:
    """The pipeline ``lake`` of ``tmp_path`` (each call rewrites its one file)."""
    return make_pipeline(tmp_path, name="lake", base={"kafka": {"topic": topic}}, event=EVENT,
                         select=select, group_by=None, window=None, aggregations=None,
                         sinks={"rows": rows, "quarantine": [{"delta": "quarantine"}]},
                         max_records=40, **sections)


def _partitioned(partition_by: list[str]) -> dict[str, Any]:
    return {"delta": {"table": "target", "partition_by": partition_by}}


def test_dates_and_times_in_every_sink_and_a_table_partitioned_by_day(
        tmp_path: Path, spark: Any, registry: SchemaRegistryServer, postgres: PostgresServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DSN_ENV, f"host={postgres.host} port={postgres.port} "
                                f"user={postgres.user} password={postgres.password} "
                                f"dbname={postgres.database}")
    registry_options = {"url": registry.url, "auth_env": AUTH_ENV}
    rows = [_partitioned(["event_date"]),
            {"kafka": unique_topic("lake-json")},
            {"kafka": {"topic": unique_topic("lake-avro"), "format": "avro",
                       "schema_registry": registry_options}},
            {"files": {"path": str(tmp_path / "files"), "format": "jsonl"}},
            {"postgres": {"table": f"lake_{tmp_path.name[-6:].replace('-', '_')}.rows",
                          "dsn_env": DSN_ENV}}]
    config = _pipeline(tmp_path, produce(DAYS), SELECT, rows)
    finish_and_audit(config, spark, "lake", DAYS.events)  # every sink, every value, DuckDB

    path = delta_path(config, "target")
    assert DeltaTable(path).metadata().partition_columns == ["event_date"]
    held = read_table(path).to_pylist()
    days = {r["event_date"] for r in held}
    assert len(days) >= 5
    on_disk = {p.name for p in Path(path).iterdir() if p.is_dir() and p.name != "_delta_log"}
    assert on_disk == {f"event_date={day.isoformat()}" for day in days}
    assert all(r["event_at"].date() == r["event_date"] and r["event_at"].tzinfo is not None
               for r in held)


def test_select_gains_a_column_between_epochs_and_a_refused_change_halts_nothing(
        tmp_path: Path, spark: Any) -> None:
    topic = produce(DAYS)
    first = {"page": "page"}
    config = _pipeline(tmp_path, topic, first, [{"delta": "target"}])
    run_epoch(config, "old-0", spark=spark)
    run_epoch(config, "old-1", spark=spark)
    assert checkpointed_epoch(config) == 1

    grown = _pipeline(tmp_path, topic, {**first, "event_date": SELECT["event_date"]},
                      [{"delta": "target"}])
    run_epoch(grown, "grown-0", spark=spark)  # epoch 2 adds the column to the table

    # Not additive: the column removed, then a partitioning the table does not have. Each is
    # refused before anything of the next epoch is sealed; fixed, the pipeline goes on.
    with pytest.raises(ConfigError, match=r"put back 'event_date'"):
        begin(_pipeline(tmp_path, topic, first, [{"delta": "target"}]), run_id="removed")
    repartitioned = _pipeline(tmp_path, topic, grown.select, [_partitioned(["event_date"])])
    with pytest.raises(SinkCannotTake, match=r"partitioned by nothing, the sink's partition_by "
                                             r"says \['event_date'\]"):
        run_epoch(repartitioned, "repartitioned", spark=spark)
    assert checkpointed_epoch(grown) == 2

    fixed = _pipeline(tmp_path, topic, grown.select, [{"delta": "target"}])
    finish_and_audit(fixed, spark, "fixed", DAYS.events)  # the audit: null before epoch 2
    held = read_table(delta_path(fixed, "target")).to_pylist()
    assert {r["epoch"] for r in held if r["event_date"] is None} == {0, 1}
    assert all(r["event_date"] is not None for r in held if r["epoch"] >= 2)
    assert os.path.isdir(delta_path(fixed, "target"))


@pytest.mark.parametrize("collect_rows", [50_000, 0], ids=["two-passes", "one-pass"])
def test_a_select_that_fails_on_a_record_stops_with_the_way_out_and_try_cast_goes_on(
        tmp_path: Path, spark: Any, collect_rows: int) -> None:
    """Spark's ANSI mode fails a CAST of a malformed string: the epoch stops with a permanent
    error saying what to do (a retry would read the same record), and the column's expression
    may change to TRY_CAST between epochs because its type stays: nothing is replayed. Alike
    whether the driver collects the epoch (two passes) or the executors write it (one)."""
    topic = produce(DAYS)
    # Epoch 0 reads offsets 0-9 of each partition ("1" casts), epoch 1 the first page path.
    cast = "CAST(CASE WHEN kafka_offset < 10 THEN '1' ELSE page END AS bigint)"
    compute = {"spark": {"collect_rows": collect_rows}}
    strict = _pipeline(tmp_path, topic, {"page": "page", "n": cast}, [{"delta": "target"}],
                       **compute)
    run_epoch(strict, "strict-0", spark=spark)
    assert checkpointed_epoch(strict) == 0
    with pytest.raises(ExpressionFailed, match=r"epoch 1: .*CAST_INVALID_INPUT.*TRY_CAST"):
        run_epoch(strict, "strict-1", spark=spark)
    lenient = _pipeline(tmp_path, topic, {"page": "page", "n": f"TRY_{cast}"},
                        [{"delta": "target"}], **compute)
    finish_and_audit(lenient, spark, "lenient", DAYS.events)
    held = read_table(delta_path(lenient, "target")).to_pylist()
    assert {r["n"] for r in held if r["epoch"] == 0} == {1}
    assert {r["n"] for r in held if r["kafka_offset"] >= 10} == {None}
