"""Where tables live: a local directory or an object store, and whether the store keeps the fence.

A pipeline's ``tables.root`` (and a Delta sink's table) is a local path or an absolute URI of an
object store that both of the libraries that touch table files support: delta-rs (every commit,
read, time travel, vacuum) and pyarrow (the staging files the executors and the driver write
and read, ``eos.compute.writers``). Anything else is refused when the config loads, so a root
``s3:/bucket`` never becomes the local directory ``data/s3:/bucket`` without a word.

Endpoint and credentials come from the standard variables both libraries read themselves
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
``AWS_ALLOW_HTTP``; ``GOOGLE_APPLICATION_CREDENTIALS``; ``AZURE_STORAGE_*``): nothing here
holds, logs or forwards a secret, and no Spark plan or data source option carries one.

**The fence on a store.** Every guarantee of the protocol rests on one property of a Delta
commit: of two writers committing the same version, exactly one succeeds (docs/guarantees.md).
delta-rs
1.x gets it from the store's put-if-absent (S3's ``If-None-Match: *``, GCS's and Azure's
conditional create). Settings that say otherwise are refused before anything is written
(``refuse_unsafe_settings``): ``AWS_S3_ALLOW_UNSAFE_RENAME`` (delta-rs' documented opt-out of
mutual exclusion; measured: 1.6.6 still refused the second of two racing commits on SeaweedFS
with it set, but the setting asks for the opposite and nothing promises it),
``AWS_S3_LOCKING_PROVIDER`` (DynamoDB locking, which delta-rs 1.x no longer implements: a user
setting it believes in a lock nobody takes) and a disabled conditional put. A store that
accepts conditional writes without enforcing them (old S3-compatible servers) is caught by
``probe_fence`` before a pipeline's first table is created there: two commits race for one
version of a probe table, and anything but exactly one winner refuses the root.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from eos.core.errors import ConfigError, StoreUnsafe

if TYPE_CHECKING:  # pyarrow is imported where files are touched, never when a config loads
    import pyarrow.fs as pa_fs

#: Object-store schemes both delta-rs and pyarrow open (measured with deltalake 1.6.6 and
#: pyarrow 21: ``s3a``/``az`` are delta-rs only, ``hdfs`` needs a JVM in the writer's process).
OBJECT_STORE_SCHEMES = ("s3", "gs", "abfs", "abfss")

#: Storage settings under which two writers can both commit one Delta version, with why.
UNSAFE_SETTINGS = {
    "AWS_S3_ALLOW_UNSAFE_RENAME": "it is delta-rs' documented opt-out of mutual exclusion "
                                  "on S3 (two writers of one version may both succeed; "
                                  "delta-rs 1.6.6 still used put-if-absent on SeaweedFS "
                                  "here, but nothing promises it)",
    "AWS_S3_LOCKING_PROVIDER": "delta-rs 1.x has no locking provider and ignores it; commits "
                               "rely on the store's conditional put, so remove the setting",
}
#: object_store's conditional-put mode: ``disabled`` turns put-if-absent off.
CONDITIONAL_PUT = ("AWS_CONDITIONAL_PUT", "conditional_put", "aws_conditional_put")


_SCHEME_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def scheme(location: str) -> str | None:
    """The URI scheme of ``location`` (``s3``), or None for a local path (``file://`` too)."""
    if "://" not in location:
        return None
    found = location.split("://", 1)[0].lower()
    return None if found == "file" else found


def is_remote(location: str) -> bool:
    return scheme(location) is not None


def resolve(location: str, base: Path | str) -> str:
    """A table location as the library keeps it: an object-store URI as given (without a
    trailing slash), a local path made absolute (relative ones under ``base``: the data
    directory, or a store URI, ``eos.core.config.paths.tables_base``). Refuses a scheme nothing here
    can write, and a URI-looking local path."""
    found = scheme(location)
    if found is not None:
        if found not in OBJECT_STORE_SCHEMES:
            raise ConfigError(
                f"{location!r}: the {found}:// scheme is not supported for tables (supported: "
                f"a local path, file://, {', '.join(s + '://' for s in OBJECT_STORE_SCHEMES)})")
        rest = location.split("://", 1)[1].strip("/")
        if not rest or rest.startswith("/"):
            raise ConfigError(f"{location!r}: an object-store location names a bucket (or "
                              f"container) and a prefix, e.g. {found}://bucket/pipeline")
        return f"{found}://{rest}"
    path = location.removeprefix("file://")
    if _SCHEME_LIKE.match(path):
        # ``s3:/bucket`` (one slash) or ``s3:bucket``: almost certainly a mistyped URI, which
        # would otherwise become a local directory named ``s3:``.
        raise ConfigError(f"{location!r} looks like a URI with a mistyped scheme separator; "
                          "write scheme://bucket/prefix, or a local path without ':'")
    resolved = Path(path)
    if resolved.is_absolute():
        return str(resolved)
    if is_remote(str(base)):
        return resolve(join(str(base), path), Path("/"))
    return str(Path(base) / resolved)


def join(root: str, *parts: str) -> str:
    """``root/part/...`` for a local path or a URI alike."""
    return "/".join([root.rstrip("/"), *(p.strip("/") for p in parts)])


def refuse_unsafe_settings(location: str, environ: dict[str, str] | None = None) -> None:
    """Refuse, naming the setting, any storage setting under which two writers could commit
    one Delta version of a table at ``location`` (see the module's docstring)."""
    if scheme(location) != "s3":
        return
    env = os.environ if environ is None else environ
    for name, why in UNSAFE_SETTINGS.items():
        value = env.get(name, "").strip()
        if value and value.lower() not in ("false", "0", "no"):
            raise StoreUnsafe(f"{name}={value} is set: {why}. Tables at {location} would "
                              "lose the commit fence; unset it")
    for name in CONDITIONAL_PUT:
        if env.get(name, "").strip().lower() == "disabled":
            raise StoreUnsafe(f"{name}=disabled turns off the conditional put every Delta "
                              f"commit at {location} relies on; unset it")


def probe_fence(root: str) -> None:
    """Check that the store under ``root`` lets exactly one of two racing commits of one
    Delta version land (its put-if-absent), on a probe table of its own that is deleted
    afterwards when the store allows. Raises ``StoreUnsafe`` otherwise. Local disks are
    not probed (delta-rs commits there with an atomic rename-if-absent)."""
    if not is_remote(root):
        return
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError

    probe = join(root, "_eos_probe", uuid.uuid4().hex)
    data = pa.table({"n": pa.array([1], pa.int64())})
    write_deltalake(probe, data, mode="append")
    one, other = DeltaTable(probe), DeltaTable(probe)
    landed = 0
    # One app id in both: delta-rs rebases a losing blind append onto the winner, but never
    # a commit whose ``txn`` app id the winner carried (``ConcurrentTransaction``).
    for handle in (one, other):
        try:
            write_deltalake(handle, data, mode="append", commit_properties=CommitProperties(
                app_transactions=[Transaction("eos-probe", 1)]))
            landed += 1
        except CommitFailedError:
            pass
    versions = DeltaTable(probe).history()
    _delete_tree(probe)
    if landed != 1 or len(versions) != 2:
        raise StoreUnsafe(
            f"the object store under {root} does not enforce put-if-absent: {landed} of two "
            "commits racing for one Delta version landed. Two attempts of one epoch could "
            "both commit; use a store with conditional writes (AWS S3, GCS, Azure, "
            "SeaweedFS, recent MinIO)")


def _delete_tree(location: str) -> None:
    """Delete everything under ``location`` (best effort: a leftover probe is harmless)."""
    try:
        store, path = filesystem(location)
        store.delete_dir_contents(path, missing_dir_ok=True)
        store.delete_dir(path)
    except OSError:
        pass


_filesystems: dict[str, pa_fs.FileSystem] = {}  # per process (Spark reuses Python workers)


def filesystem(location: str) -> tuple[pa_fs.FileSystem, str]:
    """A pyarrow filesystem for ``location`` and the path inside it. One filesystem per store
    and bucket per process: opening one from a URI resolves the bucket's region with a request
    of its own (and builds a client), which a Spark task writing a few files should not pay
    for each file. Credentials are the environment's (see the module's docstring)."""
    import pyarrow.fs as pa_fs

    if not is_remote(location):
        return pa_fs.LocalFileSystem(), os.path.abspath(location.removeprefix("file://"))
    found, rest = location.split("://", 1)
    bucket, _, inside = rest.partition("/")
    key = f"{found}://{bucket}"
    cached = _filesystems.get(key)
    if cached is None:
        cached, _ = pa_fs.FileSystem.from_uri(key)
        _filesystems[key] = cached
    return cached, f"{bucket}/{inside}".rstrip("/")
