"""What a sink that upserts on keys writes of an epoch: each key's last row.

A sink that keeps one row per key (``SupportsReadBack.kept_by``: a PostgreSQL table with
``upsert_keys``, a table merged on keys) applies each epoch once, in epoch order, so across
epochs the later epoch's row replaces the earlier. Within one epoch a key may come several
times (a user who clicks twice, a page with two windows closing together), and one statement
cannot apply both: ``INSERT ... ON CONFLICT DO UPDATE`` refuses to touch a row twice, a MERGE to
match one target row with two source rows. Refusing the epoch would stop the pipeline on the
most ordinary data, forever (a rerun reads the same records). So the epoch is reduced first to
each key's **last** row, the one a changelog upserted record by record would leave:

- rows of Kafka records (``rows``, ``late``, ``quarantine``): within a partition the later
  offset, as Kafka orders a partition; across partitions or topics, which Kafka does not
  order, the later Kafka timestamp, then topic, partition and offset. Each partition's last
  record of the key is found first, and those compared: a record an earlier one of its own
  partition follows never wins on its timestamp;
- windows: the later window (its end, then its start); a window is emitted once, so with the
  group fields and the window among the keys no key comes twice;
- rows the order does not tell apart (a record's several late windows, where the window
  decides; quarantined overflows, which have no record): by their other columns, in the
  output's order, so the choice is a function of the values alone and the audit can make it.

A null in a key is a value like any other: rows whose keys are null alike are one key (SQL's
``IS NOT DISTINCT FROM``, what a MERGE on null-safe equality and a ``NULLS NOT DISTINCT``
constraint do). Whether the sink can store such a key is the sink's to say (a primary key
cannot hold a null).

A stateless epoch's rows carry their record's Kafka timestamp in ``RECORD_TIMESTAMP`` (not an
output column; ``eos.core.outputs.sink_rows`` reduces with it and drops it). Rows without it
(a table built by hand) are ordered across partitions by topic, partition and offset alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from eos.core.metadata import KAFKA_OFFSET, KAFKA_PARTITION, KAFKA_TOPIC

if TYPE_CHECKING:  # pyarrow is imported where rows are reduced: a config's load checks
    # ``ambiguous_keys`` while a DAG file is parsed, which imports no pyarrow
    import pyarrow as pa

__all__ = ["RECORD_TIMESTAMP", "ambiguous_keys", "last_per_key"]

# A stateless epoch's rows carry their record's Kafka timestamp under this name until they are
# handed to a sink: no select column can take it (each begins with a letter).
RECORD_TIMESTAMP = "__kafka_timestamp"
_INDEX = "__eos_row"  # a row's position in the input, while the reduction runs

# Where each output's rows say their record is: (topic, partition, offset, Kafka timestamp).
_RECORDS = {
    "rows": (KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET, RECORD_TIMESTAMP),
    "late": (KAFKA_TOPIC, "partition", "offset", "kafka_timestamp"),
    "quarantine": (KAFKA_TOPIC, "partition", "offset", "kafka_timestamp"),
}
# What orders an output's rows after their record (or without one): the window, latest last.
_WINDOW = ("window_end", "window_start")
_THEN = {"windows": _WINDOW, "late": _WINDOW}


def last_per_key(rows: pa.Table, keys: Sequence[str], output: str) -> pa.Table:
    """Each key's last row of one epoch's ``rows`` of ``output`` (the module's order), in the
    order ``rows`` has them; ``rows`` itself when no key comes twice. Every column is kept
    (``RECORD_TIMESTAMP`` too: the caller drops it)."""
    group = _once(list(keys))
    if not group or rows.num_rows < 2 or _distinct(rows, group):
        return rows
    names = set(rows.column_names)
    record = _RECORDS.get(output)
    then = [c for c in _THEN.get(output, ()) if c in names]
    if record is not None and all(c in names for c in record[:3]):
        topic, partition, offset, stamp = record
        ordered = [*group, topic, partition, offset, stamp, *then]
        tail = [*then, *_rest(rows, ordered)]
        # each partition's last row of the key, then the last of those
        local = _last(rows, _once([*group, topic, partition]), [offset, *tail])
        first = [stamp] if stamp in names else []
        chosen = local.take(_last(rows.take(local), group,
                                  [*first, topic, partition, offset, *tail]))
    else:
        chosen = _last(rows, group, [*then, *_rest(rows, [*group, *then])])
    return rows.take(chosen.sort())


def _once(names: list[str]) -> list[str]:
    """``names`` without repeats (a key may be a coordinate too)."""
    return list(dict.fromkeys(names))


def _distinct(rows: pa.Table, keys: list[str]) -> bool:
    return bool(rows.group_by(keys).aggregate([]).num_rows == rows.num_rows)


def _rest(rows: pa.Table, named: list[str]) -> list[str]:
    """The columns that break what ``named`` leaves tied, in the output's order: every other
    one an order is defined on (not a list, a struct or a map)."""
    import pyarrow as pa

    return [f.name for f in rows.schema
            if f.name not in named and f.name != _INDEX and not pa.types.is_nested(f.type)]


def _last(rows: pa.Table, group: list[str], order: list[str]) -> pa.Array:
    """The position in ``rows`` of each ``group``'s row last by ``order`` (ascending, nulls
    first): a stable sort, then each group's last position in it."""
    sort: list[tuple[str, str]] = [(c, "ascending") for c in _once(order)]
    import pyarrow.compute as pc

    positions = pc.sort_indices(rows, sort_keys=sort, null_placement="at_start")
    ordered = rows.select(group).take(positions).append_column(_INDEX, positions)
    found = ordered.group_by(group, use_threads=False).aggregate([(_INDEX, "last")])
    return found.column(f"{_INDEX}_last").combine_chunks()


def ambiguous_keys(config: Any, output: str, keys: Sequence[str]) -> str | None:
    """Why upserting ``output`` on ``keys`` would keep a row chosen by nothing in the data, or
    None: keys leaving out a group field of the ``windows`` make one window's rows of several
    groups one key (the windows of one group are ordered, its groups are not)."""
    if output != "windows" or not keys:
        return None
    missing = [g for g in config.group_by if g not in keys]
    if not missing:
        return None
    return (f"the upsert keys {list(keys)} leave out the group field(s) {missing}: the rows of "
            "one window for several groups would be one key, and the row kept one of them "
            f"chosen by nothing in the data; add {missing} to the keys")
