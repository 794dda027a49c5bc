"""`/acp?agent=NAME` on `deck serve --web`: ACP over a WebSocket, one JSON-RPC message per text frame,
behind the token and Origin checks of `/ws`; the same translator as `deck acp` on stdio."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from deck.remote.serverdir import socket_path

from tests.conftest import agent_block
from tests.core.remote.test_server import Raw, runtime  # noqa: F401 (a fixture)
from tests.deck_process import write_config
from tests.web_server import WebServe

pytestmark = [pytest.mark.timeout(90), pytest.mark.anyio]


@pytest.fixture
def served(tmp_path: Path, runtime: Path) -> Iterator[WebServe]:  # noqa: F811
    server = WebServe(write_config(tmp_path / "deck.toml", agent_block("a")))
    yield server
    server.stop()


class AcpSocket:
    """An ACP client on `/acp` (aiohttp's WebSocket): each frame one message."""

    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.session, self.ws = session, ws
        self.frames: list[str] = []
        self.messages: list[dict[str, Any]] = []
        self._next_id = 0
        self._changed = asyncio.Condition()
        self._reading = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for frame in self.ws:
            if frame.type != aiohttp.WSMsgType.TEXT:
                break
            async with self._changed:
                self.frames.append(frame.data)
                self.messages.append(json.loads(frame.data))  # one message per frame: never two
                self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()

    async def wait(self, test: Any, timeout: float = 20.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout), self._changed:
            while (found := next((m for m in self.messages if test(m)), None)) is None:
                assert not self.ws.closed, f"closed before: {self.messages[-5:]}"
                await self._changed.wait()
            return found

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        request_id = self._next_id
        await self.ws.send_str(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}))
        return await self.wait(lambda m: m.get("id") == request_id and "method" not in m)

    async def close(self) -> None:
        await self.ws.close()
        self._reading.cancel()
        await self.session.close()


async def connect(server: WebServe, agent: str = "a", *, token: str | None = None, **headers: str) -> AcpSocket:
    session = aiohttp.ClientSession()
    url = f"ws://{server.host}:{server.port}/acp?agent={agent}"
    headers.setdefault("Authorization", f"Bearer {server.token if token is None else token}")
    try:
        ws = await session.ws_connect(url, headers=headers)
    except BaseException:
        await session.close()
        raise
    return AcpSocket(session, ws)


async def refused(server: WebServe, agent: str = "a", **kwargs: Any) -> int:
    with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
        await connect(server, agent, **kwargs)
    return caught.value.status


async def test_acp_needs_the_token_the_pages_origin_and_an_agent_of_the_deck(served: WebServe) -> None:
    assert await refused(served, token="x" * 43) == 401
    assert await refused(served, token="") == 401
    assert await refused(served, Origin="http://evil.example") == 403
    assert await refused(served, agent="nobody") == 400
    assert await refused(served, agent="") == 400
    assert served.token.encode() not in served.stderr  # the token is in no log line


async def test_a_session_over_the_websocket_streams_its_answer_and_sees_what_the_console_sends(served: WebServe) -> None:
    client = await connect(served, Origin=f"http://127.0.0.1:{served.port}")  # the page's own origin is welcome
    watcher = Raw(socket_path(served.name))
    try:
        init = await client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        assert init["result"]["agentInfo"]["name"] == "deck" and init["result"]["protocolVersion"] == 1
        session = (await client.request("session/new", {"cwd": "/tmp", "mcpServers": []}))["result"]["sessionId"]
        answer = await client.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "stream 20"}]})
        assert answer["result"] == {"stopReason": "end_turn"}
        text = "".join(m["params"]["update"]["content"]["text"] for m in client.messages
                       if m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")  # fmt: skip
        assert text == "".join(f"c{i} " for i in range(20))
        assert all("\n" not in frame for frame in client.frames)  # one message per frame
        watcher.call("ChatService.Send", {"agent": "a", "text": "from the console"})
        told = await client.wait(lambda m: m.get("method") == "session/update"
                                 and m["params"]["update"]["sessionUpdate"] == "user_message_chunk")  # fmt: skip
        assert told["params"]["update"]["content"]["text"] == "from the console"
        await client.ws.send_str("{not json")
        bad = await client.wait(lambda m: m.get("error", {}).get("code") == -32700)
        assert bad["id"] is None
        unknown = await client.request("no/such_method")
        assert unknown["error"]["code"] == -32601
        listed = await client.request("session/list")
        assert [s["sessionId"] for s in listed["result"]["sessions"]] == [session]
        acp_clients = [c for c in watcher.call("DeckService.Clients") if c.get("acp")]
        assert len(acp_clients) == 1 and acp_clients[0]["command"].startswith("acp a 127.0.0.1")  # one more client
    finally:
        watcher.close()
        await client.close()
