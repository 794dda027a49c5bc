"""`deck serve`: a deck with no frontend of its own, its clients on a Unix socket.

The socket is `socket_path(NAME)`, in a folder of the user's own (`deck.serverdir`).
It is 0600, and each peer is checked again with SO_PEERCRED: a process of another
uid (root included) gets one error line and is closed.

Beside the socket, NAME.lock is held (flock) for the server's whole life, so two servers of
one name cannot run and a server killed by SIGKILL leaves nothing that stops the next:
whoever holds the lock owns the name, and a socket found without it is stale and replaced.
NAME.json says who runs there (pid, config, since) for `deck ls`.

The wire is the jsonl bridge's (`deck.wire`), unchanged: every connection gets every event
line, sends JSON-RPC requests and gets their responses. Each event is encoded once, batched
with the others of the same loop iteration, and the same bytes are written to every client.
Writes never wait for a client: what the kernel does not take at once is queued by the
client's transport, and a client whose queue grows past `QUEUE_LIMIT` (it stopped reading)
is disconnected with a log line; the others and the deck go on at full speed. It can attach
again and resync from a snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deck.acp.connection import LineFramer
from deck.errors import INVALID_REQUEST
from deck.events import ClientsChanged, Event, now_iso
from deck.frontend import Frontend
from deck.proc.storage import replace_in
from deck.remote.peer import Peer, request_framer
from deck.remote.serverdir import NAME_RE, AlreadyRunning, NoServer, ServerError, check_name, open_dir, socket_dir
from deck.runtime.local import LocalClient
from deck.wire import RequestReader, encode_event, error_line, to_bytes

if TYPE_CHECKING:
    from deck.remote.web import WebListening, WebServer
    from deck.runtime.deck import Deck

log = logging.getLogger(__name__)

#: How long the count of clients must hold before `clients:changed` says it, in seconds.
CLIENTS_SETTLE = 0.15
#: How long a server that ends waits for its clients to take their last lines.
FAREWELL_SECONDS = 2.0
#: The most bytes of one client's request lines read in a turn of the event loop, before the agents and
#: the other clients get theirs: what one read of the socket brings (asyncio reads 256 KiB at a time).
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


@dataclass
class Registration:
    """What NAME.json says of a running server."""

    name: str
    pid: int
    config: str
    since: str
    socket: str
    #: The page's address (`deck serve --web`), without its token; "" when it serves none.
    web: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "pid": self.pid, "config": self.config, "since": self.since, "socket": self.socket, "web": self.web
        }


def read_registration(directory: int, name: str) -> Registration | None:
    try:
        fd = os.open(f"{name}.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read(64 * 1024))
        return Registration(
            str(data["name"]), int(data["pid"]), str(data["config"]), str(data["since"]), str(data["socket"]), str(data.get("web") or "")
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _lock(directory: int, name: str, *, wait: bool = False) -> int | None:
    """NAME.lock, locked: its descriptor, or None when another process holds it (a server runs)."""
    while True:
        fd = os.open(f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=directory)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        # The file locked must still be the one at the name: a server that ended removes it.
        try:
            same = os.stat(f"{name}.lock", dir_fd=directory, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _remove(directory: int, name: str, suffixes: tuple[str, ...]) -> None:
    for suffix in suffixes:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{name}{suffix}", dir_fd=directory)


@dataclass
class Listening:
    """A server's claim on its name: the lock held, the socket bound and listening, NAME.json written."""

    name: str
    path: Path
    sock: socket.socket
    directory: int
    lock: int
    registration: Registration

    def close(self) -> None:
        """Stop listening: the socket goes, no client comes any more (the name stays taken)."""
        if self.lock >= 0:
            self.sock.close()
            _remove(self.directory, self.name, (".sock",))

    def release(self) -> None:
        """Close, then give the name up (the lock goes): another server may take it. Safe to call twice."""
        if self.lock < 0:
            return
        self.close()
        _remove(self.directory, self.name, (".json", ".token", ".lock"))
        os.close(self.lock)
        os.close(self.directory)
        self.lock = -1


