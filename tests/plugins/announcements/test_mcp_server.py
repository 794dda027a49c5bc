"""The `deck` MCP server agents start: the official MCP client against it, and the protocol's edge cases over pipes."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys

import pytest
from deck.plugins import announcements_mcp
from deck.plugins.announcements import bridge

from tests.conftest import agent_block
from tests.plugins.announcements.test_announcements import CONCLUSION, server_entry

pytestmark = pytest.mark.anyio

SLOW = {"agent": "b", "question": "slow"}  # b answers until it is cancelled
HELLO = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}


def server_env(deck, agent: str) -> dict[str, str]:
    """What an agent gives the server: a small environment plus the entry's own variables."""
    return {"PATH": os.environ.get("PATH", ""), **{e["name"]: e["value"] for e in server_entry(deck, agent)["env"]}}


def active_asks(rec) -> list[dict]:
    changes = rec.named("ask:changed")
    ended = {c["ticketId"] for c in changes if not c["active"]}
    return [c for c in changes if c["active"] and c["ticketId"] not in ended]


# -- starting fast --------------------------------------------------------------------------------


def test_the_server_imports_the_standard_library_only():
    """Agents drop an MCP server that is slow to answer `initialize`: the module deck starts (and every
    package `python -m` imports on the way) must stay off the mcp package, asyncio, pluggy and the plugin."""
    code = (
        "import sys, json; before = set(sys.modules); import importlib; importlib.import_module(sys.argv[1]);"
        "print(json.dumps(sorted(set(sys.modules) - before - {'importlib'})))"
    )
    out = subprocess.run([sys.executable, "-c", code, bridge.SERVER_MODULE], capture_output=True, check=True, text=True)
    loaded = json.loads(out.stdout)
    ours = {"deck", "deck._version", "deck.plugins", bridge.SERVER_MODULE}
    assert [m for m in loaded if m not in ours and m.split(".")[0] not in sys.stdlib_module_names] == []
    assert not {"asyncio", "deck.plugins.announcements"} & set(loaded)


def test_env_names_are_the_bridges():
    names = ("ENV_SOCKET", "ENV_AGENT", "ENV_TOKEN", "ENV_ORIGIN", "MAX_LINE")
    assert [getattr(announcements_mcp, n) for n in names] == [getattr(bridge, n) for n in names]


# -- the official MCP client ------------------------------------------------------------------------


async def test_the_official_client_initializes_lists_and_calls_the_tools(make_deck):
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.shared.exceptions import MCPError
    from mcp_types.version import LATEST_HANDSHAKE_VERSION

    deck, rec = make_deck(agent_block("a", title="Agent A") + agent_block("b"))
    entry = server_entry(deck, "a")
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=server_env(deck, "a"))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        assert init.protocol_version == LATEST_HANDSHAKE_VERSION  # the client's own, which the server speaks
        assert init.server_info.name == "deck" and init.capabilities.tools is not None
        assert "ask_agent" in (init.instructions or "")
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert sorted(tools) == ["ask_agent", "changed_files", "list_agents"]
        assert tools["ask_agent"].title == "Ask another agent"
        assert tools["ask_agent"].input_schema["required"] == ["agent", "question"]
        assert {k: v["type"] for k, v in tools["ask_agent"].input_schema["properties"].items()} == {
            "agent": "string", "question": "string",
        }  # fmt: skip
        assert tools["list_agents"].input_schema == {"type": "object", "properties": {}}

        listed = await session.call_tool("list_agents", {})
        assert not listed.is_error
        assert [(a["name"], a["title"]) for a in json.loads(listed.content[0].text)] == [("a", "Agent A"), ("b", "b")]
        changed = await session.call_tool("changed_files", {})
        assert not changed.is_error and json.loads(changed.content[0].text) == []  # no agent has a worktree
        asked = await session.call_tool("ask_agent", {"agent": "b", "question": "multi 1"})
        assert not asked.is_error and asked.content[0].text == CONCLUSION
        # deck's refusal is the tool's error, word for word; so are wrong arguments (the model can fix them).
        refused = await session.call_tool("ask_agent", {"agent": "nobody", "question": "hi"})
        assert refused.is_error and refused.content[0].text == "unknown agent 'nobody' (agents: a, b)"
        wrong = await session.call_tool("ask_agent", {"agent": "b"})
        assert wrong.is_error and "`question` is missing" in wrong.content[0].text
        with pytest.raises(MCPError) as unknown:  # an unknown tool is a protocol error
            await session.call_tool("nope", {})
        assert unknown.value.code == -32602 and "nope" in str(unknown.value)
    assert rec.states("b") == ["starting", "ready", "busy", "ready"]  # asked once, by the one good call


async def test_the_official_clients_discover_probe_falls_back_to_initialize(make_deck):
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    entry = server_entry(deck, "a")
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=server_env(deck, "a"))
    async with Client(params) as client:  # mode "auto": server/discover first
        assert client.server_info is not None and client.server_info.name == "deck"
        assert [a["name"] for a in json.loads((await client.call_tool("list_agents", {})).content[0].text)] == ["a", "b"]


# -- the protocol over pipes ------------------------------------------------------------------------


