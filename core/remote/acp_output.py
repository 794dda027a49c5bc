"""What goes to one ACP client of `deck acp` (`deck.remote.acp_proxy`): its lines in order, one write per
turn of the event loop, a streamed part's chunks joined into one `session/update` per write.

Writes never wait: the transport takes the bytes. While the client does not read (its transport holds
HIGH_WATER bytes) nothing is written, the streamed text goes on being joined, `on_backlog(True)` tells
the transport's owner (which may stop reading the client meanwhile), and past MAX_HELD bytes held the
client is given up (`on_overflow`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from json.encoder import encode_basestring

#: Bytes the client's transport may hold before output is held (and streamed chunks joined).
HIGH_WATER = 1024 * 1024
#: Bytes held for a client that does not read before it is given up.
MAX_HELD = 256 * 1024 * 1024
#: How often output held for a client that does not read is tried again, in seconds.
RETRY_SECONDS = 0.02
#: Streamed chunks of one part kept apart before they are joined (a second of a fast stream).
JOIN_EVERY = 4096
#: A streamed text update: the session's id, the update's kind, the text.
_CHUNK = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":%s,"update":{"sessionUpdate":"%s","content":{"type":"text","text":%s}}}}\n'
_str = encode_basestring
#: The key of no streamed part.
NONE = ("", -1, "")


class Output:
    """One client's lines out (see the module)."""

    def __init__(
        self,
        write: Callable[[bytes], None],
        *,
        backlog: Callable[[], int],
        on_backlog: Callable[[bool], None],
        on_overflow: Callable[[], None],
    ) -> None:
        self._write = write
        self._backlog = backlog
        self._on_backlog = on_backlog
        self._on_overflow = on_overflow
        self._loop = asyncio.get_running_loop()
        self._lines: list[bytes] = []
        self._held = 0
        self._scheduled = False
        self._backed_up = False
        self.closed = False
        #: The streamed part whose chunks are being joined: (message id, part index, kind of deck's).
        self.key: tuple[str, int, str] = NONE
        self._session = self._update = ""  # the streamed part's session, and the update it is
        self._text: list[str] = []
        self._blocks: list[str] = []

    # -- streamed text ---------------------------------------------------------------------------

    def stream(self, key: tuple[str, int, str], session: str, update: str, text: str) -> None:
        """The first chunk of a streamed part (`update`: `agent_message_chunk`, …) of `session`."""
        self.end_stream()
        self.key = key
        self._session, self._update = session, update
        self.more(text)

    def more(self, text: str) -> None:
        """One more chunk of the part streaming: a list append (a join every JOIN_EVERY)."""
        self._text.append(text)
        if len(self._text) >= JOIN_EVERY:
            self._blocks.append("".join(self._text))
            self._text.clear()
        if not self._scheduled:
            self._schedule()

    def end_stream(self) -> None:
        """The part stops streaming (another begins, a line of another kind goes out)."""
        if self._text or self._blocks:
            self._seal()
        self.key = NONE

    def _seal(self) -> None:
        """The text streamed since the last write, as one update."""
        text = "".join([*self._blocks, *self._text]) if self._blocks else "".join(self._text)
        data = (_CHUNK % (_str(self._session), self._update, _str(text))).encode(errors="backslashreplace")
        self._lines.append(data)
        self._held += len(data)
        self._text.clear()
        self._blocks.clear()

    # -- lines -------------------------------------------------------------------------------------

    def line(self, data: bytes) -> None:
        """A line of another kind (a response, a request, an update), after what streamed before it."""
        if self._text or self._blocks:
            self._seal()
        self._lines.append(data)
        self._held += len(data)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """What this turn of the loop said, in one write; held while the client's transport is full."""
        self._scheduled = False
        if self.closed:
            return
        if self._backlog() > HIGH_WATER:
            self._hold()
            return
        if self._backed_up:
            self._backed_up = False
            self._on_backlog(False)
        self.flush_now()

    def _hold(self) -> None:
        if self._held + sum(map(len, self._blocks)) > MAX_HELD:
            self.closed = True
            self._on_overflow()
            return
        self._scheduled = True
        self._loop.call_later(RETRY_SECONDS, self._flush)
        if not self._backed_up:
            self._backed_up = True
            self._on_backlog(True)

    def flush_now(self) -> None:
        """Write what waits, whatever the transport holds (each write, and the end of the connection)."""
        if self.closed:
            return
        if self._text or self._blocks:
            self._seal()
        if self._lines:
            data = b"".join(self._lines)
            self._lines.clear()
            self._held = 0
            self._write(data)
