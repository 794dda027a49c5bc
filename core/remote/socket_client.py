"""The client of a deck server (`deck attach`): `deck.client.Client` over the server's Unix socket.

A call writes its request line at once and its future waits for the response of that id;
event lines are rebuilt as their classes (`deck.events.from_wire`) and given to the
listeners in the server's order. (`deck attach --frontend=jsonl` needs none of this: the
server's wire is its own, and `deck.relay` passes the bytes through.) Leaving (`end_of_input`,
`close`) only detaches: the server, its agents and their turns go on; `DeckService.Shutdown` is
what stops it.

Should the server go away, every call waiting fails, and `ended` says so: `run_attached`
then ends the frontend and says "the deck server NAME went away" ("… was stopped" when it stopped
as a server stops, its socket removed first: another client's `deck stop`, a signal). The end a
`DeckService.Shutdown` of this client asked for is no such loss: the server may answer and
close at once, or close before its answer goes out; either way the call succeeds and the
client ends with 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from deck.acp.connection import LineFramer, decode_line
from deck.client import Client, Listener, service_error
from deck.errors import INTERNAL_ERROR, ExitCode, ServiceError
from deck.events import from_wire
from deck.frontend import Frontend
from deck.remote.server import running
from deck.remote.serverdir import ServerError, connect, fell_behind, listening, refused, socket_path, went_away
from deck.wire import encode, to_bytes

log = logging.getLogger(__name__)

#: How long `close` waits for the socket to take what was written before it.
CLOSE_SECONDS = 2.0
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


#: Seconds between losing the connection and telling a server gone from a client dropped: a server
#: killed closes its listening socket within moments of the connections.
LOSS_SETTLES = 0.3


class SocketClient(Client, asyncio.Protocol):
    """A client of the deck server `name` (or of the socket at `path`)."""

    attached = True

    def __init__(self, name: str, path: Path | None = None) -> None:
        self.name = name
        self.path = path or socket_path(name)
        self._listeners: list[Listener] = []
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._next_id = 0
        self._transport: asyncio.Transport | None = None
        self._framer = LineFramer(self._line, self._overflow)
        self._closing = False
        #: Set once the client is done: the exit code asked (`request_exit`), or 1 when the server went away.
        self.ended: asyncio.Future[int] | None = None
        #: Why the connection ended when nobody closed it ("" while it stands, or after `close`).
        self.gone = ""
        self._lost: asyncio.Future[None] | None = None
        #: The ids of this client's `DeckService.Shutdown` calls not answered yet.
        self._stopping: set[int] = set()
        #: Whether the server answered one of them: it is stopping as asked.
        self._stopped = False

    # -- connecting ------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Reach the server; a NoServer or ServerError with one clear line when there is none."""
        loop = asyncio.get_running_loop()
        self.ended = loop.create_future()
        self._lost = loop.create_future()
        _path, sock = connect(self.name, None if self.path == socket_path(self.name) else self.path)
        try:
            await loop.create_unix_connection(lambda: self, sock=sock)
        except BaseException:
            sock.close()
            raise

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        # Nothing is read until the frontend listens or calls: the lines wait in the socket, and the
        # first events (its own `clients:changed`) are not given to nobody.
        transport.pause_reading()

    def _read(self) -> None:
        transport = self._transport
        if transport is not None and not transport.is_reading() and not transport.is_closing():
            transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        self._framer.feed(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        # A server stopping as this client asked closes its socket: that is the end asked, not a loss.
        asked = self._stopped or bool(self._stopping)
        lost = not self._closing and not self.gone and not asked
        if lost:
            self.gone = went_away(self.name, self.path)  # "was stopped" when its socket went with it
        error = self.gone or (f"the deck server {self.name} stopped" if asked else f"detached from the deck server {self.name}")
        calls, self._calls = self._calls, {}
        for request_id, future in calls.items():
            if future.done():
                continue
            if request_id in self._stopping and not self.gone:
                future.set_result(None)  # closed before its answer went out: stopped all the same
            else:
                future.set_exception(service_error(INTERNAL_ERROR, error))
        self._stopping.clear()
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)
        if lost:
            asyncio.get_running_loop().call_later(LOSS_SETTLES, self._judge_loss)
        elif self.gone:
            self.request_exit(ExitCode.ERROR)
        elif asked and not self._closing:
            # Once the answers just given are handled (call_soon runs after their callbacks).
            asyncio.get_running_loop().call_soon(self.request_exit, ExitCode.OK)

    def _judge_loss(self) -> None:
        if listening(self.path):
            self.gone = fell_behind(self.name)
        self.request_exit(ExitCode.ERROR)

    # -- lines in --------------------------------------------------------------------------------

    def _line(self, raw: bytes) -> None:
        try:
            message = decode_line(raw.decode(errors="replace"))
        except ValueError as exc:
            log.warning("the deck server %s sent a line that is not JSON: %s", self.name, exc)
            return
        if not isinstance(message, dict):
            return
        if "event" in message:
            try:
                event = from_wire(message)
            except (ValueError, TypeError) as exc:
                log.warning("the deck server %s sent a bad event: %s", self.name, exc)
                return
            for listener in tuple(self._listeners):
                try:
                    listener(event)
                except Exception:
                    log.exception("event listener failed")
            return
        request_id = message.get("id")
        future = self._calls.pop(request_id, None) if isinstance(request_id, int) else None
        if future is None:
            error = message.get("error")
            if isinstance(error, dict) and request_id is None:  # about no request of ours: refused, a bad line
                text = str(error.get("message"))
                log.warning("the deck server %s: %s", self.name, text)
                if text.startswith("refused"):
                    self.gone = refused(self.name, text)
            return
        if request_id in self._stopping:
            self._stopping.discard(request_id)
            self._stopped = self._stopped or not isinstance(message.get("error"), dict)
        if future.done():
            return
        error = message.get("error")
        if isinstance(error, dict):
            code = error.get("code")
            code = code if isinstance(code, int) else INTERNAL_ERROR
            future.set_exception(service_error(code, str(error.get("message")), error.get("data")))
        else:
            future.set_result(message.get("result"))

    def _overflow(self, size: int) -> None:
        log.warning("the deck server %s sent a line of %d bytes: skipped", self.name, size)

    # -- the Client --------------------------------------------------------------------------------

    def call(self, method: str, params: Any = None) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        transport = self._transport
        if transport is None or transport.is_closing():
            future.set_exception(service_error(INTERNAL_ERROR, self.gone or f"not attached to the deck server {self.name}"))
            return future
        self._next_id += 1
        request: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            request["params"] = params
        self._calls[self._next_id] = future
        if method == "DeckService.Shutdown":
            self._stopping.add(self._next_id)
        transport.write(to_bytes([encode(request)]))
        self._read()
        return future

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)
        self._read()

    def unsubscribe(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    async def end_of_input(self, *, drain: bool = True) -> None:
        """The user is gone: the server goes on with what it was asked, answered by its other clients."""

    async def close(self) -> None:
        """Detach, once what was written has gone out; the server goes on."""
        self._closing = True
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.close()
        if self._lost is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_SECONDS):
                    await asyncio.shield(self._lost)
        if self._transport is not None:
            self._transport.abort()

    def request_exit(self, code: int) -> None:
        if self.ended is not None and not self.ended.done():
            self.ended.set_result(code)


