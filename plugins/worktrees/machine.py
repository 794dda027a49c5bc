"""The machine a worktree's repository is on: this one, or an agent's host reached through ssh.

`tree.py` works the same on both through a `Machine`: git run safely (`git.py`'s rules on either
side) and the few file operations the worktrees need — look at a path, read and write a record,
list records, find the worktrees a repository keeps, a temporary folder, a copy, a deletion.

On a host (`Remote`) each is one small POSIX sh script run through the OpenSSH client, over the
connection the host's agents share (`deck.host_command`: deck's ssh options and socket). A script
is a constant of this module; what varies (a path, a branch, git's arguments) is given as its
`$1`, `$2`… and quoted, so the host's shell never reads an agent's name or a path as anything but
one word. git runs there as here: deck's `-c` options, none of the session's `GIT_*` variables, no
pager, prompt or editor, its output bounded; nothing an agent wrote runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import shlex
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from deck import host_command, state_dir
from deck.errors import ServiceError

from .git import MAX_OUTPUT, QUIET, SAFE, GitError, GitMissing, Result, git, run

#: The most of a record (`AGENT.json`) that is read: far above what deck writes there.
MAX_RECORD = 64 * 1024
#: ssh's exit status when the connection failed (the remote command's own otherwise).
SSH_FAILED = 255
#: The exit status of the git script on a host when its folder is not there, and when git is not.
NO_FOLDER, NO_GIT = 125, 127

#: The host's folder of worktrees, as the local rule has it: `$XDG_STATE_HOME` (if absolute) else
#: `~/.local/state`, then `deck/worktrees`.
ROOT_SCRIPT = """\
case $XDG_STATE_HOME in /*) s=$XDG_STATE_HOME ;; *) s=$HOME/.local/state ;; esac
case $s in /*) printf '%s/deck/worktrees' "$s" ;; *) exit 3 ;; esac
"""
#: In folder $1, git's environment made (`GIT_*` unset, {exports} filled in, each value quoted); $1 shifted.
GIT_PREAMBLE = """\
cd -- "$1" 2>/dev/null || exit 125
shift
for v in $(env | sed -n 's/^\\(GIT_[A-Za-z0-9_]*\\)=.*/\\1/p'); do unset "$v"; done
export {exports}
command -v git >/dev/null 2>&1 || exit 127
"""
#: git in folder $1 with the rest of the arguments; its own exit 255 made 254, as 255 is ssh's alone.
GIT_SCRIPT = GIT_PREAMBLE + 'git "$@"; r=$?; [ "$r" -ne 255 ] || r=254; exit "$r"\n'
#: git (`rev-parse --show-toplevel`) in folder $1: the top of its repository and $1, both resolved,
#: each followed by NUL (exit 4 in no repository).
TOP_SCRIPT = GIT_PREAMBLE + """\
t=$(git "$@") || exit 4
w=$(pwd -P) && cd -P -- "$t" && printf '%s\\0%s\\0' "$(pwd -P)" "$w"
"""
#: git (`rev-parse --git-common-dir`) in repository $1, then, each followed by NUL: $2 resolved (as
#: it is when it is no folder), the repository's `worktrees` folder, and if it is there: that folder
#: resolved, then for each entry the entry, the entry resolved, the folder its `gitdir` names resolved.
WORKTREES_SCRIPT = GIT_PREAMBLE + """\
t=$1; shift
c=$(git "$@") || exit 4
printf '%s\\0%s\\0' "$(cd -P -- "$t" 2>/dev/null && pwd -P || printf '%s' "$t")" "$c/worktrees"
cd -P -- "$c/worktrees" 2>/dev/null || exit 0
printf '%s\\0' "$(pwd -P)"
for e in *; do
  [ -d "$e" ] || continue
  g=$(head -c 4096 -- "$e/gitdir" 2>/dev/null) || continue
  r=$(cd -P -- "$(dirname -- "$g")" 2>/dev/null && pwd -P) || continue
  printf '%s\\0%s\\0%s\\0' "$c/worktrees/$e" "$(cd -P -- "$e" && pwd -P)" "$r"
