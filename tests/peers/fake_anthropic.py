"""A small fake of Anthropic's Messages API on 127.0.0.1 (stdlib only), for claude-agent-acp.

Claude Code honours ANTHROPIC_BASE_URL, so pointing it here runs whole turns offline
with the real agent: one `POST /v1/messages` (`stream: true`) per model turn,
answered with server-sent events. What each turn answers is up to a `reply`
function given the request body; `Reply` describes the content blocks.
`StalledAnthropic` is the other kind: a server that takes requests and never answers.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from .fake_api import FakeApi, send_events, send_json

MODEL = "claude-sonnet-4-6"


@dataclass
class Reply:
    """One model turn: text and/or tool uses, then a stop reason."""

    text: str = ""
    tool_uses: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (tool name, input)
    input_tokens: int = 1200
    output_tokens: int = 40

    @property
    def stop_reason(self) -> str:
        return "tool_use" if self.tool_uses else "end_turn"


_tool_ids = itertools.count(1)


def sse(reply: Reply) -> bytes:
    """The event stream of one streamed Messages API response."""
    events: list[tuple[str, dict[str, Any]]] = []
    usage = {"input_tokens": reply.input_tokens, "output_tokens": 1,
             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}  # fmt: skip
    events.append(("message_start", {"type": "message_start", "message": {
        "id": f"msg_fake_{next(_tool_ids)}", "type": "message", "role": "assistant", "model": MODEL,
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}}))  # fmt: skip
    index = 0
    if reply.text:
        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": {"type": "text", "text": ""}}))  # fmt: skip
        for word in reply.text.split(" "):
            chunk = word if not events[-1][0] == "content_block_delta" else " " + word
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                   "delta": {"type": "text_delta", "text": chunk}}))  # fmt: skip
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for name, tool_input in reply.tool_uses:
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
            "type": "tool_use", "id": f"toolu_fake_{next(_tool_ids)}", "name": name, "input": {}}}))  # fmt: skip
        events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                               "delta": {"type": "input_json_delta", "partial_json": json.dumps(tool_input)}}))  # fmt: skip
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                                     "usage": {"output_tokens": reply.output_tokens}}))  # fmt: skip
    events.append(("message_stop", {"type": "message_stop"}))
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the newest user message (Claude Code adds reminders as extra text blocks)."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of the newest user message (what the tools returned)."""
    messages = body.get("messages") or []
    if not messages or messages[-1].get("role") != "user" or isinstance(messages[-1].get("content"), str):
        return []
    return [b for b in messages[-1]["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]


class FakeAnthropic(FakeApi):
    """The server. `turns` records every main-loop request body (the ones offering tools);
    `side_requests` the others (titles, summaries), answered with a fixed text."""

    name = "fake-anthropic"

    def __init__(self, reply: Callable[[dict[str, Any]], Reply]) -> None:
        super().__init__()
        self.reply = reply
        self.side_requests: list[dict[str, Any]] = []

    def is_turn(self, path: str) -> bool:
        return path.startswith("/v1/messages") and not path.startswith("/v1/messages/count_tokens")

    def turn(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        main_loop = bool(body.get("tools"))
        self.record(body, None if main_loop else self.side_requests)
        reply = self.reply(body) if main_loop else Reply(text="Fake side answer")
        if body.get("stream"):
            send_events(handler, sse(reply))
            return
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        content += [{"type": "tool_use", "id": f"toolu_fake_{next(_tool_ids)}", "name": n, "input": i}
                    for n, i in reply.tool_uses]  # fmt: skip
        send_json(handler, 200, {
            "id": "msg_fake", "type": "message", "role": "assistant", "model": MODEL, "content": content,
            "stop_reason": reply.stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens}})  # fmt: skip

    def other(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.path.startswith("/v1/messages/count_tokens"):
            send_json(handler, 200, {"input_tokens": 100})
        else:
            send_json(handler, 404, {"type": "error", "error": {"type": "not_found_error", "message": "not faked"}})


class StalledAnthropic:
    """A Messages API on 127.0.0.1 that never answers: it reads each request line and holds the connection.

    A model request then waits as long as the agent's own timeout (minutes), so only a working
    cancel or stop ends the turn soon. `requested` is set once a `POST /v1/messages` has come in:
    the agent is waiting on the model from then on.
    """

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.requests: list[str] = []
        self.requested = threading.Event()
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="stalled-anthropic", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.listener.getsockname()[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> StalledAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            sockets = [self.listener, *self._connections]
        for sock in sockets:  # shutdown wakes the threads blocked in accept/recv; close alone does not
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed by __exit__
                return
            with self._lock:
                self._connections.append(connection)
            threading.Thread(target=self._hold, args=(connection,), daemon=True).start()

    def _hold(self, connection: socket.socket) -> None:
        """Read the request line, then read (and drop) whatever comes until the client gives up."""
        data = b""
        try:
            while b"\r\n" not in data and (chunk := connection.recv(4096)):
                data += chunk
            if b"\r\n" in data:
                line = data.split(b"\r\n", 1)[0].decode("latin-1")
                with self._lock:
                    self.requests.append(line)
                if line.startswith("POST /v1/messages"):
                    self.requested.set()
            while connection.recv(4096):
                pass
        except OSError:
            pass