def listen(name: str, config: str, *, web: str = "") -> Listening:
    """Claim server `name`: lock it, replace a stale socket, bind and listen (0600), register it
    (with `web`, the address of the page it serves).

    A live server of that name is an AlreadyRunning error naming its pid."""
    check_name(name)
    directory = open_dir(create=True)
    try:
        lock = _lock(directory, name)
        if lock is None:
            known = read_registration(directory, name)
            pid = f"pid {known.pid}" if known else "pid unknown"
            raise AlreadyRunning(f"a deck server named {name} is already running ({pid})")
        try:
            path = socket_dir() / f"{name}.sock"
            if len(os.fsencode(path)) >= 108:
                raise ServerError(f"the socket path {path} is too long for a Unix socket: set XDG_RUNTIME_DIR to a shorter folder")
            _remove(directory, name, (".sock", ".json", ".token"))  # stale: its server is gone, since we hold the lock
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(str(path))
                os.chmod(path, 0o600, follow_symlinks=False)  # nobody else can enter the folder meanwhile
                sock.listen(64)
                sock.setblocking(False)
            except OSError as exc:
                sock.close()
                raise ServerError(f"cannot listen on {path}: {exc.strerror or exc}") from None
            registration = Registration(name, os.getpid(), config, now_iso(), str(path), web)
            data = json.dumps(registration.to_dict()).encode()
            replace_in(directory, f"{name}.json", data, 0o600)
            return Listening(name, path, sock, directory, lock, registration)
        except BaseException:
            _remove(directory, name, (".sock", ".json", ".token", ".lock"))
            os.close(lock)
            raise
    except BaseException:
        os.close(directory)
        raise


def registration(name: str) -> Registration | None:
    """What NAME.json says of server `name` (None: no such file, or no folder of the user's own)."""
    try:
        directory = open_dir(create=False)
    except ServerError:
        return None
    try:
        return read_registration(directory, check_name(name))
    finally:
        os.close(directory)


def wait_free(name: str, timeout: float) -> bool:
    """Wait up to `timeout` seconds until no server holds `name` (its process may still be ending); True if free."""
    try:
        directory = open_dir(create=False)
    except ServerError:
        return True
    deadline = time.monotonic() + timeout
    try:
        while _held(directory, check_name(name)):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)  # another process's lock: nothing to wait on but the lock itself
        return True
    finally:
        os.close(directory)


def _held(directory: int, name: str) -> bool:
    """Whether a process holds NAME.lock now (never creating it)."""
    try:
        fd = os.open(f"{name}.lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def running() -> list[Registration]:
    """The servers running now, by name; what stale ones left (killed by SIGKILL) is removed."""
    try:
        directory = open_dir(create=False)
    except NoServer:
        return []
    try:
        names = sorted({n.rsplit(".", 1)[0] for n in os.listdir(directory) if n.endswith((".json", ".lock", ".sock"))})
        found = []
        for name in names:
            if not NAME_RE.fullmatch(name):
                continue
            lock = _lock(directory, name)
            if lock is not None:  # nobody holds it: no server
                _remove(directory, name, (".sock", ".json", ".token", ".lock"))
                os.close(lock)
                continue
            known = read_registration(directory, name)
            if known is not None:
                found.append(known)
        return found
    finally:
        os.close(directory)


# -- the server ------------------------------------------------------------------------------


class Connection(Peer, asyncio.Protocol):
    """One client on the socket: the lines it sends are requests, every event and its responses go back."""

    def __init__(self, server: ServerFrontend, id: int) -> None:
        super().__init__(server, id)
        self.framer: LineFramer | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._lost = asyncio.get_running_loop().create_future()
        sock = transport.get_extra_info("socket")
        try:
            self.pid, self.uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
        except (OSError, AttributeError, struct.error):
            self.pid, self.uid = 0, -1
        if self.uid != os.getuid():
            log.warning("refused a client of uid %d (pid %d): the server is uid %d's", self.uid, self.pid, os.getuid())
            message = f"refused: this deck server is uid {os.getuid()}'s, and you are uid {self.uid}"
            transport.write(to_bytes([error_line(None, INVALID_REQUEST, message)]))
            self.closed = True
            transport.close()
            return
        self.since = now_iso()
        self.command = _command(self.pid)
        self.reader = RequestReader(self.server.client, self.respond)
        self.framer = request_framer(self)
        self.server.attach(self)

    def data_received(self, data: bytes) -> None:
        if self.framer is not None and not self.closed:
            self.framer.feed(data)

    def eof_received(self) -> bool:
        """The client is done sending (`socat` at the end of its stdin): its calls are answered, then it is
        detached, as the jsonl bridge answers what was asked before the end of its stdin (a last line
        without its newline included)."""
        if self.framer is not None and not self.closed:
            self.framer.close()
        if self.reader is None or not self.reader.requests:
            return False  # nothing left to answer: closed now
        task = asyncio.get_running_loop().create_task(self._answered_then_closed(self.reader))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)
        return True

    async def _answered_then_closed(self, reader: RequestReader) -> None:
        await reader.drain()
        self.server.flush()
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost()


