"""How large one output record can get, from the config alone: what a sink with a record limit
checks when the pipeline loads (``Sink.check_pipeline``), so that no record can halt it later.

No heavy import here: the config loads when the DAG file is parsed, with no pyarrow or
deltalake. The bound follows ``eos.sinks.records`` (key = the group fields as JSON, value =
every column as JSON, plus headers) and ``eos.core.outputs`` (the columns of each output);
``tests/unit/core/test_config_doors.py`` holds it against the real codec's worst row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eos.core.config import PipelineConfig

# A quarantine row carries at most this much of the record's key and of its value: it must fit
# every sink (a Kafka record of 1 MB at most, base64 in JSON), whatever the record held. The
# record itself stays in Kafka at (partition, offset); its lengths and digest identify it.
RAW_PREFIX_BYTES = 4096
JSON_ESCAPE = 6  # a control character is written \u00XX: six bytes for one
SCALAR_BYTES = 48  # a JSON timestamp, long, double or decimal(38, s), quoted where it is
REASON_BYTES = 4096  # a quarantine reason: fixed texts quoting a field's name and a cut value
DIGEST_BYTES = 66  # a quoted SHA-256 in hex
BINARY_BYTES = 4 * -(-RAW_PREFIX_BYTES // 3) + 2  # a quoted base64 prefix
HEADER_BYTES = 1024  # eos-pipeline, eos-epoch, eos-plan-hash, eos-lineage
TOPIC_CHARS = 249  # Kafka's longest topic name
TOPIC_BYTES = JSON_ESCAPE * TOPIC_CHARS + 2  # ... quoted, as if every character were escaped

_LATE = ("event_time", "window_start", "window_end", "watermark", "partition", "offset",
         "kafka_timestamp", "epoch")
_QUARANTINE = {"reason": REASON_BYTES, "raw_key": BINARY_BYTES, "raw_value": BINARY_BYTES,
               "partition": SCALAR_BYTES, "offset": SCALAR_BYTES,
               "kafka_timestamp": SCALAR_BYTES, "epoch": SCALAR_BYTES,
               "raw_key_bytes": SCALAR_BYTES, "raw_value_bytes": SCALAR_BYTES,
               "raw_value_sha256": DIGEST_BYTES, "kafka_topic": TOPIC_BYTES}


def largest_record_bytes(config: PipelineConfig, output: str) -> int:
    """An upper bound of one row of ``output`` as a Kafka record. A string column holds at most
    ``event.max_string_bytes`` (longer ones are quarantined at parse), every byte of it possibly
    escaped; binaries are the quarantine prefix in base64; numbers and times at their widest."""
    string = JSON_ESCAPE * config.event.max_string_bytes + 2
    groups = {g: string if config.field_types[g].name == "string" else SCALAR_BYTES
              for g in config.group_by}
    if output == "quarantine":
        return _object(_QUARANTINE) + HEADER_BYTES
    if output == "rows":
        # A select's string column is counted as a declared string: a select that builds a
        # longer one (concat, repeat, the record's key) is refused by the sink's check before
        # the epoch is sealed, not here.
        columns = {**{name: string if ftype.name == "string" else SCALAR_BYTES
                      for name, ftype in config.row_columns.items()},
                   "kafka_topic": TOPIC_BYTES,
                   **dict.fromkeys(("kafka_partition", "kafka_offset", "epoch"), SCALAR_BYTES)}
    elif output == "late":
        columns = {**groups, **dict.fromkeys(_LATE, SCALAR_BYTES), "kafka_topic": TOPIC_BYTES}
    else:
        columns = {**groups, "window_start": SCALAR_BYTES, "window_end": SCALAR_BYTES,
                   **{name: _aggregate(config, name, string)
                      for name in config.aggregations}, "epoch": SCALAR_BYTES}
    return _object(groups) + _object(columns) + HEADER_BYTES


def _aggregate(config: PipelineConfig, name: str, string: int) -> int:
    from eos.core.aggregations import FUNCTIONS

    spec = config.aggregations[name]
    ftype = config.field_types.get(spec.field) if spec.field else None
    if FUNCTIONS[spec.function].keeps_value and ftype and ftype.name == "string":
        return string
    return SCALAR_BYTES


def _object(widths: dict[str, int]) -> int:
    """A JSON object of these columns: braces, and per column its quoted name, colon, comma."""
    return 2 + sum(len(name) + 4 + width for name, width in widths.items())
