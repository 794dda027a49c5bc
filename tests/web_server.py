"""`deck serve --web 0` as a real process, its page's address from `deck web`, and a WebSocket client of it."""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from tests.deck_process import DECK


class WebServe:
    """`deck serve --web 0 --name NAME` in the foreground, ready (its socket and its page accept)."""

    def __init__(self, config: Path, name: str = "w", *extra: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        ready_read, ready_write = os.pipe()
        self.popen = subprocess.Popen(
            [*DECK, "serve", "--config", str(config), "--name", name, "--web", "0", *extra, "--ready-fd", str(ready_write)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(ready_write,), env=env,
        )  # fmt: skip
        os.close(ready_write)
        self.stderr = b""
        threading.Thread(target=self._read_stderr, daemon=True).start()
        try:
            readable, _, _ = select.select([ready_read], [], [], 30)
            ready = os.read(ready_read, 6) == b"ready\n" if readable else False
        finally:
            os.close(ready_read)
        assert ready, f"the server did not start: {self.stderr.decode(errors='replace')}"
        shown = subprocess.run([*DECK, "web", name], capture_output=True, text=True, timeout=30, env=env)
        assert shown.returncode == 0, shown.stderr
        #: The address `deck web` prints: http://127.0.0.1:PORT/#token=…
        self.url = shown.stdout.strip()
        self.base, _, fragment = self.url.partition("#")
        self.token = fragment.removeprefix("token=")
        parts = urlsplit(self.base)
        self.host, self.port = parts.hostname or "", parts.port or 0
        self.ws_url = f"ws://{parts.netloc}/ws"

    def _read_stderr(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.stderr += line

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.terminate()
        try:
            return self.popen.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the server did not stop in 60 s: {self.stderr.decode(errors='replace')}") from None
        finally:
            if self.popen.stdout is not None:
                self.popen.stdout.close()


class WebSocketClient:
    """A client of `/ws` (aiohttp's): JSON-RPC calls, and every message it got, each one wire line."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.messages: list[str] = []
        self.lines: list[dict[str, Any]] = []
        self._next_id = 0
        self._changed = asyncio.Condition()
        self._reading = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            async with self._changed:
                self.messages.append(message.data)
                self.lines += [json.loads(line) for line in message.data.splitlines()]
                self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()

    async def wait(self, predicate: Any, timeout: float = 20.0) -> Any:
        async with asyncio.timeout(timeout), self._changed:
            while not (found := predicate(self.lines)):
                assert not self.ws.closed, f"closed ({self.ws.close_code}) before: {self.lines[-5:]}"
                await self._changed.wait()
            return found

    async def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 20.0) -> Any:
        self._next_id += 1
        request_id = self._next_id
        await self.ws.send_str(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}))
        [reply] = await self.wait(lambda lines: [x for x in lines if x.get("id") == request_id], timeout)
        assert "result" in reply, reply
        return reply["result"]

    async def event(self, name: str, timeout: float = 20.0, **fields: Any) -> dict[str, Any]:
        def found(lines: list[dict[str, Any]]) -> Any:
            return next((x for x in lines if x.get("event") == name and all(x.get(k) == v for k, v in fields.items())), None)

        return await self.wait(found, timeout)

    async def close(self) -> None:
        await self.ws.close()
        self._reading.cancel()
