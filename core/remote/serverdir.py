"""Where deck servers live, as their clients and the servers themselves see it.

A server's socket is `socket_path(NAME)`: `$XDG_RUNTIME_DIR/deck/NAME.sock`, else
`/tmp/deck-UID/NAME.sock`, in a folder of the user's own that nobody else may enter (0700; a
folder owned by another user, open to others, or a symlink is refused, never repaired);
`connect` reaches one, after checking that folder, with one clear line when there is none, and
checks that the process at the other end runs as the user (`SO_PEERCRED`, on Linux), as the
server checks each client: a socket planted by another user, root included, is refused.

The standard library alone, and little of it: `deck attach --frontend=jsonl` (`deck.relay`)
starts with this module and no other of deck's.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
import struct
from pathlib import Path

from deck.errors import DeckError
from deck.proc.folders import socket_dir

#: A server's name: a file name of letters, digits, `.`, `_` and `-`, not starting with a dot.
NAME_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
DEFAULT_NAME = "default"
_DIR_FLAGS = os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


class ServerError(DeckError):
    """The server cannot run, or cannot be reached, as asked: one clear line."""


class AlreadyRunning(ServerError):
    pass


class NoServer(ServerError):
    pass


def check_name(name: str) -> str:
    """`name` if it can name a server (it becomes a file name), else a ServerError saying why."""
    if not NAME_RE.fullmatch(name):
        raise ServerError(f"bad server name {name!r}: letters, digits, '.', '_' and '-' (64 at most, no leading dot)")
    return name


def socket_path(name: str) -> Path:
    """The socket of server `name`."""
    return socket_dir() / f"{check_name(name)}.sock"


def open_dir(create: bool) -> int:
    """A descriptor of the servers' folder (made 0700 if `create` and missing), after checking that it
    is the user's own: a real folder, not a symlink, owned by this uid, with no group or other access."""
    path = socket_dir()
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # checked below, whoever made it
        except OSError as exc:
            raise ServerError(f"cannot make the folder {path}: {exc.strerror or exc}") from None
    try:
        fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        raise NoServer(f"no folder {path}") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ServerError(f"refused: {path} is not a folder (a symlink?); remove it") from None
        raise ServerError(f"cannot open {path}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    problem = ""
    if st.st_uid != os.getuid():
        problem = f"it belongs to uid {st.st_uid}, not to you ({os.getuid()})"
    elif stat.S_IMODE(st.st_mode) & 0o077:
        problem = f"others may use it (mode {stat.S_IMODE(st.st_mode):04o}; it must be 0700)"
    if problem:
        os.close(fd)
        raise ServerError(f"refused the folder {path}: {problem}")
    return fd


def listening(path: Path) -> bool:
    """Whether a server accepts at `path` now: after a connection ended, one that still listens
    dropped its client (it fell behind), one that does not went away."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        probe.setblocking(False)
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def no_server(name: str, path: Path, why: str = "") -> NoServer:
    """The error of a client that finds no server `name` at `path` (`why`: what it found instead)."""
    option = "" if name == DEFAULT_NAME else f" --name {name}"
    where = f"{why}: {path}" if why else f"no socket at {path}"
    return NoServer(f"no deck server named {name} is running ({where}): start one with `deck serve{option}`")


def went_away(name: str, path: Path | None = None) -> str:
    """Why a server's connection ended, as its clients say it: a server that stops (`deck stop`,
    a signal) removes its socket before it closes its clients, so with `path` gone it was stopped;
    one killed leaves it behind: it went away."""
    if path is not None and not os.path.lexists(path):
        return f"the deck server {name} was stopped"
    return f"the deck server {name} went away"


def fell_behind(name: str) -> str:
    """Why a server dropped its client: what the client says when it finds out."""
    return (
        f"the deck server {name} disconnected this client: it fell behind reading its events "
        f"(a stopped terminal, a stuck pipe); `deck attach {name}` joins again where it is"
    )


def refused(name: str, message: str) -> str:
    """What a client says of the server's `refused: …` line about no request of its own."""
    return f"the deck server {name} {message.replace(':', ' this client:', 1)}"


def connect(name: str, path: Path | None = None) -> tuple[Path, socket.socket]:
    """The socket of server `name` (or the one at `path`), connected; a ServerError saying why not."""
    if path is None:
        path = socket_path(name)
        try:
            os.close(open_dir(create=False))  # the folder must be the user's own: no server planted by another
        except NoServer:
            raise no_server(name, path) from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.connect(str(path))
    except FileNotFoundError:
        sock.close()
        raise no_server(name, path) from None
    except ConnectionRefusedError:
        sock.close()
        raise no_server(name, path, "its socket is stale") from None
    except OSError as exc:
        sock.close()
        raise ServerError(f"cannot reach the deck server {name} at {path}: {exc.strerror or exc}") from None
    try:
        check_peer(sock, name, path)
    except ServerError:
        sock.close()
        raise
    return path, sock


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of the Unix socket `sock` (SO_PEERCRED); None on a
    system without that option; an OSError when it cannot be read."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    _pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, option, _PEERCRED.size))
    return int(uid)


def check_peer(sock: socket.socket, name: str, path: Path, uid: int | None = None) -> None:
    """A ServerError unless the server at the other end of `sock` runs as `uid` (by default, the
    user's): its socket could have been put there by another user."""
    expected = os.getuid() if uid is None else uid
    try:
        found = peer_uid(sock)
    except OSError as exc:
        raise ServerError(f"refused the deck server {name} at {path}: cannot tell whose it is ({exc.strerror or exc})") from None
    if found is not None and found != expected:
        raise ServerError(f"refused the deck server {name} at {path}: it runs as uid {found}, not as you ({expected})")


def read_token(directory: int, name: str) -> str | None:
    """The token of server `name`'s web page, from NAME.token in the folder open as `directory`
    (None if it serves none): a regular file of the user's own, a symlink not followed."""
    try:
        fd = os.open(f"{name}.token", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=directory)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            return None
        token = f.read(256).decode(errors="replace").strip()
    return token or None
