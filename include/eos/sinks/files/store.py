"""Where the ``files`` sink writes: a local (POSIX) directory or an object-store prefix, behind
the few operations its commit needs (``eos.sinks.files.sink``).

The one operation the two places do differently is the commit marker's create-if-absent:

- **Local**: the manifest is written to a temporary file, made durable, then ``os.link``-ed to
  its name. A link, unlike a rename, refuses to replace a file: of two attempts exactly one
  creates it. Data files are renamed into place (a rename replaces an existing file of the same
  name atomically; both attempts write the same rows under the same name).
- **Object store**: the manifest is a PUT with ``If-None-Match: *`` (S3's conditional write,
  which AWS S3, SeaweedFS and recent MinIO enforce): of two attempts exactly one gets ``200``,
  the other ``412 Precondition Failed``. pyarrow's filesystem has no conditional write, so this
  one request goes through obstore (``eos.sinks.files.s3``) with the same ``AWS_*`` variables
  pyarrow and delta-rs read; everything else goes through pyarrow.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eos.core.storage import filesystem, is_remote, join, scheme

if TYPE_CHECKING:
    import pyarrow.fs as pa_fs


@dataclass(frozen=True)
class Place:
    """The sink's root: a local directory or a store URI, and the pyarrow filesystem for it."""

    root: str

    @property
    def remote(self) -> bool:
        return is_remote(self.root)

    def _fs(self, relative: str = "") -> tuple[pa_fs.FileSystem, str]:
        return filesystem(join(self.root, relative) if relative else self.root)

    def names(self, relative: str) -> list[str]:
        """Every file under ``relative`` (recursively), as paths relative to the root."""
        import pyarrow.fs as pa_fs

        store, base = self._fs()
        selector = pa_fs.FileSelector(f"{base}/{relative}".rstrip("/"), allow_not_found=True,
                                      recursive=True)
        return sorted(info.path[len(base) + 1:] for info in store.get_file_info(selector)
                      if info.type == pa_fs.FileType.File)

    def read(self, relative: str) -> bytes | None:
        """A file's bytes, None when it does not exist."""
        import pyarrow.fs as pa_fs

        store, path = self._fs(relative)
        try:
            with store.open_input_stream(path) as stream:
                return bytes(stream.read())
        except FileNotFoundError:
            return None
        except OSError:  # a store may report a missing key as another error
            if store.get_file_info(path).type == pa_fs.FileType.NotFound:
                return None
            raise

    def write(self, relative: str, data: bytes) -> None:
        """Make ``relative`` hold ``data`` whole or not at all: locally a temporary file made
        durable and renamed into place (replacing one of the same name); on a store one PUT."""
        if self.remote:
            store, path = self._fs(relative)
            with store.open_output_stream(path) as out:
                out.write(data)
            return
        final = os.path.join(self.root, relative)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        temp = self._durable_temp(final, data)
        os.replace(temp, final)
        _sync_dir(os.path.dirname(final))

    def create(self, relative: str, data: bytes) -> bool:
        """Create ``relative`` holding ``data`` unless it exists; True: this call created it.
        Exactly one of any number of concurrent calls returns True."""
        if self.remote:
            from eos.sinks.files.s3 import put_if_absent

            return put_if_absent(join(self.root, relative), data)
        final = os.path.join(self.root, relative)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        temp = self._durable_temp(final, data)
        try:
            os.link(temp, final)
        except FileExistsError:
            return False
        finally:
            os.unlink(temp)
        _sync_dir(os.path.dirname(final))
        return True

    def delete(self, relative: str) -> None:
        """Remove a file; one already gone is fine."""
        store, path = self._fs(relative)
        with contextlib.suppress(FileNotFoundError):
            store.delete_file(path)

    def location(self, relative: str) -> str:
        """A file's full path or URI (what a reader is given)."""
        return join(self.root, relative)

    @staticmethod
    def _durable_temp(final: str, data: bytes) -> str:
        """``data`` in a temporary file next to ``final``, flushed to disk. Its name starts with
        a dot (readers skip hidden files) and carries ``final``'s name, so that an abort finds
        the temporary files of its epoch."""
        directory, name = os.path.split(final)
        temp = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:12]}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        return temp


def _sync_dir(directory: str) -> None:
    """Make a new name in ``directory`` durable: a crash after the commit must not lose it."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def supported(root: str) -> str | None:
    """Why the sink cannot write under ``root`` (None: it can): only local paths and s3://,
    the store whose conditional write ``eos.sinks.files.s3`` makes."""
    found = scheme(root)
    if found is None or found == "s3":
        return None
    return (f"the {found}:// scheme is not supported by the files sink (supported: a local "
            "path, file://, s3://)")
