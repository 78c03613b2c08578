"""Delta time travel for rewinds (``eos.core.rewind``): the version of a table that held epoch N,
whether it can still be restored, and the restore that sets the table's marker back to N.

Every commit the protocol makes to a Delta table (a sink's epoch, a checkpoint, a staged epoch,
a plan marker, a rewind) carries ``eos.app`` and ``eos.epoch`` in its commit info
(``commit_properties``), so "the version at which epoch N was committed" is read from the
table's history instead of being guessed from timestamps or scanned version by version. After
a rewind the history holds epoch N twice (the first commit, and the restore that came back to
it): the *latest* commit naming N is always on the table's current line.

A Delta ``RESTORE`` brings back files, not ``txn`` versions: left alone, the marker would still
say the last epoch before the rewind and every replayed commit would be skipped as "already
committed". So the restore commit itself carries ``txn(app, N)``: files and marker go back in
one atomic commit (delta-rs keeps the latest ``txn`` action of an app, even a lower one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eos.core.delta import APP, EPOCH, FILL_SUFFIX, OP, PLAN_HASH, REWIND, commit_properties
from eos.core.errors import RewindRefused
from eos.core.outcomes import NO_EPOCH
from eos.core.storage import filesystem

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable, Transaction

def history(table: DeltaTable, app_id: str) -> list[dict[str, Any]]:
    """The commits of ``app_id`` in the table's history, oldest first."""
    return sorted((h for h in table.history() if h.get(APP) == app_id),
                  key=lambda h: int(h["version"]))


def version_of(table: DeltaTable, path: str, app_id: str, epoch: int,
               plan_hash: str | None = None) -> int:
    """The table version at which ``epoch`` was committed (the latest commit naming it, with
    ``plan_hash`` when given); for ``NO_EPOCH`` the version before the app's first commit (the
    table as it was before the pipeline wrote anything). Raises ``RewindRefused`` when the
    history has no such commit (written before commits carried ``eos.epoch``, or never)."""
    ours = history(table, app_id)
    if epoch == NO_EPOCH:
        return int(ours[0]["version"]) - 1 if ours else table.version()
    for commit in reversed(ours):
        if commit.get(EPOCH) == str(epoch) and plan_hash in (None, commit.get(PLAN_HASH)):
            return int(commit["version"])
    raise RewindRefused(
        f"Delta table {path} has no commit of epoch {epoch}"
        f"{f' (plan {plan_hash})' if plan_hash else ''} in its history: it cannot be restored "
        "to it (commits made before rewind support carry no eos.epoch; protocol tables keep "
        "their commits for epoch.log_retention)"
    )


def target_version(path: str, app_id: str, epoch: int, plan_hash: str | None = None) -> int:
    """``version_of`` a table, checked restorable: ``RewindRefused`` names what is missing."""
    from deltalake import DeltaTable

    version = version_of(DeltaTable(path), path, app_id, epoch, plan_hash)
    gone = missing_files(path, version)
    if gone:
        raise RewindRefused(
            f"Delta table {path} cannot be restored to version {version} (epoch {epoch}): "
            f"{len(gone)} of its files were vacuumed, e.g. {gone[0]}. Rewind to a later epoch, "
            "or to -1 (a full replay)"
        )
    return version


def line(table: DeltaTable, app_id: str) -> list[int]:
    """The epochs committed to the table on its current line, oldest first: each protocol
    commit adds its epoch, each rewind to N drops the epochs after N."""
    epochs: list[int] = []
    for commit in history(table, app_id):
        epoch = int(commit[EPOCH])
        if commit.get(OP) == "rewind":
            epochs = [e for e in epochs if e <= epoch]
        elif commit.get(OP) == "commit":
            epochs.append(epoch)
    return epochs


# Operations that add or remove no rows: another writer's such commit after a rewind's target
# version loses nothing when the table is restored to it (files are rewritten, not changed).
ROWLESS_OPS = frozenset({"CREATE TABLE", "SET TBLPROPERTIES", "OPTIMIZE", "VACUUM START",
                         "VACUUM END", "ADD COLUMN", "ADD CONSTRAINT", "DROP CONSTRAINT",
                         "ADD FEATURE", "UPDATE TABLE METADATA", "CHECKPOINT"})


def other_writers(table: DeltaTable, app_id: str, version: int) -> list[tuple[int, str]]:
    """The commits after ``version`` that another writer made and that may carry rows, as
    (version, who): another pipeline's (its ``eos.app``), or one outside eos (no ``eos.app``
    and an operation that writes rows). A restore to ``version`` would remove their rows."""
    from eos.core.ownership import Writer

    found = []
    for commit in table.history():
        at, app = int(commit["version"]), commit.get(APP)
        # The pipeline's own, and its fill's (``eos fill``: epochs from before a sink joined,
        # whose marker a restore takes back with them).
        if at <= version or app in (app_id, app_id + FILL_SUFFIX):
            continue
        if app:
            found.append((at, str(Writer.of_app(str(app)))))
        elif commit.get("operation") not in ROWLESS_OPS:
            found.append((at, f"a writer outside eos ({commit.get('operation')})"))
    return sorted(found)