done
"""
#: What $1 is: `e` there, `l` a symlink, `d` a folder (followed), `g` holding a `.git`.
LOOK_SCRIPT = """\
r=; [ -e "$1" ] && r=e; [ -L "$1" ] && r=${r}l; [ -d "$1" ] && r=${r}d; [ -e "$1/.git" ] && r=${r}g; printf '%s' "$r"
"""
#: File $1, if it is one (exit 3 otherwise).
READ_SCRIPT = '[ -f "$1" ] || exit 3; exec cat -- "$1"'
#: Standard input written to $2 in folder $1 (made), through a temporary file renamed over it.
WRITE_SCRIPT = 'mkdir -p -- "$1" && t=$(mktemp "$1/.deck.XXXXXX") && cat >"$t" && mv -f -- "$t" "$2"'
MKDIR_SCRIPT = 'mkdir -p -- "$1"'
#: Each `*.json` file of the folders given, as NAME NUL CONTENT NUL.
RECORDS_SCRIPT = """\
for d in "$@"; do for f in "$d"/*.json; do
  [ -f "$f" ] || continue; printf '%s\\0' "$f"; head -c 65536 -- "$f"; printf '\\0'
done; done
"""
#: The folders `$1/*-*`, each followed by NUL.
FOLDERS_SCRIPT = 'for d in "$1"/*-*; do [ -d "$d" ] && printf "%s\\0" "$d"; done; :'
#: A temporary folder, then `c` if file $1 was copied there as `index` with its times.
STAGING_SCRIPT = """\
d=$(mktemp -d "${TMPDIR:-/tmp}/deck-worktree-XXXXXX") || exit 3
printf '%s\\0' "$d"
[ -f "$1" ] && cp -p -- "$1" "$d/index" && printf c
:
"""
#: In folder $1, the command $3… run for $2 seconds at most (where `timeout` is there: what ends it
#: if deck is gone), its stderr with its stdout; exit 125 when the folder is not there.
RUN_SCRIPT = """\
cd -- "$1" 2>/dev/null || exit 125
t=$2; shift 2
for v in $(env | sed -n 's/^\\(GIT_[A-Za-z0-9_]*\\)=.*/\\1/p'); do unset "$v"; done
if command -v timeout >/dev/null 2>&1; then exec timeout -k 5 "$t" "$@" 2>&1; fi
exec "$@" 2>&1
"""
#: $1 and all in it deleted, a symlink in it deleted and never followed; $1 itself no symlink.
DELETE_SCRIPT = '[ -L "$1" ] && exit 3; exec rm -rf -- "$1"'


class Unreachable(GitError):
    """ssh could not reach the host (or lost it): nothing there was looked at, which is not the same
    as there being nothing there. `reason` is ssh's own last line."""

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(f"the connection to {host} failed or was lost: {reason}")
        self.host = host
        self.reason = reason


@dataclass(frozen=True)
class Look:
    """What is at a path: anything (a symlink followed), a symlink, a folder (the symlink followed),
    one holding a `.git`."""

    exists: bool
    link: bool
    folder: bool
    git: bool


@dataclass(frozen=True)
class Entry:
    """A worktree a repository keeps: its folder there (`.git/worktrees/ID`), that folder resolved,
    and the worktree its `gitdir` file names, resolved."""

    path: str
    real: str
    worktree: str


