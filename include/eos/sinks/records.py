"""The JSON record codec of the Kafka sink (and of the files sink's ``jsonl``): an output row
as a record key and a JSON value, and back.

Key: the group fields as compact JSON with sorted keys (none when the output has no group
fields). Value: a JSON object of the output columns in schema order, typed by the output's
schema: timestamps ISO-8601 UTC with milliseconds, dates ISO-8601 (``2026-11-27``), decimals as
exact JSON numbers, binary as base64, and the doubles JSON has no number for (±Infinity, NaN)
as the strings ``"Infinity"``, ``"-Infinity"`` and ``"NaN"``: what Spark's ``to_json`` writes
and its JSON reader (Jackson's non-numeric numbers) reads back. ``decode_value`` is the inverse
(the audit and the demo read the topic back with it).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def non_finite_text(value: float) -> str:
    """±Infinity and NaN as the JSON strings Spark's ``to_json`` writes for them."""
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


def _fragments(column: pa.ChunkedArray) -> list[str]:
    """Each value of a column as JSON text, built a column at a time (rows are many, columns
    few): timestamps ISO-8601 UTC with milliseconds, decimals with every digit, binary base64."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_timestamp(kind):
        try:  # milliseconds (outputs hold ms times); finer values keep their digits, never cut
            column = column.cast(pa.timestamp("ms", tz="UTC"))
        except pa.ArrowInvalid:
            column = column.cast(pa.timestamp("us", tz="UTC"))
        texts = pc.strftime(column, format="%Y-%m-%dT%H:%M:%SZ").to_pylist()
        return ["null" if t is None else f'"{t}"' for t in texts]
    values = column.to_pylist()
    if pa.types.is_list(kind):  # kafka_headers: [{"key": name, "value": base64 or null}]
        return ["null" if v is None else json.dumps(
            [{"key": h["key"], "value": None if h["value"] is None
              else base64.b64encode(h["value"]).decode()} for h in v], ensure_ascii=False)
            for v in values]
    if pa.types.is_date(kind):
        return ["null" if v is None else f'"{v.isoformat()}"' for v in values]
    if pa.types.is_decimal(kind):
        return ["null" if v is None else format(v, "f") for v in values]
    if pa.types.is_binary(kind):
        return ["null" if v is None else f'"{base64.b64encode(v).decode()}"' for v in values]
    dumps = json.JSONEncoder(allow_nan=False, ensure_ascii=False).encode
    if pa.types.is_floating(kind):
        return ["null" if v is None else dumps(v) if math.isfinite(v)
                else f'"{non_finite_text(v)}"' for v in values]
    return ["null" if v is None else dumps(v) for v in values]


def value_columns(rows: pa.Table) -> pa.Table:
    """The columns a record value holds: every column but ``kafka_headers`` (a sink that
    carries them writes them as the record's headers) and the record columns (``__``: a key
    or header computed from an expression, never part of the row)."""
    from eos.core.config.rows import RECORD_PREFIX

    kept = [name for name in rows.schema.names
            if name != "kafka_headers" and not name.startswith(RECORD_PREFIX)]
    return rows.select(kept) if len(kept) < rows.num_columns else rows


def encode_values(rows: pa.Table) -> list[bytes]:
    """The record value of every output row: a JSON object of every column, in schema order.

    Built by Arrow a column at a time (``_fragment_array``) and joined row-wise by Arrow: a
    100k-row epoch encoded value by value in Python took most of a Kafka sink's commit. The
    text is byte for byte ``_encode_in_python``'s (the tests hold one against the other)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if rows.num_rows == 0 or not rows.schema.names:
        return []
    parts: list[Any] = []
    for i, name in enumerate(rows.schema.names):
        parts.append(("{" if i == 0 else ",") + json.dumps(name) + ":")
        parts.append(_fragment_array(rows.column(name)))
    parts.append("}")
    joined = pc.binary_join_element_wise(*parts, "")
    return joined.cast(pa.large_binary()).to_pylist()


def _encode_in_python(rows: pa.Table) -> list[bytes]:
    """``encode_values`` value by value in Python: the definition the Arrow path is held to."""
    prefixes = [json.dumps(name) + ":" for name in rows.schema.names]
    columns = [_fragments(rows.column(name)) for name in rows.schema.names]
    return [("{" + ",".join(p + v for p, v in zip(prefixes, values, strict=True)) + "}").encode()
            for values in zip(*columns, strict=True)] if columns else []


# A string JSON must escape: a quote, a backslash or a control character (json.dumps escapes
# nothing else with ensure_ascii=False).
_NEEDS_ESCAPE = r'["\\\x00-\x1f]'


