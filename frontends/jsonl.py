"""The jsonl frontend: events out as JSON lines, JSON-RPC 2.0 service calls in.

stdout carries one `{"event": NAME, "seq": N, ...payload}` line per event and one
response line per request: the wire a client of deck reads, whatever the process.
Writes are batched and flushed when the event loop goes idle, so a burst of events
costs one system call, and latency stays low.

The lines are `deck.wire`'s, as a deck server writes them on its socket: strict JSON
(RFC 8259), valid UTF-8. (So `deck attach --frontend=jsonl` runs no frontend at all: it relays
the server's bytes, `deck.relay`.)
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from deck import hookimpl
from deck.errors import INVALID_REQUEST
from deck.events import Event
from deck.frontend import Frontend, RequestReader, encode, encode_event, error_line, read_lines, stdout_failed, to_bytes


class JsonlFrontend(Frontend):
    name = "jsonl"
    description = "JSON lines on stdin/stdout, for programs"

    def __init__(
        self, client: Any, *, stay: bool = False, stdin_fd: int | None = None, stdout_fd: int | None = None, **options: Any
    ) -> None:
        super().__init__(client, **options)
        self.stay = stay
        self._stdin_fd = stdin_fd if stdin_fd is not None else sys.stdin.fileno()
        self._fd = stdout_fd if stdout_fd is not None else sys.stdout.fileno()
        self._out: list[str] = []
        self._flush_scheduled = False
        self._closed = False
        self._ended = False
        self._reader = RequestReader(self.client, self._append_open)
        self._requests = self._reader.requests  # the calls not answered yet
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- output ------------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if not self._closed:
            self._append(encode_event(event))

    def write(self, obj: dict[str, Any]) -> None:
        if not self._closed:
            self._append(encode(obj))

    def _append_open(self, line: str) -> None:
        if not self._closed:
            self._append(line)

    def _append(self, line: str) -> None:
        self._out.append(line)
        if self._ended:
            self.flush()
        elif not self._flush_scheduled and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        if not self._out or self._closed:
            return
        data = to_bytes(self._out)
        self._out.clear()
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:
            self._closed = True
            self._silence_stdout()
            self.client.request_exit(stdout_failed(exc))

    def _silence_stdout(self) -> None:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._fd)
            os.close(devnull)
        except OSError:
            pass

    # -- input -------------------------------------------------------------------------------

    async def run(self) -> int:
        self._loop = asyncio.get_running_loop()
        self.client.subscribe(self.on_event)
        lines = read_lines(
            self._stdin_fd, lambda size: self._error(None, INVALID_REQUEST, f"line of {size} bytes skipped: too long")
        )
        try:
            while (line := await lines.get()) is not None:
                self._handle_line(line)
            await self._reader.drain()
            if self.stay:
                await asyncio.Event().wait()
            # End of input: finish the work in hand; nobody is left to answer questions.
            await self.client.end_of_input(drain=True)
            await self.client.close()
            return 0
        finally:
            # Still subscribed: after a signal the deck stops the agents once this
            # returns, and their last states go out too, each line at once.
            self._ended = True
            self.flush()

    def _handle_line(self, raw: bytes) -> None:
        self._reader.handle_line(raw)

    def _error(self, request_id: Any, code: int, message: str) -> None:
        self._append_open(error_line(request_id, code, message))


@hookimpl
def deck_register_frontends() -> dict[str, type[Frontend]]:
    return {"jsonl": JsonlFrontend}
