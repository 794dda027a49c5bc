"""The private Unix socket between a deck and the MCP servers its agents run.

The socket lives in a directory only this user can enter (0700: under
$XDG_RUNTIME_DIR when it is usable, else a fresh temp dir), is itself 0600, and
takes only connections from this user's processes (SO_PEERCRED where the system
has it). Every request carries the asking agent's name and its token, an HMAC of
that name under a random secret of this deck: an MCP server holds the token of
its own agent only, so it cannot ask on behalf of another.

One connection per request: a JSON line `{"agent", "token", "method", "params"}`
in, a JSON line `{"result": …}` or `{"error": "…"}` out. Closing the connection
early cancels the request (the requester gave up: its tool call was cancelled).

What a connection may take is bounded, whatever its client sends. A connection
belongs to the agent whose process tree the connecting process is in (SO_PEERCRED
and its parents), or to no agent; each agent, and no agent, has MAX_CONNECTIONS at
once, a request line of MAX_LINE bytes at most and MAX_BUFFERED bytes of request
lines not yet complete across its connections. Past any of these the connection gets
an error line and is closed, with a line in the agent's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import json
import logging
import os
import secrets
import shutil
import socket
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil
from deck import TooDeep, decode_line
from deck.errors import ServiceError, UnknownMethod

from .asks import AskError, Asks, Notes

log = logging.getLogger(__name__)

ENV_SOCKET = "DECK_ASK_SOCKET"
ENV_AGENT = "DECK_ASK_AGENT"
ENV_TOKEN = "DECK_ASK_TOKEN"
#: Which of the agent's sessions started this server: its own conversation, or an ask's ticket.
ENV_ORIGIN = "DECK_ASK_ORIGIN"
#: Outside this package, so that starting it imports none of the plugin (announcements_mcp.py).
SERVER_MODULE = "deck.plugins.announcements_mcp"
#: A request's line, in bytes: a question may be long, this is far above any real one.
MAX_LINE = 1024 * 1024
#: Connections one agent's processes may have open at once (and processes in no agent's tree, in all).
MAX_CONNECTIONS = 8
#: What one agent's connections may hold of request lines not yet complete, in all, in bytes.
MAX_BUFFERED = 4 * 1024 * 1024
#: What is read of a connection at once (its stream holds twice this at most before reading pauses).
READ_CHUNK = 64 * 1024
#: How far up from the connecting process an agent's process is looked for.
MAX_ANCESTRY = 64
#: AF_UNIX paths are limited to about 108 bytes.
MAX_SOCKET_PATH = 100


def agent_token(secret: bytes, agent: str) -> str:
    return hmac.new(secret, agent.encode(), hashlib.sha256).hexdigest()


def private_dir() -> Path:
    """A new directory only this user can enter, for this deck's socket."""
    # A Unix socket path is short (about 107 bytes): the first place with room wins.
    for base in (os.environ.get("XDG_RUNTIME_DIR"), tempfile.gettempdir(), "/tmp"):
        if base and os.path.isdir(base) and os.access(base, os.W_OK) and len(base) < MAX_SOCKET_PATH - 30:
            return Path(tempfile.mkdtemp(prefix="deck-", dir=base))  # mkdtemp makes it 0700
    raise OSError("no writable directory with a path short enough for a Unix socket")


class Refused(Exception):
    """A connection deck will not serve; the message is its error line."""


class Pool:
    """The connections of one agent's processes (`agent`), or of processes in no agent's tree (None)."""

    def __init__(self, agent: str | None, notes: Notes) -> None:
        self.agent = agent
        self.connections = 0
        self.buffered = 0  # bytes of request lines still coming
        self.notes = notes

    @property
    def who_has(self) -> str:
        """Its owner, and the verb that goes with it, for an error line."""
        return f"{self.agent} has" if self.agent is not None else "processes in no agent's tree have"


