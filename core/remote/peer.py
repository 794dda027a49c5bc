"""What a deck server keeps of one client, whatever carries it: the Unix socket (`deck.remote.server`)
or a WebSocket (`deck.remote.web`). Writes never wait for the client: what its transport cannot
send at once is queued there, and a client whose queue grows past `QUEUE_LIMIT` (it stopped
reading) is disconnected with a log line."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from deck.acp.connection import MAX_LINE_BYTES, LineFramer
from deck.errors import INVALID_REQUEST
from deck.wire import RequestReader, error_line, to_bytes

if TYPE_CHECKING:
    from deck.remote.server import ServerFrontend

log = logging.getLogger("deck.remote.server")

#: Bytes queued for one client (beyond what its socket buffer holds) before it is disconnected.
QUEUE_LIMIT = 16 * 1024 * 1024


class Peer:
    """One client of the server, whatever carries it (the socket here, a WebSocket in `deck.remote.web`):
    its requests are answered and every event reaches it, never waiting for it."""

    def __init__(self, server: ServerFrontend, id: int) -> None:
        self.server = server
        self.id = id
        self.transport: asyncio.Transport | None = None
        self.pid = 0
        self.uid = -1
        self.since = ""
        self.command = ""
        self.closed = False
        self.reader: RequestReader | None = None
        self._lost: asyncio.Future[None] | None = None
        #: How many bytes may wait for the client before it is disconnected.
        self.limit = QUEUE_LIMIT

    def respond(self, line: str) -> None:
        """A response to this client, after the events already announced. A big one (the snapshot of long
        conversations) is room the client asked for: the queue may hold it on top of QUEUE_LIMIT, once."""
        self.server.flush()
        data = to_bytes([line])
        if self.send(data) and len(data) > QUEUE_LIMIT // 16 and self.transport is not None:
            room = self.transport.get_write_buffer_size() + QUEUE_LIMIT
            self.limit = min(max(self.limit, room), MAX_LINE_BYTES + QUEUE_LIMIT)

    def send(self, data: bytes) -> bool:
        """Queue `data` (wire lines, each ended by a newline) for the client, never waiting; False if it
        is gone. A client whose queue went past its limit (it stopped reading) is disconnected."""
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            return False
        queued = transport.get_write_buffer_size()
        if queued <= QUEUE_LIMIT:
            self.limit = QUEUE_LIMIT  # the room given for a big response is used up
        elif queued > self.limit:
            log.warning(
                "client %d (%s) stopped reading: disconnected with %d bytes queued", self.id, self.who(), queued
            )
            self.closed = True
            transport.abort()
            return False
        transport.write(self.framed(data))
        return True

    def framed(self, data: bytes) -> bytes:
        """`data` as this client's transport carries it: the lines as they are, on the socket."""
        return data

    def who(self) -> str:
        """The client, for the log."""
        return f"pid {self.pid}"

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()

    def lost(self) -> None:
        """The client is gone: it leaves the server's list."""
        self.closed = True
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)
        if self.reader is not None:
            self.server.detach(self)

    async def wait_closed(self) -> None:
        if self._lost is not None:
            await asyncio.shield(self._lost)

    def info(self) -> dict[str, Any]:
        return {"id": self.id, "pid": self.pid, "uid": self.uid, "command": self.command, "since": self.since}


#: A WebSocket message, up to 16 MiB of lines, is read by slices of this size (`read_requests`).
READ_BUDGET = 256 * 1024


def request_framer(peer: Peer) -> LineFramer:
    """A client's request lines, whatever carries them, each made a call by its reader; a line too long
    is skipped with an error."""
    reader = peer.reader
    assert reader is not None

    def too_long(size: int) -> None:
        peer.respond(error_line(None, INVALID_REQUEST, f"line of {size} bytes skipped: too long"))

    return LineFramer(reader.handle_line, too_long)


async def read_requests(peer: Peer, framer: LineFramer, data: bytes) -> None:
    """`data`, request lines a client sent at once, read as the socket reads them: READ_BUDGET bytes in a
    turn of the event loop, the agents and the other clients served between two; none once the client is
    gone (a client that does not read its answers is disconnected at QUEUE_LIMIT, the rest of its flood
    dropped). A last line without its newline is one too."""
    for start in range(0, len(data), READ_BUDGET):
        if start:
            await asyncio.sleep(0)
        if peer.closed:
            return
        framer.feed(data[start : start + READ_BUDGET])
    if not peer.closed:
        framer.close()
