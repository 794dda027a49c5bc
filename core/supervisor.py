"""Agent processes: spawn in a new session, tee stderr, watch the exit, stop with escalation.

The stop sequence is SPEC §3: close stdin, wait, SIGTERM the process group and the
descendants that left it, wait, SIGKILL. Descendants are snapshotted with psutil
before anything is signalled, since an orphan is re-parented and cannot be found
from the agent any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

#: Longest stderr line passed on: a longer one keeps its first bytes, marked " [cut]".
MAX_STDERR_LINE = 16 * 1024

_live: weakref.WeakSet[Process] = weakref.WeakSet()


@dataclass(frozen=True)
class StopTimings:
    """How long a stop waits at each step (SPEC §3); tests inject short ones."""

    after_stdin_close: float = 5.0
    after_sigterm: float = 3.0
    after_sigkill: float = 2.0


class SpawnError(OSError):
    """The command could not be started at all."""


class _Reader(asyncio.Protocol):
    def __init__(self, on_data: Callable[[bytes], None], on_eof: Callable[[], None]) -> None:
        self.on_data = on_data
        self.on_eof = on_eof

    def data_received(self, data: bytes) -> None:
        self.on_data(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_eof()


class _Writer(asyncio.Protocol):
    def connection_lost(self, exc: Exception | None) -> None:
        pass


class Process:
    """One agent process with non-blocking pipes and an awaitable exit."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        on_stdout: Callable[[bytes], None],
        on_stderr_line: Callable[[str], None],
        log: Callable[[str], None],
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.pgid = popen.pid  # start_new_session makes it the group leader
        self._on_stdout = on_stdout
        self._on_stderr_line = on_stderr_line
        self._log = log
        self._stderr_rest = b""
        self._stderr_cut = False
        self._stdin: asyncio.WriteTransport | None = None
        self._transports: list[asyncio.BaseTransport] = []
        self.stdout_closed: asyncio.Future[None]
        self.exited: asyncio.Future[int]
        self._pidfd = -1
        self.known: list[psutil.Process] = []
        _live.add(self)

    @classmethod
    async def spawn(
        cls,
        command: list[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        on_stdout: Callable[[bytes], None],
        on_stderr_line: Callable[[str], None],
        log: Callable[[str], None],
    ) -> Process:
        try:
            popen = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=env,
                start_new_session=True,
                bufsize=0,
            )
        except FileNotFoundError as exc:
            raise SpawnError(f"command not found: {command[0]}") from exc
        except PermissionError as exc:
            raise SpawnError(f"command not executable: {command[0]}") from exc
        except NotADirectoryError as exc:
            raise SpawnError(f"cannot start {command[0]}: {exc.strerror}: {exc.filename}") from exc
        except OSError as exc:
            raise SpawnError(f"cannot start {command[0]}: {exc}") from exc
        self = cls(popen, on_stdout, on_stderr_line, log)
        await self._connect()
        return self

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        self.exited = loop.create_future()
        self.stdout_closed = loop.create_future()
        assert self.popen.stdin and self.popen.stdout and self.popen.stderr
        stdin, _ = await loop.connect_write_pipe(_Writer, self.popen.stdin)
        self._stdin = stdin  # type: ignore[assignment]
        out, _ = await loop.connect_read_pipe(
            lambda: _Reader(self._on_stdout, lambda: _resolve(self.stdout_closed, None)), self.popen.stdout
        )
        err, _ = await loop.connect_read_pipe(
            lambda: _Reader(self._stderr_data, self._stderr_eof), self.popen.stderr
        )
        self._transports = [stdin, out, err]
        self._watch_exit(loop)

    def _watch_exit(self, loop: asyncio.AbstractEventLoop) -> None:
        # A pidfd turns readable when the process exits, whoever still holds its
        # pipes; asyncio's own wait() would also wait for those pipes to close.
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            loop.create_task(self._poll_exit())
            return
        loop.add_reader(self._pidfd, self._reap)

    def _reap(self) -> None:
        code = self.popen.poll()
        if code is None:
            return
        asyncio.get_running_loop().remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = -1
        _resolve(self.exited, code)

    async def _poll_exit(self) -> None:
        while (code := self.popen.poll()) is None:
            await asyncio.sleep(0.05)
        _resolve(self.exited, code)

    # -- pipes ----------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._stdin is None or self._stdin.is_closing():
            raise BrokenPipeError("the agent's stdin is closed")
        self._stdin.write(data)

    def close_stdin(self) -> None:
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()

    def _stderr_data(self, data: bytes) -> None:
        if self._stderr_rest:
            data = self._stderr_rest + data
        *lines, rest = data.split(b"\n")
        for line in lines:
            if self._stderr_cut:  # the end of a line already passed on, cut
                self._stderr_cut = False
                continue
            self._emit_stderr(line)
        if len(rest) > MAX_STDERR_LINE and not self._stderr_cut:
            self._emit_stderr(rest)
            self._stderr_cut = True  # the rest of this line is dropped
        self._stderr_rest = b"" if self._stderr_cut else rest

    def _stderr_eof(self) -> None:
        if self._stderr_rest:
            self._emit_stderr(self._stderr_rest)
            self._stderr_rest = b""

    def _emit_stderr(self, line: bytes) -> None:
        if len(line) > MAX_STDERR_LINE:
            line = line[:MAX_STDERR_LINE] + b" [cut]"
        self._on_stderr_line(line.rstrip(b"\r").decode(errors="replace"))

    # -- ending ---------------------------------------------------------------------------

    @property
    def returncode(self) -> int | None:
        return self.exited.result() if self.exited.done() else None

    def descendants(self) -> list[psutil.Process]:
        """What the agent launched and is still its descendant, with the ones seen before."""
        found: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            found = psutil.Process(self.pid).children(recursive=True)
        return _merge(self.known, found)

    def remember_descendants(self) -> None:
        """Note the agent's descendants now: after a crash, the orphans cannot be found from it."""
        self.known = [p for p in self.descendants() if _alive(p)]

    async def stop(self, timings: StopTimings) -> int:
        """Close stdin, then SIGTERM, then SIGKILL the group and every descendant; wait for all."""
        tree = self.descendants()
        self.close_stdin()
        if not await self._wait(timings.after_stdin_close):
            tree = _merge(tree, self.descendants())
            self._log(f"no exit {timings.after_stdin_close:g}s after stdin closed: SIGTERM to the process group")
            self._signal(signal.SIGTERM, tree)
            if not await self._wait(timings.after_sigterm):
                self._log(f"no exit {timings.after_sigterm:g}s after SIGTERM: SIGKILL to the process group")
                self._signal(signal.SIGKILL, tree)
                await self._wait(timings.after_sigkill)
        await self.end_leftovers(tree, timings)
        self.close_pipes()
        return self.returncode if self.returncode is not None else -signal.SIGKILL

    async def end_leftovers(self, tree: list[psutil.Process], timings: StopTimings) -> None:
        """End what the agent launched and left behind (its group, escaped descendants): SIGTERM, wait, SIGKILL."""
        alive = _merge([p for p in tree if _alive(p)], _group_members(self.pgid))
        if not alive:
            return
        self._log(f"ending {len(alive)} process(es) the agent left behind")
        _killpg(self.pgid, signal.SIGTERM)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = await asyncio.to_thread(psutil.wait_procs, alive, timings.after_sigterm)
        if alive:
            self._log(f"{len(alive)} process(es) still there {timings.after_sigterm:g}s after SIGTERM: SIGKILL")
        _killpg(self.pgid, signal.SIGKILL)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()

    def _signal(self, sig: signal.Signals, tree: list[psutil.Process]) -> None:
        _killpg(self.pgid, sig)
        for p in tree:
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                p.send_signal(sig)

    async def _wait(self, timeout: float) -> bool:
        if self.exited.done():
            return True
        try:
            await asyncio.wait_for(asyncio.shield(self.exited), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def close_pipes(self) -> None:
        for transport in self._transports:
            transport.close()
        if self._pidfd >= 0 and self.popen.poll() is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
            _resolve(self.exited, self.popen.returncode)


def kill_all_now() -> None:
    """SIGKILL every agent process tree still alive (used when deck exits abnormally)."""
    for process in list(_live):
        with contextlib.suppress(Exception):
            process._signal(signal.SIGKILL, [p for p in process.descendants() if _alive(p)])


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _merge(a: list[psutil.Process], b: list[psutil.Process]) -> list[psutil.Process]:
    seen = {p.pid for p in a}
    return a + [p for p in b if p.pid not in seen]


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_members(pgid: int) -> list[psutil.Process]:
    """Live (not zombie) processes of group `pgid`; scanned only when the group still exists."""
    if not _group_alive(pgid):
        return []
    members = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(p.pid) == pgid and _alive(p):
                members.append(p)
    return members


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
