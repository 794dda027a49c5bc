"""The client side of ACP's terminal/* methods: the commands an agent runs through deck.

Each command is a `supervisor.Process` of its own, so it has what an agent process has: a
process group and session of its own, a token in its environment, the parent-death signal,
and the sentinel that ends it if deck is killed. Its stdout and stderr share one pipe, read
by the event loop as it comes, and kept bounded:

- what `terminal/output` returns is the last `outputByteLimit` bytes (1 MiB when the agent
  gives none, MAX_OUTPUT_LIMIT at most), cut from the start at a UTF-8 character boundary;
- what one agent's terminals keep is MAX_TOTAL_OUTPUT in all: a create asking for more than is
  left gets what is left, and is refused when less than MIN_OUTPUT_LIMIT is; an agent holds at
  most MAX_TERMINALS terminals, its place taken as the request comes, before anything is awaited
  (a burst of creates cannot all pass the count);
- what goes live to the frontends (`on_output`) is sent at most every LIVE_EVERY seconds, each
  time at most LIVE_MAX bytes: the newest, as a flood shows only its end anyway;
- past READ_BUDGET bytes between two such sends, reading pauses until the next: a command that
  prints as fast as it can waits on its pipe, and other agents keep their share of the loop.

A command runs in the agent's environment plus the `env` it was given, in the `cwd` it was
given, resolved beneath the agent's working directory as fs/* paths are (no symlink leads out;
the directory opened is the one the command starts in, through /proc/self/fd). A kill sends
SIGTERM to the command's group and every descendant, then SIGKILL after a short grace, and
ends whatever it left behind (a daemon that called setsid). An agent's terminals are killed
when they are released, when the agent stops or exits, and when deck exits.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import itertools
import os
import signal
import uuid
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deck.errors import INTERNAL_ERROR, INVALID_PARAMS, AcpError
from deck.proc.supervisor import Process, SpawnError, StopTimings

if TYPE_CHECKING:
    from deck.agent.sandbox import View

    #: A sandbox and the path in it a command runs in.
    Sandboxed = tuple[View, str]

#: What `terminal/output` keeps when the agent sets no `outputByteLimit`.
DEFAULT_OUTPUT_LIMIT = 1024 * 1024
#: The most it keeps whatever the agent asks: the answer is one JSON line.
MAX_OUTPUT_LIMIT = 16 * 1024 * 1024
#: Terminals one agent may hold at once (running, starting or exited, until released).
MAX_TERMINALS = 16
#: What all of one agent's terminals keep of their output, in all (their limits added up).
MAX_TOTAL_OUTPUT = 32 * 1024 * 1024
#: The least a terminal is given of what is left of MAX_TOTAL_OUTPUT: with less, terminal/create is refused.
MIN_OUTPUT_LIMIT = 64 * 1024
#: How often live output goes to the frontends at most, in seconds: a flood is not one event per read.
LIVE_EVERY = 0.03
#: The most live output sent at once, in bytes: the newest.
LIVE_MAX = 16 * 1024
#: The most a command's output is read between two live sends (LIVE_EVERY), in bytes: past it,
#: reading pauses until the next send and the command waits on its full pipe, so a flood takes
#: at most that share of deck's loop (about 32 MB/s), and of the machine's CPU.
READ_BUDGET = 1024 * 1024
#: After the command exits, how long its last output may take to arrive (a daemon may hold the pipe).
DRAIN = 1.0
#: How long a killed command has between SIGTERM and SIGKILL.
KILL_GRACE = 3.0

_ids = itertools.count(1)
_RUN = uuid.uuid4().hex[:8]


def _continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def char_start(data: bytes | bytearray) -> int:
    """Where the first whole UTF-8 character of `data` starts (its first bytes may end a character cut in two)."""
    start = 0
    while start < min(len(data), 3) and _continuation(data[start]):
        start += 1
    return start


def complete_end(data: bytes | bytearray) -> int:
    """Where `data` ends without the character it may end in the middle of (the rest comes later)."""
    end = len(data)
    for back in range(1, min(4, end) + 1):
        byte = data[end - back]
        if _continuation(byte):
            continue
        need = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
        return end - back if need > back else end
    return end


class Output:
    """The last `limit` bytes of a command's output; `truncated` once anything was dropped.

    Kept as the reads came (a deque of them), the oldest dropped or cut as new ones come: a read
    costs at most a copy of the one it cuts, never a move of everything kept (a flood's reads
    come by the thousand)."""

    __slots__ = ("chunks", "size", "limit", "truncated")

    def __init__(self, limit: int) -> None:
        self.chunks: deque[bytes] = deque()
        self.size = 0
        self.limit = limit
        self.truncated = False

    def __len__(self) -> int:
        """The bytes kept: `limit` at most."""
        return self.size

    def add(self, chunk: bytes) -> None:
        if not chunk:
            return
        if not self.limit:
            self.truncated = True
            return
        self.chunks.append(chunk)
        self.size += len(chunk)
        excess = self.size - self.limit
        if excess <= 0:
            return
        self.truncated = True
        self.size = self.limit
        chunks = self.chunks
        while chunks and excess >= len(chunks[0]):
            excess -= len(chunks.popleft())
        if excess:
            chunks[0] = chunks[0][excess:]

    def drop(self) -> None:
        """Keep nothing from now on (the terminal was released: nobody can read it)."""
        self.chunks.clear()
        self.size = self.limit = 0

    def text(self, final: bool) -> str:
        """The output as text, from a character boundary; while it runs, without a character still cut."""
        data = b"".join(self.chunks)
        start = char_start(data) if self.truncated else 0
        end = len(data) if final else max(start, complete_end(data))
        return data[start:end].decode("utf-8", errors="replace")


def exit_status(code: int) -> dict[str, Any]:
    """ACP's TerminalExitStatus from a return code (negative: killed by that signal)."""
    if code >= 0:
        return {"exitCode": code, "signal": None}
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = str(-code)
    return {"exitCode": None, "signal": name}


