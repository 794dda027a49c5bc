"""deck's own files: where it keeps its state, and the one way it replaces a file.

A file is never rewritten in place: the new content goes to a temp file in the same
directory, which is renamed over the old one, so a reader sees the old file or the new
one, never half. Everything happens relative to a descriptor of that directory (`replace_in`):
the agents' fs/* writes pass the directory their confined walk opened, and nothing is
looked up by name again between the checks and the rename.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: The process's umask, read once at import (reading it means setting it, which is not thread-safe).
UMASK = _umask()
#: What open() gives a new file.
NEW_FILE_MODE = 0o666 & ~UMASK

_DIR_FLAGS = os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)
#: A temp file is always new (O_EXCL), and a symlink planted at its name is not followed.
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def state_dir() -> Path:
    """deck's state folder ($XDG_STATE_HOME/deck): its log, the agents' logs, the recent configs."""
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "deck"


def replace_in(
    directory: int,
    name: str,
    data: bytes,
    mode: int,
    *,
    durable: bool = False,
    check: Callable[[], None] | None = None,
) -> None:
    """Write `data` to a temp file in the directory open as `directory`, then rename it over `name` there.

    The temp file has a fixed-length random name (a `name` near the length limit still fits),
    is created 0600 and given `mode` before the rename. A symlink put at `name` meanwhile is
    replaced, not followed. `durable` syncs the data to disk before the rename; `check` runs
    just before it and may raise to keep the old file.
    """
    temp = f".deck-{secrets.token_hex(6)}.tmp"
    fd = os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fchmod(out.fileno(), mode)
            if durable:
                os.fsync(out.fileno())
        if check is not None:
            check()
        os.rename(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp, dir_fd=directory)
        raise


def write_atomic(
    path: str | Path,
    data: bytes,
    mode: int | None = None,
    *,
    durable: bool = True,
    check: Callable[[], None] | None = None,
) -> None:
    """Replace the file at `path` with `data` at once (`replace_in` its directory).

    `mode` None: an existing regular file keeps its mode, a new one gets what open() would
    give it. The data is synced to disk unless `durable` is false.
    """
    path = Path(path)
    directory = os.open(path.parent, _DIR_FLAGS)
    try:
        if mode is None:
            try:
                st = os.stat(path.name, dir_fd=directory, follow_symlinks=False)
            except FileNotFoundError:
                mode = NEW_FILE_MODE
            else:
                mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else NEW_FILE_MODE
        replace_in(directory, path.name, data, mode, durable=durable, check=check)
    finally:
        os.close(directory)


def lock_file(path: Path, *, shared: bool) -> int | None:
    """A descriptor of lock file `path` (made if need be, 0600, never through a symlink) holding a
    shared or an exclusive `flock`, taken without waiting; None while another process holds it the
    other way. A file its last holder unlinked meanwhile is locked again at its place, so that two
    processes never hold locks on two different files of one name. Close the descriptor to let go."""
    how = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, how)
            if same_file(fd, path):
                return fd
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def same_file(fd: int, path: Path) -> bool:
    """Whether `fd` is the file at `path` now (not one unlinked, nor one another took its place)."""
    try:
        now, mine = os.stat(path, follow_symlinks=False), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)