class Bridge:
    """The deck's side: a Unix server answering `ask_agent`, `list_agents` and `changed_files` for its agents."""

    def __init__(self, asks: Asks) -> None:
        self.asks = asks
        self.secret = secrets.token_bytes(32)
        self.directory: Path | None = None
        self.path: Path | None = None
        self._sock: socket.socket | None = None
        self._server: asyncio.AbstractServer | None = None
        self._serving: asyncio.Task[None] | None = None
        self._clients: set[asyncio.Task[None]] = set()
        self._pools: dict[str | None, Pool] = {}
        self._failed: str | None = None

    # -- what agents get ------------------------------------------------------------------------

    def mcp_server(self, agent: str, origin: str) -> dict[str, Any]:
        """The ACP stdio `McpServer` entry for `agent`'s `session/new`; `origin` names that session."""
        self.listen()
        assert self.path is not None
        env = {
            ENV_SOCKET: str(self.path), ENV_AGENT: agent, ENV_TOKEN: agent_token(self.secret, agent), ENV_ORIGIN: origin,
        }  # fmt: skip
        return {
            "name": "deck",
            "command": os.path.abspath(sys.executable),
            "args": ["-P", "-m", SERVER_MODULE],  # -P: a `deck` folder in the agent's cwd is not this one
            "env": [{"name": k, "value": v} for k, v in env.items()],
        }

    # -- serving --------------------------------------------------------------------------------

    async def start(self) -> None:
        self.listen()

    def listen(self) -> None:
        """Bind the socket now (synchronously, so a session/new can name it) and serve it."""
        if self._sock is not None:
            return
        if self._failed is not None:
            raise OSError(self._failed)  # said once; no new directory per session
        try:
            self.directory = private_dir()
            self.asks.deck.private_folders.append(self.directory)  # out of agents' fs/* reach
            self.asks.deck.reachable_folders.append(self.directory)  # but its socket in a sandbox's
            self.path = self.directory / "ask.sock"
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old = os.umask(0o177)
            try:
                sock.bind(str(self.path))
            finally:
                os.umask(old)
        except OSError as exc:
            if self.directory is not None:
                shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = self.path = None
            self._failed = f"inter-agent asks are off: cannot open their socket: {exc}"
            raise OSError(self._failed) from exc
        os.chmod(self.path, 0o600)
        sock.listen(64)
        sock.setblocking(False)
        self._sock = sock
        self._serving = self.asks.deck.spawn(self._serve(sock), "announcements socket")

    async def _serve(self, sock: socket.socket) -> None:
        self._server = await asyncio.start_unix_server(self._on_client, sock=sock, limit=READ_CHUNK)
        await self._server.serve_forever()

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        try:
            pool = self._admit(writer)
            if pool is not None:
                try:
                    await self._serve_client(reader, writer, pool)
                finally:
                    pool.connections -= 1
        except (ConnectionError, ValueError, asyncio.IncompleteReadError) as exc:
            log.info("announcements: a client went away: %r", exc)
        finally:
            self._clients.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _admit(self, writer: asyncio.StreamWriter) -> Pool | None:
        """The pool a new connection counts in, its place taken; None when it is not served (an error line
        is on its way when it is one too many)."""
        peer = _peer(writer)
        if peer is not None and peer[1] != os.getuid():
            return None  # only this user's processes (the 0700 directory says so already; this checks)
        pool = self._pool(self._owner(peer[0]) if peer is not None else None)
        if pool.connections >= MAX_CONNECTIONS:
            why = (f"too many connections: {pool.who_has} {pool.connections} open to deck's ask socket, the most "
                   "one agent may have; this one is closed")  # fmt: skip
            pool.notes.note(f"ask socket: a connection refused: {why}")
            writer.write(_line({"error": why}))
            return None
        pool.connections += 1
        return pool

    def _pool(self, agent: str | None) -> Pool:
        pool = self._pools.get(agent)
        if pool is None:
            write = functools.partial(self.asks.note, agent) if agent is not None else _warn
            pool = self._pools[agent] = Pool(agent, Notes(write))
        return pool

    def _owner(self, pid: int) -> str | None:
        """The agent whose process tree `pid` is in, or None."""
        agents = {a.process.pid: name for name, a in self.asks.deck.agents.items() if a.process is not None}
        try:
            for _ in range(MAX_ANCESTRY):
                if pid in agents:
                    return agents[pid]
                if pid <= 1:
                    return None
                pid = psutil.Process(pid).ppid()
        except psutil.Error:
            pass  # it is gone already
        return None

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pool: Pool) -> None:
        """One connection's request, read within `pool`'s bounds, and its answer."""
        try:
            line = await read_request(reader, pool)
        except Refused as exc:
            pool.notes.note(f"ask socket: a request refused: {exc}")
            writer.write(_line({"error": str(exc)}))
            return
        answer = await self._answer_unless_gone(line, reader, pool.agent)
        if answer is not None:
            writer.write(_line(answer))
            await writer.drain()

    async def _answer_unless_gone(
        self, line: bytes, reader: asyncio.StreamReader, owner: str | None = None
    ) -> dict[str, Any] | None:
        """The answer to `line`; None when the client hung up first (its request is then cancelled)."""
        work = asyncio.ensure_future(self.answer(line, owner))
        gone = asyncio.ensure_future(reader.read(1))  # the client sends nothing more: data or EOF means it left
        try:
            done, _ = await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
            if work in done:
                return work.result()
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            return None
        finally:
            gone.cancel()
            work.cancel()

    async def answer(self, line: bytes, owner: str | None = None) -> dict[str, Any]:
        """The answer to a request line; `owner`: the agent whose process sent it, if known (only its own
        name is then accepted)."""
        try:
            request = decode_line(line.decode())  # strict values, bounded nesting: what comes back is strict JSON
        except TooDeep as exc:
            return {"error": f"not a JSON request: {exc}"}
        except ValueError:
            return {"error": "not a JSON request"}
        if not isinstance(request, dict):
            return {"error": "not a JSON request"}
        agent, token = request.get("agent"), request.get("token")
        if not isinstance(agent, str) or not isinstance(token, str):
            return {"error": "not authorized"}
        if not hmac.compare_digest(token, agent_token(self.secret, agent)):
            log.warning("announcements: a request for %r with a wrong token was refused", agent)
            return {"error": "not authorized"}
        if owner is not None and agent != owner:
            log.warning("announcements: a request for %r from %r's processes was refused", agent, owner)
            return {"error": "not authorized"}
        method, params = request.get("method"), request.get("params") or {}
        if not isinstance(params, dict):
            return {"error": "params must be an object"}
        try:
            if method == "list_agents":
                return {"result": self.asks.list_agents(agent)}
            if method == "changed_files":
                return {"result": await changed_files(self.asks.deck, agent)}
            if method == "ask_agent":
                target, question = params.get("agent"), params.get("question")
                if not isinstance(target, str) or not isinstance(question, str):
                    return {"error": "ask_agent needs the parameters agent and question, both strings"}
                origin = request.get("origin")
                return {"result": await self.asks.ask(agent, target, question, origin if isinstance(origin, str) else "")}
        except AskError as exc:
            return {"error": str(exc)}
        return {"error": f"unknown method {method!r}"}

    async def close(self) -> None:
        for task in list(self._clients):
            task.cancel()
        if self._server is not None:
            self._server.close()
        if self._serving is not None:
            self._serving.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._serving
        if self._sock is not None:
            self._sock.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        self._sock = self._server = self._serving = None


