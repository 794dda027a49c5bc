"""The jsonl bridge's wire, wherever it runs: events out as JSON lines, JSON-RPC 2.0 requests in.

One encoder and one request reader for every end of it: the jsonl frontend on stdin/stdout,
the server on its socket (`deck.server`), and the socket client (`deck.remote`), so the lines
are the same bytes whichever process writes them.

Every line is strict JSON (RFC 8259, what JavaScript's JSON.parse reads): input is decoded
by `decode_line` (non-finite numbers read as null, nesting bounded), the encoder refuses NaN
and Infinity, and a lone surrogate goes out as its JSON escape (`\\ud800`, `to_bytes`), so the
bytes are valid UTF-8. What JSON may leave raw in a string but a terminal, an editor or a
JavaScript reader may act on — DEL, the C1 controls, the line and paragraph separators, the bidi
embeddings, overrides and isolates — goes out as its `\\u` escape too, as JSON writes C0 controls.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from json.encoder import encode_basestring
from typing import Any, Protocol

from deck.acp.connection import TooDeep, decode_line
from deck.errors import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, ServiceError
from deck.events import Event, MessageDelta


class Caller(Protocol):
    """What the bridge calls services through: a client of a deck (deck.client.Client)."""

    def call(self, method: str, params: Any = None) -> Awaitable[Any]: ...


__all__ = ["RequestReader", "encode", "encode_event", "error_line", "to_bytes"]

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_str = encode_basestring  # a str as a JSON string, as _dumps writes it
#: What JSON writes raw in its strings and a reader of the line may still act on (see above).
_RAW = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_DELTA = '{"event":"message:delta","seq":%d,"agent":%s,"messageId":%s,"index":%d,"kind":%s,"text":%s}'
#: The same of a subagent's message: its session last.
_CHILD_DELTA = _DELTA[:-1] + ',"session":%s}'


def _null(name: str) -> None:
    return None  # NaN, Infinity, -Infinity: JSON has no such values


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _escaped(line: str) -> str:
    """A JSON text with each character of `_RAW` as its `\\u` escape: the same JSON value.

    Outside its strings JSON is ASCII, so only string contents change. A line of ASCII (nearly
    every line) costs a flag test and a search for DEL; any other, a test that it is printable
    (JSON escaped the C0 controls: a printable line holds none of `_RAW`).
    """
    if line.isascii():
        if "\x7f" not in line:
            return line
    elif line.isprintable():
        return line
    return _RAW.sub(_escape, line)


def encode(obj: Any) -> str:
    """`obj` as one line of strict JSON (no newline); a value JSON has no form for goes as text,
    NaN and Infinity as null."""
    try:
        line = _dumps(obj)
    except (TypeError, ValueError):
        line = _dumps(json.loads(json.dumps(obj, default=str), parse_constant=_null))
    return _escaped(line)


def encode_event(event: Event) -> str:
    """The wire line of `event` (no newline): `{"event": NAME, "seq": N, ...payload}`."""
    if type(event) is MessageDelta and event.text is not None:
        # The hot path (one event per streamed chunk): the same line as the generic
        # encoding below, without building a dict per chunk.
        agent, message_id, kind = _str(event.agent), _str(event.message_id), _str(event.kind)
        if event.session is None:
            return _escaped(_DELTA % (event.seq, agent, message_id, event.index, kind, _str(event.text)))
        text, session = _str(event.text), _str(event.session)
        return _escaped(_CHILD_DELTA % (event.seq, agent, message_id, event.index, kind, text, session))
    return encode({"event": event.name, "seq": event.seq, **event.payload()})


def to_bytes(lines: list[str]) -> bytes:
    """`lines` as the bytes written, each ended by a newline; a lone surrogate as its JSON escape."""
    return ("\n".join(lines) + "\n").encode(errors="backslashreplace")


def error_line(request_id: Any, code: int, message: str, data: Any = None) -> str:
    """A JSON-RPC error response line; `data`, what the refusal names (e.g. the conflicting files), when there is."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return encode({"jsonrpc": "2.0", "id": request_id, "error": error})


class RequestReader:
    """Request lines in, each made a service call of `client` at once, in the order of the lines;
    its response line goes to `write` when done, in any order. A line that is no request gets
    an error line, and the bridge carries on."""

    def __init__(self, client: Caller, write: Callable[[str], None]) -> None:
        self.client = client
        self.write = write
        #: The calls not yet answered.
        self.requests: set[asyncio.Task[None]] = set()

    def handle_line(self, raw: bytes) -> None:
        text = raw.decode(errors="replace").strip()
        if not text:
            return
        try:
            request = decode_line(text)
        except TooDeep as exc:
            self.error(None, PARSE_ERROR, f"refused: {exc}")
            return
        except ValueError as exc:
            self.error(None, PARSE_ERROR, f"not JSON: {exc}")
            return
        if not isinstance(request, dict):
            self.error(None, INVALID_REQUEST, "a request must be a JSON object")
            return
        request_id = request.get("id")
        if request_id is not None and not isinstance(request_id, (int, str)) or isinstance(request_id, bool):
            self.error(None, INVALID_REQUEST, "id must be a string or an integer")  # an answer never echoes junk
            return
        if request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
            self.error(request_id, INVALID_REQUEST, 'not a JSON-RPC 2.0 request: need "jsonrpc": "2.0" and a "method"')
            return
        # Made at once, in the order of the lines; answered when done, in any order.
        call = self.client.call(request["method"], request.get("params"))
        task = asyncio.get_running_loop().create_task(self._answer(request_id, call, "id" in request))
        self.requests.add(task)
        task.add_done_callback(self.requests.discard)

    async def drain(self) -> None:
        """Return once every call made so far is answered."""
        while self.requests:
            await asyncio.gather(*self.requests, return_exceptions=True)

    async def _answer(self, request_id: Any, call: Awaitable[Any], answered: bool) -> None:
        """Await `call` and write its response; a result only when `answered` (a request with an
        `id`, null included: one without is a notification), an error whatever it was."""
        try:
            result = await call
        except ServiceError as exc:
            self.error(request_id, exc.code, str(exc), exc.data)
        except Exception as exc:  # a bug must not end the bridge
            self.error(request_id, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        else:
            if answered:
                self.write(encode({"jsonrpc": "2.0", "id": request_id, "result": result}))

    def error(self, request_id: Any, code: int, message: str, data: Any = None) -> None:
        self.write(error_line(request_id, code, message, data))
