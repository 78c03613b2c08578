"""A sink option naming output columns (a files sink's ``partition_by``, a PostgreSQL sink's
``upsert_keys``) names columns the output has, or the pipeline does not load: otherwise every
epoch would be refused before its seal. The columns come from the config alone
(``eos.sinks.columns``), held here against the outputs' real schemas."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from eos.core import sink as sink_module
from eos.core.config import PipelineConfig, parse_config
from eos.core.errors import ConfigError
from eos.core.outputs import output_schema
from eos.core.sink import register
from eos.sinks.columns import output_columns
from eos.sinks.files.sink import FilesSink
from eos.sinks.postgres.sink import PostgresSink
from unit.core.test_config import GOOD

from support.memory_rows import STATELESS_IN_MEMORY
from support.pipelines import IN_MEMORY, make_pipeline


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "_registered", dict(sink_module._registered))
    register(FilesSink.kind, FilesSink)
    register(PostgresSink.kind, PostgresSink)


def postgres(**more: Any) -> dict[str, Any]:
    return {"postgres": {"table": "s.t", "dsn_env": "NOT_READ_AT_LOAD", **more}}


def files(tmp_path: Path, **more: Any) -> dict[str, Any]:
    return {"files": {"path": str(tmp_path / "out"), **more}}


def windows(tmp_path: Path, *sinks: dict[str, Any]) -> PipelineConfig:
    return make_pipeline(tmp_path, base=IN_MEMORY, sinks={
        "windows": [{"memory": "a"}, *sinks], "late": [{"memory": "b"}],
        "quarantine": [{"memory": "c"}]})


def rows(tmp_path: Path, *sinks: dict[str, Any]) -> PipelineConfig:
    return make_pipeline(tmp_path, base=STATELESS_IN_MEMORY, sinks={
        "rows": [*sinks, {"memory": "a"}], "quarantine": [{"memory": "c"}]})


def refused(message: str) -> Any:
    return pytest.raises(ConfigError, match=re.escape(message))


def test_a_postgres_upsert_key_that_is_no_output_column_is_refused_at_load(
        tmp_path: Path) -> None:
    """Before: the pipeline loaded, and every epoch was refused before its seal ("table has no
    primary key ... on exactly the upsert keys", or a missing column). Now the file does not
    load, and the message names where the key is and the columns there are."""
    with refused("sinks.rows[0].postgres.upsert_keys: column 'x' is not an output column "
                 "(columns: key, at, kafka_topic, kafka_partition, kafka_offset, epoch)"):
        rows(tmp_path, postgres(upsert_keys=["kafka_offset", "x"]))
    with refused("sinks.windows[1].postgres.upsert_keys: column 'window' is not an output "
                 "column (columns: key, window_start, window_end, n, epoch)"):
        windows(tmp_path, postgres(upsert_keys=["key", "window"]))
    rows(tmp_path, postgres(upsert_keys=["kafka_topic", "kafka_partition", "kafka_offset"]))
    windows(tmp_path, postgres(upsert_keys=["key", "window_start"]))


def test_postgres_upsert_keys_of_windows_hold_every_group_field(tmp_path: Path) -> None:
    """Without a group field, one window's rows of several groups would be one key, and the
    row kept one of them chosen by nothing in the data; without the window, each group keeps
    its latest window."""
    with refused("sinks.windows[1].postgres.upsert_keys: the upsert keys ['window_start'] "
                 "leave out the group field(s) ['key']"):
        windows(tmp_path, postgres(upsert_keys=["window_start"]))
    windows(tmp_path, postgres(upsert_keys=["key"]))


def test_a_files_partition_column_that_is_no_output_column_is_refused_at_load(
        tmp_path: Path) -> None:
    with refused("sinks.windows[1].files.partition_by: column 'day' is not an output column "
                 "(columns: key, window_start, window_end, n, epoch)"):
        windows(tmp_path, files(tmp_path, partition_by=["key", "day"]))
    with refused("sinks.rows[0].files.partition_by: column 'page' is not an output column "
                 "(columns: key, at, kafka_topic, kafka_partition, kafka_offset, epoch)"):
        rows(tmp_path, files(tmp_path, partition_by=["page"]))
    windows(tmp_path, files(tmp_path, partition_by=["key", "epoch"]))
    rows(tmp_path, files(tmp_path, partition_by=["kafka_partition"]))


def test_the_late_and_quarantine_outputs_are_checked_against_their_own_columns(
        tmp_path: Path) -> None:
    sinks = {"windows": [{"memory": "a"}], "late": [files(tmp_path, partition_by=["n"])],
             "quarantine": [{"memory": "c"}]}
    with refused("sinks.late[0].files.partition_by: column 'n' is not an output column"):
        make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)
    sinks["late"] = [files(tmp_path, partition_by=["watermark"])]
    make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)
    sinks["quarantine"] = [postgres(upsert_keys=["partition", "offset"])]
    make_pipeline(tmp_path, base=IN_MEMORY, sinks=sinks)


@pytest.mark.parametrize("output", ["windows", "late", "quarantine", "rows"])
def test_the_columns_from_the_config_are_the_outputs_columns(output: str) -> None:
    """Held against ``eos.core.outputs`` (pyarrow), for outputs with several group fields and
    aggregations, and rows that carry their records' headers."""
    if output == "rows":
        config = parse_config({"name": "r", "kafka": {"topic": "t"},
                               "event": {"fields": {"page": "string", "n": "long"}},
                               "select": {"page": "page", "twice": "CAST(n * 2 AS bigint)"},
                               "sinks": {"rows": [{"kafka": {"topic": "out",
                                                             "headers": "carry"}}]}})
        assert "kafka_headers" in output_columns(config, output)
    else:
        config = parse_config({**GOOD, "group_by": ["page", "user"]})
    assert output_columns(config, output) == output_schema(config, output).names
