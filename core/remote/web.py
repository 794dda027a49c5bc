"""`deck serve --web [HOST:]PORT`: the server's page over HTTP, and its wire over a WebSocket at `/ws`.

aiohttp serves both, on the deck's own event loop, beside the Unix socket (`deck.remote.server`).
A browser is one more client of the server: a `WebClient` is what a socket `Connection` is,
every event line going to it as one WebSocket text message, its messages read as request lines,
its queue bounded the same way (a tab that stops reading is disconnected, never waited for).

Access (the Security model in docs/security.md):

- a token of 256 bits per server, in NAME.token (0600, in the servers' folder, 0700), removed
  when the server ends; `deck web NAME` prints the page's address with it in the fragment (never
  sent to any server by the browser). The page hands it over as a WebSocket subprotocol
  (`deck.token.T`); a script may send `Authorization: Bearer T` or `?token=T` instead;
- a WebSocket without the right token, or whose `Origin` is not the page's own, is answered 401
  or 403 before it is upgraded: it never gets an event;
- on a loopback address (the default), a request whose `Host` is no loopback name is refused (a
  foreign name resolving to 127.0.0.1 is a DNS rebinding, not the user);
- no CORS header, ever; a Content-Security-Policy that allows the page's own scripts and styles
  and nothing inline; the page renders what agents send through `textContent`, never as HTML;
- the token is written to no log: there is no access log, the token subprotocols are taken out of
  a request before aiohttp sees its subprotocols (it logs those it does not know), a request
  aiohttp cannot read (a NUL in a header) is logged as one line without its bytes, and every log
  line the server writes while it runs has the token cut out;
- whoever can reach the port, token or not, holds little: at most MAX_CONNECTIONS connections in
  all and MAX_CONNECTIONS_PER_PEER from one address (past a cap, the oldest one that is no open
  WebSocket yet is closed to make room, else the new one), a request's head must come whole within
  HEADER_TIMEOUT of its first byte and a connection waits IDLE_TIMEOUT at most for a request; a
  WebSocket message's request lines are read under the socket's budget (`read_requests`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import html
import ipaddress
import json
import logging
import os
import secrets
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import WSMsgType, hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from deck.events import now_iso
from deck.proc.storage import replace_in
from deck.remote.peer import Peer, read_requests, request_framer
from deck.remote.serverdir import ServerError
from deck.tty import one_line
from deck.wire import RequestReader

if TYPE_CHECKING:
    from deck.remote.server import ServerFrontend

log = logging.getLogger("deck.remote.server")

#: The subprotocol the page speaks, and the prefix of the one that carries its token.
PROTOCOL = "deck"
TOKEN_PROTOCOL = "deck.token."
#: Offered beside PROTOCOL, a client takes the lines in batches: each message holds the lines
#: written together (each ended by a newline, as on the socket); else each message is one line.
BATCHES = "deck.lines"
#: The largest message a client may send (a request line); past it the WebSocket is closed (1009).
MAX_MESSAGE = 16 * 1024 * 1024
#: What every answer says to the browser: only the page's own files run, nothing inline, no framing.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
#: The page's files (in deck.frontends, folder web/), by the path they are served at.
PAGE_FILES = {
    "/": ("index.html", "text/html"),
    "/app.js": ("app.js", "text/javascript"),
    "/markdown.js": ("markdown.js", "text/javascript"),
    "/style.css": ("style.css", "text/css"),
    "/icon.svg": ("icon.svg", "image/svg+xml"),
}
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}
#: Connections to the page's port at once, in all and from one address. Each holds one of the deck's
#: descriptors, which its agents and its socket's clients need too.
MAX_CONNECTIONS = 128
MAX_CONNECTIONS_PER_PEER = 32
#: Seconds a request's head (its request line and headers) may take, from its first byte.
HEADER_TIMEOUT = 10.0
#: Seconds a connection that is no open WebSocket may wait for a request (the next one, after an answer).
IDLE_TIMEOUT = 30.0
#: How often, at most, the log says that connections were closed for the caps (with how many since).
CAP_LOG_SECONDS = 60.0
#: The page `deck web --open` hands the browser, in the servers' folder: it leads to the address with the
#: token, which is so on no command line (another user may read those).
OPENER = "{name}.open.html"


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 with or without brackets) is this machine only."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_address(text: str) -> tuple[str, int]:
    """`[HOST:]PORT` (HOST 127.0.0.1 unless given; `[::1]:PORT` for IPv6) as (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host = "127.0.0.1"
    host = host.strip("[]")
    if not port.isdigit() or not 0 <= int(port) <= 65535 or (sep and not host):
        raise ServerError(f"bad --web address {text!r}: give PORT or HOST:PORT (e.g. 8765, 127.0.0.1:8765, [::1]:8765)")
    return host, int(port)


@dataclass
class WebListening:
    """The page's TCP socket, bound and listening before the deck starts (a port in use fails at once)."""

    host: str
    port: int
    sock: socket.socket
    remote: bool

    @property
    def url(self) -> str:
        """The page's address, without its token."""
        host = self.host
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/"


def bind(address: str, *, allow_remote: bool = False) -> WebListening:
    """Listen on `address` ([HOST:]PORT); a host beyond loopback needs `allow_remote`."""
    host, port = parse_address(address)
    if not is_loopback(host) and not allow_remote:
        raise ServerError(
            f"--web {address} would serve the page beyond this machine: add --web-allow-remote "
            "(and put it behind TLS: README, Web), or use 127.0.0.1"
        )
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ServerError(f"cannot serve the page on {address}: {exc.strerror}") from None
    family, kind, proto, _name, where = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(where)
        sock.listen(64)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ServerError(f"cannot serve the page on {address}: {exc.strerror or exc}") from None
    return WebListening(host, sock.getsockname()[1], sock, allow_remote)


def make_token(directory: int, name: str) -> str:
    """A new token for server `name`, written to NAME.token (0600) in the servers' folder."""
    token = secrets.token_urlsafe(32)
    replace_in(directory, f"{name}.token", token.encode() + b"\n", 0o600)
    return token


def write_opener(directory: int, name: str, url: str) -> str:
    """A page that leads the browser to `url` (the address with its token), written 0600 to the servers'
    folder (open as `directory`, 0700) as OPENER, replacing the last one: its name, for the browser's
    command line instead of the token. The server removes it when it ends."""
    opener = OPENER.format(name=name)
    target = json.dumps(url).replace("<", "\\u003c")  # a string of the script's, that no `</script>` ends
    page = (
        '<!doctype html>\n<html><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">\n'
        f'<meta http-equiv="refresh" content="0; url={html.escape(url)}">\n'
        f"<script>location.replace({target})</script>\n"
        "<title>deck</title></head><body>opening the deck page…</body></html>\n"
    )
    replace_in(directory, opener, page.encode(), 0o600)
    return opener


def _remove_opener(directory: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(OPENER.format(name=name), dir_fd=directory)


# -- WebSocket frames out ------------------------------------------------------------------------


def text_frames(data: bytes) -> bytes:
    """Wire lines (each ended by a newline) as WebSocket text frames from the server, one per line."""
    out: list[bytes] = []
    for line in data.split(b"\n")[:-1]:
        out += (_header(len(line)), line)
    return b"".join(out)


def text_frame(data: bytes) -> bytes:
    """`data` as one WebSocket text frame from the server (never masked)."""
    return _header(len(data)) + data


def _header(size: int) -> bytes:
    if size < 126:
        return b"\x81" + bytes((size,))
    if size < 65536:
        return b"\x81\x7e" + struct.pack("!H", size)
    return b"\x81\x7f" + struct.pack("!Q", size)


class WebClient(Peer):
    """One browser (or script) on `/ws`: each text message it sends holds request lines; each line of
    the wire goes back as one text message, written straight to its transport, never waited for."""

    def __init__(
        self, server: ServerFrontend, web: WebServer, id: int, ws: web.WebSocketResponse, request: web.Request, *, batches: bool
    ) -> None:
        super().__init__(server, id)
        self.web = web
        #: The lines written together go as one message (the client offered BATCHES).
        self.batches = batches
        self.ws = ws
        self.transport = request.transport
        self.address = request.remote or "?"
        agent = one_line(request.headers.get("User-Agent", ""), 120)  # the browser's words: printable, one line
        self.since = now_iso()
        self.command = f"web {self.address}" + (f" ({agent})" if agent else "")
        self._lost = asyncio.get_running_loop().create_future()
        self.reader = RequestReader(server.client, self.respond)
        self.framer = request_framer(self)

    def framed(self, data: bytes) -> bytes:
        return self.web.frames(data, self.batches)

    def who(self) -> str:
        return f"web {self.address}"

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            task = asyncio.get_running_loop().create_task(self.ws.close())
            self.web.tasks.add(task)
            task.add_done_callback(self.web.tasks.discard)

    def info(self) -> dict[str, Any]:
        return {**super().info(), "web": True}

    async def serve(self) -> None:
        """Read the client's messages until it goes; each line in them is a request, read as the socket
        reads its lines (a message of 16 MiB of requests holds the other clients up no longer than the
        same lines on the socket would)."""
        try:
            async for message in self.ws:
                if message.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    data = message.data.encode() if isinstance(message.data, str) else message.data
                    await read_requests(self, self.framer, data)
                elif message.type == WSMsgType.ERROR:
                    log.warning("client %d (%s) closed: %s", self.id, self.who(), self.ws.exception())
        finally:
            self.lost()


class PortConnection(asyncio.Protocol):
    """One TCP connection to the page's port, in front of aiohttp's handler of it: counted against the
    caps, and closed when it waits for a request longer than IDLE_TIMEOUT or sends a request's head
    slower than HEADER_TIMEOUT. Once an open WebSocket (its token checked), it is left alone."""

    def __init__(self, server: WebServer) -> None:
        self.server = server
        self.handler: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        #: An open WebSocket, never closed for the caps or the timeouts.
        self.websocket = False
        #: A request of it is being answered.
        self.busy = False
        #: Bytes came since it waits for a request (or while one was answered: the next one's).
        self.heard = False
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if not self.server.admit(self):
            transport.abort()  # at once: its descriptor goes now
            return
        self.handler = self.server.make_handler()
        self.waiting()
        self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.handler is None:
            return
        if not self.heard and not self.websocket:
            self.heard = True
            if not self.busy:  # the first byte of a request: its head comes within HEADER_TIMEOUT
                self._arm(min(self._deadline, self.server.loop.time() + self.server.header_timeout))
        self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received() if self.handler is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.server.release(self)
        if self.handler is not None:
            self.handler.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.handler is not None:
            self.handler.resume_writing()

    # -- what it does, as the server sees it ----------------------------------------------------

    def answering(self) -> None:
        """A request of it is being answered: no deadline meanwhile."""
        self.busy, self.heard = True, False
        self._disarm()

    def waiting(self) -> None:
        """It waits for a request: IDLE_TIMEOUT at most, HEADER_TIMEOUT if the request has begun."""
        self.busy = False
        now = self.server.loop.time()
        self._arm(now + (self.server.header_timeout if self.heard else self.server.idle_timeout))

    def upgraded(self) -> None:
        """It is an open WebSocket now, its token checked: no deadline, never closed for the caps."""
        self.websocket = True
        self._disarm()

    def close(self) -> None:
        """Closed at once (the caps, a deadline): nothing more is read or written."""
        self._disarm()
        self.server.release(self)
        if self.transport is not None:
            self.transport.abort()

    def _arm(self, deadline: float) -> None:
        self._disarm()
        self._deadline = deadline
        self._timer = self.server.loop.call_at(deadline, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._deadline = float("inf")

    def _expired(self) -> None:
        self._timer = None
        if not self.websocket:
            self.close()


class WebServer:
    """The HTTP side of a deck server: the page's files, and `/ws` for its clients."""

    def __init__(self, frontend: ServerFrontend, listening: WebListening, token: str) -> None:
        self.frontend = frontend
        self.listening = listening
        self.token = token
        self.tasks: set[asyncio.Task[Any]] = set()
        self.files = _page_files()
        self._frames: dict[bool, tuple[bytes, bytes]] = {False: (b"", b""), True: (b"", b"")}
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.AbstractServer | None = None
        #: The server is ending: a browser that reconnects meanwhile is told so, and not attached.
        self.closing = False
        # The caps and the deadlines, as the module says them when the server is made.
        self.max_connections = MAX_CONNECTIONS
        self.max_per_peer = MAX_CONNECTIONS_PER_PEER
        self.header_timeout = HEADER_TIMEOUT
        self.idle_timeout = IDLE_TIMEOUT
        #: The connections open, oldest first: all of them, and by the address they come from.
        self.connections: dict[asyncio.Transport, PortConnection] = {}
        self.peers: dict[str, dict[asyncio.Transport, PortConnection]] = {}
        self.loop = asyncio.get_running_loop()
        self._handlers: Callable[[], asyncio.Protocol] | None = None  # aiohttp's, one per connection
        self._cut = 0  # connections closed for the caps since the log last said so
        self._cut_said = -CAP_LOG_SECONDS
        self._scrub = _Scrub(token)
        self._scrubbed: list[logging.Handler] = []

    def frames(self, data: bytes, batches: bool) -> bytes:
        """`data` as WebSocket frames (one per line, or one for all with `batches`), made once for every
        client the same bytes go to."""
        made = self._frames[batches]
        if made[0] is not data:
            made = self._frames[batches] = (data, text_frame(data) if batches else text_frames(data))
        return made[1]

    async def start(self) -> None:
        self._scrubbed = _log_handlers()
        for handler in self._scrubbed:
            handler.addFilter(self._scrub)
        _remove_opener(self.frontend.listening.directory, self.frontend.listening.name)  # a dead server's
        app = web.Application(middlewares=[self._guard], client_max_size=64 * 1024)
        app.router.add_get("/ws", self._websocket)
        app.router.add_get("/acp", self._acp)  # ACP over a WebSocket: deck.remote.acp_web
        for path in self.files:
            app.router.add_get(path, self._file)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=1.0, logger=_RequestLog()
        )
        await self._runner.setup()
        self._handlers = self._runner.server
        self._listener = await self.loop.create_server(lambda: PortConnection(self), sock=self.listening.sock)
        log.info("web page on %s (deck web %s prints its address with the token)", self.listening.url, self.frontend.listening.name)

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()  # no new connection
        try:
            if self._runner is not None:
                await self._runner.cleanup()
            self.listening.sock.close()
        finally:
            _remove_opener(self.frontend.listening.directory, self.frontend.listening.name)
            for handler in self._scrubbed:
                handler.removeFilter(self._scrub)

    # -- connections -----------------------------------------------------------------------------

    def make_handler(self) -> asyncio.Protocol:
        """aiohttp's handler of a new connection."""
        assert self._handlers is not None
        return self._handlers()

    def admit(self, connection: PortConnection) -> bool:
        """Whether a new connection may stay: within the caps, or once the oldest connection that is no
        open WebSocket (of its address, or of all) is closed to make room, one waiting for a request
        rather than one being answered."""
        caps = ((self.peers.get(connection.peer, {}), self.max_per_peer), (self.connections, self.max_connections))
        for among, cap in caps:
            if len(among) < cap:
                continue
            closable = [c for c in among.values() if not c.websocket]
            self._capped(connection.peer, closed_new=not closable)
            if not closable:  # every one is a client of the page's: the new one goes
                return False
            next((c for c in closable if not c.busy), closable[0]).close()
        assert connection.transport is not None
        self.connections[connection.transport] = connection
        self.peers.setdefault(connection.peer, {})[connection.transport] = connection
        return True

    def release(self, connection: PortConnection) -> None:
        """A connection closed: it no longer counts."""
        if connection.transport is None or self.connections.pop(connection.transport, None) is None:
            return
        mine = self.peers.get(connection.peer)
        if mine is not None:
            mine.pop(connection.transport, None)
            if not mine:
                del self.peers[connection.peer]

    def _capped(self, peer: str, *, closed_new: bool) -> None:
        """A connection closed for the caps: said in the log at most every CAP_LOG_SECONDS, with how many."""
        self._cut += 1
        now = time.monotonic()
        if now - self._cut_said >= CAP_LOG_SECONDS:
            which = "a new one" if closed_new else "the oldest waiting"
            log.warning(
                "web connections at their cap (%d in all, %d from one address): %d closed, the last %s from %s",
                self.max_connections, self.max_per_peer, self._cut, which, peer,
            )  # fmt: skip
            self._cut, self._cut_said = 0, now

    # -- requests ------------------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Every answer carries the security headers; a loopback server refuses a foreign `Host`, and
        every server a request that names none. The connection waits for no deadline meanwhile."""
        connection = self.connections.get(request.transport) if request.transport is not None else None
        if connection is not None:
            connection.answering()
        try:
            given = request.headers.get(hdrs.HOST)  # aiohttp's `request.host` is the socket's address without one
            if given is None:
                log.warning("refused a web request at %s: it names no Host", request.remote or "?")
                response: web.StreamResponse = web.Response(status=421, text="refused: a request must name its Host\n")
            elif not self.listening.remote and not is_loopback(urlsplit(f"//{given}").hostname or ""):
                where, named = request.remote or "?", one_line(given, 100)
                log.warning("refused a web request at %s: Host %r is not a loopback name", where, named)
                response = web.Response(status=421, text="refused: this deck page answers on loopback only\n")
            else:
                try:
                    response = await handler(request)
                except web.HTTPException as exc:
                    response = web.Response(status=exc.status, text=f"{exc.reason}\n")
            if not response.prepared:
                response.headers.update(SECURITY_HEADERS)
            return response
        finally:
            if connection is not None and not connection.websocket:
                connection.waiting()

    async def _file(self, request: web.Request) -> web.Response:
        body, kind = self.files[request.path]
        return web.Response(body=body, content_type=kind, charset="utf-8" if kind.startswith("text/") else None)

    def refusal(self, request: web.Request) -> tuple[int, str] | None:
        """Why a WebSocket may not open (status, text), or None: the token, then the origin."""
        origin = request.headers.get("Origin")
        if origin is not None:
            parts = urlsplit(origin)
            # On loopback the page is http; beyond it (--web-allow-remote) it may be https, behind a TLS proxy.
            schemes = ("http", "https") if self.listening.remote else ("http",)
            if parts.scheme not in schemes or parts.netloc.lower() != request.host.lower():
                return 403, "refused: the page of another origin may not connect"
        if not any(hmac.compare_digest(given.encode(), self.token.encode()) for given in _tokens(request)):
            return 401, "refused: no token, or a wrong one (deck web NAME prints the page's address with it)"
        return None

    def _gate(self, request: web.Request, who: str) -> web.Response | None:
        """The answer to a WebSocket upgrade refused (the server stopping, no token, a foreign Origin…), logged;
        None when `who` (a web client, an ACP client) may come in."""
        if self.closing:
            return web.Response(status=503, text="the deck server is stopping\n")
        refused = self.refusal(request)
        if refused is None:
            return None
        status, text = refused
        log.warning("refused %s at %s: %s", who, request.remote or "?", text.removeprefix("refused: "))
        return web.Response(status=status, text=text + "\n")

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._gate(request, "a web client")) is not None:
            return refused
        offered = [p.strip() for p in request.headers.get(hdrs.SEC_WEBSOCKET_PROTOCOL, "").split(",")]
        ws = web.WebSocketResponse(
            protocols=(PROTOCOL,) if PROTOCOL in offered else (), max_msg_size=MAX_MESSAGE, heartbeat=30.0, compress=False
        )
        await ws.prepare(_without_token_protocols(request, offered))
        connection = self.connections.get(request.transport) if request.transport is not None else None
        if connection is not None:
            connection.upgraded()
        client = WebClient(self.frontend, self, self.frontend.next_id(), ws, request, batches=BATCHES in offered)
        self.frontend.attach(client)
        await client.serve()
        return ws

    async def _acp(self, request: web.Request) -> web.StreamResponse:
        """`/acp?agent=NAME`: an ACP client, one JSON-RPC message per text frame, behind the same checks as `/ws`."""
        from deck.remote.acp_web import serve_acp

        if (refused := self._gate(request, "an ACP client")) is not None:
            return refused
        offered = [p.strip() for p in request.headers.get(hdrs.SEC_WEBSOCKET_PROTOCOL, "").split(",")]
        connection = self.connections.get(request.transport) if request.transport is not None else None
        return await serve_acp(self, _without_token_protocols(request, offered), connection)


def _tokens(request: web.Request) -> list[str]:
    """The tokens a request offers: as a subprotocol, a bearer, a query parameter."""
    found = [
        p.strip().removeprefix(TOKEN_PROTOCOL)
        for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
        if p.strip().startswith(TOKEN_PROTOCOL)
    ]
    bearer = request.headers.get("Authorization", "")
    if bearer.lower().startswith("bearer "):
        found.append(bearer[7:].strip())
    found += request.query.getall("token", [])
    return found


def _without_token_protocols(request: web.Request, offered: list[str]) -> web.Request:
    """`request` with no token among its subprotocols, for aiohttp to pick one: it logs those offered
    when it knows none of them."""
    if not any(p.startswith(TOKEN_PROTOCOL) for p in offered):
        return request
    kept = [p for p in offered if p and not p.startswith(TOKEN_PROTOCOL)]
    headers = request.headers.copy()
    del headers[hdrs.SEC_WEBSOCKET_PROTOCOL]
    if kept:
        headers[hdrs.SEC_WEBSOCKET_PROTOCOL] = ", ".join(kept)
    return request.clone(headers=headers)


class _RequestLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server log. A request it cannot read (a NUL in a header, a bad request line) it reports
    with the request's bytes, which may hold the token: said here in one line without them."""

    def __init__(self) -> None:
        super().__init__(logging.getLogger("aiohttp.server"), {})

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info")
        if isinstance(exc, tuple):
            exc = exc[1]
        if not isinstance(exc, HttpProcessingError):
            super().log(level, msg, *args, **kwargs)
        elif level >= logging.WARNING:  # below: what aiohttp takes for a scanner's noise, as it does
            where = args[0] if args and isinstance(args[0], str) else "?"
            log.warning("refused a web request at %s: no valid HTTP (%s %s)", where, exc.code, type(exc).__name__)


#: What a log line has instead of the token.
CUT = "[token]"


class _Scrub(logging.Filter):
    """The token cut out of every record a log handler is given while the server runs: no line may hold it,
    whoever logged it."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        token = self.token
        try:
            message = record.getMessage()
        except Exception:  # the handler says what is wrong with it
            return True
        exc_text = record.exc_text
        if exc_text is None and record.exc_info and record.exc_info[0] is not None:
            exc_text = logging.Formatter().formatException(record.exc_info)
        if token in message or token in (exc_text or "") or token in (record.stack_info or ""):
            record.msg, record.args = message.replace(token, CUT), ()
            if exc_text is not None:
                record.exc_text, record.exc_info = exc_text.replace(token, CUT), None
            if record.stack_info:
                record.stack_info = record.stack_info.replace(token, CUT)
        return True


def _log_handlers() -> list[logging.Handler]:
    """Every log handler there is: the root's, and those of every logger made so far."""
    made = logging.Logger.manager.loggerDict.values()
    loggers = [logging.getLogger(), *(x for x in made if isinstance(x, logging.Logger))]
    return list({id(h): h for logger in loggers for h in logger.handlers}.values())


def _page_files() -> dict[str, tuple[bytes, str]]:
    folder = resources.files("deck.frontends") / "web"
    return {path: ((folder / name).read_bytes(), kind) for path, (name, kind) in PAGE_FILES.items()}
