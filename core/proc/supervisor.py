"""Agent processes: spawn in a new session, tee stderr, watch the exit, stop with escalation.

The stop sequence (docs/architecture.md, "Stopping an agent"): close stdin, wait, SIGTERM the process group and the
descendants that left it, wait, SIGKILL. Descendants are snapshotted with psutil
before anything is signalled.

No process an agent launched outlives deck, by construction rather than by luck
(Linux; elsewhere the stop sequence and the sentinel only, see `_Guard`):

- every agent runs with a token of its own in its environment (`DECK_AGENT_TOKEN`),
  which what it launches inherits;
- deck is a child subreaper: an orphan in an agent's tree (a double-forked
  `setsid` daemon) is re-parented to deck, not to init, and found there by its
  token or the agent's session; deck waits for such orphans when they exit;
- every agent is SIGKILLed by the kernel when deck dies (PR_SET_PDEATHSIG);
- a sentinel outside deck's tree SIGKILLs whatever carries deck's tokens once
  deck is gone, SIGKILL of deck included (`deck.sentinel`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import functools
import itertools
import os
import secrets
import select
import signal
import subprocess
import sys
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any

import psutil
from deck.proc import sentinel

#: Longest stderr line passed on: a longer one keeps its first bytes, marked " [cut]".
MAX_STDERR_LINE = 16 * 1024
#: In each agent's environment, a token of its own: what the agent launches inherits it, so
#: deck finds it again wherever it was re-parented, unless it cleared its environment.
TOKEN_VAR = sentinel.TOKEN_VAR
#: Seconds between two looks for exited orphans re-parented to deck, which only deck can wait for.
REAP_EVERY = 1.0

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36

_live: weakref.WeakSet[Process] = weakref.WeakSet()


@dataclass(frozen=True)
class StopTimings:
    """How long a stop waits at each step; tests inject short ones."""

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
        token: str = "",
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.pgid = popen.pid  # start_new_session makes it the group leader, and of its session
        self.token = token
        self.closed = False
        self._on_stdout = on_stdout
        self._on_stderr_line = on_stderr_line
        self._log = log
        self._stderr_rest = b""
        self._stderr_cut = False
        self._stdin: asyncio.WriteTransport | None = None
        self._transports: list[asyncio.BaseTransport] = []
        self._stdout: asyncio.ReadTransport
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
        merged: bool = False,
    ) -> Process:
        """Start `command`; from the event loop's thread, which lives as long as deck (PDEATHSIG follows the thread).

        `merged`: a command, not an agent (a terminal): no stdin, stderr goes to stdout's pipe."""
        for problem in _guard.setup():
            log(problem)
        _guard.reap()
        token = _guard.new_token()
        try:
            popen = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL if merged else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                cwd=cwd,
                env={**env, TOKEN_VAR: token},
                start_new_session=True,
                preexec_fn=_guard.preexec(),
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
        self = cls(popen, on_stdout, on_stderr_line, log, token)
        _guard.report([popen.pid])
        await self._connect()
        return self

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        self.exited = loop.create_future()
        self.stdout_closed = loop.create_future()
        assert self.popen.stdout
        if self.popen.stdin is not None:
            stdin, _ = await loop.connect_write_pipe(_Writer, self.popen.stdin)
            self._stdin = stdin  # type: ignore[assignment]
            self._transports.append(stdin)
        out, _ = await loop.connect_read_pipe(
            lambda: _Reader(self._on_stdout, lambda: _resolve(self.stdout_closed, None)), self.popen.stdout
        )
        self._transports.append(out)
        self._stdout = out
        if self.popen.stderr is not None:
            err, _ = await loop.connect_read_pipe(
                lambda: _Reader(self._stderr_data, self._stderr_eof), self.popen.stderr
            )
            self._transports.append(err)
        self._watch_exit(loop)
        _guard.keep_reaping(loop)

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

    def pause_stdout(self, paused: bool) -> None:
        """Stop reading stdout for now (the process blocks once the pipe is full), or read it again."""
        if self.closed or self._stdout.is_closing():
            return
        if paused:
            self._stdout.pause_reading()
        else:
            self._stdout.resume_reading()

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
        """What the agent launched: its descendants, the orphans it left, the ones seen before."""
        found: list[psutil.Process] = []
        if self.popen.returncode is None:  # once waited for, the pid may be another process's
            with contextlib.suppress(psutil.Error):
                found = psutil.Process(self.pid).children(recursive=True)
        return _merge(_merge(self.known, found), _guard.orphans(self))

    def remember_descendants(self) -> None:
        """Note the agent's descendants now, for the ones that clear their environment (no token)."""
        self.known = [p for p in self.descendants() if _alive(p)]
        _guard.report(p.pid for p in self.known)

    async def stop(self, timings: StopTimings) -> int:
        """Close stdin, then SIGTERM, then SIGKILL the group and every descendant; wait for all."""
        tree = self.descendants()
        self.close_stdin()
        if not await self._wait(timings.after_stdin_close):
            tree = _merge(tree, self.descendants())
            waited = f"no exit {timings.after_stdin_close:g}s after stdin closed: " if timings.after_stdin_close else ""
            self._log(f"{waited}SIGTERM to the process group")
            self._signal(signal.SIGTERM, tree)
            if not await self._wait(timings.after_sigterm):
                self._log(f"no exit {timings.after_sigterm:g}s after SIGTERM: SIGKILL to the process group")
                self._signal(signal.SIGKILL, tree)
                await self._wait(timings.after_sigkill)
        await self.end_leftovers(tree, timings)
        self.close_pipes()
        _guard.reap()
        return self.returncode if self.returncode is not None else -signal.SIGKILL

    async def end_leftovers(self, tree: list[psutil.Process], timings: StopTimings) -> None:
        """End what the agent launched and left behind (its group, escaped descendants): SIGTERM, wait, SIGKILL."""
        # Not the agent itself: waiting for it here would take its exit status from its Popen.
        alive = [p for p in _merge(tree, _group_members(self.pgid)) if p.pid != self.pid and _alive(p)]
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
        self.closed = True
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


