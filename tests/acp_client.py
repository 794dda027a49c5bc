"""`deck acp AGENT` as a real process driven by a bare ACP client: JSON-RPC lines to its stdin, its stdout
read line by line (every line must be JSON: `Lines.feed` stops at one that is not)."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import psutil

from tests.deck_process import DECK, Lines

INITIALIZE = {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}}


class AcpProcess(Lines):
    """`deck acp ARGS…`: requests out, responses, updates and deck's requests in."""

    def __init__(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
        super().__init__()
        self.popen = subprocess.Popen(
            [*DECK, "acp", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env
        )
        self.stderr = b""
        self._next_id = 0
        threading.Thread(target=self.feed, args=(self.popen.stdout,), daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stderr(self) -> None:
        assert self.popen.stderr is not None
        self.stderr = self.popen.stderr.read()

    def describe(self) -> str:
        return f"\nstderr: {self.stderr[-2000:]!r}"

    def send_raw(self, data: bytes) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(data)
        self.popen.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params or {}})
        return self._next_id

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0) -> Any:
        reply = self.response(self.request(method, params), timeout)
        assert "result" in reply, reply
        return reply["result"]

    def error(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        reply = self.response(self.request(method, params), timeout)
        assert "error" in reply, reply
        return reply["error"]  # type: ignore[no-any-return]

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def answer(self, request_id: Any, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def open_session(self, cwd: str = "/tmp") -> str:
        self.call("initialize", INITIALIZE)
        return str(self.call("session/new", {"cwd": cwd, "mcpServers": []})["sessionId"])

    def updates(self, session: str, kind: str | None = None) -> list[dict[str, Any]]:
        with self._changed:
            found = [x["params"]["update"] for x in self.lines if x.get("method") == "session/update" and x["params"]["sessionId"] == session]
        return [u for u in found if kind is None or u["sessionUpdate"] == kind]

    def text(self, session: str, kind: str = "agent_message_chunk") -> str:
        return "".join(u["content"]["text"] for u in self.updates(session, kind))

    def asked(self, method: str, count: int = 1, timeout: float = 30.0) -> dict[str, Any]:
        """The `count`th request deck sent the client by `method`."""
        return self.wait_line(lambda x: x.get("method") == method and "id" in x, timeout, count)

    def close(self) -> int:
        """End of stdin; the exit code (the process and its agents are killed past 30 s)."""
        if self.popen.stdin is not None and not self.popen.stdin.closed:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        try:
            return self.popen.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        try:
            procs = [psutil.Process(self.popen.pid), *psutil.Process(self.popen.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for proc in procs:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, 5)
