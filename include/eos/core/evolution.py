"""What may change in a running pipeline's config between epochs, and what each epoch was
computed with.

In every pipeline the ``event.filter`` may change between any two epochs: it keeps no state and
types nothing. An aggregating pipeline's derived fields (its ``select``) may change their
expressions while their types stay, and gain fields; its parsing, ``group_by``, ``window`` and
``aggregations`` may not (its open windows were computed with them). Each epoch records the
view its rows were staged with (the precommit's, carried into its checkpoint), and the audit
recomputes each epoch with its own filter and select.

A pipeline without windows has more room: its ``select`` may gain columns between epochs.

A stateless pipeline keeps no state, so an epoch's rows mean what its own config said; the
checkpoint records that config's schema view (``PipelineConfig.schema_view``) for each epoch,
and the audit recomputes each epoch with the ``select`` it was committed with. A column added
to ``select`` is carried from the first epoch precommitted with it: the Delta sink adds it to
its table in that epoch's commit (rows written before read as null), a files sink's later files
have it, a Kafka sink's values gain the field (an Avro value schema gains a nullable field with
a null default: a backward-compatible change the registry accepts), and a PostgreSQL table
must have it first (``ALTER TABLE ... ADD COLUMN``: the sink refuses the epoch before the seal
until it does).

A column's expression may change when its type does not: the way out of a select that fails
on some record (a ``CAST`` of a malformed string, an overflow in ANSI mode) is to write it with
``TRY_CAST`` or a ``CASE``, and a rule that refused that would leave a replay from the start as
the only way on. Rows keep the expression of their epoch: the audit recomputes each epoch with
the select its checkpoint recorded.

What is refused, before anything is sealed (``begin``, ``precommit`` and ``commit`` before
the seal check the view against the last checkpoint's): a column removed from ``select``, a
column whose type changed (its expression now gives another type, or no longer types), and
any change outside ``select``. Rows already committed cannot
be taken back by a config change: the way to reshape them is a new pipeline (new tables), or a
replay from the start (``eos rewind --to-epoch -1``), which checks nothing against the old
view.

An epoch precommitted before a column was added and committed after it is committed as it was
staged, without the column (``unstaged``): the checkpoint records the view its rows were
computed with, and the next epoch carries the column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eos.core.path_rules import PATH_RULES

if TYPE_CHECKING:
    from eos.core.config import PipelineConfig
    from eos.core.tables import OpenTables


def columns_of(view: dict[str, Any]) -> dict[str, str]:
    """A stateless view's output columns and their expressions: its ``select``, or without
    one every declared field under its own name."""
    select = view.get("select") or {}
    if select:
        return dict(select)
    return {name: name for name in (view.get("event") or {}).get("fields", {})}


def comparable(before: dict[str, Any], after: dict[str, Any],
               config: PipelineConfig | None = None) -> tuple[dict, dict]:
    """Two schema views with what may change between epochs left out, so that what remains
    differs only where a change is refused: the filter (each epoch records its own), the
    select's added columns (a stateless pipeline's output columns, an aggregating one's derived
    fields; both selects spelled out), and with ``config`` (``after``'s), a kept column whose
    expression changed but still gives the same type."""
    # Each epoch records the path rules it quarantined with; sinks may come and go.
    before = {k: v for k, v in _without_filter(before).items() if k != PATH_RULES}
    after = {k: v for k, v in _without_filter(after).items() if k != PATH_RULES}
    stateless = "group_by" not in after
    if not stateless and "select" not in before and "select" not in after:
        return before, after
    old = columns_of(before) if stateless else dict(before.get("select") or {})
    new = columns_of(after) if stateless else dict(after.get("select") or {})
    kept = {name: text for name, text in new.items() if name in old}
    if config is not None:
        old = {name: kept[name] if name in kept and text != kept[name]
               and not retyped(config, name, text) else text for name, text in old.items()}
    return {**before, "select": old}, {**after, "select": kept}


def _without_filter(view: dict[str, Any]) -> dict[str, Any]:
    """``view`` without the event's filter: a filter decides, record by record, whether a
    record counts; it keeps no state and types nothing, so it may change between any two
    epochs (the audit applies each epoch's own)."""
    event = view.get("event")
    if not isinstance(event, dict) or "filter" not in event:
        return view
    return {**view, "event": {k: v for k, v in event.items() if k != "filter"}}


def retyped(config: PipelineConfig, name: str, committed: str) -> bool:
    """Whether column ``name``'s committed expression gives another type than its expression in
    ``config`` (or cannot be typed against ``config``'s fields any more)."""
    from eos.core.config.fields import FieldType
    from eos.core.config.rows import sql_types
    from eos.core.filters import expression_type, filter_columns

    what = f"select column '{name}' as committed:"
    try:
        columns = filter_columns(committed, what)
        old = FieldType.parse(expression_type(committed, what, sql_types(config, columns)),
                              output=True)
    except ValueError:
        return True
    return old != (config.row_columns if config.stateless else config.derived).get(name)


def refusal(config: PipelineConfig, changes: list[str], committed: int) -> str:
    """The message of a refused change of a stateless pipeline's view: each column at fault
    and what to do."""
    tail = ("give the changed pipeline a new name (and tables), or replay it from the start "
            "(eos rewind --to-epoch -1)")
    names = [c.split(":", 1)[0].removeprefix("select.") for c in changes
             if c.startswith("select.")]
    todo = (f"A pipeline without windows may add select columns between epochs, never remove "
            f"or change one: put back {', '.join(map(repr, names))} as committed (an expression "
            f"may change if its type does not), or {tail}"
            if names else tail[:1].upper() + tail[1:])
    return (f"pipeline '{config.name}' committed epochs 0..{committed} with another schema; "
            f"changed: {'; '.join(changes)}. {todo}")


def unstaged(config: PipelineConfig, tables: OpenTables, epoch: int,
             previous: dict[str, Any] | None) -> list[str]:
    """The columns the config adds since ``previous`` (the last checkpoint's view) that epoch
    N's staged rows were not computed with (its precommit ran before they were added): N
    commits without them. Reads the staged files' footers only when columns were added."""
    from eos.core.tables import row_column

    if not config.stateless or previous is None:
        return []
    added = [name for name in config.row_columns if name not in columns_of(previous)]
    if not added:
        return []
    staging = tables.handle(tables.staging)
    if staging is None:
        return added
    dataset = staging.to_pyarrow_dataset(partitions=[("epoch", "=", str(int(epoch)))])
    present: set[str] = set()
    for fragment in dataset.get_fragments():
        present.update(fragment.physical_schema.names)
    return [name for name in added if row_column(name) not in present]


def without(view: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    """``view`` with ``columns`` left out of its ``select``."""
    if not columns:
        return view
    return {**view, "select": {k: v for k, v in view["select"].items() if k not in columns}}
