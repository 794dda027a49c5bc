"""Which agent sessions are in use, whatever deck uses them: a lock file per session in deck's state
folder (`sessions/HASH.lock`, HASH of the agent's name and the session id: the same agent under
another name in another config is another key).

A deck holds a shared `flock` on it while its agent runs in that session (`deck run`, `deck serve`,
`deck send` alike). `session/delete` takes it exclusively without waiting, so a
session another deck is talking in is never deleted from under it. The kernel lets go of a lock when
its process ends, however it ends: a deck killed leaves nothing that blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from deck.errors import ServiceError
from deck.proc.storage import lock_file, same_file, state_dir


#: How often, and how far apart in seconds, `hold` tries a lock another deck holds alone.
HOLD_TRIES, HOLD_WAIT = 20, 0.01


def lock_path(agent: str, session_id: str) -> Path:
    key = hashlib.sha256(f"{agent}\0{session_id}".encode(errors="surrogatepass")).hexdigest()[:32]
    return state_dir() / "sessions" / f"{key}.lock"


class Held:
    """A session's lock, held shared while this deck runs in it."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    def release(self) -> None:
        """Let go of it; the file goes once no deck holds it."""
        with contextlib.suppress(OSError):
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no other holder: nobody needs the file
            if same_file(self.fd, self.path):
                os.unlink(self.path)
        os.close(self.fd)


async def hold(agent: str, session_id: str) -> Held | None:
    """The lock of a session this deck now runs in, held until `release`; None when it cannot be
    taken (a state folder deck cannot write, a delete under way): the session runs all the same.

    Another deck holds it alone for an instant as it lets go of it (to remove the file if it was
    the last), and for the length of a `session/delete`: taking it is tried a few times."""
    path = lock_path(agent, session_id)
    for _ in range(HOLD_TRIES):
        try:
            fd = lock_file(path, shared=True)
        except OSError:
            return None
        if fd is not None:
            break
        await asyncio.sleep(HOLD_WAIT)
    else:
        return None
    with contextlib.suppress(OSError):
        os.pwrite(fd, f"{os.getpid()}\n".ljust(16).encode(), 0)  # who holds it, for a refusal
    return Held(fd, path)


@contextlib.contextmanager
def unused(agent: str, session_id: str) -> Iterator[None]:
    """Hold a session's lock alone while it is deleted; refused while a deck runs in it."""
    path = lock_path(agent, session_id)
    try:
        fd = lock_file(path, shared=False)
    except OSError as exc:
        raise ServiceError(f"cannot lock {path}: {exc.strerror or exc}") from exc
    if fd is None:
        raise ServiceError(f"{agent} is running in session {session_id}{_holder(path)}: stop it there first")
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def _holder(path: Path) -> str:
    """`(deck pid N)` as the lock file says, when it says."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(path.read_bytes()[:16].split()[0])
        return f" (deck pid {pid})"
    return ""