@dataclass(frozen=True)
class Spec:
    """A terminal/create request, checked."""

    command: str
    args: list[str]
    env: dict[str, str]
    cwd: str | None
    limit: int

    @classmethod
    def parse(cls, params: dict[str, Any]) -> Spec:
        command = params.get("command")
        if not isinstance(command, str) or not command:
            raise AcpError(INVALID_PARAMS, "command must be a non-empty string")
        args = params.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise AcpError(INVALID_PARAMS, "args must be a list of strings")
        env: dict[str, str] = {}
        items = params.get("env") or []
        if not isinstance(items, list):  # a number is not iterable, a string or an object would be read wrongly
            raise AcpError(INVALID_PARAMS, "env must be a list of {name, value} strings")
        for item in items:
            if not (isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("value"), str)):
                raise AcpError(INVALID_PARAMS, "env must be a list of {name, value} strings")
            if not item["name"] or "=" in item["name"] or "\0" in item["name"] + item["value"]:
                raise AcpError(INVALID_PARAMS, f"not a valid environment variable: {item['name']!r}")
            env[item["name"]] = item["value"]
        if "\0" in command or any("\0" in a for a in args):
            raise AcpError(INVALID_PARAMS, "command and args may not contain NUL characters")
        cwd = params.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise AcpError(INVALID_PARAMS, "cwd must be an absolute path")
        limit = params.get("outputByteLimit")
        if limit is None:
            limit = DEFAULT_OUTPUT_LIMIT
        elif isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise AcpError(INVALID_PARAMS, "outputByteLimit must be a non-negative integer")
        return cls(command, list(args), env, cwd or None, min(limit, MAX_OUTPUT_LIMIT))


