"""Small helpers for the background servers the dev tools supervise (broker, Spark Connect),
and for the environment variables that hand their addresses over."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator


def alive(pid: int) -> bool:
    """Whether ``pid`` runs; an exited child of ours is reaped (not left a zombie) and is not
    alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    return True


def group_members(pgid: int) -> list[int]:
    """The processes in process group ``pgid`` (Linux ``/proc``), zombies excluded."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


@contextlib.contextmanager
def restored_environ(names: Iterable[str]) -> Iterator[None]:
    """Put the environment variables ``names`` back as they were when the block ends (unset
    ones unset), whatever the block set: a server started for one command hands its address
    over in the environment only while it runs."""
    saved = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
