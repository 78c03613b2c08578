"""What an Iceberg table can take from an output, decided before the seal.

The table is created from the output's Arrow schema (pyiceberg's own conversion: a decimal
stays ``decimal(p, s)``, a UTC timestamp in microseconds becomes ``timestamptz``, a string
``string``, a long ``long``). An existing table takes the rows when every column they share has
a type Iceberg's own compatibility check accepts (the same type, or a promotion Iceberg allows)
and every column the table requires is there; a column the rows add is added to the table in
the epoch's commit. A type Iceberg cannot hold (a duration, nanosecond times on a format-2
table, a decimal wider than 38 digits) or a conflicting column is refused with
``SinkCannotTake`` in ``check``, while an abort is still possible, never at the commit.

An existing table may be partitioned (the sink creates its own unpartitioned): pyiceberg applies
each transform of the table's current spec to the rows it appends, ``identity`` and ``void``
itself, ``bucket``, ``truncate``, ``year``, ``month``, ``day`` and ``hour`` through the
``pyiceberg-core`` package (the ``iceberg`` extra installs it). A transform this runtime cannot
apply (the package missing, a transform pyiceberg does not know) would fail every commit after
the seal, so it is refused with ``SinkCannotTake`` in ``prepare`` and in ``check``
(``refuse_partitioning``).

pyiceberg names a partition's directory itself (``<field>=<value>``, the value's text
``quote_plus``-encoded: any character is safe) and the manifests keep the exact value, but a
value whose directory's name would be too long for the file system (255 bytes a name) or whose
file's key too long for the store (1024 bytes), or a partition column the output lacks, would
fail every commit: ``check`` refuses them before the seal (``refuse_partition_values``),
having computed the paths the append would write with pyiceberg's own partition keys and the
table's location provider.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eos.core.errors import SinkCannotTake
from eos.core.path_rules import PathRule

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "added_columns",
    "conflicts",
    "iceberg_schema",
    "partition_value_problems",
    "path_rules",
    "refuse_conflicts",
    "refuse_partition_values",
    "refuse_partitioning",
    "sink_path_rules",
    "unapplicable_transforms",
]

#: A data file's name as pyiceberg gives it (``00000-<task>-<write uuid>.parquet``), with a
#: task number longer than any append of one epoch reaches.
DATA_FILE_NAME = "00000-99999-00000000-0000-0000-0000-000000000000.parquet"


def iceberg_schema(schema: pa.Schema, where: str) -> Any:
    """The Iceberg schema of an output (pyiceberg's conversion, ids assigned on creation), or
    ``SinkCannotTake`` naming what Iceberg cannot hold."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.io.pyarrow import UnsupportedPyArrowTypeException

    try:
        return Catalog._convert_schema_if_needed(schema)
    except (ValueError, TypeError, UnsupportedPyArrowTypeException) as error:
        raise SinkCannotTake(f"{where}: Iceberg cannot hold the output's columns: {error}. "
                             "Nothing was sealed or written") from None


def added_columns(table_schema: Any, rows: pa.Schema) -> list[str]:
    """The columns of ``rows`` the table lacks (added by the commit)."""
    known = {field.name for field in table_schema.fields}
    return [name for name in rows.names if name not in known]


def conflicts(table_schema: Any, rows: Any) -> list[str]:
    """Why a table of ``table_schema`` cannot take rows of Iceberg schema ``rows`` (empty: it
    can), by column name: Iceberg's promotions allowed (an int into a long), containers
    compared by kind."""
    from pyiceberg.exceptions import ResolveError
    from pyiceberg.schema import promote
    from pyiceberg.types import PrimitiveType

    given = {field.name: field for field in rows.fields}
    found = []
    for field in table_schema.fields:
        other = given.get(field.name)
        if other is None:
            if field.required:
                found.append(f"column '{field.name}' is required and the output has no such "
                             "column")
            continue
        if field.required and not other.required:
            found.append(f"column '{field.name}' is required in the table and may be empty "
                         "in the output")
        ours, theirs = other.field_type, field.field_type
        if not isinstance(theirs, PrimitiveType):
            if type(ours) is not type(theirs):
                found.append(f"column '{field.name}' is {theirs} in the table, {ours} in the "
                             "output")
            continue
        try:
            if ours != theirs:
                promote(ours, theirs)
        except ResolveError:
            found.append(f"column '{field.name}' is {theirs} in the table, {ours} in the output")
    return found


def refuse_conflicts(table_schema: Any | None, rows: pa.Schema, where: str) -> None:
    """``SinkCannotTake`` when a table of ``table_schema`` (None: not created yet) cannot take
    rows of schema ``rows``."""
    converted = iceberg_schema(rows, where)
    found = [] if table_schema is None else conflicts(table_schema, converted)
    if found:
        raise SinkCannotTake(f"{where}: the table cannot take the output: {'; '.join(found)}. "
                             "Nothing was sealed or written: give the sink another table, or "
                             "change the table to the output's schema, then run again")


def unapplicable_transforms(table: Any) -> list[str]:
    """The transforms of the table's current partition spec (the one an append writes with)
    that pyiceberg cannot apply in this process, each as ``transform(column)`` and why:
    ``pyarrow_transform`` raises for it what the append would raise after the seal."""
    from pyiceberg.exceptions import NotInstalledError

    schema, found = table.schema(), []
    for field in table.spec().fields:
        source = schema.find_field(field.source_id)
        try:
            field.transform.pyarrow_transform(source.field_type)
        except (NotInstalledError, ImportError):
            found.append(f"{field.transform}({source.name}) needs the pyiceberg-core package, "
                         "which is not installed here")
        except NotImplementedError:
            found.append(f"{field.transform}({source.name}) is a transform pyiceberg cannot "
                         "apply when it writes")
    return found


def refuse_partitioning(table: Any | None, where: str) -> None:
    """``SinkCannotTake`` when the table (None: not created yet, so unpartitioned) is
    partitioned by a transform this runtime cannot apply."""
    found = [] if table is None else unapplicable_transforms(table)
    if found:
        raise SinkCannotTake(
            f"{where}: the table is partitioned by transforms pyiceberg cannot apply here: "
            f"{'; '.join(found)}. Nothing was sealed or written: install pyiceberg-core where "
            "the commit runs (pip install 'eos-pipeline[iceberg]' does), or give the sink "
            "another table, then run again")


def partition_value_problems(table: Any, rows: pa.Table) -> list[str]:
    """Why appending ``rows`` to ``table`` would fail for its partitioning (empty: it would
    not): a partition column the rows lack, or a partition whose data file's path or key
    would outgrow the file system's or the store's limit (``eos.core.layout``). The paths are
    those pyiceberg's append writes: the transforms of the current spec, its partition keys,
    the table's location provider. Call after ``refuse_partitioning`` (the transforms apply)."""
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
    from pyiceberg.table.locations import load_location_provider

    from eos.core.layout import path_limits, path_problem

    spec, schema = table.spec(), table.schema()
    if spec.is_unpartitioned() or not rows.num_rows:
        return []
    transformed, found = {}, []
    for field in spec.fields:
        source = schema.find_field(field.source_id)
        if source.name not in rows.schema.names:
            found.append(f"the table is partitioned by {field.transform}({source.name}), a "
                         "column the output lacks")
            continue
        column = rows.column(source.name)
        transformed[field.name] = field.transform.pyarrow_transform(source.field_type)(column)
    if found:
        return found
    keys = pa.table(transformed).group_by(list(transformed)).aggregate([]).to_pylist()
    provider = load_location_provider(table.metadata.location, table.metadata.properties)
    limits = path_limits(provider.data_path)
    for values in keys:
        key = PartitionKey(field_values=[PartitionFieldValue(f, values[f.name])
                                         for f in spec.fields],
                           partition_spec=spec, schema=schema)
        problem = path_problem(provider.new_data_location(DATA_FILE_NAME, key), limits)
        if problem:
            path = key.to_path()
            shown = path if len(path) <= 60 else f"{path[:60]}... ({len(path)} characters)"
            found.append(f"the partition {shown} would be written under a path it cannot "
                         f"have: {problem}")
            break
    return found


def refuse_partition_values(table: Any | None, rows: pa.Table, where: str) -> None:
    """``SinkCannotTake`` when appending ``rows`` to ``table`` (None: not created yet, so
    unpartitioned) would fail for its partitioning (``partition_value_problems``)."""
    found = [] if table is None else partition_value_problems(table, rows)
    if found:
        raise SinkCannotTake(
            f"{where}: the rows cannot be appended to the partitioned table: "
            f"{'; '.join(found)}. Nothing was sealed or written: partition the table "
            "otherwise (a bucket transform, or truncate with a small width, bounds a long "
            "text), keep such values out of the output (a filter), or give the sink another "
            "table, then run again")


#: The characters ``quote_plus`` writes as they are (a space becomes a '+'); every other UTF-8
#: byte as ``%XX``.
QUOTE_PLUS_KEPT = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~ ")
#: Bytes a partition directory's value of any transform other than identity-of-a-string may
#: take: a bucket's number, a truncated number, a year, month, day or hour, or "null".
_OTHER_VALUE_BYTES = 24


def path_rules(table: Any | None, sink: str, types: dict[str, str]) -> list[PathRule]:
    """The path rules of an existing table's current spec (``eos.core.path_rules``): each
    identity partition of an output string column (``types``) bounded so that its directory's
    name fits, and the data file's path or key fits when every string partition takes its
    share and every other partition its widest value. None (no table yet: the sink creates
    it unpartitioned) has none."""
    from urllib.parse import quote_plus

    from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
    from pyiceberg.table.locations import load_location_provider

    from eos.core.layout import path_bytes, path_limits

    if table is None or table.spec().is_unpartitioned():
        return []
    spec, schema = table.spec(), table.schema()
    strings = []
    for field in spec.fields:
        source = schema.find_field(field.source_id).name
        if str(field.transform) == "identity" and types.get(source) == "string":
            strings.append((field, source))
    if not strings:
        return []
    provider = load_location_provider(table.metadata.location, table.metadata.properties)
    limits = path_limits(provider.data_path)
    # The path the provider gives with every string value empty and every other one null,
    # each other value then counted at its widest: what the string values share.
    blank = PartitionKey(field_values=[
        PartitionFieldValue(f, "" if any(f is g for g, _ in strings) else None)
        for f in spec.fields], partition_spec=spec, schema=schema)
    fixed = path_bytes(provider.new_data_location(DATA_FILE_NAME, blank), limits) + (
        _OTHER_VALUE_BYTES - len("null")) * (len(spec.fields) - len(strings))
    rules = []
    for field, source in strings:
        head = len(quote_plus(field.name, safe="")) + 1  # "<field>="
        most = (limits.whole - fixed) // len(strings)
        if limits.name is not None:
            most = min(most, limits.name - head)
        rules.append(PathRule(sink, source, most, QUOTE_PLUS_KEPT, empty_is_null=False))
    return rules


def sink_path_rules(sink: str, types: dict[str, str], load: Any) -> list[PathRule]:
    """``path_rules`` of the table ``load()`` finds now (``types``: the output's columns). A
    catalog out of reach gives none, with a warning: ``check`` stays the guard before the
    seal."""
    import logging

    from eos.core.errors import EosError

    try:
        table = load()
    except EosError as error:
        logging.getLogger(__name__).warning(
            "sink %s: no path rules (%s); its check decides before the seal", sink, error)
        return []
    return path_rules(table, sink, types)
