"""What the ``files`` sink writes for one epoch: its files' names and bytes (Parquet or JSON
lines, Hive-style partitions) and its manifest, the commit marker (``eos.sinks.files.sink``).

Names are derived from the epoch and its content alone: ``<col>=<value>/.../epoch-<N:012d>-
<plan>-part-00000.<ext>``, where ``<plan>`` is the epoch's plan hash, which fixes its rows.
A rerun of an epoch, or a second attempt racing the first, writes the same names holding the
same rows, so no attempt ever has files of its own to remove once another has committed.

**Partition directories** hold any value, and two values never share one (their files'
names would collide). ``<value>`` is the value's text escaped as Hive and Spark escape a
partition path (``escapePathName``): ``%XX`` for ASCII controls, ``"#%'*/:=?\\{[]^`` and DEL,
plus ``~``; other characters as they are (UTF-8). A null is ``__HIVE_DEFAULT_PARTITION__``;
the text ``__HIVE_DEFAULT_PARTITION__``, and ``null`` in any case (which DuckDB reads as a
null), have their first character escaped. Spark, Hive and DuckDB's ``hive_partitioning`` read
such a name back as the value. A name that would still be too long for the file system or the
store (``name_cap``: 255 bytes, less where the whole path or key would outgrow its limit) is
shortened to ``<col>=<escaped prefix>~<32 hex digits of the value's SHA-256>``: unique, as no
escaped value holds a ``~``, but no longer the value. So every file holds its partition
columns too: a reader takes the value from the file (DuckDB ``hive_partitioning = false``;
DuckDB and Spark take a partition column from the path when they read one). Whatever the
values, no epoch is refused for a name once the pipeline loads.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from eos.core.errors import SinkCannotTake
from eos.core.layout import NAME_MAX, PathLimits

if TYPE_CHECKING:
    import pyarrow as pa

MANIFESTS = "_eos/manifests"
COMMITTED = "_eos/committed.json"
WRITERS = "_eos/writers.json"  # who writes the directory (``eos.core.ownership``'s record)
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


#: ASCII characters a partition directory's name holds escaped (``%XX``): Hive's and Spark's
#: ``escapePathName`` set, NUL, and ``~``, which only a shortened name holds raw.
ESCAPED = frozenset([chr(c) for c in range(0x20)] + list('"#%\'*/:=?\\\x7f{[]^~'))
#: Non-ASCII characters escaped too (as their UTF-8 bytes): XML 1.0 cannot hold them, and an
#: S3 listing is XML.
NONCHARACTERS = frozenset("\ufffe\uffff")
SHORTENED = "~"  # between a shortened name's prefix and its hash
HASH_DIGITS = 32  # hex digits of the value's SHA-256 in a shortened name (128 bits)
#: A value of one of these types names a partition directory (by ``value_text``); another
#: type (a double, whose text is not one value: NaN, -0.0; bytes; a list) cannot.
NAMEABLE = (str, int, date, Decimal)  # int: bool too; date: datetime too
UNNAMEABLE_TYPES = ("double", "binary", "headers")  # the config's names of the other types


def value_text(value: Any) -> str:
    """A non-null partition value's text, before escaping."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def value_problem(value: Any) -> str | None:
    """Why ``value`` cannot name a partition directory (None: it can)."""
    if value is None or isinstance(value, NAMEABLE):
        return None
    return f"a {type(value).__name__} cannot be a partition value"


def _escaped(text: str) -> list[str]:
    """``text`` escaped, one unit (a character or its ``%XX`` escapes) per character."""
    units = []
    for char in text:
        if char in ESCAPED or char in NONCHARACTERS:
            units.append("".join(f"%{byte:02X}" for byte in char.encode()))
        else:
            units.append(char)
    if units and (text == NULL_PARTITION or text.lower() == "null"):
        units[0] = f"%{ord(text[0]):02X}"  # read back as the text, not as a null
    return units


