"""The jsonl frontend: events out as JSON lines, JSON-RPC 2.0 service calls in.

stdout carries one `{"event": NAME, "seq": N, ...payload}` line per event and one
response line per request: the wire a client of deck reads, whatever the process.
Writes are batched and flushed when the event loop goes idle, so a burst of events
costs one system call, and latency stays low.

Every line is strict JSON (RFC 8259, what JavaScript's JSON.parse reads): input
is decoded by `deck.frontend.decode_line` (non-finite numbers read as null, nesting
bounded), the encoder refuses NaN and Infinity, and a lone surrogate goes out as
its JSON escape (`\\ud800`), so the bytes are valid UTF-8.
"""

from __future__ import annotations

import asyncio
import json
from json.encoder import encode_basestring
import os
import sys
from collections.abc import Awaitable
from typing import Any

from deck import hookimpl
from deck.errors import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, ServiceError
from deck.events import Event, MessageDelta
from deck.frontend import Frontend, TooDeep, decode_line, read_lines, stdout_failed

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_str = encode_basestring  # a str as a JSON string, as _dumps writes it
_DELTA = '{"event":"message:delta","seq":%d,"agent":%s,"messageId":%s,"index":%d,"kind":%s,"text":%s}'


def _null(name: str) -> None:
    return None  # NaN, Infinity, -Infinity: JSON has no such values


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
        self._requests: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- output ------------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if type(event) is MessageDelta and event.text is not None:
            # The hot path (one event per streamed chunk): the same line as the generic
            # encoding below, without building a dict per chunk.
            if not self._closed:
                agent, message_id, kind = _str(event.agent), _str(event.message_id), _str(event.kind)
                self._append(_DELTA % (event.seq, agent, message_id, event.index, kind, _str(event.text)))
            return
        self.write({"event": event.name, "seq": event.seq, **event.payload()})

    def write(self, obj: dict[str, Any]) -> None:
        if self._closed:
            return
        try:
            line = _dumps(obj)
        except (TypeError, ValueError):  # a value JSON has no form for: as text, NaN and Infinity as null
            line = _dumps(json.loads(json.dumps(obj, default=str), parse_constant=_null))
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
        data = ("\n".join(self._out) + "\n").encode(errors="backslashreplace")  # a lone surrogate: its JSON escape
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
            if self._requests:
                await asyncio.gather(*self._requests, return_exceptions=True)
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
        text = raw.decode(errors="replace").strip()
        if not text:
            return
        try:
            request = decode_line(text)
        except TooDeep as exc:
            self._error(None, PARSE_ERROR, f"refused: {exc}")
            return
        except ValueError as exc:
            self._error(None, PARSE_ERROR, f"not JSON: {exc}")
            return
        if not isinstance(request, dict):
            self._error(None, INVALID_REQUEST, "a request must be a JSON object")
            return
        request_id = request.get("id")
        if request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
            self._error(request_id, INVALID_REQUEST, 'not a JSON-RPC 2.0 request: need "jsonrpc": "2.0" and a "method"')
            return
        if request_id is not None and not isinstance(request_id, (int, str)) or isinstance(request_id, bool):
            self._error(None, INVALID_REQUEST, "id must be a string or a number")
            return
        # Made at once, in the order of the lines; answered when done, in any order.
        call = self.client.call(request["method"], request.get("params"))
        task = asyncio.get_running_loop().create_task(self._answer(request_id, call))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _answer(self, request_id: Any, call: Awaitable[Any]) -> None:
        try:
            result = await call
        except ServiceError as exc:
            self._error(request_id, exc.code, str(exc))
        except Exception as exc:  # a bug must not end the bridge
            self._error(request_id, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        else:
            if request_id is not None:
                self.write({"jsonrpc": "2.0", "id": request_id, "result": result})

    def _error(self, request_id: Any, code: int, message: str) -> None:
        self.write({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


@hookimpl
def deck_register_frontends() -> dict[str, type[Frontend]]:
    return {"jsonl": JsonlFrontend}
