"""`/acp?agent=NAME` on the web server (`deck serve --web`): an ACP client over a WebSocket, one JSON-RPC
message per text frame each way (the WebSocket profile of ACP's remote transport), through the
translator `deck acp` uses on stdio (`deck.remote.acp_proxy`).

The web server checks the token and the Origin first, as for `/ws` (`WebServer._acp`). The client
is one more client of the deck: its events come from the deck in this process, and its frames are
written straight to its transport, never waited for (held while it does not read, as on stdio).
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web
from deck.errors import ServiceError
from deck.events import now_iso
from deck.remote.acp_proxy import MAX_LINE_BYTES, AcpProxy
from deck.remote.peer import Peer
from deck.tty import one_line

if TYPE_CHECKING:
    from deck.remote.server import ServerFrontend
    from deck.remote.web import PortConnection, WebServer


class AcpClient(Peer):
    """An ACP client on `/acp`, as the server lists its clients (`DeckService.Clients`, `clients:changed`):
    its events come from the deck in this process, not as the wire's lines, which it is never sent."""

    def __init__(self, server: ServerFrontend, request: web.Request, agent: str) -> None:
        super().__init__(server, server.next_id())
        self.address = request.remote or "?"
        self.since = now_iso()
        client = one_line(request.headers.get("User-Agent", ""), 120)
        self.command = f"acp {agent} {self.address}" + (f" ({client})" if client else "")

    def send(self, data: bytes) -> bool:
        return not self.closed  # the wire's lines are not for an ACP client

    def who(self) -> str:
        return f"acp {self.address}"

    def info(self) -> dict[str, Any]:
        return {**super().info(), "web": True, "acp": True}


async def serve_acp(server: WebServer, request: web.Request, connection: PortConnection | None) -> web.StreamResponse:
    """Serve one ACP client until it goes: refused with 400 when it names no agent of the deck's."""
    client = server.frontend.client
    agent = request.query.get("agent", "")
    try:
        known = [str(a.get("name")) for a in await client.call("AgentService.List")]
    except ServiceError as exc:
        return web.Response(status=503, text=f"{exc}\n")
    if agent not in known:
        return web.Response(status=400, text=f"name one of the deck's agents: /acp?agent=NAME ({', '.join(known)})\n")
    ws = web.WebSocketResponse(protocols=("acp",), max_msg_size=MAX_LINE_BYTES, heartbeat=30.0, compress=False)
    await ws.prepare(request)
    if connection is not None:
        connection.upgraded()
    transport = request.transport
    assert transport is not None
    loop = asyncio.get_running_loop()

    def write(data: bytes) -> None:
        if not transport.is_closing():
            transport.write(server.frames(data, False))  # one text frame per line: one message each

    def closed(why: str) -> None:
        task = loop.create_task(ws.close())
        server.tasks.add(task)
        task.add_done_callback(server.tasks.discard)

    proxy = AcpProxy(client, agent, write, backlog=transport.get_write_buffer_size, on_close=closed, cwd=os.getcwd())
    listed = AcpClient(server.frontend, request, agent)
    server.frontend.attach(listed)
    client.subscribe(proxy.on_event)
    try:
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                proxy.handle_line(message.data.encode())
            elif message.type == WSMsgType.BINARY:
                proxy.handle_line(message.data)
    finally:
        listed.closed = True
        server.frontend.detach(listed)
        client.unsubscribe(proxy.on_event)
        proxy.flush_now()
        proxy.close()
    return ws
