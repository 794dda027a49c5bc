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
- no access log, so the token in a URL is written nowhere.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import secrets
import socket
import struct
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import WSMsgType, web
from deck.events import now_iso
from deck.proc.storage import replace_in
from deck.remote.peer import Peer
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
        """Read the client's messages until it goes; each line in them is a request."""
        assert self.reader is not None
        try:
            async for message in self.ws:
                if message.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    data = message.data.encode() if isinstance(message.data, str) else message.data
                    for line in data.split(b"\n"):
                        self.reader.handle_line(line)
                elif message.type == WSMsgType.ERROR:
                    log.warning("client %d (%s) closed: %s", self.id, self.who(), self.ws.exception())
        finally:
            self.lost()


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
        #: The server is ending: a browser that reconnects meanwhile is told so, and not attached.
        self.closing = False

    def frames(self, data: bytes, batches: bool) -> bytes:
        """`data` as WebSocket frames (one per line, or one for all with `batches`), made once for every
        client the same bytes go to."""
        made = self._frames[batches]
        if made[0] is not data:
            made = self._frames[batches] = (data, text_frame(data) if batches else text_frames(data))
        return made[1]

    async def start(self) -> None:
        app = web.Application(middlewares=[self._guard], client_max_size=64 * 1024)
        app.router.add_get("/ws", self._websocket)
        for path in self.files:
            app.router.add_get(path, self._file)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.SockSite(self._runner, self.listening.sock).start()
        log.info("web page on %s (deck web %s prints its address with the token)", self.listening.url, self.frontend.listening.name)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self.listening.sock.close()

    # -- requests ------------------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Every answer carries the security headers; a loopback server refuses a foreign `Host`."""
        host = urlsplit(f"//{request.host}").hostname or ""
        if not self.listening.remote and not is_loopback(host):
            log.warning("refused a web request at %s: Host %r is not a loopback name", request.remote or "?", one_line(request.host, 100))
            response: web.StreamResponse = web.Response(status=421, text="refused: this deck page answers on loopback only\n")
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                response = web.Response(status=exc.status, text=f"{exc.reason}\n")
        if not response.prepared:
            response.headers.update(SECURITY_HEADERS)
        return response

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

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if self.closing:
            return web.Response(status=503, text="the deck server is stopping\n")
        refused = self.refusal(request)
        if refused is not None:
            status, text = refused
            log.warning("refused a web client at %s: %s", request.remote or "?", text.removeprefix("refused: "))
            return web.Response(status=status, text=text + "\n")
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        ws = web.WebSocketResponse(
            protocols=(PROTOCOL,) if PROTOCOL in offered else (), max_msg_size=MAX_MESSAGE, heartbeat=30.0, compress=False
        )
        await ws.prepare(request)
        client = WebClient(self.frontend, self, self.frontend.next_id(), ws, request, batches=BATCHES in offered)
        self.frontend.attach(client)
        await client.serve()
        return ws


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


def _page_files() -> dict[str, tuple[bytes, str]]:
    folder = resources.files("deck.frontends") / "web"
    return {path: ((folder / name).read_bytes(), kind) for path, (name, kind) in PAGE_FILES.items()}
