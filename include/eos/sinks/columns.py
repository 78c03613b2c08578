"""The columns of each output, from the config alone, for the checks a sink makes while the
pipeline loads (``Sink.check_pipeline``): a column its options name must be one the output has.

No pyarrow here: the config loads when the DAG file is parsed. The names follow
``eos.core.outputs`` (``output_schema``, which the tests hold these against, output by output).
"""

from __future__ import annotations

from typing import Any

from eos.core.metadata import KAFKA_HEADERS, KAFKA_OFFSET, KAFKA_PARTITION, KAFKA_TOPIC

__all__ = ["output_columns", "refuse_unknown_columns", "sink_path"]

# eos.core.outputs.late_schema, after the group fields; QUARANTINE_SCHEMA.
_LATE = ("event_time", "window_start", "window_end", "watermark", "partition", "offset",
         "kafka_timestamp", "epoch", KAFKA_TOPIC)
_QUARANTINE = ("reason", "raw_key", "raw_value", "partition", "offset", "kafka_timestamp",
               "epoch", "raw_key_bytes", "raw_value_bytes", "raw_value_sha256", KAFKA_TOPIC)


def output_columns(config: Any, output: str) -> list[str]:
    """The column names of ``output`` (``windows``, ``late``, ``quarantine``, ``rows``) in
    the order its sinks receive them."""
    if output == "windows":
        return [*config.group_by, "window_start", "window_end", *config.aggregations, "epoch"]
    if output == "late":
        return [*config.group_by, *_LATE]
    if output == "rows":
        from eos.core.config.rows import carries_headers

        return [*config.row_columns, KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET, "epoch",
                *([KAFKA_HEADERS] if carries_headers(config) else [])]
    return list(_QUARANTINE)


def sink_path(config: Any, output: str, kind: str, options: Any) -> str:
    """Where in the file a sink's options are: ``sinks.<output>[<i>].<kind>``."""
    for i, spec in enumerate(getattr(config.sinks, output) or []):
        if spec.get(kind) is options:
            return f"sinks.{output}[{i}].{kind}"
    return f"sinks.{output}.{kind}"


def refuse_unknown_columns(config: Any, output: str, kind: str, options: Any, key: str,
                           named: tuple[str, ...]) -> None:
    """A ``ValueError`` naming the option's path when ``named`` (the option ``key``'s columns)
    holds a column ``output`` does not have: every epoch would be refused before its seal."""
    columns = output_columns(config, output)
    for column in named:
        if column not in columns:
            raise ValueError(f"{sink_path(config, output, kind, options)}.{key}: column "
                             f"{column!r} is not an output column (columns: "
                             f"{', '.join(columns)})")
