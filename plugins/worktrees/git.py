"""Running git for the worktrees: off the event loop, with a clean environment, bounded output.

A worktree's files are the agent's, so untrusted: nothing deck runs there may run code they
name. Every git command runs with `core.hooksPath=/dev/null` (no hook, not even one a relative
`core.hooksPath` would find in the worktree) and `core.fsmonitor=false`, without a pager or a
prompt, and with none of the caller's `GIT_*` variables (a `GIT_DIR` would point it elsewhere).
Commands in a worktree add their own options (`tree.Checkout`): the repository named explicitly,
never found through files there, and no look into a folder there that has a `.git` of its own.
A failure is a `GitError` (a `ServiceError`) that says which command failed and git's own words.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

from deck import start_process
from deck.errors import ServiceError

#: Options given to every git command deck runs.
SAFE = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.pager=cat", "-c", "color.ui=false")
#: The most a git command's output is read (a diff): far above a reviewable change, and bounded.
MAX_OUTPUT = 16 * 1024 * 1024
#: How long a cancelled git command may still run before it is killed.
CANCEL_GRACE = 5.0
#: git's error output kept for a message.
MAX_ERROR = 2000


class GitError(ServiceError):
    """A git command failed, or git is not there."""


class GitMissing(GitError):
    """git is not there: no worktree can be looked at, which is not the same as there being none."""


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str
    truncated: bool = False


#: The environment every git command gets: no pager, prompt, editor or optional lock.
QUIET = {
    "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "PAGER": "cat", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C",
    "GIT_ASKPASS": "", "SSH_ASKPASS": "", "GIT_EDITOR": ":",
}  # fmt: skip


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """deck's environment without the `GIT_*` variables, with QUIET's and `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(QUIET)
    env.update(extra or {})
    return env


async def git(
    *args: str, cwd: str, check: bool = True, env: dict[str, str] | None = None, limit: int = MAX_OUTPUT,
    options: Sequence[str] = (), into: BinaryIO | None = None, data: bytes | None = None,
) -> Result:
    """Run `git OPTIONS ARGS` in `cwd`; a non-zero exit raises GitError unless `check` is off.

    `options` go before the command (`--git-dir`, more `-c`); with `into` (a file) the output is
    written there, whatever its size, and not read; `data` is its standard input. A caller
    cancelled meanwhile waits up to CANCEL_GRACE seconds for git to finish on its own, so that no
    lock file or half-made worktree is left behind; then git is killed."""
    if not os.path.isdir(cwd):
        raise GitError(f"{cwd} does not exist (or is not a folder)")
    try:
        result = await run(["git", *SAFE, *options, *args], cwd=cwd, env=clean_env(env), limit=limit, into=into, data=data)
    except FileNotFoundError as exc:
        raise GitMissing("git is not installed (or not on PATH)") from exc
    except OSError as exc:
        raise GitError(f"cannot run git in {cwd}: {exc.strerror or exc}") from exc
    if check and result.code != 0:
        raise GitError(f"git {' '.join(args[:2])} failed in {cwd}: {result.err.strip() or f'exit code {result.code}'}")
    return result


async def run(
    argv: Sequence[str], *, cwd: str, env: dict[str, str], limit: int = MAX_OUTPUT, into: BinaryIO | None = None,
    data: bytes | None = None,
) -> Result:
    """Run `argv` (git, or ssh running git on a host) in a session of its own, its output bounded
    by `limit` (or written `into` a file), `data` its standard input; a caller cancelled meanwhile
    waits up to CANCEL_GRACE seconds for it to finish on its own, then it is killed."""
    process = await start_process(
        *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL if data is None else asyncio.subprocess.PIPE,
        stdout=into or asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    task = asyncio.ensure_future(_collect(process, limit, data))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await _finish(process, task)
        raise


async def _collect(process: asyncio.subprocess.Process, limit: int, data: bytes | None) -> Result:
    assert process.stderr is not None

    async def feed() -> None:
        if process.stdin is None:
            return
        with contextlib.suppress(ConnectionError):  # it ended without reading all of it
            process.stdin.write(data or b"")
            await process.stdin.drain()
        process.stdin.close()

    async def read_out() -> tuple[bytes, bool]:
        if process.stdout is None:  # written to a file
            return b"", False
        chunks, size = [], 0
        while chunk := await process.stdout.read(1 << 16):  # type: ignore[union-attr]
            if size + len(chunk) > limit:
                chunks.append(chunk[: limit - size])
                process.kill()
                return b"".join(chunks), True
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks), False

    async def read_err() -> bytes:
        data = await process.stderr.read(MAX_ERROR)  # type: ignore[union-attr]
        while await process.stderr.read(1 << 16):  # type: ignore[union-attr]
            pass  # the rest is drained, never kept
        return data

    (out, truncated), err, _ = await asyncio.gather(read_out(), read_err(), feed())
    code = await process.wait()
    return Result(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), truncated)


async def _finish(process: asyncio.subprocess.Process, task: asyncio.Future[Result]) -> None:
    try:
        await asyncio.wait_for(asyncio.shield(task), CANCEL_GRACE)
    except TimeoutError:
        _kill(process)
        await asyncio.gather(task, return_exceptions=True)
    except asyncio.CancelledError:  # cancelled again while it had its grace (deck ending): killed now,
        _kill(process)  # never left running on into what its caller deletes next (a temporary index)
        raise
    except Exception:
        pass  # its result was not wanted


def _kill(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.kill()
