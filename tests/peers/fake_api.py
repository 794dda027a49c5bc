"""What the fake model APIs share (stdlib only): an HTTP server on 127.0.0.1 in a thread of its own,
the turns it was asked for, the requests it does not fake, and replies as JSON or as server-sent events.

A fake says which requests are turns (`is_turn`) and answers them (`turn`); everything else is
recorded in `other_paths` and answered by `other` (a 404 unless the fake knows better).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeApi:
    """The server; `turns` records every turn's request body, in order."""

    name = "fake-api"

    def __init__(self) -> None:
        self.turns: list[dict[str, Any]] = []
        self.other_paths: list[str] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                if fake.is_turn(self.path):
                    fake.turn(self, json.loads(raw or b"{}"))
                else:
                    fake._other(self)

            def do_GET(self) -> None:
                fake._other(self)

            do_HEAD = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name=self.name, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def record(self, body: dict[str, Any], into: list[dict[str, Any]] | None = None) -> None:
        with self._lock:
            (self.turns if into is None else into).append(body)

    def is_turn(self, path: str) -> bool:
        raise NotImplementedError

    def turn(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def other(self, handler: BaseHTTPRequestHandler) -> None:
        send_json(handler, 404, {"error": {"message": "not faked", "type": "not_found_error"}})

    def _other(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.other_paths.append(f"{handler.command} {handler.path}")
        self.other(handler)


def send_json(handler: BaseHTTPRequestHandler, status: int, obj: dict[str, Any]) -> None:
    _send(handler, status, "application/json", json.dumps(obj).encode())


def send_events(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    """A whole server-sent event stream, as one response."""
    _send(handler, 200, "text/event-stream", data, ("cache-control", "no-cache"))


def _send(handler: BaseHTTPRequestHandler, status: int, kind: str, data: bytes, *headers: tuple[str, str]) -> None:
    handler.send_response(status)
    handler.send_header("content-type", kind)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(data)
