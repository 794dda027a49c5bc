"""The client side of ACP's fs/* methods: confined to the agent's working directory, away from deck's own files.

The agent may change its tree while deck works on it (swap a directory for a symlink between
a check and an open, in a loop), so nothing is checked by name and then opened by name again.
A path is resolved beneath a descriptor of the working directory — by the kernel, with
openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) where Linux has it, else by `_walk`, one
component at a time with O_NOFOLLOW — and what was opened is what is read or written:

- symlinks are followed while they stay inside, relative or absolute ones; one that leads out,
  or a ".." that climbs above the working directory (even to come back), is refused;
- a read opens the file with O_NOFOLLOW | O_NONBLOCK and reads it only when fstat says it is a
  regular file: a FIFO or a device is refused, and never blocks a worker thread;
- a write creates its temp file in the target's directory through that directory's descriptor,
  and renames it over the target there: readers see the old file or the new one, never half;
  the folders it lacks are made first, as `mkdir -p` would, one at a time beneath the descriptor
  of the one before (`_walk`), never in deck's folders nor in place of deck's own names;
- deck's own files (`Private`) are compared by device and inode, whatever the path's spelling.

A read streams the file and returns at most MAX_READ_BYTES; lines end at "\\n".
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from deck.config import files as config_files
from deck.errors import INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND, AcpError
from deck.proc.storage import NEW_FILE_MODE, replace_in, state_dir

#: The most one fs/read_text_file returns, in bytes of the file. No model reads more at once,
#: and even a text of control characters (6 bytes each once escaped in JSON) keeps the answer
#: under the 64 MiB line deck itself accepts from a peer (acp.MAX_LINE_BYTES).
MAX_READ_BYTES = 10 * 1024 * 1024
#: Symlinks followed for one path, as Linux does (MAXSYMLINKS).
MAX_SYMLINKS = 40
#: Folders one fs/write_text_file may make on the way to its file: far more than a source tree
#: nests, and a path of a million new levels cannot keep a worker thread (and its descriptors) busy.
MAX_NEW_FOLDERS = 100
#: A new folder's mode before the umask, as mkdir(1) gives it.
NEW_FOLDER_MODE = 0o777
_CHUNK = 64 * 1024

_DIR_FLAGS = os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC


# -- openat2(2) --------------------------------------------------------------------------------

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
#: Its number where deck knows it; elsewhere `_walk` does the same work.
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_openat2() -> Callable[[int, str, int], int] | None:
    """openat2 with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS, if this kernel has it (Linux 5.6+)."""
    number = _SYS_OPENAT2.get(platform.machine()) if sys.platform == "linux" else None
    if number is None:
        return None
    syscall = ctypes.CDLL(None, use_errno=True).syscall
    syscall.restype = ctypes.c_long

    def openat2(dir_fd: int, path: str, flags: int) -> int:
        how = _OpenHow(flags, 0, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
        fd = syscall(
            ctypes.c_long(number), ctypes.c_long(dir_fd), ctypes.c_char_p(os.fsencode(path)),
            ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)),
        )  # fmt: skip
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return int(fd)

    try:  # ENOSYS on older kernels, EPERM under some seccomp filters: the walk does it then
        top = os.open("/", _DIR_FLAGS)
        try:
            os.close(openat2(top, ".", _DIR_FLAGS))
        finally:
            os.close(top)
    except OSError:
        return None
    return openat2


_openat2 = _load_openat2()


# -- deck's own files --------------------------------------------------------------------------


@dataclass(frozen=True)
class Private:
    """deck's own files: agents' fs/* never change them, nor read into deck's folders.

    Files: the config in use, the configs deck opened before (`recent_files`) and the user's
    default config; none is replaced by fs/write_text_file (they stay readable). Folders: deck's
    state folder and `folders` (the socket folder of a plugin); nothing in them is read or
    written. Looked up at each request, compared by device and inode.
    """

    config: str | Path | None = None
    folders: tuple[str | Path, ...] = ()

    def identities(self) -> _Identities:
        """What to compare with, as device and inode numbers, looked up now."""
        ids = _Identities(set(), set(), set())
        for path in (self.config, *config_files.recent_files(), config_files.xdg_config_file()):
            if not path:
                continue
            real = os.path.realpath(path)
            with suppress(OSError):
                ids.files.add(_identity(os.stat(real)))
            with suppress(OSError):
                ids.names.add((*_identity(os.stat(os.path.dirname(real))), os.path.basename(real)))
        for folder in (state_dir(), *self.folders):
            real = os.path.realpath(folder)
            with suppress(OSError):
                ids.folders.add(_identity(os.stat(real)))
            with suppress(OSError):  # not made yet: a file in its place would keep deck from making it
                ids.names.add((*_identity(os.stat(os.path.dirname(real))), os.path.basename(real)))
        return ids


class _Identities(NamedTuple):
    files: set[tuple[int, int]]  # deck's config files
    names: set[tuple[int, int, str]]  # (folder, name) of those files and folders: never created or replaced
    folders: set[tuple[int, int]]  # nothing in them is read or written


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


# -- refusals ----------------------------------------------------------------------------------


class _Outside(Exception):
    """The path leads out of the working directory."""


class _Own(Exception):
    """The path is one of deck's own files, or in one of its folders."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class _TooBig(Exception):
    """More to read than MAX_READ_BYTES."""


@contextmanager
def _answers(path: str, verb: str) -> Iterator[None]:
    """Turn what went wrong into the JSON-RPC error the agent gets."""
    try:
        yield
    except _Outside as exc:
        raise AcpError(INVALID_PARAMS, f"path outside the agent's working directory refused: {path}") from exc
    except _Own as exc:
        if exc.what == "name":
            raise AcpError(INVALID_PARAMS, f"refused: {path} would take the place of deck's own files or folders") from exc
        if exc.what == "file":
            raise AcpError(INVALID_PARAMS, f"refused: {path} is one of deck's own files: agents may not {verb} it") from exc
        raise AcpError(INVALID_PARAMS, f"refused: {path} is in deck's own state or runtime folder: agents may not {verb} there") from exc
    except FileNotFoundError as exc:
        if verb == "write":
            raise AcpError(RESOURCE_NOT_FOUND, f"no such directory: {os.path.dirname(path)}") from exc
        raise AcpError(RESOURCE_NOT_FOUND, f"no such file: {path}") from exc
    except IsADirectoryError as exc:
        raise AcpError(INVALID_PARAMS, f"is a directory: {path}") from exc
    except NotADirectoryError as exc:  # a file where the path needs a folder
        raise AcpError(INVALID_PARAMS, f"not a directory: {path} goes through something that is not a folder") from exc
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, a device without its driver
            raise AcpError(INVALID_PARAMS, f"not a regular file: {path}") from exc
        if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP):  # the path the agent gave: its problem, not deck's
            raise AcpError(INVALID_PARAMS, f"cannot {verb} {path}: {exc.strerror}") from exc
        raise AcpError(INTERNAL_ERROR, f"cannot {verb} {path}: {exc.strerror}") from exc


def _path(params: dict[str, Any]) -> str:
    path = params.get("path")
    if not isinstance(path, str) or not path:
        raise AcpError(INVALID_PARAMS, "path must be a non-empty string")
    if "\0" in path:
        raise AcpError(INVALID_PARAMS, "path must not hold a NUL character")
    if not os.path.isabs(path):
        raise AcpError(INVALID_PARAMS, f"path must be absolute: {path}")
    return path


def root_for(params: dict[str, Any], cwd: str, directories: list[str]) -> str:
    """The folder a request's path is resolved beneath: the first of the agent's additional
    directories (`additionalDirectories`) whose path it starts with, else its cwd (where a path
    outside everything is refused). Only the choice is made here, by the path's components: the
    path is then resolved beneath that folder's descriptor, as any other, symlinks included."""
    path = params.get("path")
    if not directories or not isinstance(path, str) or not os.path.isabs(path) or "\0" in path:
        return cwd
    parts = _components(path)
    for root in (cwd, *directories):
        folder = _components(os.path.realpath(root))
        if parts[: len(folder)] == folder:
            return root
    return cwd


# -- resolving beneath the working directory ---------------------------------------------------------


class _Root:
    """The working directory, held open: every path is resolved beneath this descriptor."""

    def __init__(self, path: str, folders: set[tuple[int, int]], names: set[tuple[int, int, str]] | None = None) -> None:
        self.folders = folders  # deck's own, never entered
        self.names = names or set()  # (folder, name) of deck's own files and folders: never made here
        self.path = os.path.realpath(path)
        self.parts = _components(self.path)
        try:
            self.fd = os.open(self.path, _DIR_FLAGS)
        except OSError as exc:
            raise AcpError(INTERNAL_ERROR, f"the agent's working directory cannot be opened: {self.path}: {exc.strerror}") from exc
        self.id = _identity(os.fstat(self.fd))

    def __enter__(self) -> _Root:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)

    def beneath(self, path: str) -> list[str]:
        """The components of absolute `path` below the root; _Outside if it does not start there."""
        parts = _components(path)
        if parts[: len(self.parts)] == self.parts:
            return parts[len(self.parts) :]
        # The root reached through a symlink outside it (/tmp on macOS): whatever matches, what
        # follows is still resolved beneath the descriptor.
        for end in range(len(parts), 0, -1):
            with suppress(OSError):
                if _identity(os.stat("/" + "/".join(parts[:end]))) == self.id:
                    return parts[end:]
        raise _Outside(path)

    def check(self, directory: int) -> None:
        """_Own if `directory` is one of deck's folders or inside one, below the root.

        It and each directory above it, up to the root, are compared with deck's folders by
        device and inode (".." of a held descriptor, not a path). Not finding the root on the
        way means the directory was moved out meanwhile: _Outside.
        """
        current = os.dup(directory)
        try:
            here = _identity(os.fstat(current))
            while here not in self.folders:
                if here == self.id:
                    return
                parent = os.open("..", _DIR_FLAGS, dir_fd=current)
                os.close(current)
                current = parent
                here, below = _identity(os.fstat(current)), here
                if here == below:  # the top of the filesystem
                    raise _Outside()
            raise _Own("folder")
        finally:
            os.close(current)


def _components(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _open_dir(root: _Root, parts: list[str], make: bool = False) -> int:
    """A descriptor of the directory `parts` names beneath the root, symlinks followed inside only;
    with `make`, the directories missing on the way are made (by the walk)."""
    if not parts:
        return os.dup(root.fd)
    if _openat2 is not None:
        for _ in range(3):
            try:
                return _openat2(root.fd, "/".join(parts), _DIR_FLAGS)
            except OSError as exc:
                if exc.errno == errno.EXDEV or (make and exc.errno == errno.ENOENT):
                    break  # an absolute symlink, or a way out, or folders to make: the walk does it
                if exc.errno != errno.EAGAIN:  # EAGAIN: a rename raced a "..", try again
                    raise
    return _walk(root, parts, make)


def _walk(root: _Root, parts: list[str], make: bool = False) -> int:
    """`_open_dir` without openat2: one component at a time, each opened with O_NOFOLLOW
    beneath the descriptor of the one before.

    A symlink met on the way is read (readlinkat) and its target resolved the same way: from
    the link's directory if relative, from the root if absolute and lexically inside it; a
    ".." goes back to the directory held before, never above the root. The directories are
    held open all along, so a rename meanwhile cannot move the walk elsewhere. With `make`, a
    component that does not exist is made (mkdirat in the directory held) and then opened like
    any other: what was swapped in for it meanwhile is resolved, or refused, as ever.
    """
    todo = list(reversed(parts))  # the next component last
    held: list[int] = []  # the directories below the root, deepest last
    links = made = 0
    new: list[tuple[int, str]] = []  # the folders made: (a descriptor of the folder above, the name)
    try:
        while todo:
            name = todo.pop()
            if name == "..":
                if not held:
                    raise _Outside(name)
                os.close(held.pop())
                continue
            here = held[-1] if held else root.fd
            try:
                held.append(os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=here))
                continue
            except FileNotFoundError:
                if not make:
                    raise
                made += 1
                if made > MAX_NEW_FOLDERS:
                    raise AcpError(INVALID_PARAMS, f"more than {MAX_NEW_FOLDERS} folders to make for one file") from None
                if _make_folder(root, here, name):
                    new.append((os.dup(here), name))
                todo.append(name)  # opened on the next turn, whatever is there by then
                continue
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                refusal = exc  # a symlink, or not a directory
            links += 1
            if links > MAX_SYMLINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
            try:
                target = os.readlink(name, dir_fd=here)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                mode = os.stat(name, dir_fd=here, follow_symlinks=False).st_mode
                if not (stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                    raise refusal from None
                todo.append(name)  # swapped meanwhile (a symlink, then a directory): look again
                continue
            if os.path.isabs(target):
                while held:
                    os.close(held.pop())
                todo.extend(reversed(root.beneath(target)))
            else:
                todo.extend(reversed(_components(target)))
        return held.pop() if held else os.dup(root.fd)
    except BaseException:
        for above, name in reversed(new):  # a refused write leaves no folder of its own behind
            with suppress(OSError):
                os.rmdir(name, dir_fd=above)
        raise
    finally:
        for fd in held:
            os.close(fd)
        for above, _name in new:
            os.close(above)


def _make_folder(root: _Root, here: int, name: str) -> bool:
    """Make folder `name` in directory `here` (mode 0777 less the umask), unless `here` is one of
    deck's folders or `name` one of deck's own names there; one made meanwhile will do. Whether
    this made it."""
    root.check(here)
    if (*_identity(os.fstat(here)), name) in root.names:
        raise _Own("name")
    try:
        os.mkdir(name, NEW_FOLDER_MODE, dir_fd=here)
    except FileExistsError:  # made meanwhile, or a symlink: the walk looks at it again
        return False
    return True


class _Target(NamedTuple):
    """Where a path leads: its directory (held open) and its name there (None: the path is that
    directory); what is there, never a symlink (None: nothing yet); for a read, the file opened."""

    dir: int
    name: str | None
    st: os.stat_result | None
    fd: int | None = None


def _locate(root: _Root, path: str, open_flags: int | None = None, make: bool = False) -> _Target:
    """Resolve `path` beneath the root, and open it with `open_flags` if given; with `make`, the
    folders missing above its last component are made.

    The last component is looked at (or opened) with O_NOFOLLOW: a symlink there is read and
    its target resolved like the rest, so what is opened is never reached through a symlink
    that leads out, even one swapped in a moment before.
    """
    parts = root.beneath(path)
    for _ in range(MAX_SYMLINKS + 1):
        if not parts or parts[-1] == "..":
            directory = _open_dir(root, parts)
            try:
                root.check(directory)
            except BaseException:
                os.close(directory)
                raise
            return _Target(directory, None, None)
        directory, name = _open_dir(root, parts[:-1], make), parts[-1]
        try:
            root.check(directory)  # before anything in it is opened
            if open_flags is None:
                st = os.stat(name, dir_fd=directory, follow_symlinks=False)
                if not stat.S_ISLNK(st.st_mode):
                    return _Target(directory, name, st)
            else:
                try:
                    fd = os.open(name, open_flags | os.O_NOFOLLOW, dir_fd=directory)
                    return _Target(directory, name, os.fstat(fd), fd)
                except OSError as exc:
                    if exc.errno != errno.ELOOP:  # ELOOP with O_NOFOLLOW: a symlink
                        raise
            target = os.readlink(name, dir_fd=directory)
        except FileNotFoundError:
            if open_flags is None:
                return _Target(directory, name, None)  # to be created
            os.close(directory)
            raise
        except OSError as exc:
            os.close(directory)
            if exc.errno == errno.EINVAL:
                continue  # no longer a symlink: look again
            raise
        except BaseException:
            os.close(directory)
            raise
        os.close(directory)
        parts = root.beneath(target) if os.path.isabs(target) else [*parts[:-1], *_components(target)]
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)


# -- the methods -------------------------------------------------------------------------------------


def read_text_file(root: str, params: dict[str, Any], private: Private = Private()) -> dict[str, Any]:
    """ACP fs/read_text_file: the file's text, or `limit` lines from line `line` (1-based)."""
    path = _path(params)
    line, limit = params.get("line"), params.get("limit")
    for name, value in (("line", line), ("limit", limit)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < (1 if name == "line" else 0)):
            raise AcpError(INVALID_PARAMS, f"{name} must be a positive integer")
    with _answers(path, "read"), _Root(root, private.identities().folders) as base:
        fd = _open_for_reading(base, path)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            if not stat.S_ISREG(st.st_mode):
                raise AcpError(INVALID_PARAMS, f"not a regular file: {path}")
            try:
                if line is None and limit is None and st.st_size > MAX_READ_BYTES:
                    raise _TooBig()
                data = _read(f, line, limit)
            except _TooBig:
                raise AcpError(
                    INVALID_PARAMS,
                    f"{path} has more than the {MAX_READ_BYTES // 2**20} MiB one read returns "
                    f"({st.st_size} bytes): read it in parts with line and limit",
                    {"size": st.st_size, "maxBytes": MAX_READ_BYTES},
                ) from None
    return {"content": data.decode("utf-8", errors="replace")}


def _open_for_reading(root: _Root, path: str) -> int:
    """The file `path` leads to, opened: never through a symlink, never blocking (a FIFO)."""
    target = _locate(root, path, _READ_FLAGS)
    os.close(target.dir)
    if target.fd is None:
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    return target.fd


def _read(f: BinaryIO, line: int | None, limit: int | None) -> bytes:
    """The bytes asked for, read as they come: skipped lines are not kept; _TooBig past the cap."""
    for _ in range((line or 1) - 1):
        while piece := f.readline(_CHUNK):
            if piece.endswith(b"\n"):
                break
        if not piece:
            return b""
    if limit is None:
        data = f.read(MAX_READ_BYTES + 1)
        if len(data) > MAX_READ_BYTES:
            raise _TooBig()
        return data
    pieces: list[bytes] = []
    size = taken = 0
    while taken < limit and (piece := f.readline(_CHUNK)):
        size += len(piece)
        if size > MAX_READ_BYTES:
            raise _TooBig()
        pieces.append(piece)
        taken += piece.endswith(b"\n")
    return b"".join(pieces)


def open_directory(root: str, path: str, private: Private = Private()) -> int:
    """A descriptor (O_PATH) of directory `path`, resolved beneath `root` like any fs/* path: what a
    command of the agent's runs in (terminal/create `cwd`). The caller closes it."""
    if not os.path.isabs(path):
        raise AcpError(INVALID_PARAMS, f"cwd must be an absolute path: {path}")
    with _answers(path, "run a command in"), _Root(root, private.identities().folders) as base:
        try:
            directory = _open_dir(base, base.beneath(path))
        except FileNotFoundError:
            raise AcpError(RESOURCE_NOT_FOUND, f"no such directory: {path}") from None
        except NotADirectoryError:
            raise AcpError(INVALID_PARAMS, f"not a directory: {path}") from None
        try:
            base.check(directory)  # deck's own folders are no place for a command either
        except BaseException:
            os.close(directory)
            raise
        return directory


def write_text_file(root: str, params: dict[str, Any], private: Private = Private()) -> dict[str, Any]:
    """ACP fs/write_text_file: replace (or create) the file at once, keeping an existing file's mode;
    the folders it lacks are made, as `mkdir -p` would."""
    path = _path(params)
    content = params.get("content")
    if not isinstance(content, str):
        raise AcpError(INVALID_PARAMS, "content must be a string")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise AcpError(INVALID_PARAMS, f"content is not valid text for UTF-8: {exc.reason}") from exc
    ids = private.identities()
    with _answers(path, "write"), _Root(root, ids.folders, ids.names) as base:
        if path.endswith(("/", "/.", "/..")):  # names a folder, never a file to write
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        target = _locate(base, path, make=True)
        try:
            if target.name is not None:
                where = (*_identity(os.fstat(target.dir)), target.name)
                if where in ids.names or (target.st is not None and _identity(target.st) in ids.files):
                    raise _Own("file")
            if target.name is None or (target.st is not None and stat.S_ISDIR(target.st.st_mode)):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            # An existing file keeps its mode; a new one gets what open() would give it.
            keep = target.st is not None and stat.S_ISREG(target.st.st_mode)
            mode = stat.S_IMODE(target.st.st_mode) if keep and target.st else NEW_FILE_MODE
            replace_in(target.dir, target.name, data, mode)
        finally:
            os.close(target.dir)
    return {}  # WriteTextFileResponse is an object, never null

