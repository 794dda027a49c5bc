"""Which worktrees an agent runs in, whatever deck runs it: a lock file per worktree, beside it
in deck's state folder (`REPO-HASH/AGENT.lock`, out of the agent's reach).

A deck that starts an agent in its worktree holds a shared `flock` on that file until the agent
stops (`deck run` and `deck serve` alike, of any config; several may run it). A removal takes
the lock exclusively, without waiting: it is refused while any deck runs the agent there, and no
deck starts the agent there while it is being removed. The kernel lets go of a lock when the
process holding it ends, however it ends: a deck killed leaves nothing behind that blocks.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from deck import lock_file
from deck.errors import ServiceError

from .tree import Place


def _take(place: Place, *, shared: bool) -> int | None:
    """`place`'s lock file locked without waiting (`deck.lock_file`); None while another deck holds it
    the other way; a lock that cannot be taken at all is a ServiceError saying which."""
    try:
        return lock_file(place.lock, shared=shared)
    except OSError as exc:
        raise ServiceError(f"cannot lock {place.lock}: {exc.strerror or exc}") from exc


def claim(place: Place) -> int:
    """Hold `place`'s lock while its agent runs (release it with `os.close`); refused while the
    worktree is being removed."""
    fd = _take(place, shared=True)
    if fd is None:
        raise ServiceError(f"{place.agent}'s worktree is being removed")
    with contextlib.suppress(OSError):
        os.pwrite(fd, f"{os.getpid()}\n".ljust(16).encode(), 0)  # who runs it, for a removal refused
    return fd


@contextlib.contextmanager
def removing(place: Place) -> Iterator[None]:
    """Hold `place`'s lock alone while its worktree is removed; refused while a deck runs its agent."""
    fd = _take(place, shared=False)
    if fd is None:
        raise ServiceError(f"{place.agent} is running in its worktree{_holder(place)}: stop it first")
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(place.lock)
        os.close(fd)


def _holder(place: Place) -> str:
    """` (deck process PID)`, of a deck that runs the agent, as its lock file says."""
    try:
        pid = place.lock.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return ""
    return f" (deck process {pid})" if pid.isdigit() else ""