def _command(pid: int) -> str:
    """The command line of process `pid`, for `DeckService.Clients` ("" if unknown)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read(4096).replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return ""


class ServerFrontend(Frontend):
    """The deck's one "frontend" under `deck serve`: it serves the clients on its socket until the deck ends."""

    name = "serve"
    description = "the clients of a Unix socket (deck serve)"

    def __init__(
        self,
        client: Any,
        *,
        listening: Listening,
        ready_fd: int | None = None,
        web: tuple[WebListening, str] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(client, **options)
        self.listening = listening
        #: The page's socket and token (`deck.remote.web`), with --web.
        self.web_listening = web
        self.web: WebServer | None = None
        self.ready_fd = ready_fd
        self.connections: dict[int, Peer] = {}
        self._next_id = 0
        self._out: list[str] = []
        self._flush_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Clients done sending whose last calls are being answered.
        self.tasks: set[asyncio.Task[None]] = set()
        #: The deck served (`Deck.run` passes its in-process client): the clients come and go as its events.
        self.deck: Deck | None = client.deck if isinstance(client, LocalClient) else None
        self._announced = 0  # the count `clients:changed` said last
        self._count_timer: asyncio.TimerHandle | None = None

    async def run(self) -> int:
        loop = self._loop = asyncio.get_running_loop()
        if self.deck is not None:
            self.deck.services["DeckService"].attached = self.clients
        self.client.subscribe(self.on_event)
        server = await loop.create_unix_server(self._connection, sock=self.listening.sock)
        log.info("deck server %s listening on %s (pid %d)", self.listening.name, self.listening.path, os.getpid())
        if self.web_listening is not None:
            from deck.remote.web import WebServer  # aiohttp, only for a server that serves the page

            self.web = WebServer(self, *self.web_listening)
            await self.web.start()
        self._ready()
        try:
            await asyncio.Event().wait()  # until the deck ends: a signal, DeckService.Shutdown
            return 0
        finally:
            server.close()
            self.listening.close()  # no new client from now on
            if self.web is not None:
                self.web.closing = True
            log.info("deck server %s stopping", self.listening.name)
            try:
                await self.client.close()  # every agent stops; the clients see their last states
            finally:
                if self._count_timer is not None:
                    self._count_timer.cancel()
                self.flush()
                await self._farewell()
                if self.web is not None:
                    await self.web.stop()
                self.client.unsubscribe(self.on_event)
                self.listening.release()  # the name is free: a new server of it may start

    def _ready(self) -> None:
        if self.ready_fd is None:
            return
        with contextlib.suppress(OSError):
            os.write(self.ready_fd, b"ready\n")
        with contextlib.suppress(OSError):
            os.close(self.ready_fd)
        self.ready_fd = None

    async def _farewell(self) -> None:
        connections = list(self.connections.values())
        for connection in connections:
            connection.close()
        if connections:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FAREWELL_SECONDS):
                    await asyncio.gather(*(c.wait_closed() for c in connections))
        for connection in connections:
            if connection.transport is not None and not connection.transport.is_closing():
                connection.transport.abort()

    # -- clients -------------------------------------------------------------------------------

    def _connection(self) -> Connection:
        return Connection(self, self.next_id())

    def next_id(self) -> int:
        """The id of the next client, whatever carries it."""
        self._next_id += 1
        return self._next_id

    def attach(self, connection: Peer) -> None:
        self.connections[connection.id] = connection
        log.info("client %d attached (%s): %d attached", connection.id, connection.who(), len(self.connections))
        self._count_soon()

    def detach(self, connection: Peer) -> None:
        if self.connections.pop(connection.id, None) is None:
            return
        log.info("client %d detached (%s): %d attached", connection.id, connection.who(), len(self.connections))
        self._count_soon()

    def _count_soon(self) -> None:
        """`clients:changed` once the count has held for CLIENTS_SETTLE: a client that comes and goes
        at once (`deck ls` asking) changes nothing the others see."""
        if self._count_timer is not None:
            self._count_timer.cancel()
        if self._loop is not None:
            self._count_timer = self._loop.call_later(CLIENTS_SETTLE, self._announce_count)

    def _announce_count(self) -> None:
        self._count_timer = None
        if len(self.connections) != self._announced:
            self._announced = len(self.connections)
            self._deck_emit(ClientsChanged(self._announced))

    def _deck_emit(self, event: Event) -> None:
        if self.deck is not None:
            self.deck.emit(event)

    def clients(self) -> list[dict[str, Any]]:
        """`DeckService.Clients()`: the clients attached, in the order they came."""
        return [c.info() for c in self.connections.values()]

    # -- events out ------------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if self.connections:
            self._out.append(encode_event(event))
            if not self._flush_scheduled and self._loop is not None:
                self._flush_scheduled = True
                self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """The events announced so far, written to every client: encoded once, the same bytes for all."""
        self._flush_scheduled = False
        if not self._out:
            return
        data = to_bytes(self._out)
        self._out.clear()
        for connection in list(self.connections.values()):
            connection.send(data)