def reap_orphans() -> None:
    """Wait for the orphans re-parented to deck that exited (deck waits for them every `REAP_EVERY` s)."""
    _guard.reap()


class _Guard:
    """What holds for every agent of this deck process; set up before its first agent starts.

    Linux: deck is a child subreaper, so an orphan of any agent's tree is
    re-parented to deck (found by `orphans`, waited for by `reap`), and each agent
    gets PR_SET_PDEATHSIG(SIGKILL). Everywhere: every agent carries a token, and
    the sentinel kills what carries one once deck is gone. Without a subreaper,
    orphans are looked for among all processes, by token and session.
    """

    def __init__(self) -> None:
        self.pid = 0  # the process it was set up in (a forked child sets up its own)
        self.prefix = ""
        self.subreaper = False
        self._count = itertools.count(1)
        self._sentinel = -1  # the write end of the sentinel's stdin: only deck holds it
        self._sentinel_out: IO[bytes] | None = None
        self._adopted: set[tuple[int, str]] = set()  # (pid, start) of orphans seen with a token of ours
        self._orphans_left = False  # some orphan was alive at the last reap
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    def setup(self) -> list[str]:
        """Start the sentinel, then become a subreaper; once per process. The problems to log."""
        if self.pid == os.getpid():
            return []
        self.pid = os.getpid()
        self.prefix = f"{self.pid}-{secrets.token_hex(4)}"
        problems = self._start_sentinel()  # first: it forks away, and would come back to a subreaper
        prctl = _prctl()
        if prctl is not None:
            self.subreaper = prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            if not self.subreaper:
                problems.append("deck: cannot become a child subreaper: orphans are looked for among all processes")
        return problems

    def _start_sentinel(self) -> list[str]:
        read, write = os.pipe()
        flags = ["-I", "-S"] if sys.platform == "linux" else ["-I"]  # -S: stdlib only, it starts in milliseconds
        command = [sys.executable, *flags, sentinel.__file__, self.prefix]
        try:
            # Its stdout, which it never writes, reaches the end of file when it has exited.
            popen = subprocess.Popen(
                command, stdin=read, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/", start_new_session=True
            )
        except OSError as exc:
            os.close(write)
            return [f"deck: cannot start the sentinel that ends agents if deck is killed: {exc}"]
        finally:
            os.close(read)
        assert popen.stdout is not None
        try:
            code = _wait_exit(popen, 5)  # the sentinel forks away at once and carries on
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
            code = -signal.SIGKILL
        if code != 0:
            os.close(write)
            popen.stdout.close()
            return [f"deck: the sentinel that ends agents if deck is killed did not start (exit code {code})"]
        os.set_blocking(write, False)
        self._sentinel, self._sentinel_out = write, popen.stdout
        atexit.register(self.end_sentinel)
        return []

    def end_sentinel(self, timeout: float = 2.0) -> None:
        """At deck's exit: let the sentinel sweep now and wait for it, so that it does not outlive deck either."""
        if self._sentinel < 0 or self._sentinel_out is None:
            return
        os.close(self._sentinel)
        self._sentinel = -1
        with contextlib.suppress(OSError, ValueError):
            select.select([self._sentinel_out], [], [], timeout)  # readable at its end of file: it has exited
        self._sentinel_out.close()
        self._sentinel_out = None

    def new_token(self) -> str:
        return f"{self.prefix}.{next(self._count)}"

    def preexec(self) -> Callable[[], None] | None:
        """What the child runs between fork and exec: ask for SIGKILL when deck dies.

        subprocess warns that a preexec_fn may deadlock when deck has threads. This
        one takes no lock: prctl is a ctypes pointer resolved here, beforehand, and
        the rest are plain system calls (Python re-initialises its own locks in the
        child before calling it). posix_spawn cannot set the parent-death signal; a
        wrapper program (setpriv --pdeathsig) is not on every system and would turn
        a missing command into its own exit status.
        The kernel sends the signal when the *thread* that forked exits: agents are
        spawned from the event loop's thread, which runs as long as deck.
        """
        prctl = _prctl()
        if prctl is None:
            return None
        deck, kill = os.getpid(), int(signal.SIGKILL)

        def die_with_deck() -> None:
            prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
            if os.getppid() != deck:  # deck died before the call above
                os.kill(os.getpid(), kill)

        return die_with_deck

    def report(self, pids: Iterable[int]) -> None:
        """Tell the sentinel of processes seen in an agent's tree: it kills them too, token or not."""
        if self._sentinel < 0:
            return
        for pid in pids:
            start = sentinel.identity(pid)
            if start is None:
                continue
            try:
                os.write(self._sentinel, f"{pid} {start}\n".encode())  # short: one atomic write
            except BlockingIOError:
                return  # the sentinel lags behind; the tokens still find these
            except OSError:  # the sentinel is gone
                self.end_sentinel(timeout=0)
                return

    def forked(self) -> set[int]:
        """The agents' own pids not yet waited for: only their Popen waits for them."""
        return {p.pid for p in list(_live) if p.popen.returncode is None}

    def orphans(self, process: Process) -> list[psutil.Process]:
        """What `process`'s agent launched that hangs elsewhere now, and what those launched.

        Found by the agent's token or its session (deck never forks into an
        agent's session) among deck's children, where a subreaper's orphans go;
        among all processes when deck is no subreaper.
        """
        try:
            candidates = psutil.Process().children() if self.subreaper else list(psutil.process_iter())
        except psutil.Error:
            return []
        skip = self.forked() | {os.getpid()}
        found: list[psutil.Process] = []
        for p in candidates:
            if p.pid not in skip and _belongs(p, process):
                found.append(p)
                with contextlib.suppress(psutil.Error):
                    found += p.children(recursive=True)
                if self.subreaper and (start := sentinel.identity(p.pid)):
                    self._adopted.add((p.pid, start))  # deck's to wait for, once it exits
        return found

    def reap(self) -> None:
        """Wait for the exited orphans among deck's children; never for a process deck forked.

        An orphan is known by its session: a process deck forked is in deck's
        session or leads its own, an agent's descendant that did not call setsid is
        in its agent's session. A setsid orphan is known once it was seen alive
        with one of deck's tokens. Any other zombie is left to whoever forked it.
        """
        if not self.subreaper:
            return
        me, session = os.getpid(), os.getsid(0)
        forked = self.forked()
        marker = f"{TOKEN_VAR}={self.prefix}.".encode()
        alive: set[tuple[int, str]] = set()
        self._orphans_left = False
        for pid in _own_children():
            found = sentinel.stat(pid)
            if pid in forked or found is None or found.ppid != me:
                continue
            key = (pid, found.start)
            orphan = found.session not in (pid, session) or key in self._adopted
            if found.state not in ("Z", "X"):
                if not orphan and sentinel.carries(pid, marker):
                    self._adopted.add(key)
                    orphan = True
                alive.add(key)
                self._orphans_left |= orphan
            elif orphan:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        self._adopted &= alive

    def keep_reaping(self, loop: asyncio.AbstractEventLoop) -> None:
        """Reap every `REAP_EVERY` s while agents run or orphans are left (from `loop`, which runs deck).

        Also at each spawn and at the end of each stop.
        """
        if not self.subreaper or (self._timer is not None and self._timer_loop is loop):
            return
        self._timer_loop = loop
        self._timer = loop.call_later(REAP_EVERY, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        self.reap()
        if self._orphans_left or any(not p.closed for p in list(_live)):
            self.keep_reaping(loop)


_guard = _Guard()


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl (Linux), or None."""
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl  # type: ignore[no-any-return]


def _wait_exit(popen: subprocess.Popen[bytes], timeout: float) -> int:
    """`popen.wait(timeout)`, woken by the exit itself (a pidfd): Popen.wait polls, sleeping up to
    50 ms between looks, and a deck's first agent would wait that out after the sentinel's start."""
    try:
        pidfd = os.pidfd_open(popen.pid)
    except (AttributeError, OSError):
        return popen.wait(timeout)
    try:
        if not select.select([pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(popen.args, timeout)
    finally:
        os.close(pidfd)
    return popen.wait()


def _own_children() -> list[int]:
    """Deck's children: each of its threads' /proc list is read (psutil would scan every process)."""
    if not os.path.exists(f"/proc/self/task/{os.getpid()}/children"):
        with contextlib.suppress(psutil.Error):
            return [p.pid for p in psutil.Process().children()]
        return []
    pids: list[int] = []
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that just ended
            with open(f"/proc/self/task/{tid}/children") as f:
                pids += [int(pid) for pid in f.read().split()]
    return pids


def _belongs(p: psutil.Process, process: Process) -> bool:
    """Whether `p` is in `process`'s session or carries its token."""
    with contextlib.suppress(OSError):
        if os.getsid(p.pid) == process.pgid:
            return True
    with contextlib.suppress(psutil.Error):
        return bool(process.token) and p.environ().get(TOKEN_VAR) == process.token
    return False


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