def _fragment_array(column: pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """``_fragments`` of a column as an Arrow string array with no nulls: by Arrow's casts for
    integers, booleans, decimals, doubles, dates, timestamps and strings without anything to
    escape; by ``_fragments`` for the rest (binaries and headers are rare, a string with an
    escape is written by json; a decimal or double Arrow would write with an exponent)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type

    def quoted(texts: Any) -> Any:
        return pc.binary_join_element_wise('"', texts, '"', "")

    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        texts = column.cast(pa.string())
    elif pa.types.is_decimal(kind) and kind.scale >= 0:
        texts = _plain_decimals(column)
    elif pa.types.is_float64(kind):
        texts = _doubles(column)
    elif pa.types.is_date(kind):
        texts = quoted(column.cast(pa.date32()).cast(pa.string()))
    elif pa.types.is_timestamp(kind):
        try:  # as _fragments: milliseconds, finer values keep their digits
            exact = column.cast(pa.timestamp("ms", tz="UTC"))
        except pa.ArrowInvalid:
            exact = column.cast(pa.timestamp("us", tz="UTC"))
        texts = quoted(_formatted_times(exact))
    elif pa.types.is_string(kind) and not pc.any(
            pc.match_substring_regex(column, _NEEDS_ESCAPE)).as_py():
        texts = quoted(column)
    else:
        return pa.array(_fragments(column), pa.string())
    return pc.fill_null(texts, "null")


def _formatted_times(column: pa.ChunkedArray) -> pa.Array:
    """ISO-8601 texts of timestamps, each distinct value formatted once: ``strftime`` costs a
    microsecond a value, and a window output repeats a few window bounds over many rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    distinct = pc.dictionary_encode(column)
    texts = pc.strftime(distinct.dictionary, format="%Y-%m-%dT%H:%M:%SZ")
    return pc.take(texts, distinct.indices)


def _doubles(column: pa.ChunkedArray) -> pa.Array:
    """Doubles as Python's ``repr`` writes them (JSON numbers, the shortest text that reads
    back the same double). Arrow's shortest text is the same digits between 1e-4 and 1e16 when
    it has no exponent, less a trailing ``.0``; every other value (an exponent, ±Infinity,
    NaN) is written by ``_fragments``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    texts = column.cast(pa.string())
    size = pc.abs(column)
    plain = pc.and_(pc.or_(pc.equal(column, 0.0),
                           pc.and_(pc.greater_equal(size, 1e-4), pc.less(size, 1e16))),
                    pc.invert(pc.match_substring(texts, "e")))
    plain = pc.fill_null(plain, True)  # a null is written "null" by the caller
    texts = pc.if_else(pc.match_substring(texts, "."), texts,
                       pc.binary_join_element_wise(texts, ".0", ""))
    if pc.all(plain).as_py():
        return texts
    others = pc.invert(plain)
    return pc.replace_with_mask(texts, others,
                                pa.array(_fragments(column.filter(others)), pa.string()))


def _plain_decimals(column: pa.ChunkedArray) -> pa.Array:
    """Decimals as text with every digit and no exponent. Arrow writes one below 1e-6 in
    scientific notation (``-1E-9``, ``0E-9``), as Java's BigDecimal does; those few are
    written by Python's ``format(v, "f")`` instead."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    texts = column.cast(pa.string())
    scientific = pc.fill_null(pc.match_substring(texts, "E"), False)
    if not pc.any(scientific).as_py():
        return texts
    fixed = [format(v, "f") for v in column.filter(scientific).to_pylist()]
    return pc.replace_with_mask(texts, scientific, pa.array(fixed, pa.string()))


def encode_keys(rows: pa.Table, group: list[str]) -> list[bytes | None]:
    """The record key of every row: the group fields as compact JSON with sorted keys."""
    if not group:
        return [None] * rows.num_rows
    return list(encode_values(rows.select(sorted(group))))


def column_bytes(rows: pa.Table, column: str) -> list[bytes | None]:
    """A string or binary column's values as bytes (a string as UTF-8; null stays null): what
    a sink of rows writes as a record's key or a header's value."""
    return [v.encode() if isinstance(v, str) else v for v in rows.column(column).to_pylist()]


Headers = list[tuple[str, bytes | None]]
# eos's own headers (``eos-pipeline``, ``eos-epoch``, ...): a source record's are not carried,
# the record gets this pipeline's (a consumer of a chain of pipelines sees one set).
EOS_HEADERS = "eos-"


def eos_headers(pipeline: str, epoch: int, plan_hash: str,
                lineage: str | None = None) -> list[tuple[str, bytes]]:
    """eos's own headers of a record of ``epoch``: ``eos-pipeline``, ``eos-epoch``,
    ``eos-plan-hash``, and ``eos-lineage`` on a line a rewind started."""
    headers = [("eos-pipeline", pipeline.encode()), ("eos-epoch", str(epoch).encode()),
               ("eos-plan-hash", plan_hash.encode())]
    return headers + ([("eos-lineage", lineage.encode())] if lineage else [])


def record_headers(rows: pa.Table, carry: bool, named: dict[str, str]) -> list[Headers]:
    """Each row's own headers: its source record's (``carry``, from ``kafka_headers``, in
    their order), then one per ``named`` header (name -> column), in the option's order."""
    carried = (rows.column("kafka_headers").to_pylist() if carry
               else [None] * rows.num_rows)
    values = {name: column_bytes(rows, column) for name, column in named.items()}
    return [[*((h["key"], h["value"]) for h in carried[i] or ()
               if not h["key"].lower().startswith(EOS_HEADERS)),
             *((name, values[name][i]) for name in named)] for i in range(rows.num_rows)]


# -- a record's size on the wire -------------------------------------------------------------
#
# What ``message.max.bytes`` limits is a record as Kafka frames it, by its record batch format
# (magic 2, KIP-98; https://kafka.apache.org/documentation/#recordbatch and #record):
#
#   RecordBatch: baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8,
#     crc uint32, attributes int16, lastOffsetDelta int32, baseTimestamp int64,
#     maxTimestamp int64, producerId int64, producerEpoch int16, baseSequence int32,
#     recordCount int32 (61 bytes), then its records;
#   Record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
#     keyLength varint, key, valueLength varint, value, headerCount varint, then per header
#     headerKeyLength varint, headerKey, headerValueLength varint, headerValue.
#
# A varint is zigzag-encoded, 7 bits a byte; a null key or header value has length -1. The
# broker refuses a batch over the topic's ``max.message.bytes`` (a record alone in a batch is
# the least it can be sent in), and librdkafka refuses, when it is produced, a record whose
# worst-case framing (``RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD``, 36 bytes) with its key, value and
# headers is over its ``message.max.bytes``. So a record is counted with the batch header, its
# lengths exactly, and the fields whose value only the producer knows (the record's length,
# the timestamp and offset deltas, the header count) at their widest: never less than either
# check counts.
BATCH_HEADER_BYTES = 8 + 4 + 4 + 1 + 4 + 2 + 4 + 8 + 8 + 8 + 2 + 4 + 4  # 61
_LENGTH, _ATTRIBUTES, _TIMESTAMP_DELTA, _OFFSET_DELTA, _HEADER_COUNT = 5, 1, 10, 5, 5
RECORD_OVERHEAD_BYTES = (BATCH_HEADER_BYTES + _LENGTH + _ATTRIBUTES + _TIMESTAMP_DELTA
                         + _OFFSET_DELTA + _HEADER_COUNT)
# The key's and the value's lengths at their widest: with the overhead above, what a record
# adds to its key, value and headers whatever their lengths (a bound made from the config).
FRAMING_BYTES = RECORD_OVERHEAD_BYTES + 2 * 5


def varint_bytes(value: int) -> int:
    """The bytes of ``value`` as a Kafka varint (zigzag: -1 is one byte, 64 two)."""
    zigzag = (value << 1) ^ (value >> 63)
    return max(1, -(-zigzag.bit_length() // 7))


def prefixed_bytes(length: int) -> int:
    """A length-prefixed field of ``length`` bytes (-1: null) on the wire: its varint length
    and its bytes."""
    return varint_bytes(length) + max(length, 0)


def _length(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def headers_size(headers: Sequence[tuple[str, bytes | None]]) -> int:
    """The bytes of a record's headers on the wire: each name and value with its varint
    length (toward ``message.max.bytes``)."""
    return sum(prefixed_bytes(len(k.encode())) + prefixed_bytes(_length(v)) for k, v in headers)


def record_bytes(key: bytes | None, value: bytes | None,
                 headers: Sequence[tuple[str, bytes | None]]) -> int:
    """The most bytes one record can take against ``message.max.bytes``: the batch header,
    the record's framing at its widest, its key, value and headers with their lengths."""
    return (RECORD_OVERHEAD_BYTES + prefixed_bytes(_length(key)) + prefixed_bytes(_length(value))
            + headers_size(headers))


def decode_value(raw: bytes, schema: pa.Schema) -> dict[str, Any]:
    """The inverse of ``encode_value``: JSON back to the Python values of the schema's types."""
    import pyarrow as pa

    doc = json.loads(raw, parse_float=Decimal)
    row: dict[str, Any] = {}
    for field in schema:
        value = doc.get(field.name)
        if value is None:
            row[field.name] = None
        elif pa.types.is_timestamp(field.type):
            row[field.name] = datetime.fromisoformat(value.replace("Z", "+00:00"))
        elif pa.types.is_date(field.type):
            row[field.name] = date.fromisoformat(value)
        elif pa.types.is_floating(field.type):
            row[field.name] = float(value)
        elif pa.types.is_decimal(field.type):
            row[field.name] = Decimal(value)
        elif pa.types.is_binary(field.type):
            row[field.name] = base64.b64decode(value)
        elif pa.types.is_list(field.type):
            row[field.name] = [{"key": h["key"], "value": None if h["value"] is None
                                else base64.b64decode(h["value"])} for h in value]
        else:
            row[field.name] = value
    return row