def segment(column: str, value: Any, cap: int = NAME_MAX) -> str:
    """The directory ``<column>=<value>`` for one partition value, at most ``cap`` bytes:
    escaped, or shortened when escaping is not enough (the module's docstring)."""
    if value is None:
        return f"{column}={NULL_PARTITION}"
    text = value_text(value)
    units = _escaped(text)
    name = f"{column}={''.join(units)}"
    if len(name.encode()) <= cap:
        return name
    digest = hashlib.sha256(text.encode()).hexdigest()[:HASH_DIGITS]
    room = cap - len(f"{column}={SHORTENED}{digest}".encode())
    prefix, used = [], 0
    for unit in units:
        used += len(unit.encode())
        if used > room:
            break
        prefix.append(unit)
    return f"{column}={''.join(prefix)}{SHORTENED}{digest}"


def shortest_segment(column: str) -> int:
    """Bytes of the shortest name ``segment`` can give ``column``'s values (an empty prefix)."""
    return len(f"{column}={SHORTENED}".encode()) + HASH_DIGITS


def longest_file_name(form: str, remote: bool) -> int:
    """Bytes of the longest name the sink gives a file in a partition directory: a data file,
    or locally its temporary file (``eos.sinks.files.store.Place._durable_temp``)."""
    name = f"epoch-{0:012d}-{'p' * 16}-part-00000.{EXTENSIONS[form]}"
    return len(name) + (0 if remote else len(".") + len(".0123456789ab.tmp"))


def name_cap(limits: PathLimits, root: str, columns: int, form: str) -> int:
    """Bytes each partition directory's name may take under ``root``: at most a name's limit
    (``NAME_MAX`` on a store too, so that a copy of the files fits a local disk), and an equal
    share of what the whole path (locally) or object key (on a store) leaves after the root and
    the longest file name. Equal shares keep each value's directory independent of the other
    columns' values."""
    if limits.remote:
        base = len(urlparse(root).path.strip("/").encode()) + 1
    else:
        base = len(root.rstrip("/").encode()) + 1
    share = (limits.whole - base - longest_file_name(form, limits.remote)) // max(columns, 1) - 1
    return min(limits.name or NAME_MAX, NAME_MAX, share)


def cap_problem(columns: list[str], cap: int) -> str | None:
    """Why partition directories of at most ``cap`` bytes cannot name ``columns``' values
    (None: they can): the path leaves too little room for even a shortened name."""
    for column in columns:
        if shortest_segment(column) > cap:
            return (f"the path leaves {max(cap, 0)} bytes for each partition directory's name, "
                    f"fewer than the {shortest_segment(column)} a shortened name of column "
                    f"{column!r} takes: give the sink a shorter path or fewer partition "
                    "columns")
    return None


def partitions(rows: pa.Table, columns: list[str],
               cap: int = NAME_MAX) -> list[tuple[str, pa.Table]]:
    """The rows split by the partition columns' values: ``(dirs, rows)``, ``dirs`` being
    ``col=value/...`` ('' when unpartitioned; each name at most ``cap`` bytes), in a stable
    order (sorted by ``dirs``)."""
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
        dirs = "/".join(segment(c, key[c], cap) for c in columns)
        split.append((dirs, rows.filter(mask)))
    return sorted(split, key=lambda part: part[0])


def refuse_partitions(rows: pa.Table, columns: list[str], sink: str,
                      cap: int = NAME_MAX) -> None:
    """``SinkCannotTake`` for a partition column the rows lack, a value of a type no
    directory can name, or a path that leaves no room for a partition directory's name (before
    the seal: after it, the commit could never succeed). Every value of a nameable type has a
    name (``segment``)."""
    problem = cap_problem(columns, cap)
    if problem:
        raise SinkCannotTake(f"sink {sink}: {problem}")
    for column in columns:
        if column not in rows.schema.names:
            raise SinkCannotTake(f"sink {sink}: partition column {column!r} is not a column "
                                 f"of the output ({', '.join(rows.schema.names)})")
        for value in rows.column(column).unique().to_pylist():
            problem = value_problem(value)
            if problem:
                raise SinkCannotTake(f"sink {sink}: partition column {column!r}: {problem}")


def encode(rows: pa.Table, form: str) -> bytes:
    """A data file's bytes. JSON lines as the Kafka sink's JSON codec writes values
    (``eos.sinks.records``: ±Infinity and NaN as strings, timestamps ISO 8601 UTC,
    decimals exact, binary base64); Parquet as pyarrow writes it (deterministic bytes for
    the same rows)."""
    if form == "jsonl":
        from eos.sinks.records import encode_values

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
