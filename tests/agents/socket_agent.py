"""An ACP agent (stdlib only) that uses deck's ask socket itself, as a hostile agent may: for the socket's caps.

It reads the socket, its name and its token from the `deck` MCP server of its session/new, and
connects from its own process. Each prompt is a JSON object, one of:
  {"open": N, "request": R | null, "junk": SIZE, "wait": K, "timeout": T}
      N new connections, all at once, each sending the request R (`method`, `params`, and `origin`
      when given, signed as this agent) or, with `junk`, SIZE bytes with no newline; then waits
      until deck closed K of them (it does once it answered or refused), T seconds at most (10 by default).
  {"send": SIZE, "wait": K, "timeout": T}
      SIZE bytes with no newline on every connection still open, all at once; then the same wait.
  {"close": true}
      every connection still open: its writing side shut, then it waits for deck to close it.
The turn's one agent_message_chunk is a JSON list, one entry per connection the prompt used:
{"reply": the first line deck sent (parsed) or null, "closed": bool, "sent": bytes written}.
The connections stay open across prompts until deck closes them or a `close`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

lock = threading.Lock()
changed = threading.Condition()
entry: dict = {}  # the deck MCP server's environment
connections: list = []


class Connection:
    """One connection to deck's socket, read on a thread of its own."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.data = b""
        self.closed = False
        self.sent = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            with changed:
                if not chunk:
                    self.closed = True
                else:
                    self.data = (self.data + chunk)[:65536]
                changed.notify_all()
            if not chunk:
                return

    @property
    def done(self) -> bool:
        """deck closes a connection once it answered it, or refused it."""
        return self.closed

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                sent = self.sock.send(view[:65536])
                self.sent += sent
                view = view[sent:]
        except OSError:
            pass

    def report(self) -> dict:
        line = self.data.split(b"\n")[0] if b"\n" in self.data else None
        return {"reply": json.loads(line) if line else None, "closed": self.closed, "sent": self.sent}


def signed(request: dict) -> bytes:
    message = {"agent": entry.get("DECK_ASK_AGENT"), "token": entry.get("DECK_ASK_TOKEN"),
               "origin": entry.get("DECK_ASK_ORIGIN"), **request}  # fmt: skip
    return json.dumps(message).encode() + b"\n"


def all_at_once(conns: list, data: bytes) -> None:
    threads = [threading.Thread(target=c.send, args=(data,), daemon=True) for c in conns]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def wait(conns: list, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with changed:
        while sum(c.done for c in conns) < count and time.monotonic() < deadline:
            changed.wait(deadline - time.monotonic())


def step(spec: dict) -> list:
    timeout = spec.get("timeout", 10.0)
    if "open" in spec:
        conns = [Connection(entry["DECK_ASK_SOCKET"]) for _ in range(spec["open"])]
        connections.extend(conns)
        data = signed(spec["request"]) if spec.get("request") else b"x" * spec.get("junk", 0)
        all_at_once(conns, data)
    elif "send" in spec:
        conns = [c for c in connections if not c.closed]
        all_at_once(conns, b"x" * spec["send"])
    else:
        conns = [c for c in connections if not c.closed]
        for c in conns:
            try:
                c.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        wait(conns, len(conns), timeout)
        return [c.report() for c in conns]
    wait(conns, spec.get("wait", 0), timeout)
    return [c.report() for c in conns]


def write(msg: dict) -> None:
    with lock:
        sys.stdout.buffer.write(json.dumps({"jsonrpc": "2.0", **msg}).encode() + b"\n")
        sys.stdout.buffer.flush()


def turn(rid, sid: str, text: str) -> None:
    report = json.dumps(step(json.loads(text)))
    write({"method": "session/update", "params": {"sessionId": sid, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": report}}}})  # fmt: skip
    write({"id": rid, "result": {"stopReason": "end_turn"}})


def handle(msg: dict) -> None:
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method == "initialize":
        write({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}})
    elif method == "session/new":
        for server in params.get("mcpServers") or []:
            if server.get("name") == "deck":
                entry.update({e["name"]: e["value"] for e in server.get("env", [])})
        write({"id": rid, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        text = " ".join(b.get("text", "") for b in params.get("prompt", []))
        threading.Thread(target=turn, args=(rid, params.get("sessionId"), text), daemon=True).start()
    elif rid is not None and method is not None:
        write({"id": rid, "error": {"code": -32601, "message": "method not found"}})


def main() -> None:
    for raw in sys.stdin.buffer:
        handle(json.loads(raw))
    os._exit(0)


if __name__ == "__main__":
    main()
