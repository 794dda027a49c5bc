"""Finding and reading the config file safely (a regular file or a pipe, of 1 MiB at most, never
a FIFO left open), writing it atomically, and the recent files deck opened."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import selectors
import stat
import sys
import time
from pathlib import Path

from deck.config.models import DEFAULT_NAME, MAX_SIZE, PIPE_TIMEOUT, RECENT_MAX
from deck.proc.storage import state_dir
from deck.proc.storage import write_atomic as replace_file


def embedded_default() -> str:
    """The config used when there is no file anywhere: the demo agent only (run with -P: a
    `deck` folder in the current folder is not taken for deck)."""
    python = sys.executable.replace("\\", "\\\\").replace('"', '\\"')
    return (
        "# deck's built-in config: the demo agent shipped with deck.\n"
        "[agents.demo]\n"
        'title = "Demo agent"\n'
        'icon = "D"\n'
        'description = "A scripted agent that shows what deck can display"\n'
        f'command = ["{python}", "-P", "-m", "deck.demo"]\n'
    )


def xdg_config_file() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "deck" / DEFAULT_NAME


def find_config(flag: str | None = None) -> tuple[Path | None, str]:
    """The config file in use and how it was found: flag, env, cwd, xdg or embedded."""
    if flag:
        return Path(flag).expanduser(), "flag"
    if env := os.environ.get("DECK_CONFIG"):
        return Path(env).expanduser(), "env"
    local = Path(DEFAULT_NAME)
    if local.is_file():
        return local.resolve(), "cwd"
    xdg = xdg_config_file()
    if xdg.is_file():
        return xdg, "xdg"
    return None, "embedded"


# -- reading ----------------------------------------------------------------------------------

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO or pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class Unreadable(OSError):
    """A path deck does not read as a config: not a regular file, too large, or a pipe too slow."""


def read_text(path: Path, *, pipe: bool = False) -> str:
    """The text of config file `path`, exactly as written: no newline is translated, so `digest` of it
    is the hash of the file's bytes.

    Only a regular file of MAX_SIZE bytes at most is read, or with `pipe` (the config deck starts
    with, `--config <(…)`) what a pipe sends within PIPE_TIMEOUT. The path is opened without
    blocking: a FIFO nobody writes to, or a device, is refused at once instead of hanging deck.
    """
    return read_bytes(path, pipe=pipe).decode("utf-8")


def read_bytes(path: Path, *, pipe: bool = False) -> bytes:
    """The bytes of config file `path` (see `read_text`); `Unreadable` when deck refuses it."""
    _check_kind(os.stat(path).st_mode, pipe)  # a device is not even opened: opening some does something
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        info = os.fstat(fd)  # what was opened, should the path have been replaced meanwhile
        _check_kind(info.st_mode, pipe)
        return _read_regular(fd, info.st_size) if stat.S_ISREG(info.st_mode) else _read_pipe(fd)
    finally:
        os.close(fd)


def _check_kind(mode: int, pipe: bool) -> None:
    if not (stat.S_ISREG(mode) or (pipe and stat.S_ISFIFO(mode))):
        raise Unreadable(f"not a regular file ({_mode_kind(mode)})")


def too_big(size: int) -> str:
    return f"{size} bytes: a config file has {MAX_SIZE} (1 MiB) at most"


def _read_regular(fd: int, size: int) -> bytes:
    if size > MAX_SIZE:
        raise Unreadable(too_big(size))
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(fd, MAX_SIZE + 1 - total):  # the file may grow while it is read
        chunks.append(chunk)
        total += len(chunk)
        if total > MAX_SIZE:
            raise Unreadable(too_big(total))
    return b"".join(chunks)


def _read_pipe(fd: int) -> bytes:
    """What a pipe sends until its writer closes it, within PIPE_TIMEOUT and MAX_SIZE."""
    deadline = time.monotonic() + PIPE_TIMEOUT
    chunks: list[bytes] = []
    total = 0
    with selectors.DefaultSelector() as ready:
        ready.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not ready.select(left):
                raise Unreadable(f"the pipe did not send the whole config within {PIPE_TIMEOUT:g}s")
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:  # woken without data
                continue
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_SIZE:
                raise Unreadable(f"the pipe sent more than {MAX_SIZE} bytes: a config file has 1 MiB at most")


def _mode_kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def _current_digest(path: Path) -> str | None:
    """The sha256 of what `path` holds now; None when it cannot be read as a config (gone, a FIFO, too large)."""
    try:
        return hashlib.sha256(read_bytes(path)).hexdigest()
    except OSError:
        return None


def is_pipe(path: Path) -> bool:
    """Whether `path` is a pipe (`--config <(…)`): read once at start, never watched, written or remembered."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def digest(text: str) -> str:
    """The sha256 (hex) of `text` in UTF-8: the hash of a config file's bytes when `text` was read from it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- saving and recent files ------------------------------------------------------------------


class Changed(Exception):
    """The file is no longer the one a write was based on."""


def write_atomic(path: Path, text: str, *, base: str | None = None) -> None:
    """Replace config file `path` with `text` at once (`files.write_atomic`): readers see the old or the new file, never half.

    Only a regular file is replaced. With `base` (the `digest` of the text the new one was made
    from), `Changed` is raised instead when the file holds anything else: it is hashed again just
    before the rename, so only a write landing between that read and the rename can still be lost.
    """
    target = Path(os.path.realpath(path))  # a symlinked config keeps its link
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(mode := os.stat(path).st_mode):  # a pipe, a device: never replaced by a file
            raise Unreadable(f"not a regular file ({_mode_kind(mode)})")
    target.parent.mkdir(parents=True, exist_ok=True)

    def unchanged() -> None:
        if base is not None and _current_digest(target) != base:
            raise Changed(str(path))

    # An existing file keeps its mode, a new one gets what open() would give it.
    replace_file(target, text.encode("utf-8"), check=unchanged)


def recent_files() -> list[str]:
    """Config files opened, most recent first."""
    try:
        data = json.loads((state_dir() / "recent.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [p for p in data if isinstance(p, str)][:RECENT_MAX] if isinstance(data, list) else []


def remember(path: Path) -> list[str]:
    """Put `path` first in the recent files; return the new list."""
    entry = str(Path(path).expanduser().absolute())
    files = [entry, *(p for p in recent_files() if p != entry)][:RECENT_MAX]
    write_atomic(state_dir() / "recent.json", json.dumps(files, indent=2) + "\n")
    return files