class Machine:
    """This machine: the operations as deck runs them here."""

    host = ""

    @property
    def root(self) -> PurePosixPath:
        """The folder of the worktrees on this machine."""
        return PurePosixPath(state_dir() / "worktrees")

    def at(self, path: str | PurePosixPath) -> str:
        """`path` as a message names it: `HOST:PATH` on a host."""
        return f"{self.host}:{path}" if self.host else str(path)

    async def git(
        self, *args: str, cwd: str, check: bool = True, env: dict[str, str] | None = None, limit: int = MAX_OUTPUT,
        options: Sequence[str] = (), into: BinaryIO | None = None, data: bytes | None = None,
    ) -> Result:  # fmt: skip
        return await git(*args, cwd=cwd, check=check, env=env, limit=limit, options=options, into=into, data=data)

    async def look(self, path: str) -> Look:
        return Look(
            os.path.exists(path), os.path.islink(path), os.path.isdir(path), os.path.exists(os.path.join(path, ".git"))
        )

    async def read(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read(MAX_RECORD)
        except OSError:
            return None

    async def write(self, path: str, data: bytes) -> None:
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=folder, prefix=".deck.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    async def mkdirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    async def records(self, folders: Sequence[str]) -> list[tuple[str, bytes]]:
        found = []
        for folder in folders:
            for path in sorted(Path(folder).glob("*.json")):
                if (data := await self.read(str(path))) is not None:
                    found.append((str(path), data))
        return found

    async def folders(self) -> list[str]:
        return [str(p) for p in sorted(Path(self.root).glob("*-*")) if p.is_dir()]

    async def top(self, cwd: str) -> tuple[str, str] | None:
        """The top of the repository folder `cwd` is in, and `cwd`, both resolved; None when it is
        in no repository, a ServiceError when it is no folder."""
        if not os.path.isdir(cwd):
            raise ServiceError(f"working directory does not exist: {self.at(cwd)}")
        found = await self.git("rev-parse", "--show-toplevel", cwd=cwd, check=False)
        return (os.path.realpath(found.out.strip()), os.path.realpath(cwd)) if found.code == 0 else None

    async def worktrees(self, repo: str, target: str) -> tuple[str, list[Entry], str]:
        """The worktrees repository `repo` keeps (its `.git/worktrees` folder resolved, and its
        entries), and `target` resolved."""
        common = await self.git("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=repo)
        admin = posixpath.join(common.out.strip(), "worktrees")
        found = []
        with contextlib.suppress(OSError):
            for entry in sorted(Path(admin).iterdir()):
                with contextlib.suppress(OSError):
                    gitdir = (entry / "gitdir").read_text(encoding="utf-8", errors="replace").strip()
                    found.append(Entry(str(entry), os.path.realpath(entry), os.path.realpath(os.path.dirname(gitdir))))
        return os.path.realpath(admin), found, os.path.realpath(target)

    @contextlib.asynccontextmanager
    async def staging(self, index: str) -> AsyncIterator[tuple[str, bool]]:
        """A temporary folder holding a copy of file `index` with its times, as `index`: that copy's
        path, and whether `index` was there to copy (deleted after)."""
        with tempfile.TemporaryDirectory(prefix="deck-worktree-", ignore_cleanup_errors=True) as folder:
            copy = os.path.join(folder, "index")
            try:
                with open(index, "rb") as source, open(copy, "wb") as target:
                    target.write(source.read())
                    target.flush()
                    written = os.fstat(source.fileno())
                    os.utime(target.fileno(), ns=(written.st_atime_ns, written.st_mtime_ns))
            except FileNotFoundError:
                yield copy, False
            else:
                yield copy, True

    def command(self, argv: Sequence[str], cwd: str, timeout: float) -> tuple[list[str], str]:
        """The local command line that runs `argv` in folder `cwd` of this machine, and the folder it
        is run from here. Under `timeout` (coreutils), where there is one, past `timeout` and
        BACKSTOP more seconds: what ends it if deck, which ends it at `timeout`, was killed first."""
        found = shutil.which("timeout")
        return ([found, "-k", "5", backstop(timeout)] if found else []) + list(argv), cwd

    async def delete(self, path: str) -> None:
        """Delete `path` (a file, or a folder and all in it, off the event loop; nothing when it is not
        there); a symlink in it is deleted, never followed (`shutil.rmtree` works through
        descriptors, so one swapped in meanwhile leads nowhere either)."""
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                os.unlink(path)
                return
        except FileNotFoundError:
            return
        if not shutil.rmtree.avoids_symlink_attacks:  # type: ignore[attr-defined]
            raise ServiceError("this system cannot delete a folder safely (no openat): remove it by hand")
        try:
            await asyncio.to_thread(shutil.rmtree, path)
        except OSError as exc:
            raise ServiceError(f"cannot delete {path}: {exc.strerror or exc}") from exc


LOCAL = Machine()

#: Seconds a command run with a time limit (`Machine.command`) may outlive it before `timeout` ends it.
BACKSTOP = 5


def backstop(timeout: float) -> str:
    """`timeout`'s argument: the limit and BACKSTOP more seconds, whole."""
    return str(int(timeout + 0.999) + BACKSTOP)


class Remote(Machine):
    """An agent's host: each operation a script run there through ssh (`prepare` first)."""

    def __init__(self, host: str, ssh: Sequence[str]) -> None:
        self.host = host
        self.ssh = list(ssh)
        self._root: PurePosixPath | None = None

    @property
    def root(self) -> PurePosixPath:
        assert self._root is not None, "Remote.prepare() first"
        return self._root

    async def prepare(self) -> None:
        """Ask the host where its worktrees are (once)."""
        if self._root is None:
            found = await self.sh(ROOT_SCRIPT, check=False)
            if found.code != 0 or not found.out.startswith("/"):
                raise ServiceError(f"{self.host} has no absolute $XDG_STATE_HOME or $HOME: no folder for worktrees there")
            self._root = PurePosixPath(found.out)

    async def sh(
        self, script: str, *args: str, check: bool = True, limit: int = MAX_OUTPUT, into: BinaryIO | None = None,
        data: bytes | None = None,
    ) -> Result:  # fmt: skip
        """Run `script` on the host with `args` as its `$1`…; ssh's own failure is a GitError naming
        the host, and so is any other exit but 0 when `check`."""
        try:
            argv = host_command(self.host, self.ssh, script, *args)
            result = await run(argv, cwd=os.getcwd(), env=dict(os.environ), limit=limit, into=into, data=data)
        except OSError as exc:
            raise GitError(f"cannot run ssh for {self.host}: {exc.strerror or exc}") from exc
        if result.code == SSH_FAILED:
            said = result.err.strip().splitlines()
            raise Unreachable(self.host, said[-1] if said else "ssh exited 255")
        if check and result.code != 0:
            raise GitError(f"on {self.host}: {result.err.strip() or f'exit code {result.code}'}")
        return result

    async def git(
        self, *args: str, cwd: str, check: bool = True, env: dict[str, str] | None = None, limit: int = MAX_OUTPUT,
        options: Sequence[str] = (), into: BinaryIO | None = None, data: bytes | None = None,
    ) -> Result:  # fmt: skip
        result = await self.git_script(GIT_SCRIPT, cwd, *options, *args, env=env, limit=limit, into=into, data=data)
        self._ran(result, cwd)
        if check and result.code != 0:
            raise GitError(f"git {' '.join(args[:2])} failed in {self.at(cwd)}: {result.err.strip() or f'exit code {result.code}'}")
        return result

    async def git_script(
        self, script: str, cwd: str, *args: str, before: Sequence[str] = (), env: dict[str, str] | None = None,
        limit: int = MAX_OUTPUT, into: BinaryIO | None = None, data: bytes | None = None,
    ) -> Result:  # fmt: skip
        """`script` (GIT_PREAMBLE and more) in `cwd`, git's environment `env` added; its arguments
        `before`, then git's (its safe options first): its exit code is not checked."""
        exports = " ".join(f"{name}={shlex.quote(value)}" for name, value in {**QUIET, **(env or {})}.items())
        return await self.sh(script.format(exports=exports), cwd, *before, *SAFE, *args, check=False, limit=limit,
                             into=into, data=data)  # fmt: skip

    def _ran(self, result: Result, cwd: str) -> None:
        """Refuse what a git script says when its folder or git is not there."""
        if result.code == NO_FOLDER:
            raise GitError(f"{self.at(cwd)} does not exist (or is not a folder)")
        if result.code == NO_GIT:
            raise GitMissing(f"git is not installed on {self.host} (or not on PATH there)")

    async def top(self, cwd: str) -> tuple[str, str] | None:
        found = await self.git_script(TOP_SCRIPT, cwd, "rev-parse", "--show-toplevel")
        if found.code == NO_FOLDER:
            raise ServiceError(f"working directory does not exist: {self.at(cwd)}")
        self._ran(found, cwd)
        fields = found.out.split("\0")
        if found.code == 4:
            return None
        if found.code != 0 or len(fields) < 3:
            raise GitError(f"git rev-parse failed in {self.at(cwd)}: {found.err.strip() or f'exit code {found.code}'}")
        return fields[0], fields[1]

    async def worktrees(self, repo: str, target: str) -> tuple[str, list[Entry], str]:
        found = await self.git_script(
            WORKTREES_SCRIPT, repo, "rev-parse", "--path-format=absolute", "--git-common-dir", before=[target]
        )
        self._ran(found, repo)
        fields = found.out.split("\0")
        if found.code != 0 or len(fields) < 3:
            raise GitError(f"git rev-parse failed in {self.at(repo)}: {found.err.strip() or f'exit code {found.code}'}")
        if len(fields) == 3:  # no `worktrees` folder
            return fields[1], [], fields[0]
        rest = fields[3:-1]
        return fields[2], [Entry(*rest[i : i + 3]) for i in range(0, len(rest) - 2, 3)], fields[0]

    async def look(self, path: str) -> Look:
        flags = (await self.sh(LOOK_SCRIPT, path)).out
        return Look("e" in flags, "l" in flags, "d" in flags, "g" in flags)

    async def read(self, path: str) -> bytes | None:
        found = await self.sh(READ_SCRIPT, path, check=False, limit=MAX_RECORD)
        return found.out.encode("utf-8", "surrogateescape") if found.code == 0 else None

    async def write(self, path: str, data: bytes) -> None:
        await self.sh(WRITE_SCRIPT, os.path.dirname(path), path, data=data)

    async def mkdirs(self, path: str) -> None:
        await self.sh(MKDIR_SCRIPT, path)

    async def records(self, folders: Sequence[str]) -> list[tuple[str, bytes]]:
        if not folders:
            return []
        fields = (await self.sh(RECORDS_SCRIPT, *folders)).out.split("\0")
        return [(fields[i], fields[i + 1].encode()) for i in range(0, len(fields) - 1, 2)]

    async def folders(self) -> list[str]:
        return sorted(f for f in (await self.sh(FOLDERS_SCRIPT, str(self.root))).out.split("\0") if f)

    @contextlib.asynccontextmanager
    async def staging(self, index: str) -> AsyncIterator[tuple[str, bool]]:
        folder, _, copied = (await self.sh(STAGING_SCRIPT, index)).out.partition("\0")
        if not folder.startswith("/"):
            raise GitError(f"no temporary folder on {self.host}")
        try:
            yield posixpath.join(folder, "index"), copied == "c"
        finally:
            with contextlib.suppress(GitError):
                await asyncio.shield(self.sh(DELETE_SCRIPT, folder))

    def command(self, argv: Sequence[str], cwd: str, timeout: float) -> tuple[list[str], str]:
        return host_command(self.host, self.ssh, RUN_SCRIPT, cwd, backstop(timeout), *argv), os.getcwd()

    async def delete(self, path: str) -> None:
        found = await self.sh(DELETE_SCRIPT, path, check=False)
        if found.code == 3:
            raise ServiceError(f"{self.at(path)} is a symlink: deck does not follow it")
        if found.code != 0:
            raise ServiceError(f"cannot delete {self.at(path)}: {found.err.strip() or f'exit code {found.code}'}")