async def run_attached(client: SocketClient, frontend_cls: type[Frontend], **options: Any) -> int:
    """Run `frontend_cls` against the server `client` reaches until it is done, a signal comes, or the
    server goes away (then a line on stderr says so and the exit code is 1). Leaving detaches."""
    loop = asyncio.get_running_loop()
    await client.connect()
    assert client.ended is not None
    for sig in SIGNALS:
        loop.add_signal_handler(sig, client.request_exit, 128 + sig)
    code: int
    try:
        frontend = frontend_cls(client, **options)
        front = loop.create_task(frontend.run(), name="frontend")
        await asyncio.wait({front, client.ended}, return_when=asyncio.FIRST_COMPLETED)
        interrupted = not front.done()
        if interrupted:
            front.cancel()
        (result,) = await asyncio.gather(front, return_exceptions=True)
        if client.gone:
            code = ExitCode.ERROR
        elif interrupted:
            code = client.ended.result()
        elif isinstance(result, BaseException):
            raise result
        else:
            code = client.ended.result() if client.ended.done() else result
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
        await client.close()
    if client.gone:
        with contextlib.suppress(OSError):
            sys.stderr.write(f"deck: {client.gone}\n")
            sys.stderr.flush()
    return code


#: How long `deck ls` waits for each server's answer.
ASK_SECONDS = 5.0
_RUNNING = frozenset({"starting", "ready", "busy"})


