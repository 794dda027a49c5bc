"""ACP over stdio: JSON-RPC 2.0 line framing, and a connection that dispatches both ways.

Framing (`LineFramer`) is separate from dispatch (`Connection`). Messages are raw
dicts: deck forwards and records what agents send without dropping unknown fields.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import math
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from deck.errors import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, REQUEST_CANCELLED, AcpError, ConnectionClosed

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1

#: The longest line deck accepts from an agent. Real messages (a big diff, a
#: file read, a session replay) stay far below it; a longer line is dropped
#: with a log line instead of growing memory without bound.
MAX_LINE_BYTES = 64 * 1024 * 1024

#: The deepest nesting of arrays and objects deck accepts in a JSON line. ACP messages
#: nest a dozen levels; a deeper line is refused whole, which bounds everything done
#: with a value afterwards (encoding it again for a frontend, the trace, a log line)
#: far below Python's recursion limit.
MAX_DEPTH = 200
#: The most messages deck serves of one JSON-RPC batch (a line holding an array of them). A batch
#: is handled at once, as one line is: a longer one would hold the event loop (and every other
#: agent) for seconds. It is refused whole, with one error answer of no id.
MAX_BATCH = 1000
#: Requests deck never withdraws with `$/cancel_request`: a prompt ends with `session/cancel`.
NOT_WITHDRAWN = frozenset({"session/prompt"})
_DEEP_LINE = 2 * MAX_DEPTH  # no line this short nests deeper: each level takes two characters at least, "[…]"


class TooDeep(ValueError):
    """A JSON line nested deeper than MAX_DEPTH: refused whole."""


def _finite(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None  # 1e400 overflows to inf: not a JSON number either


def _no_constant(name: str) -> None:
    return None  # NaN, Infinity, -Infinity: Python's json reads them, JSON has no such values


_decoder = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constant)
_scan = _decoder.scan_once  # type: ignore[attr-defined]  # the C scanner, set in __init__


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests lists and dicts more than `limit` levels; iterative, and stops at the first."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return False


def decode_line(text: str) -> Any:
    """One JSON line from an untrusted peer: strict JSON values, bounded nesting; ValueError if refused.

    NaN, Infinity, -Infinity and numbers that overflow a float read as null, so
    what deck writes on is strict JSON. A line nested deeper than MAX_DEPTH raises
    TooDeep: far deeper, the parser's own recursion limit stops it (caught here);
    otherwise the value's depth is checked, only when the line is long enough to
    nest that deep (two characters a level) and has more than MAX_DEPTH brackets:
    one comparison for the usual short line, a count or two for a long one.
    """
    try:
        try:
            value, end = _scan(text, 0)  # the C scanner directly: the line is usually bare JSON
        except StopIteration:
            value = _decoder.decode(text)  # leading whitespace or not JSON: json says which, with its message
        else:
            if end != len(text) and text[end:].strip():
                value = _decoder.decode(text)  # trailing data: json raises "Extra data"
    except RecursionError:
        raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    if len(text) > _DEEP_LINE and isinstance(value, (dict, list)) and _brackets(text) > MAX_DEPTH:
        if _deeper_than(value, MAX_DEPTH):
            raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")
    return value


def _brackets(text: str) -> int:
    """How many `{` and `[` `text` holds: how many arrays and objects it opens, at most.

    A long line (a big chunk, a diff) usually holds a few, far apart: found one by
    one (memchr), they cost next to nothing, where counting reads every character.
    """
    if len(text) > 2048:
        found = 0
        for char in "{[":
            at = text.find(char)
            while at >= 0:
                found += 1
                if found > 16:  # many: counting is quicker after all
                    return text.count("{") + text.count("[")
                at = text.find(char, at + 1)
        return found
    count = text.count("{")
    return count + text.count("[") if "[" in text else count  # a streamed chunk holds no array


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def encode_line(message: Any) -> bytes:
    """`message` as one strict JSON line: NaN or Infinity raise ValueError rather than go out.

    A lone surrogate (a "\\ud800" escape in what a peer sent) goes out as that same
    JSON escape, so the line stays valid UTF-8.
    """
    return _encode(message).encode(errors="backslashreplace") + b"\n"


RequestHandler = Callable[[dict[str, Any]], Awaitable[Any]]
NotificationHandler = Callable[[dict[str, Any]], None]
#: Starts a request handler as a task, given a name for it.
Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


class LineFramer:
    """Splits a byte stream into lines; lines over `max_bytes` are reported and skipped."""

    __slots__ = ("_parts", "_size", "_skipping", "max_bytes", "on_line", "on_overflow")

    def __init__(
        self,
        on_line: Callable[[bytes], None],
        on_overflow: Callable[[int], None],
        max_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self.on_line = on_line
        self.on_overflow = on_overflow
        self.max_bytes = max_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._skipping = False

    def feed(self, data: bytes) -> None:
        start = self._end_pending(data) if self._parts or self._skipping else 0
        if start < 0:
            return
        # The lines whole in this read: the hot path of every streamed chunk, hence the locals.
        on_line, max_bytes, find = self.on_line, self.max_bytes, data.find
        while (end := find(b"\n", start)) >= 0:
            line = data[start:end]
            start = end + 1
            if len(line) > max_bytes:
                self.on_overflow(len(line))
            else:
                on_line(line)
        self._keep(data, start)

    def _end_pending(self, data: bytes) -> int:
        """The line begun in an earlier read, ended by `data`'s first newline (or still going on):
        where the next line starts in `data`, -1 when it holds no newline."""
        end = data.find(b"\n")
        if end < 0:
            self._keep(data, 0)
            return -1
        if self._skipping:
            self._skipping = False
            self.on_overflow(self._size + end)
        else:
            self._parts.append(data[:end])
            line = b"".join(self._parts)
            if len(line) > self.max_bytes:
                self.on_overflow(len(line))
            else:
                self.on_line(line)
        self._parts.clear()
        self._size = 0
        return end + 1

    def _keep(self, data: bytes, start: int) -> None:
        """What follows `data`'s last newline: the start of a line, kept (or counted, once too long)."""
        rest = len(data) - start
        if not rest:
            return
        self._size += rest
        if self._skipping:  # only the size counts: reported, and reset, at the newline
            return
        if self._size > self.max_bytes:
            self._parts.clear()
            self._skipping = True
        else:
            self._parts.append(data[start:] if start else data)

    def close(self) -> None:
        """End of stream: a last line without its newline still counts."""
        if self._skipping:
            self._skipping = False
            self.on_overflow(self._size)
        elif self._parts:
            line = b"".join(self._parts)
            if line.strip():
                self.on_line(line)
        self._parts.clear()
        self._size = 0