class Terminal:
    """One command: its bounded output, its live output to `on_output`, its exit to `on_exit`."""

    def __init__(
        self,
        terminal_id: str,
        limit: int,
        on_output: Callable[[str, str], None],
        on_exit: Callable[[str, dict[str, Any]], None],
    ) -> None:
        self.id = terminal_id
        self.output = Output(limit)
        self.process: Process | None = None
        self.status: dict[str, Any] | None = None  # set once it exited and its output is in
        self.ended: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.killing: asyncio.Future[int] | None = None
        self._on_output = on_output
        self._on_exit = on_exit
        self._live = bytearray()
        self._live_cut = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._flush: asyncio.TimerHandle | None = None
        self._read = 0  # bytes read since the last live send
        self._paused = False

    async def start(
        self, spec: Spec, cwd: str, env: dict[str, str], log: Callable[[str], None], inside: Sandboxed | None = None
    ) -> None:
        """Run the command in `cwd` with `env` and its own; `inside`: in the agent's sandbox, at `path` there."""
        argv, env = [spec.command, *spec.args], {**env, **spec.env}
        if inside is not None:
            argv = inside[0].command(argv, inside[1], spec.env)
        try:
            self.process = await Process.spawn(
                argv, cwd=cwd, env=env,
                on_stdout=self._data, on_stderr_line=log, log=log, merged=True,
            )  # fmt: skip
        except SpawnError as exc:
            raise AcpError(INTERNAL_ERROR, str(exc)) from exc

    @property
    def running(self) -> bool:
        return self.process is not None and not self.process.exited.done()

    def _data(self, chunk: bytes) -> None:
        self.output.add(chunk)
        self._read += len(chunk)
        if self._read >= READ_BUDGET and self.process is not None and not self._paused:
            self._paused = True
            self.process.pause_stdout(True)
        self._live += chunk
        excess = len(self._live) - LIVE_MAX
        if excess > 0:
            del self._live[:excess]
            self._live_cut = True
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(LIVE_EVERY, self.flush)

    def flush(self, final: bool = False) -> None:
        """Send the live output gathered since the last time."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        self._read = 0
        if self._paused and self.process is not None:
            self._paused = False
            self.process.pause_stdout(False)
        data = bytes(self._live)
        self._live.clear()
        if self._live_cut:  # what came before was dropped: a fresh start at a character boundary
            self._live_cut = False
            self._decoder.reset()
            data = data[char_start(data) :]
        text = self._decoder.decode(data, final=final)
        if text:
            self._on_output(self.id, text)

    async def watch(self) -> None:
        """Until the command exits and its output is in: then `on_exit`, once."""
        process = self.process
        assert process is not None
        code = await asyncio.shield(process.exited)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DRAIN):
                await asyncio.shield(process.stdout_closed)
        self._ended(code)

    def _ended(self, code: int) -> None:
        if self.status is not None:
            return
        self.flush(final=True)
        self.status = exit_status(code)
        if not self.ended.done():
            self.ended.set_result(self.status)
        self._on_exit(self.id, self.status)

    def answer(self) -> dict[str, Any]:
        """ACP TerminalOutputResponse."""
        out: dict[str, Any] = {"output": self.output.text(final=self.status is not None), "truncated": self.output.truncated}
        if self.status is not None:
            out["exitStatus"] = self.status
        return out

    async def kill(self, grace: float) -> None:
        """SIGTERM to the group and every descendant, SIGKILL `grace` s later; what it left behind ends too."""
        process = self.process
        if process is None:
            return
        if self.killing is None:
            self.killing = asyncio.ensure_future(
                process.stop(StopTimings(after_stdin_close=0.0, after_sigterm=grace, after_sigkill=grace))
            )
        await asyncio.shield(self.killing)
        if process.exited.done():
            self._ended(process.exited.result())


class Terminals:
    """One agent's terminals (for one run of it): created, read, waited for, killed, released."""

    def __init__(
        self,
        spawn: Callable[[Any, str], asyncio.Task[Any]],
        on_output: Callable[[str, str], None],
        on_exit: Callable[[str, dict[str, Any]], None],
        log: Callable[[str], None],
        grace: float = KILL_GRACE,
    ) -> None:
        self._spawn = spawn
        self._on_output = on_output
        self._on_exit = on_exit
        self._log = log
        self.grace = grace
        self.terminals: dict[str, Terminal] = {}
        self.starting = 0  # creates that took a place and have not ended yet
        self.kept = 0  # the output limits of the terminals held and starting, added up
        self.closed = False

    async def create(
        self, params: dict[str, Any], cwd: Callable[[str | None], tuple[int, str]], env: dict[str, str],
        view: View | None = None,
    ) -> dict[str, Any]:
        """terminal/create; `cwd(path)` opens the directory it runs in (None: the agent's), confined:
        its descriptor, and its path; `view`: the agent's sandbox, which the command runs in."""
        if self.closed:
            raise AcpError(INTERNAL_ERROR, "the agent is stopping: no new terminal")
        spec = Spec.parse(params)
        limit = self._reserve(spec.limit)  # before the first await: concurrent creates see each other
        terminal: Terminal | None = None
        try:
            directory, path = await asyncio.to_thread(cwd, spec.cwd)
            terminal = Terminal(f"term-{_RUN}-{next(_ids)}", limit, self._on_output, self._on_exit)
            try:
                # The command starts in the very directory resolved (a path could be swapped meanwhile);
                # where there is no /proc, in the path checked.
                where = f"/proc/self/fd/{directory}" if os.path.isdir("/proc/self/fd") else path
                await terminal.start(spec, where, env, self._log, (view, path) if view is not None else None)
            finally:
                os.close(directory)
            if self.closed:  # the agent stopped meanwhile: its terminals were killed, this one goes too
                raise AcpError(INTERNAL_ERROR, "the agent is stopping: no new terminal")
        except BaseException:
            self.starting -= 1
            self.kept -= limit
            if terminal is not None and terminal.process is not None:
                _background(terminal.kill(self.grace))
            raise
        self.starting -= 1
        self.terminals[terminal.id] = terminal
        self._spawn(terminal.watch(), f"terminal {terminal.id}")
        return {"terminalId": terminal.id}

    def _reserve(self, asked: int) -> int:
        """A place among MAX_TERMINALS and a share of MAX_TOTAL_OUTPUT for a new terminal: the output limit
        it gets (`asked`, or what is left when that is less). Refused with a JSON-RPC error."""
        if len(self.terminals) + self.starting >= MAX_TERMINALS:
            raise AcpError(
                INVALID_PARAMS,
                f"too many terminals: {MAX_TERMINALS} are open or starting; release one (terminal/release) "
                "before creating another",
            )
        left = MAX_TOTAL_OUTPUT - self.kept
        limit = min(asked, left)
        if limit < min(asked, MIN_OUTPUT_LIMIT):
            raise AcpError(
                INVALID_PARAMS,
                f"too much terminal output kept: an agent's terminals keep {_mib(MAX_TOTAL_OUTPUT)} in all and "
                f"{left} bytes are left; release a terminal (terminal/release) or ask for a smaller outputByteLimit",
            )
        if limit < asked:
            self._log(
                f"terminal/create: outputByteLimit {asked} cut to {limit}, what is left of the "
                f"{_mib(MAX_TOTAL_OUTPUT)} an agent's terminals keep in all"
            )
        self.starting += 1
        self.kept += limit
        return limit

    def get(self, params: dict[str, Any]) -> Terminal:
        terminal_id = params.get("terminalId")
        if not isinstance(terminal_id, str):  # a list or an object is no key to look up
            raise AcpError(INVALID_PARAMS, "terminalId must be a string")
        terminal = self.terminals.get(terminal_id)
        if terminal is None:
            raise AcpError(INVALID_PARAMS, f"unknown terminal: {terminal_id[:100]}")
        return terminal

    def output(self, params: dict[str, Any]) -> dict[str, Any]:
        return self.get(params).answer()

    async def wait_for_exit(self, params: dict[str, Any]) -> dict[str, Any]:
        terminal = self.get(params)
        return dict(await asyncio.shield(terminal.ended))

    async def kill(self, params: dict[str, Any]) -> dict[str, Any]:
        await self.get(params).kill(self.grace)
        return {}

    async def release(self, params: dict[str, Any]) -> dict[str, Any]:
        terminal = self.get(params)
        del self.terminals[terminal.id]
        self.kept -= terminal.output.limit
        terminal.output.drop()  # what it still prints while it dies is nobody's
        await terminal.kill(self.grace)
        return {}

    async def close(self) -> None:
        """The agent stops: every terminal is killed, in parallel, and forgotten."""
        self.closed = True
        terminals = list(self.terminals.values())
        self.terminals.clear()
        running = [t for t in terminals if t.running]
        if running:
            self._log(f"killing {len(running)} terminal(s) of the agent")
        await asyncio.gather(*(t.kill(self.grace) for t in terminals), return_exceptions=True)


_killing: set[asyncio.Task[None]] = set()


def _background(kill: Coroutine[Any, Any, None]) -> None:
    """A kill that must go on though the request that started the command failed or was cancelled."""
    task = asyncio.ensure_future(kill)
    _killing.add(task)
    task.add_done_callback(_killing.discard)


def _mib(size: int) -> str:
    return f"{size // (1024 * 1024)} MiB"
