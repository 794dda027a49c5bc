"""The check of `deck land`: the user's command, run on a merge result in a scratch worktree.

The scratch worktree (`SCRATCH`, in the repository's folder of worktrees, where no agent's can be:
`worktree_name_problem` refuses a leading dot) is made at a train's first check, on a detached HEAD,
and moved from merge to merge (`git checkout --detach -f`, then `git clean -ffdx`: nothing of the
last check is left); the train deletes it at its end, and the next train one left behind. Its
files are a merge of the agent's work: git is told to switch off every filter the user's config
defines there (`tree.no_filters`), and runs no hook, as everywhere in this plugin.

The check runs in a process group of its own (on an agent's host, through ssh, with `timeout`
there too), its stderr with its stdout: its output is streamed as it comes (STREAMED at most), its
last CHECK_LINES lines kept, and the whole group is ended when it is done, times out, or the train
is interrupted.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Sequence

from deck import start_process
from deck.errors import ServiceError

from .tree import Place

log = logging.getLogger(__name__)

SCRATCH = ".land"
#: The check's last lines kept for a failure's report, and the most of one line kept.
CHECK_LINES = 20
LINE_CHARS = 500
#: The most of a check's output streamed (in characters); the rest still goes to its last lines.
STREAMED = 1024 * 1024


class Scratch:
    """A train's scratch worktrees, one per repository."""

    def __init__(self) -> None:
        self._made: dict[str, tuple[Place, str]] = {}

    async def at(self, place: Place, merged: str, options: Sequence[str]) -> str:
        """The scratch worktree of `place`'s repository on a detached HEAD at `merged`, with no file
        but its own; `options` are git's (the filters switched off)."""
        machine = place.machine
        made = self._made.get(place.key)
        if made is None:
            await drop_scratch(place)
            path = scratch_path(place)
            await machine.git("worktree", "add", "-q", "--detach", "-f", path, merged, cwd=place.repo, options=options)
            self._made[place.key] = (place, path)
            return path
        path = made[1]
        await machine.git("checkout", "-q", "--detach", "-f", merged, cwd=path, options=options)
        await machine.git("clean", "-q", "-ffdx", cwd=path)
        return path

    async def drop(self) -> None:
        """Delete them all (a failure is logged: the next train deletes what is left)."""
        for place, path in self._made.values():
            try:
                await drop_scratch(place)
            except ServiceError as exc:
                log.warning("land: cannot delete the scratch worktree %s: %s", place.machine.at(path), exc)
        self._made.clear()


def scratch_path(place: Place) -> str:
    return str(place.folder / SCRATCH)


async def drop_scratch(place: Place) -> None:
    """Delete the scratch worktree of `place`'s repository, if there is one (its folder, then git's record of it)."""
    path = scratch_path(place)
    if (await place.machine.look(path)).exists:
        await place.machine.delete(path)
        await place.machine.git("worktree", "prune", cwd=place.repo)


async def run_check(
    argv: Sequence[str], place: Place, folder: str, timeout: float, output: Callable[[str], None]
) -> tuple[int | None, list[str]]:
    """Run `argv` in `folder` of `place`'s machine: its exit code (None: it timed out) and its last
    lines; `output` gets its output as it comes."""
    command, cwd = place.machine.command(argv, folder, timeout)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        process = await start_process(*command, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
                                      stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                                      start_new_session=True)  # fmt: skip
    except OSError as exc:
        return 127, [f"cannot run {argv[0]}: {exc.strerror or exc}"]
    tail = Tail()
    try:
        async with asyncio.timeout(timeout):
            await _stream(process, tail, output)
            code: int | None = await process.wait()
    except TimeoutError:
        code = None
    finally:
        await end(process)
    return code, tail.lines()


async def _stream(process: asyncio.subprocess.Process, tail: Tail, output: Callable[[str], None]) -> None:
    assert process.stdout is not None
    streamed = 0
    while chunk := await process.stdout.read(1 << 16):
        text = tail.add(chunk)
        if streamed < STREAMED and text:
            output(text[: STREAMED - streamed])
            streamed += len(text)


class Tail:
    """The last CHECK_LINES lines of a stream, each LINE_CHARS at most; memory bounded whatever comes."""

    def __init__(self) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=CHECK_LINES)
        self._partial = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a character split between reads

    def add(self, chunk: bytes) -> str:
        """Take `chunk`; its text (decoded, controls left to whoever shows it)."""
        text = self._decoder.decode(chunk)
        *complete, rest = (self._partial + text).split("\n")
        self._lines.extend(line[:LINE_CHARS] for line in complete[-CHECK_LINES:])
        self._partial = rest[-LINE_CHARS:]
        return text

    def lines(self) -> list[str]:
        return [*self._lines, *([self._partial] if self._partial else [])][-CHECK_LINES:]


async def end(process: asyncio.subprocess.Process) -> None:
    """End the check's process group (it may have left children) and wait for it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # it, or what it left running
    with contextlib.suppress(ProcessLookupError):
        await asyncio.shield(process.wait())