class Connection:
    """One JSON-RPC 2.0 peer: our requests are futures keyed by id; theirs go to handlers.

    Notifications are handled synchronously, in arrival order; requests run in
    their own task because some (a permission request) wait for a user.
    """

    def __init__(
        self,
        write: Callable[[bytes], None],
        *,
        on_bad_line: Callable[[str], None],
        trace: Callable[[str, dict[str, Any]], None] | None = None,
        spawn: Spawn | None = None,
    ) -> None:
        self._write = write
        #: Runs each request handler as a task of the connection's owner (a plain task without one).
        self._spawn: Spawn = spawn or _plain_task
        self._on_bad_line = on_bad_line
        self.trace = trace
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._requests: dict[str, RequestHandler] = {}
        self._notifications: dict[str, NotificationHandler] = {}
        self._incoming: dict[Any, asyncio.Task[None]] = {}
        self.closed: str | None = None
        #: The size in bytes of the line last dispatched: what a handler keeps of it costs about that.
        self.line_bytes = 0
        self.framer = LineFramer(self._on_line, self._on_overflow)

    # -- registration -------------------------------------------------------------------

    def on_request(self, method: str, handler: RequestHandler) -> None:
        self._requests[method] = handler

    def on_notification(self, method: str, handler: NotificationHandler) -> None:
        self._notifications[method] = handler

    # -- sending --------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        if self.closed is not None:
            raise ConnectionClosed(self.closed)
        data = encode_line(message)  # before the trace: a message JSON cannot carry is not traced as sent
        if self.trace is not None:
            self._trace("out", message)
        self._write(data)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request and wait for its result; a JSON-RPC error raises AcpError."""
        return await self.start_request(method, params)

    def start_request(self, method: str, params: dict[str, Any]) -> asyncio.Future[Any]:
        """Send a request now; the future of its result, which a caller may outlive (`asyncio.shield`).
        Cancelling the future withdraws the request: the agent is told (`$/cancel_request`, but for a
        prompt, which `session/cancel` ends), and a late answer is logged and skipped."""
        request_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future

        def done(_: asyncio.Future[Any]) -> None:
            self._pending.pop(request_id, None)
            if future.cancelled() and self.closed is None and method not in NOT_WITHDRAWN:
                with contextlib.suppress(ConnectionClosed, OSError):
                    self.notify("$/cancel_request", {"requestId": request_id})

        future.add_done_callback(done)
        try:
            self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        except BaseException:
            future.cancel()
            raise
        return future

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    # -- receiving ------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        self.framer.feed(data)

    def _on_overflow(self, size: int) -> None:
        self._on_bad_line(f"line of {size} bytes skipped: longer than the {MAX_LINE_BYTES}-byte maximum")

    def _on_line(self, line: bytes) -> None:
        """Decode and dispatch one line. Never raises: the other lines of the same read still count."""
        try:
            message = decode_line(line.decode())
        except TooDeep as exc:
            self._on_bad_line(f"{exc}, skipped: {line[:80]!r}")
            return
        except ValueError:
            text = line.decode(errors="replace").strip()
            if text:
                self._on_bad_line(f"not JSON, skipped: {text[:200]}")
            return
        if not isinstance(message, dict):
            if isinstance(message, list):
                self._on_batch(message)
            else:
                self._on_bad_line(f"not a JSON-RPC object, skipped: {line[:200]!r}")
            return
        # `_handle`, inlined: a call less for each line of the usual kind (one message), the hot
        # path of every streamed chunk (about 0.25 µs of the 3.5 µs its framing and dispatch take).
        if self.trace is not None:
            self._trace("in", message)
        self.line_bytes = len(line)
        try:
            self.dispatch(message)
        except Exception:  # a handler bug must not end the connection
            log.exception("error while handling %s", line[:200])
            self._on_bad_line(f"error while handling a message: {line[:200]!r}")

    def _on_batch(self, batch: list[Any]) -> None:
        """A JSON-RPC batch: each message handled as if it came on a line of its own, in order
        (a request is answered on its own, not in a batch). Other values in it are skipped, and
        said in one log line."""
        if not batch:
            self._on_bad_line("empty JSON-RPC batch, skipped")
            return
        if len(batch) > MAX_BATCH:
            why = f"a JSON-RPC batch of {len(batch)} messages refused: deck serves {MAX_BATCH} at most in one"
            self._on_bad_line(why)
            self._reply_error(None, INVALID_REQUEST, why)
            return
        skipped = [item for item in batch if not isinstance(item, dict)]
        if skipped:
            self._on_bad_line(f"{len(skipped)} value(s) in a JSON-RPC batch that are no object, skipped: {str(skipped)[:200]}")
        for item in batch:
            if isinstance(item, dict):
                self._handle(item, _encode(item).encode(errors="backslashreplace"))

    def _handle(self, message: dict[str, Any], raw: bytes) -> None:
        """Dispatch one message; `raw` is the message as sent (what a handler keeps costs about its size)."""
        if self.trace is not None:
            self._trace("in", message)
        self.line_bytes = len(raw)
        try:
            self.dispatch(message)
        except Exception:  # a handler bug must not end the connection
            log.exception("error while handling %s", raw[:200])
            self._on_bad_line(f"error while handling a message: {raw[:200]!r}")

    def _trace(self, direction: str, message: dict[str, Any]) -> None:
        """The trace hook; one that fails (a full disk) must not end the connection or lose a message."""
        assert self.trace is not None
        try:
            self.trace(direction, message)
        except Exception:
            log.exception("the ACP trace failed")

    def dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is None:
            self._on_response(message)
        elif not isinstance(method, str):
            if "id" in message:
                self._reply_error(_valid_id(message["id"]), INVALID_REQUEST, "the method must be a string")
            else:
                self._on_bad_line(f"a method that is no string, skipped: {str(message)[:200]}")
        elif "id" in message:  # an id of 0 or "" is still an id
            self._start_request(message)
        else:
            handler = self._notifications.get(method)
            if handler is None and method != "$/cancel_request":
                return  # a notification nobody listens to
            params = message.get("params") or {}
            if not isinstance(params, dict):  # ACP's params are objects: a handler may count on one
                self._on_bad_line(f"{method[:100]} with params that are no object, skipped: {str(params)[:200]}")
            elif handler is not None:
                handler(params)
            else:
                self._cancel_incoming(params.get("requestId"))

    def _on_response(self, message: dict[str, Any]) -> None:
        future = self._pending.get(_hashable(message.get("id")))
        if future is None or future.done():
            self._on_bad_line(f"response to no pending request, skipped: {str(message)[:200]}")
            return
        error = message.get("error")
        if error is not None:
            if not isinstance(error, dict):
                error = {"code": INTERNAL_ERROR, "message": str(error)}
            future.set_exception(
                AcpError(error.get("code", INTERNAL_ERROR), str(error.get("message", "")), error.get("data"))
            )
        else:
            future.set_result(message.get("result"))

    def _start_request(self, message: dict[str, Any]) -> None:
        request_id = message["id"]
        if _valid_id(request_id) is None and request_id is not None:  # answered, never echoed
            self._reply_error(None, INVALID_REQUEST, f"the id must be a string or a number: {str(message)[:200]}")
            return
        handler = self._requests.get(message["method"])
        if handler is None:
            self._reply_error(request_id, METHOD_NOT_FOUND, f"method not found: {message['method']}")
            return
        task = self._spawn(self._run_request(request_id, handler, message), str(message["method"]))
        key = _hashable(request_id)
        self._incoming[key] = task

        def done(t: asyncio.Task[None]) -> None:
            if self._incoming.get(key) is t:
                del self._incoming[key]

        task.add_done_callback(done)

    async def _run_request(self, request_id: Any, handler: RequestHandler, message: dict[str, Any]) -> None:
        params = message.get("params")
        try:
            result = handler(params if isinstance(params, dict) else {})
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            if self.closed is None:
                self._reply_error(request_id, REQUEST_CANCELLED, "request cancelled")
            raise
        except AcpError as exc:
            self._reply_error(request_id, exc.code, str(exc.args[0]), exc.data)
        except Exception as exc:  # reported to the agent, never fatal to deck
            log.exception("handler for %s failed", message.get("method"))
            self._reply_error(request_id, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        else:
            self._reply(request_id, {"jsonrpc": "2.0", "id": request_id, "result": result})

    def _cancel_incoming(self, request_id: Any) -> None:
        task = self._incoming.get(_hashable(request_id))
        if task is not None:
            task.cancel()

    def _reply_error(self, request_id: Any, code: int, message: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self._reply(request_id, {"jsonrpc": "2.0", "id": request_id, "error": error})

    def _reply(self, request_id: Any, message: dict[str, Any]) -> None:
        if self.closed is None:
            try:
                self.send(message)
            except ConnectionClosed:  # the agent is stopping: nobody reads the answer any more
                pass
            except (TypeError, ValueError) as exc:  # a result JSON cannot carry (NaN): the agent still gets an answer
                log.exception("the answer to request %r cannot be sent", request_id)
                self._reply_error(request_id, INTERNAL_ERROR, f"the answer cannot be sent as JSON: {exc}")

    # -- ending ---------------------------------------------------------------------------

    def close(self, reason: str) -> None:
        """Fail every pending request with `reason` and cancel handlers in progress."""
        if self.closed is not None:
            return
        self.framer.close()
        self.closed = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionClosed(reason))
        for task in list(self._incoming.values()):  # the owner's task group ends any other
            task.cancel()


def _plain_task(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(coro, name=name)


def _valid_id(value: Any) -> Any:
    """A request's id as an answer may carry it: JSON-RPC's ids are strings, numbers or null."""
    return value if isinstance(value, (int, float, str, type(None))) and not isinstance(value, bool) else None


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (int, str, type(None))) else json.dumps(value)