def refuse_other_writers(table: DeltaTable, path: str, app_id: str, epoch: int,
                         version: int) -> None:
    """``RewindRefused`` when restoring ``table`` to ``version`` (epoch ``epoch`` of
    ``app_id``) would remove rows another writer committed after it (docs/guarantees.md): their
    markers would still say committed, so nothing would ever write them again. Refused rather
    than deleting only this pipeline's rows: the rows carry no writer, only an epoch that the
    other pipelines' epochs share."""
    found = other_writers(table, app_id, version)
    if not found:
        return
    whom = sorted({who for _, who in found})
    raise RewindRefused(
        f"{', '.join(whom)} committed to Delta table {path} after epoch {epoch} of {app_id} "
        f"(version {version}; their commits: version(s) "
        f"{', '.join(str(v) for v, _ in found[:5])}{', ...' if len(found) > 5 else ''}): "
        "restoring the table to that epoch would remove those rows while their writer's marker "
        "still says committed. Rewind to an epoch committed after their last commit, or give "
        "each pipeline a table of its own"
    )


def missing_files(path: str, version: int) -> list[str]:
    """Data files the table at ``version`` needs that are gone (vacuumed): a restore to it
    would fail half-way. One metadata request per file on an object store."""
    import pyarrow.fs as pa_fs
    from deltalake import DeltaTable

    if version < 0:
        return []
    uris = DeltaTable(path, version=version).file_uris()
    if not uris:
        return []
    store, _ = filesystem(uris[0])
    found = store.get_file_info([filesystem(uri)[1] for uri in uris])
    return [uri for uri, info in zip(uris, found, strict=True)
            if info.type == pa_fs.FileType.NotFound]


def rewound(table: DeltaTable, rewind_id: str) -> bool:
    """Whether this rewind already restored the table (a rerun after a crash skips it)."""
    return any(h.get(REWIND) == rewind_id for h in table.history())


def restore(path: str, version: int, app_id: str, epoch: int, rewind_id: str, *,
            fenced: bool = False,
            check: Callable[[DeltaTable], None] | None = None,
            markers: Callable[[DeltaTable], list[Transaction]] | None = None) -> int | None:
    """Restore ``path`` to ``version`` with ``txn(app_id, epoch)`` in the same commit; the
    version written, or None when there was nothing to do (this rewind did it already, or the
    table is at ``version``). Idempotent; of two racing attempts, one restores and the other
    finds the table restored by this rewind. ``fenced``: the staging table, whose every change
    goes through its fence (``eos.core.staging_fence.Fence``). ``check`` refuses the restore
    (raises) from the snapshot it restores: a commit after that snapshot makes the restore
    conflict."""
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    from eos.core.staging_fence import Fence

    table = DeltaTable(path)
    if rewound(table, rewind_id) or table.version() == version:
        return None
    if check is not None:
        check(table)
    also = Fence.of(table, app_id).advance(epoch) if fenced else None
    if markers is not None:  # other markers the restore must take back (a sink's fill's)
        also = [*(also or []), *markers(table)]
    properties = commit_properties(app_id, epoch, "rewind", extra={REWIND: rewind_id},
                                   also=also)
    try:
        if version < 0:  # back to before the table existed: remove every file instead
            table.delete(commit_properties=properties)
        else:
            table.restore(version, commit_properties=properties)
    except CommitFailedError as error:
        _lost_race(path, rewind_id, error)
        return None
    return DeltaTable(path).version()


def _lost_race(path: str, rewind_id: str, error: Exception) -> None:
    """A concurrent commit beat ours: fine if it was this rewind's (another attempt of it),
    else transient (a rerun restores from a fresh snapshot)."""
    from deltalake import DeltaTable

    from eos.core.errors import CommitConflict

    if rewound(DeltaTable(path), rewind_id):
        return None
    raise CommitConflict(f"the rewind of {path} conflicted with a concurrent write ({error}); "
                         "rerunning the rewind is safe") from None


def replace_schema(path: str, schema: pa.Schema, app_id: str, epoch: int, rewind_id: str,
                   partition_by: list[str] | None = None) -> int | None:
    """Give an emptied table ``schema`` (a full replay under a changed config: the outputs'
    columns changed). Done only when the schema differs; the commit keeps the marker."""
    from deltalake import DeltaTable, write_deltalake

    table = DeltaTable(path)
    if _same_schema(table, schema) and (
            partition_by is None
            or list(table.metadata().partition_columns) == list(partition_by)):
        return None
    if table.to_pyarrow_dataset().count_rows():
        raise RewindRefused(f"Delta table {path} still holds rows after the rewind; its schema "
                            "cannot be replaced without losing them")
    from deltalake.exceptions import CommitFailedError

    try:
        write_deltalake(table, schema.empty_table(), mode="overwrite", schema_mode="overwrite",
                        partition_by=partition_by,
                        commit_properties=commit_properties(app_id, epoch, "rewind",
                                                            extra={REWIND: rewind_id}))
    except CommitFailedError as error:
        done = DeltaTable(path)
        if _same_schema(done, schema) and (  # another attempt of this rewind did it
                partition_by is None
                or list(done.metadata().partition_columns) == list(partition_by)):
            return None
        from eos.core.errors import CommitConflict

        raise CommitConflict(f"replacing the schema of {path} conflicted with a concurrent "
                             f"write ({error}); rerunning the rewind is safe") from None
    return DeltaTable(path).version()


def _same_schema(table: DeltaTable, schema: pa.Schema) -> bool:
    """Same column names and Delta types (nullability and field metadata aside)."""
    import json

    from deltalake import Schema

    def columns(delta_schema: Schema) -> list[tuple[str, str]]:
        return [(f["name"], json.dumps(f["type"], sort_keys=True))
                for f in json.loads(delta_schema.to_json())["fields"]]

    return columns(table.schema()) == columns(Schema.from_arrow(schema))
