"""Who writes a sink's place (docs/guarantees.md): a Delta table, an Iceberg table or a files
sink's directory records its writers, and a second pipeline is refused before its first commit
(``TableOwned``, naming the owner) unless every writer declared the place shared.

Why: a rewind takes a sink back by restoring an older version of it. Rows another pipeline
committed after that version would go with it while that pipeline's marker still says
"committed": lost for good, silently. So a table has one writer unless its writers all say
otherwise (``shared: true``), and a rewind refuses to remove another writer's commits
(``eos.core.timetravel.refuse_other_writers``). A files sink's directory cannot be shared at
all: its manifests number the epochs of one pipeline.

The record is two properties, readable by any client of the place (a Delta or Iceberg table's
properties; for a files sink, the JSON object ``_eos/writers.json``):
- ``eos.writers``: a JSON list of ``{"app", "pipeline", "output", "sink"}``, one per writing
  pipeline (``app`` is its ``txn`` application id, which its commits carry; ``sink`` the
  sink's name, absent in records written before it was recorded);
- ``eos.shared``: ``"true"`` when every listed writer declared the table shared.

An operator hands a retired pipeline's table over by setting ``eos.writers`` to ``[]``: the next
pipeline to begin adopts it. A place with no record at all (created before writers were
recorded) is adopted when no other pipeline committed to it, as far as its history tells (a
Delta table's retained log, an Iceberg table's snapshots, a files sink's manifests).

What each place's messages say (its name, why one writer, how to share or hand it over) is a
``Place``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from eos.core.errors import CommitConflict, TableOwned

if TYPE_CHECKING:
    from deltalake import DeltaTable

WRITERS, SHARED = "eos.writers", "eos.shared"
APP_PREFIX = "eos:"  # ``PipelineConfig.app_id`` is ``eos:<pipeline>``
CLAIM_ATTEMPTS = 3


@dataclass(frozen=True)
class Writer:
    """One pipeline writing a table, as one of its sinks (``output``: windows, late, ...;
    ``sink``: the sink's name, ``files:/data/out``)."""

    app: str
    pipeline: str
    output: str = ""
    sink: str = ""

    @classmethod
    def of_app(cls, app: str) -> Writer:
        """A writer known only by the ``txn`` app id of its commits (a table from before)."""
        return cls(app, app.removeprefix(APP_PREFIX))

    def __str__(self) -> str:
        if self.sink:
            return f"pipeline {self.pipeline} (its {self.output or 'output'} sink {self.sink})"
        return f"pipeline {self.pipeline} ({self.output or 'txn app id ' + self.app})"


@dataclass(frozen=True)
class Place:
    """What messages about one place's writers say: ``kind`` is its sink type (``delta``),
    ``noun`` what it is (``Delta table``), ``location`` where; ``why`` what two writers would do
    to each other; ``shared_as`` how a sink declares it shared (None: it cannot be shared);
    ``handover`` how an operator gives it to another pipeline once its writers retired."""

    kind: str
    noun: str
    location: str
    why: str
    shared_as: str | None
    handover: str

    @property
    def what(self) -> str:
        return f"{self.noun} {self.location}"


def delta_place(path: str) -> Place:
    return Place("delta", "Delta table", path,
                 "A rewind of one writer would remove the other's rows.",
                 "{delta: {table: ..., shared: true}}",
                 "hand the table over: ALTER TABLE ... SET TBLPROPERTIES ('eos.writers' = '[]')")


@dataclass(frozen=True)
class Record:
    """A table's writers and whether all of them declared it shared."""

    writers: tuple[Writer, ...]
    shared: bool

    @classmethod
    def of(cls, configuration: Mapping[str, str | None]) -> Record | None:
        """The record in a place's properties; None for a place that has none."""
        text = configuration.get(WRITERS)
        if text is None:
            return None
        try:
            writers = tuple(Writer(str(w["app"]), str(w["pipeline"]), str(w.get("output", "")),
                                   str(w.get("sink", "")))
                            for w in json.loads(text))
        except (ValueError, TypeError, KeyError, AttributeError):
            raise TableOwned(f"the property {WRITERS} is not a JSON list of writers "
                             f"({{app, pipeline, output, sink}}): {text!r}. Set it to '[]' to "
                             "hand the place to the next pipeline that begins on it") from None
        return cls(writers, configuration.get(SHARED) == "true")

    def properties(self) -> dict[str, str]:
        listed = [{"app": w.app, "pipeline": w.pipeline, "output": w.output,
                   **({"sink": w.sink} if w.sink else {})} for w in self.writers]
        return {WRITERS: json.dumps(listed), SHARED: "true" if self.shared else "false"}

    def holds(self, app: str) -> bool:
        return any(w.app == app for w in self.writers)

    def others(self, app: str) -> tuple[Writer, ...]:
        return tuple(w for w in self.writers if w.app != app)


def admit(record: Record | None, me: Writer, shared: bool, where: str | Place,
          committed_apps: Callable[[], set[str]]) -> Record:
    """The record once ``me`` writes the place (``shared``: what its sink declares), or
    ``TableOwned`` naming the other writers and the fix. ``committed_apps`` tells the apps whose
    commits a place without a record holds (asked only then). ``where``: the place, or a Delta
    table's path."""
    place = where if isinstance(where, Place) else delta_place(where)
    if record is None:
        others = tuple(Writer.of_app(a) for a in sorted(committed_apps() - {me.app}))
        if others and not shared:
            raise TableOwned(f"{place.what} holds commits of {_names(others)}, written before "
                             f"its writers were recorded: {me} may not write it too. "
                             + _fix(others, place))
        return Record((me, *others), shared)
    if record.holds(me.app):
        others = record.others(me.app)
        if others and not shared:
            raise TableOwned(f"{place.what} is shared with {_names(others)}, and {me} does not "
                             "declare it shared: declare `shared: true` on this sink, or give "
                             f"it a {_thing(place)} of its own")
        return record if others or record.shared == shared else replace(record, shared=shared)
    if record.writers and not (shared and record.shared and place.shared_as is not None):
        unshared = place.shared_as is not None and not record.shared
        raise TableOwned(f"{place.what} belongs to {_names(record.writers)}"
                         f"{', which did not declare it shared' if unshared else ''}: "
                         f"{me} may not write it too. " + _fix(record.writers, place))
    return Record((*record.writers, me), shared if not record.writers else True)


def _names(writers: tuple[Writer, ...]) -> str:
    return ", ".join(str(w) for w in writers)


def _thing(place: Place) -> str:
    return place.noun.rsplit(" ", 1)[-1]  # table, directory


def _fix(owners: tuple[Writer, ...], place: Place) -> str:
    thing = _thing(place)
    shared = (f"or, for one {thing} written by several pipelines, declare `shared: true` in "
              f"the {place.kind} sink options of every pipeline writing it "
              f"({place.shared_as}), {_names(owners)} first; " if place.shared_as else "")
    return (f"{place.why} Give this sink a {thing} of its own; {shared}or, if "
            f"{_names(owners)} no longer writes it, {place.handover}")


def claim(table: DeltaTable, where: str, me: Writer, shared: bool) -> Record:
    """Admit ``me`` to ``table`` (an open handle of ``where``) and record it: one metadata commit
    when the record changes, none otherwise. Two pipelines claiming at once: the second commit
    conflicts, re-reads the record and decides again (``CommitConflict`` after
    ``CLAIM_ATTEMPTS``: transient, the retry re-reads)."""
    from deltalake import CommitProperties
    from deltalake.exceptions import CommitFailedError

    for _ in range(CLAIM_ATTEMPTS):
        before = Record.of(table.metadata().configuration)
        after = admit(before, me, shared, where, lambda: committed_apps(table))
        if after == before:
            return after
        try:
            table.alter.set_table_properties(
                after.properties(), raise_if_not_exists=False,
                commit_properties=CommitProperties(custom_metadata={"eos.op": "own",
                                                                    "eos.writer": me.app}))
            return after
        except CommitFailedError:
            table.update_incremental()
    raise CommitConflict(f"recording {me} as a writer of Delta table {where} conflicted with "
                         f"concurrent writes {CLAIM_ATTEMPTS} times; retrying is safe")


def check_writer(table: DeltaTable, where: str, me: Writer, shared: bool) -> None:
    """``TableOwned`` when ``table``'s record would not admit ``me`` (``admit``; a table with no
    record yet is one from before, which ``claim`` adopts at ``begin``). Checked through the
    snapshot a commit writes with, so a record that changes concurrently makes that commit
    conflict and check again. A shared writer missing from a shared table's record may commit:
    a rewind's restore of another writer can take the record back to before it joined (Delta
    ``RESTORE`` restores table properties too); its next ``begin`` records it again."""
    record = Record.of(table.metadata().configuration)
    if record is not None:
        admit(record, me, shared, where, set)


def committed_apps(table: DeltaTable) -> set[str]:
    """The ``txn`` app ids whose commits the table's retained log holds (every protocol commit
    names its app, ``eos.core.delta.commit_properties``)."""
    from eos.core.delta import APP

    return {str(h[APP]) for h in table.history() if h.get(APP)}