def _line(answer: dict[str, Any]) -> bytes:
    """An answer as one strict JSON line; one that JSON cannot carry (NaN) is an error answer instead."""
    try:
        return json.dumps(answer, allow_nan=False).encode() + b"\n"
    except (TypeError, ValueError) as exc:
        log.exception("announcements: an answer cannot be sent")
        return json.dumps({"error": f"deck's answer cannot be sent as JSON: {exc}"}).encode() + b"\n"


async def read_request(reader: asyncio.StreamReader, pool: Pool) -> bytes:
    """A connection's request line (at the end of its stream, what came), its bytes counted in `pool` while
    it comes; Refused when it is longer than MAX_LINE, when the pool would hold more than MAX_BUFFERED, or
    when more follows it."""
    line = bytearray()
    try:
        while chunk := await reader.read(READ_CHUNK):
            end = chunk.find(b"\n") + 1
            if 0 < end < len(chunk):
                raise Refused("one request per connection: nothing may follow its line")
            if len(line) + len(chunk) - (end > 0) > MAX_LINE:
                raise Refused(f"a request is {MAX_LINE // 1024 // 1024} MiB at most: this one is longer")
            if pool.buffered + len(chunk) > MAX_BUFFERED:
                raise Refused(
                    f"{pool.who_has} {pool.buffered} bytes of requests still coming in, "
                    f"{MAX_BUFFERED // 1024 // 1024} MiB at most may be: this one is closed"
                )
            pool.buffered += len(chunk)
            line += chunk
            if end:
                break
        return bytes(line)
    finally:
        pool.buffered -= len(line)


async def changed_files(deck: Any, agent: str) -> Any:
    """The files the other agents' worktrees change (`WorktreeService.ChangedFiles`, the worktrees
    plugin's: called by its wire name, as any client would, so that neither plugin imports the other)."""
    try:
        return await deck.call("WorktreeService.ChangedFiles", {"agent": agent})
    except UnknownMethod:
        raise AskError("no worktrees here: the worktrees plugin is off") from None
    except ServiceError as exc:
        raise AskError(f"the worktrees cannot be looked at: {exc}") from None


def _warn(line: str) -> None:
    log.warning("announcements: %s", line)


def _peer(writer: asyncio.StreamWriter) -> tuple[int, int] | None:
    """The connecting process's pid and user id, where the system tells (SO_PEERCRED)."""
    sock = writer.get_extra_info("socket")
    peercred = getattr(socket, "SO_PEERCRED", None)
    if sock is None or peercred is None:
        return None
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i")))
    return pid, uid