class Pipes:
    """The server as a raw subprocess: lines in, answers collected by id."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.seen: list[dict] = []

    async def write(self, data: bytes | dict) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(data if isinstance(data, bytes) else json.dumps({"jsonrpc": "2.0", **data}).encode() + b"\n")
        await self.proc.stdin.drain()

    async def next(self) -> dict:
        assert self.proc.stdout
        line = await asyncio.wait_for(self.proc.stdout.readline(), 15)
        assert line, "the server ended"
        self.seen.append(json.loads(line))
        return self.seen[-1]

    async def call(self, rid, method: str, params: dict | None = None) -> dict:
        await self.write({"id": rid, "method": method, **({"params": params} if params is not None else {})})
        while (answer := await self.next()).get("id") != rid:
            pass
        return answer

    async def close(self) -> list[dict]:
        """End stdin; the rest of what the server says before it exits."""
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.close()
        rest = [json.loads(line) for line in (await asyncio.wait_for(self.proc.stdout.read(), 15)).splitlines()]
        assert await asyncio.wait_for(self.proc.wait(), 15) == 0
        self.seen += rest
        return rest


@pytest.fixture
async def pipes(make_deck):
    procs: list[asyncio.subprocess.Process] = []

    async def start(deck, agent: str = "a") -> Pipes:
        entry = server_entry(deck, agent)
        proc = await asyncio.create_subprocess_exec(
            entry["command"], *entry["args"], env=server_env(deck, agent),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        procs.append(proc)
        return Pipes(proc)

    yield start
    for proc in procs:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_bad_lines_unknown_methods_and_ping(make_deck, pipes):
    deck, rec = make_deck(agent_block("a"))
    server = await pipes(deck)
    await server.write(b"this is not JSON\n")
    parse_error = {"code": -32700, "message": "Parse error: not a JSON message"}
    assert await server.next() == {"jsonrpc": "2.0", "id": None, "error": parse_error}
    await server.write(b"\n[1, 2]\n")  # a blank line is skipped; a batch is no request
    assert (await server.next())["error"]["code"] == -32600
    await server.write(b'{"id": 1, "method": "ping"}\n')  # no "jsonrpc": "2.0"
    assert (await server.next())["error"]["code"] == -32600
    discover = await server.call(2, "server/discover", {})  # fast-agent's probe: an error, then initialize
    assert discover["error"] == {"code": -32601, "message": "Method not found", "data": "server/discover"}
    older = (await server.call(3, "initialize", {**HELLO, "protocolVersion": "2024-11-05"}))["result"]
    assert older["protocolVersion"] == "2024-11-05"
    newest = (await server.call(4, "initialize", {**HELLO, "protocolVersion": "1999-01-01"}))["result"]
    assert newest["protocolVersion"] == announcements_mcp.PROTOCOL_VERSIONS[0] and newest["serverInfo"]["name"] == "deck"
    await server.write({"method": "notifications/initialized"})  # a notification: no answer
    assert await server.call("p", "ping") == {"jsonrpc": "2.0", "id": "p", "result": {}}
    assert (await server.call(5, "resources/list", {}))["error"]["code"] == -32601
    assert (await server.call(6, "tools/call", {"name": "ask_agent", "arguments": "b?"}))["error"]["code"] == -32602
    assert await server.close() == []
    assert [m.get("id") for m in server.seen] == [None, None, 1, 2, 3, 4, "p", 5, 6]


async def test_calls_run_concurrently_and_a_cancel_ends_the_ask_unanswered(make_deck, pipes):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    server = await pipes(deck)
    await server.call(1, "initialize", HELLO)
    await server.write({"id": 2, "method": "tools/call", "params": {"name": "ask_agent", "arguments": SLOW}})
    await rec.wait_event("agent:state", agent="b", state="busy")
    # The ask is in flight; another call is answered meanwhile.
    listed = await server.call(3, "tools/call", {"name": "list_agents", "arguments": None})
    assert [a["state"] for a in json.loads(listed["result"]["content"][0]["text"])] == ["stopped", "busy"]
    await server.write({"method": "notifications/cancelled", "params": {"requestId": 2, "reason": "the user gave up"}})
    await rec.wait(lambda r: not active_asks(r))  # the connection closed, so deck cancelled the ask
    await rec.wait(lambda r: r.states("b")[-1:] == ["ready"])
    assert await server.call(4, "ping") == {"jsonrpc": "2.0", "id": 4, "result": {}}
    await server.close()
    assert 2 not in [m.get("id") for m in server.seen]  # a cancelled request is never answered


async def test_the_end_of_stdin_cancels_the_calls_in_flight(make_deck, pipes):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    server = await pipes(deck)
    await server.call(1, "initialize", HELLO)
    await server.write({"id": 2, "method": "tools/call", "params": {"name": "ask_agent", "arguments": SLOW}})
    await rec.wait(lambda r: len(active_asks(r)) == 1)
    assert await server.close() == []
    await rec.wait(lambda r: not active_asks(r))


async def test_a_deck_that_is_gone_is_the_tools_error(make_deck, pipes):
    deck, rec = make_deck(agent_block("a"))
    server = await pipes(deck)
    await deck.shutdown()  # the socket is gone
    answer = await server.call(1, "tools/call", {"name": "list_agents"})
    assert answer["result"]["isError"] and answer["result"]["content"][0]["text"].startswith("cannot reach deck: ")
    await server.close()


def test_a_line_over_the_limit_is_skipped_whole(monkeypatch):
    monkeypatch.setattr(announcements_mcp, "MAX_MESSAGE", 10)
    stdin = io.BytesIO(b"x" * 25 + b"\n" + b'{"a": 1}\n' + b"0123456789\n" + b"tail")
    assert list(announcements_mcp.read_lines(stdin)) == [None, b'{"a": 1}\n', b"0123456789\n", b"tail"]


async def test_a_nesting_bomb_is_a_parse_error_and_the_server_goes_on(make_deck, pipes):
    deck, rec = make_deck(agent_block("a"))
    server = await pipes(deck)
    await server.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    assert (await server.next())["error"]["code"] == -32700
    assert await server.call("p", "ping") == {"jsonrpc": "2.0", "id": "p", "result": {}}
    assert await server.close() == []