async def describe_servers() -> list[dict[str, Any]]:
    """`deck ls`: each running server's registration, with its agents (running, busy) and clients,
    as it answers now (None where it does not answer)."""
    rows = []
    for known in running():
        row: dict[str, Any] = {**known.to_dict(), "agents": None, "running": None, "busy": None, "clients": None}
        client = SocketClient(known.name)
        try:
            async with asyncio.timeout(ASK_SECONDS):
                await client.connect()
                agents = await client.call("AgentService.List")
                clients = await client.call("DeckService.Clients")
        except (ServerError, ServiceError, TimeoutError) as exc:
            log.warning("the deck server %s does not answer: %s", known.name, exc)
        else:
            states = [agent.get("state") for agent in agents]
            row["agents"] = len(states)
            row["running"] = sum(1 for state in states if state in _RUNNING)
            row["busy"] = states.count("busy")
            row["clients"] = sum(1 for c in clients if c.get("pid") != os.getpid())  # not this one
        finally:
            await client.close()
        rows.append(row)
    return rows


# -- one call through a running server ---------------------------------------------------------


def server_of(config: str | os.PathLike[str]) -> str | None:
    """The name of a running deck server (`deck serve`) of the config file `config`, or None.

    A command that changes what that server's agents work on (`deck merge`) goes through it
    (`call_server`), so its refusals (a busy agent, a running one) hold from outside too."""
    real = os.path.realpath(config)
    return next((known.name for known in running() if os.path.realpath(known.config) == real), None)


async def call_server(name: str, method: str, params: Any = None, *, listener: Listener | None = None) -> Any:
    """One service call through the running deck server `name`: its result, or its ServiceError;
    a ServiceError too when the server cannot be reached. `listener` gets the deck's events while
    the call runs (a long one's progress)."""
    client = SocketClient(name)
    try:
        await client.connect()
    except ServerError as exc:
        raise ServiceError(str(exc)) from None
    try:
        if listener is not None:
            client.subscribe(listener)
        return await client.call(method, params)
    finally:
        await client.close()


async def call_deck(
    config: Path | None, source: str, method: str, params: Any = None, *, started: bool = False,
    listener: Listener | None = None,
) -> Any:  # fmt: skip
    """One service call for the config file `config` (None: the built-in config): through its
    running deck server when there is one, so that its refusals hold (a busy agent, a running
    one), else through a deck of that config made for the call and shut down after it. `started`:
    that deck runs its plugins' startup first, as a server did (its agents' conversations are back
    from the history), without following the config file; it starts no agent either. `listener`
    gets the deck's events while the call runs (a long one's progress)."""
    from deck.runtime.deck import Deck

    server = server_of(config) if config is not None else None
    if server is not None:
        return await call_server(server, method, params, listener=listener)
    deck = Deck(config, source)
    if listener is not None:
        deck.subscribe(listener)
    try:
        if started:
            await deck.startup(watch=False)
        return await deck.call(method, params)
    finally:
        await deck.shutdown()
