"""Where a pipeline's own tables live (epoch log, staging, checkpoints, audits). Pure path logic
with no heavy imports, so that parsing a DAG file does not load deltalake or pyarrow. Sinks place
their own tables (``eos.sinks.delta.sink``), never onto these (``PROTOCOL_TABLES``, checked when the
config loads through the resources the sinks claim: ``table_resource``).

Also how long a path a sink can write (``path_limits``, ``path_problem``): a name of 255 bytes,
a local path of 4095, an object key of 1024. A sink whose files are named after its values
(a partition's directory) checks them before the seal: after it, a name too long would fail
every commit."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from eos.core.storage import is_remote, join

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


# -- how long a path a sink can write -------------------------------------------------------------

#: Bytes of one name in a local path: ext4, XFS, btrfs, ZFS and APFS allow 255 (a file system
#: may allow fewer: ``path_limits`` asks it).
NAME_MAX = 255
#: Bytes of a whole local path (Linux's PATH_MAX, 4096, counts the terminating NUL).
PATH_MAX = 4095
#: Bytes of an object's key on an object store (S3 and GCS: 1024; an Azure blob's name: 1024
#: characters). A store has no limit of its own on one name between slashes.
KEY_MAX = 1024


@dataclass(frozen=True)
class PathLimits:
    """What a file system or an object store takes: ``name``, bytes of one name between
    slashes (None: no limit of its own, an object store); ``whole``, bytes of the whole local
    path, or of the object key (the path after the bucket)."""

    name: int | None
    whole: int
    remote: bool


def path_limits(location: str) -> PathLimits:
    """The limits of the place ``location`` (a local path, ``file://`` or a store URI) is on:
    for a local one, as its file system answers for the nearest directory that exists (at most
    ``NAME_MAX`` and ``PATH_MAX``), so that names stay portable."""
    if is_remote(location):
        return PathLimits(None, KEY_MAX, True)
    path = _local(location)
    while path not in ("", "/") and not os.path.isdir(path):
        path = os.path.dirname(path)
    name, whole = NAME_MAX, PATH_MAX
    try:
        name = min(name, os.pathconf(path or "/", "PC_NAME_MAX"))
        whole = min(whole, os.pathconf(path or "/", "PC_PATH_MAX") - 1)
    except (OSError, ValueError):
        pass
    return PathLimits(name, whole, False)


def _local(location: str) -> str:
    return urlparse(location).path if location.startswith("file://") else location


def path_bytes(location: str, limits: PathLimits) -> int:
    """Bytes of ``location`` that ``path_problem`` holds against ``limits.whole``: the object
    key on a store, the whole path locally."""
    if limits.remote:
        return len(urlparse(location).path.lstrip("/").encode())
    return len(_local(location).encode())


def path_problem(location: str, limits: PathLimits) -> str | None:
    """Why a file at ``location`` cannot be written where ``limits`` hold (None: it can): a
    name, the whole path or the object key too long, in bytes of UTF-8."""
    if limits.remote:
        key = urlparse(location).path.lstrip("/")
        size = len(key.encode())
        if size > limits.whole:
            return (f"its object key would be {size} bytes long, over the store's limit of "
                    f"{limits.whole}")
        return None
    path = _local(location)
    for name in path.split("/"):
        size = len(name.encode())
        if limits.name is not None and size > limits.name:
            return (f"a name in its path would be {size} bytes long ({name[:48]}...), over "
                    f"the file system's limit of {limits.name}")
    size = len(path.encode())
    if size > limits.whole:
        return (f"its path would be {size} bytes long, over the file system's limit of "
                f"{limits.whole}")
    return None
