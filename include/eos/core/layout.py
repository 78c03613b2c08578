"""Where a pipeline's own tables live (epoch log, staging, checkpoints, audits). Pure path logic
with no heavy imports, so that parsing a DAG file does not load deltalake or pyarrow. Sinks place
their own tables (``eos.sinks.delta``), never onto these (``PROTOCOL_TABLES``, checked when the
config loads through the resources the sinks claim: ``table_resource``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from eos.core.storage import join

if TYPE_CHECKING:  # the config checks its sinks against these tables: no import back at run time
    from eos.core.config import PipelineConfig

#: The protocol's tables under a pipeline's root, by directory name: the one list of them. A
#: sink writing into one (or containing one) would corrupt the protocol, so none may.
PROTOCOL_TABLES = ("epochs", "staging", "checkpoints", "audits")

_TABLE = "table:"  # a resource naming the location of a table (``eos.core.sink.Sink.resources``)


@dataclass(frozen=True)
class Tables:
    root: str  # an absolute local path or an object-store URI (``eos.core.storage.resolve``)

    def _table(self, name: str) -> str:
        return join(self.root, name)

    @property
    def epochs(self) -> str:
        return self._table("epochs")

    @property
    def staging(self) -> str:
        return self._table("staging")

    @property
    def checkpoints(self) -> str:
        return self._table("checkpoints")

    @property
    def audits(self) -> str:
        """The verdicts of ``eos verify`` (``eos.core.verdicts``): written by the audit, never read
        by the protocol."""
        return self._table("audits")

    def protocol_tables(self) -> dict[str, str]:
        """Every protocol table's location, by name."""
        return {name: self._table(name) for name in PROTOCOL_TABLES}


def tables_for(config: PipelineConfig) -> Tables:
    return Tables(config.root)


def table_resource(location: str) -> str:
    """The resource a table at ``location`` (a path or a URI, normalized by its sink) is: two
    of them collide when one location is the other or lies inside it (``resources_collide``)."""
    return f"{_TABLE}{location.rstrip('/') or '/'}"


def _inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def resources_collide(one: str, other: str) -> bool:
    """Whether two claimed resources are one place: equal, or two table locations one of which
    holds the other (a Delta table inside another's directory is written over by the other's
    vacuum and read as its data files)."""
    if one == other:
        return True
    if not (one.startswith(_TABLE) and other.startswith(_TABLE)):
        return False
    a, b = one.removeprefix(_TABLE), other.removeprefix(_TABLE)
    return _inside(a, b) or _inside(b, a)
