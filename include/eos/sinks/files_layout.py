"""What the ``files`` sink writes for one epoch: its files' names and bytes (Parquet or JSON
lines, Hive-style partitions) and its manifest, the commit marker (``eos.sinks.files``).

Names are derived from the epoch and its content alone: ``<col>=<value>/.../epoch-<N:012d>-
<plan>-part-00000.<ext>``, where ``<plan>`` is the epoch's plan hash, which fixes its rows.
A rerun of an epoch, or a second attempt racing the first, writes the same names holding the
same rows, so no attempt ever has files of its own to remove once another has committed.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any

from eos.core.errors import SinkCannotTake

if TYPE_CHECKING:
    import pyarrow as pa

MANIFESTS = "_eos/manifests"
COMMITTED = "_eos/committed.json"
MANIFEST = re.compile(r"^(\d{12})\.json$")
#: A data file (``epoch-N-...``) or a temporary one (``.epoch-N-....tmp``), by its epoch.
DATA_FILE = re.compile(r"^\.?epoch-(\d{12})-")
EXTENSIONS = {"parquet": "parquet", "jsonl": "jsonl"}
#: The Hive name of a null partition value (what Spark and Hive write and read).
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def manifest_name(epoch: int) -> str:
    return f"{MANIFESTS}/{epoch:012d}.json"


def epoch_of(relative: str) -> int | None:
    """The epoch a data or temporary file belongs to (None: not a file of this sink's)."""
    if relative.startswith("_eos/"):
        return None
    found = DATA_FILE.match(relative.rsplit("/", 1)[-1])
    return int(found.group(1)) if found else None


def _segment(value: Any) -> str:
    """A partition value as a path segment."""
    if value is None:
        return NULL_PARTITION
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def segment_problem(value: Any) -> str | None:
    """Why ``value`` cannot name a partition directory (None: it can). Refused rather than
    escaped: a reader of the directory would otherwise read back another value."""
    if value is None or isinstance(value, (bool, int, date)):
        return None
    if not isinstance(value, str):
        return f"a {type(value).__name__} cannot be a partition value"
    if value in ("", ".", "..") or value == NULL_PARTITION:
        return f"{value!r} cannot be a partition directory's value"
    bad = [c for c in ("/", "\\", "\x00") if c in value]
    if bad:
        return f"{value!r} holds {bad[0]!r}, which cannot be in a path segment"
    return None


def partitions(rows: pa.Table, columns: list[str]) -> list[tuple[str, pa.Table]]:
    """The rows split by the partition columns' values: ``(dirs, rows)``, ``dirs`` being
    ``col=value/...`` ('' when unpartitioned), in a stable order (sorted by ``dirs``)."""
    import pyarrow.compute as pc

    if not columns:
        return [("", rows)] if rows.num_rows else []
    keys = rows.select(columns).group_by(columns).aggregate([]).to_pylist()
    split = []
    for key in keys:
        mask = None
        for column in columns:
            value = key[column]
            test = (pc.is_null(rows[column]) if value is None
                    else pc.equal(rows[column], value))
            mask = test if mask is None else pc.and_(mask, test)
        dirs = "/".join(f"{c}={_segment(key[c])}" for c in columns)
        split.append((dirs, rows.filter(mask)))
    return sorted(split, key=lambda part: part[0])


def refuse_partitions(rows: pa.Table, columns: list[str], sink: str) -> None:
    """``SinkCannotTake`` for a partition column the rows lack or a value no directory can
    name (before the seal: after it, the commit could never succeed)."""
    for column in columns:
        if column not in rows.schema.names:
            raise SinkCannotTake(f"sink {sink}: partition column {column!r} is not a column "
                                 f"of the output ({', '.join(rows.schema.names)})")
        for value in rows.column(column).unique().to_pylist():
            problem = segment_problem(value)
            if problem:
                raise SinkCannotTake(f"sink {sink}: partition column {column!r}: {problem}")


def encode(rows: pa.Table, form: str) -> bytes:
    """A data file's bytes. JSON lines as the Kafka sink's JSON codec writes values
    (``eos.sinks.kafka_records``: ±Infinity and NaN as strings, timestamps ISO 8601 UTC,
    decimals exact, binary base64); Parquet as pyarrow writes it (deterministic bytes for
    the same rows)."""
    if form == "jsonl":
        from eos.sinks.kafka_records import encode_values

        try:
            return b"".join(value + b"\n" for value in encode_values(rows))
        except (TypeError, ValueError) as error:
            raise SinkCannotTake(f"a row JSON cannot hold: {error}") from None
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = pa.BufferOutputStream()
    try:
        pq.write_table(rows, buffer, compression="zstd")
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as error:
        raise SinkCannotTake(f"rows Parquet cannot hold: {error}") from None
    return buffer.getvalue().to_pybytes()


@dataclass(frozen=True)
class Manifest:
    """One committed epoch: its files (relative to the sink's root) with their row counts."""

    epoch: int
    plan_hash: str
    files: dict[str, int]
    schema: str  # the output's Arrow schema, serialized (base64), for the read-back

    def to_json(self, pipeline: str, output: str, form: str) -> bytes:
        return json.dumps({"epoch": self.epoch, "pipeline": pipeline, "output": output,
                           "format": form, "plan_hash": self.plan_hash,
                           "rows": sum(self.files.values()),
                           "files": [{"path": p, "rows": n} for p, n in self.files.items()],
                           "schema": self.schema}, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        doc = json.loads(data)
        return cls(doc["epoch"], doc["plan_hash"], {f["path"]: f["rows"] for f in doc["files"]},
                   doc["schema"])

    def arrow_schema(self) -> pa.Schema:
        import pyarrow as pa

        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(self.schema)))


def schema_text(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def file_names(epoch: int, plan_hash: str, form: str,
               parts: list[tuple[str, pa.Table]]) -> dict[str, pa.Table]:
    """Each part's file name (relative to the root), from the epoch and its plan alone."""
    plan = re.sub(r"[^0-9A-Za-z]", "", plan_hash)[:16] or "plan"
    name = f"epoch-{epoch:012d}-{plan}-part-00000.{EXTENSIONS[form]}"
    return {(f"{dirs}/{name}" if dirs else name): rows for dirs, rows in parts}
