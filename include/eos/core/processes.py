"""Small helpers for the background servers the dev tools supervise (broker, Spark Connect)."""

from __future__ import annotations

import contextlib
import os


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
