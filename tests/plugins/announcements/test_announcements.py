"""Inter-agent asks: a requester calls the real `deck` MCP server; the target answers in its own session."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys

import pytest
from deck import CONVERSATION, Session, hookimpl
from deck.plugins import announcements, announcements_mcp
from deck.plugins.announcements import bridge

from tests.conftest import agent_block

pytestmark = pytest.mark.anyio

#: The fake agent's `multi` messages (tests/agents/fake_agent.py MULTI).
PREAMBLE, MIDDLE, CONCLUSION = "Let me look into it.", "Found the file, reading on.", "The answer is 42."


def answers(deck, agent: str) -> list[str]:
    """The text of `agent`'s finished agent messages in its own conversation."""
    return [
        "".join(p["text"] for p in m["parts"] if p["type"] == "text")
        for m in deck.chat.conversation(agent).snapshot()["messages"]
        if m["role"] == "agent" and m["done"]
    ]


def all_conversation_text(deck) -> str:
    return json.dumps({name: conv.snapshot() for name, conv in deck.chat.conversations.items()})


async def until(predicate, timeout: float = 15.0) -> None:
    """Poll `predicate` (for what emits no event, such as the ACP trace)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def turn_done(rec, agent: str, count: int = 1):
    await rec.wait(lambda r: len([p for p in r.named("message:updated", agent) if p["message"]["done"]
                                  and p["message"]["role"] == "agent"]) >= count, timeout=30)


async def test_requester_gets_only_the_final_message_and_the_rest_are_announcements(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    deck.chat.send("a", "ask b multi")
    await turn_done(rec, "a")
    assert answers(deck, "a") == [f"answer: {CONCLUSION}"]
    announced = rec.named("agent:announcement")
    assert [p["text"] for p in announced] == [PREAMBLE, MIDDLE]
    assert {(p["requester"], p["target"]) for p in announced} == {("a", "b")}
    assert len({p["ticketId"] for p in announced}) == 1
    assert all(p["at"].endswith("Z") for p in announced)
    # Announcements are never stored; thoughts are never announced.
    text = all_conversation_text(deck)
    assert PREAMBLE not in text and MIDDLE not in text
    assert not any("pondering" in p["text"] for p in announced)
    # b was busy while it answered, and is ready again; the announcements came live, before the end.
    assert rec.states("b") == ["starting", "ready", "busy", "ready"]
    asks = rec.named("ask:changed")
    assert [(a["requester"], a["target"], a["active"]) for a in asks] == [("a", "b", True), ("a", "b", False)]
    assert asks[0]["ticketId"] == asks[1]["ticketId"] == announced[0]["ticketId"]
    first_announcement = next(i for i, e in enumerate(rec.events) if e.name == "agent:announcement")
    b_ready_again = max(i for i, e in enumerate(rec.events) if e.name == "agent:state" and e.payload() == {
        "agent": "b", "state": "ready", "outdated": False})
    assert first_announcement < b_ready_again


async def test_one_message_only_is_the_final_and_nothing_is_announced(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    deck.chat.send("a", "ask b multi 1")
    await turn_done(rec, "a")
    assert answers(deck, "a") == [f"answer: {CONCLUSION}"]
    assert rec.named("agent:announcement") == []


async def test_no_message_at_all_is_the_tools_error(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    deck.chat.send("a", "ask b silent")
    await turn_done(rec, "a")
    assert answers(deck, "a") == ["tool error: target returned no reply"]
    assert rec.named("agent:announcement") == []


async def test_the_targets_own_conversation_is_untouched(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    deck.chat.send("b", "hello")
    await turn_done(rec, "b")
    before = deck.chat.conversation("b").snapshot()
    seen = len(rec.events)
    deck.chat.send("a", "ask b multi")
    await turn_done(rec, "a")
    assert answers(deck, "a") == [f"answer: {CONCLUSION}"]
    assert deck.chat.conversation("b").snapshot() == before
    message_events = ("message:delta", "message:updated", "turn:changed")
    assert [e for e in rec.events[seen:] if e.name in message_events and e.payload()["agent"] == "b"] == []
    assert set(deck.chat.conversations) == {"a", "b"}


async def test_a_start_refused_by_the_limits_is_the_tools_error(make_deck):
    deck, rec = make_deck("[limits]\nmaxRunningAgents = 2\n" + "".join(agent_block(n) for n in "abc"))
    deck.chat.send("c", "slow")
    await rec.wait_event("agent:state", agent="c", state="busy")
    deck.chat.send("a", "ask b multi")
    await turn_done(rec, "a")
    assert answers(deck, "a") == ["tool error: too many agents running: 2 agent(s) busy (a, c), the limit is 2"]
    assert rec.states("b") == []
    deck.chat.cancel("c")


async def test_list_agents_names_titles_and_states(make_deck):
    deck, rec = make_deck(agent_block("a", title="Agent A") + agent_block("b", description="the reviewer"))
    deck.chat.send("a", "list-agents")
    await turn_done(rec, "a")
    (text,) = answers(deck, "a")
    assert text.startswith("answer: ")
    listed = json.loads(text.removeprefix("answer: "))
    assert listed == [
        {"name": "a", "title": "Agent A", "description": "", "state": "busy", "you": True},
        {"name": "b", "title": "b", "description": "the reviewer", "state": "stopped"},
    ]


async def test_the_tools_run_in_an_agent_folder_that_holds_a_deck_package_of_its_own(make_deck, shadowing_folder):
    deck, rec = make_deck(agent_block("a", cwd=str(shadowing_folder)) + agent_block("b"))
    deck.chat.send("a", "list-agents")
    await turn_done(rec, "a")
    (text,) = answers(deck, "a")
    assert [agent["name"] for agent in json.loads(text.removeprefix("answer: "))] == ["a", "b"]


async def test_asking_oneself_or_an_unknown_agent_is_an_error(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    deck.chat.send("a", "ask a multi")
    deck.chat.send("a", "ask nobody multi")
    await turn_done(rec, "a", 2)
    assert answers(deck, "a") == [
        "tool error: an agent cannot ask itself",
        "tool error: unknown agent 'nobody' (agents: a, b)",
    ]
    assert rec.states("b") == []


async def test_a_cycle_is_refused(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    deck.chat.send("a", "ask b ask a multi")  # a asks b, which asks a back
    await turn_done(rec, "a")
    assert answers(deck, "a") == [
        "answer: tool error: refused: a → b is waiting for an answer, so b asking a would wait forever"
    ]


async def test_a_chain_of_asks_works(make_deck):
    deck, rec = make_deck("".join(agent_block(n) for n in "abc"))
    deck.chat.send("a", "ask b ask c multi")
    await turn_done(rec, "a")
    assert answers(deck, "a") == [f"answer: answer: {CONCLUSION}"]
    assert [(p["requester"], p["target"], p["text"]) for p in rec.named("agent:announcement")] == [
        ("b", "c", PREAMBLE), ("b", "c", MIDDLE),
    ]  # fmt: skip


async def test_a_crash_of_the_target_ends_the_ask_with_an_error(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    deck.chat.send("a", "ask b crash")
    await turn_done(rec, "a")
    (text,) = answers(deck, "a")
    assert text.startswith("tool error: b stopped before it answered: the agent exited on its own with code 7")
    await rec.wait_event("agent:state", agent="b", state="error")


async def test_the_targets_permission_requests_go_to_the_user(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    deck.chat.send("a", "ask b perm")
    request = await rec.wait_event("permission:requested", agent="b")
    assert request["toolCall"]["title"] == "Edit file"
    deck.chat.answer_permission(request["id"], "yes")
    await turn_done(rec, "a")
    assert answers(deck, "a") == ["answer: permission: yes"]
    assert deck.chat.conversation("b").snapshot()["messages"] == []


class AcpTrace:
    """Records every ACP message as (agent, direction, method or stopReason)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str]] = []

    @announcements.hookimpl
    def deck_acp_message(self, deck, agent, direction, message):
        what = message.get("method") or str((message.get("result") or {}).get("stopReason", ""))
        self.lines.append((agent.name, direction, what))


async def test_cancelling_the_requesters_turn_cancels_its_ask(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    trace = AcpTrace()
    deck.pm.register(trace, name="trace")
    deck.trace_acp = True
    deck.chat.send("a", "ask b slow")
    await rec.wait_event("agent:state", agent="b", state="busy")
    await until(lambda: ("b", "in", "session/update") in trace.lines)  # b is answering
    deck.chat.cancel("a")
    await turn_done(rec, "a")
    assert deck.chat.conversation("a").snapshot()["messages"][-1]["stopReason"] == "cancelled"
    await rec.wait(lambda r: r.states("b")[-1:] == ["ready"])
    assert ("b", "out", "session/cancel") in trace.lines
    assert ("b", "in", "cancelled") in trace.lines  # b's ask session ended its answer


async def test_disabled_plugin_passes_no_mcp_server(make_deck):
    deck, rec = make_deck('[plugins]\ndisabled = ["announcements"]\n' + agent_block("a") + agent_block("b"))
    assert not deck.pm.has_plugin("announcements")
    deck.chat.send("a", "ask b multi")
    await turn_done(rec, "a")
    assert answers(deck, "a") == ["tool error: no deck MCP server in session/new"]


# -- the socket and the MCP server ------------------------------------------------------------------


async def request(method: str, params, env: dict) -> dict:
    """The MCP server's own (blocking) bridge client, off the loop that serves the socket."""
    return await asyncio.to_thread(announcements_mcp.request, method, params, env)


def server_entry(deck, agent: str) -> dict:
    (entry,) = deck.hooks.session_mcp_servers(deck.agents[agent], Session(deck.agents[agent]))
    return entry


async def test_mcp_server_entry_is_the_acp_stdio_form(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    entry = server_entry(deck, "a")
    assert entry["name"] == "deck"
    assert os.path.isabs(entry["command"]) and entry["command"] == os.path.abspath(sys.executable)
    assert entry["args"] == ["-P", "-m", "deck.plugins.announcements_mcp"]
    env = {e["name"]: e["value"] for e in entry["env"]}
    assert set(env) == {bridge.ENV_SOCKET, bridge.ENV_AGENT, bridge.ENV_TOKEN, bridge.ENV_ORIGIN}
    assert env[bridge.ENV_AGENT] == "a" and env[bridge.ENV_ORIGIN] == "conversation"


async def test_socket_is_private_and_a_wrong_token_is_refused(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    env = {e["name"]: e["value"] for e in server_entry(deck, "a")["env"]}
    path = env[bridge.ENV_SOCKET]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    # The right token works…
    answer = await request("list_agents", {}, env)
    assert [a["name"] for a in answer["result"]] == ["a", "b"]
    # …a wrong one, or a's token presented as b, is refused and nothing is asked.
    for forged in ({**env, bridge.ENV_TOKEN: "0" * 64}, {**env, bridge.ENV_AGENT: "b"}):
        assert await request("list_agents", {}, forged) == {"error": "not authorized"}
        asked = await request("ask_agent", {"agent": "b", "question": "multi"}, forged)
        assert asked == {"error": "not authorized"}
    assert rec.states("b") == []
    # Bad requests from an authorised client get a clear error, and the bridge goes on.
    assert await request("ask_agent", ["b", "hi"], env) == {"error": "params must be an object"}
    assert await request("ask_agent", {"agent": "b"}, env) == {
        "error": "ask_agent needs the parameters agent and question, both strings"}
    assert await request("nope", {}, env) == {"error": "unknown method 'nope'"}
    assert [a["name"] for a in (await request("list_agents", {}, env))["result"]] == ["a", "b"]
    await deck.shutdown()
    assert not os.path.exists(os.path.dirname(path))


async def test_mcp_server_answers_unknown_methods_with_an_error(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    entry = server_entry(deck, "a")
    env = {"PATH": os.environ.get("PATH", ""), **{e["name"]: e["value"] for e in entry["env"]}}
    proc = await asyncio.create_subprocess_exec(
        entry["command"], *entry["args"], env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )

    async def call(rid, method, params=None):
        message = {"jsonrpc": "2.0", "method": method, **({"id": rid} if rid is not None else {})}
        if params is not None:
            message["params"] = params
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        await proc.stdin.drain()
        if rid is None:
            return None
        while True:
            reply = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
            if reply.get("id") == rid:
                return reply

    try:
        # fast-agent probes this draft method first and falls back on the error.
        assert (await call(0, "server/discover", {}))["error"]["code"] == -32601
        init = await call(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "test", "version": "1"}})
        assert init["result"]["serverInfo"]["name"] == "deck"
        await call(None, "notifications/initialized")
        assert (await call(2, "no/such/method", {}))["error"]["code"] == -32601
        tools = (await call(3, "tools/list"))["result"]["tools"]
        assert {t["name"]: sorted(t["inputSchema"]["properties"]) for t in tools} == {
            "ask_agent": ["agent", "question"], "list_agents": [], "changed_files": [],
        }  # fmt: skip
        reply = await call(4, "tools/call", {"name": "ask_agent", "arguments": {"agent": "b", "question": "multi 1"}})
        assert reply["result"]["content"][0]["text"] == CONCLUSION
        assert not reply["result"].get("isError")
    finally:
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), 10)


# -- a real third-party requester ---------------------------------------------------------------------

from tests.peers.conftest import acp_schema, agent_toml, fast_agent_command, home, peer_deck, workdir  # noqa: E402,F401


@pytest.mark.timeout(90)
async def test_fast_agent_asks_through_the_deck_mcp_server(peer_deck, home, workdir):
    """fast-agent (passthrough model) calls deck__ask_agent; deck answers its permission request; the final
    message, and only it, reaches fast-agent's reply; the preamble came as an announcement."""
    question = json.dumps({"agent": "b", "question": "multi"})
    pd = peer_deck(agent_toml("fast", fast_agent_command(home), workdir) + agent_block("b", cwd=str(workdir)))
    deck, rec = pd.deck, pd.rec
    deck.chat.send("fast", f"***CALL_TOOL deck__ask_agent {question}")
    request = await rec.wait_event("permission:requested", agent="fast", timeout=60)
    assert json.loads(request["toolCall"]["input"]) == {"agent": "b", "question": "multi"}
    allow = next(o["optionId"] for o in request["options"] if o["kind"] == "allow_once")
    deck.chat.answer_permission(request["id"], allow)
    await turn_done(rec, "fast")
    reply = deck.chat.conversation("fast").snapshot()["messages"][-1]
    (tool,) = [p for p in reply["parts"] if p["type"] == "tool"]
    assert tool["status"] == "completed" and tool["output"] == CONCLUSION
    assert "".join(p["text"] for p in reply["parts"] if p["type"] == "text") == CONCLUSION
    assert [p["text"] for p in rec.named("agent:announcement")] == [PREAMBLE, MIDDLE]
    text = all_conversation_text(deck)
    assert PREAMBLE not in text and MIDDLE not in text
    await pd.close()


def test_a_late_tool_status_does_not_split_a_message_and_code_keeps_its_indentation():
    from deck.plugins.announcements.asks import Messages

    announced: list[str] = []
    messages = Messages(announced.append)
    messages.text("Let me check.")
    messages.boundary()  # a tool call
    messages.text("    def f():\n")  # the final: a code block, indented
    messages.text("        return 42\n")
    assert messages.final() == "    def f():\n        return 42"
    assert announced == ["Let me check."]


async def test_a_tool_status_update_mid_text_is_no_boundary(make_deck):
    from deck.plugins.announcements.asks import AskSink

    class FakeAsk:  # only what AskSink reads: where announcements go, and the target's name
        def __init__(self, deck):
            self.deck = deck
            self.target = deck.agents["a"]
            self.said: list[str] = []

        def announce(self, text):
            self.said.append(text)

    deck, rec = make_deck(agent_block("a"))
    ask = FakeAsk(deck)
    sink = AskSink(ask)
    chunk = lambda text: {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}  # noqa: E731
    for update in (chunk("Preamble"), {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "read"},
                   chunk("The answer "), {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"},
                   chunk("is 42.")):  # fmt: skip
        sink.on_update(update)
    assert sink.messages.final() == "The answer is 42." and ask.said == ["Preamble"]


def test_a_socket_directory_with_too_long_a_path_falls_back_to_a_short_one(tmp_path, monkeypatch):
    long = tmp_path / ("x" * 120)
    long.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(long))
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.setattr(bridge.tempfile, "tempdir", None)  # re-read TMPDIR
    directory = bridge.private_dir()
    try:
        assert len(str(directory / "ask.sock")) < bridge.MAX_SOCKET_PATH and str(directory).startswith("/tmp/deck-")
        assert directory.stat().st_mode & 0o777 == 0o700
    finally:
        directory.rmdir()


async def test_nothing_is_announced_once_the_requester_gave_up(make_deck):
    from deck.plugins.announcements.asks import Ask

    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    ask = Ask(announcements.asks.Asks(deck), "a", deck.agents["b"], "why?")
    ask.announce("still working")
    ask.given_up = True  # what the cancel of the requester's call sets
    ask.announce("said after the cancel")
    assert [p["text"] for p in rec.named("agent:announcement")] == ["still working"]


async def test_cancelling_an_agents_own_turn_ends_only_the_asks_of_that_turn(make_deck):
    limits = "[limits]\nmaxRunningAgents = 8\n"
    # a's MCP client never cancels its tool calls: ending them is up to deck's own bookkeeping.
    deck, rec = make_deck(limits + agent_block("x") + agent_block("a", "--mcp-no-cancel") + agent_block("b"))

    def active() -> list[dict]:
        changes = rec.named("ask:changed")
        ended = {c["ticketId"] for c in changes if not c["active"]}
        return [c for c in changes if c["active"] and c["ticketId"] not in ended]

    deck.chat.send("x", "ask a ask b slow")  # x asks a; answering it, a asks b
    await rec.wait(lambda r: len(active()) == 2, timeout=30)
    deck.chat.send("a", "ask b slow")  # a's own conversation asks b too
    await rec.wait(lambda r: len(active()) == 3, timeout=30)
    from_turn = active()[-1]
    deck.chat.cancel("a")  # a's own turn ends: its ask goes, the one it makes for x stays
    await rec.wait(lambda r: from_turn not in active(), timeout=15)
    assert [(c["requester"], c["target"]) for c in active()] == [("x", "a"), ("a", "b")]
    deck.chat.cancel("x")
    await rec.wait(lambda r: not active(), timeout=15)


# -- the plugin API it is written with -----------------------------------------------------------------


class Sessions:
    """A plugin that notes which session each `session/new` it gives servers to is for."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    @hookimpl
    def deck_session_mcp_servers(self, agent, session):
        assert session.id is None  # asked as the session/new is being made
        self.seen.append((agent.name, session.origin))


async def test_the_mcp_servers_hook_knows_which_session_it_serves(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    sessions = Sessions()
    deck.pm.register(sessions)
    deck.chat.send("a", "ask b multi")
    await turn_done(rec, "a")
    (ticket,) = {p["ticketId"] for p in rec.named("ask:changed")}
    assert sessions.seen == [("a", CONVERSATION), ("b", CONVERSATION), ("b", ticket)]


async def test_each_deck_keeps_its_own_announcements_on_its_own_plugin_manager(make_deck):
    one, rec_one = make_deck(agent_block("a") + agent_block("b"))
    other, rec_other = make_deck(agent_block("a") + agent_block("b"))
    for deck in (one, other):
        assert deck.pm.get_plugin(announcements.PER_DECK) is None  # made on first use
    one.chat.send("a", "ask b multi 1")
    other.chat.send("a", "ask b multi 1")
    await turn_done(rec_one, "a")
    await turn_done(rec_other, "a")
    ours, theirs = one.pm.get_plugin(announcements.PER_DECK), other.pm.get_plugin(announcements.PER_DECK)
    assert ours.deck is one and theirs.deck is other and ours.bridge.path != theirs.bridge.path
    await one.shutdown()
    assert one.pm.get_plugin(announcements.PER_DECK) is None and not os.path.exists(ours.bridge.path)
    other.chat.send("a", "ask b multi 1")  # the other deck's socket still serves it
    await turn_done(rec_other, "a", 2)
    assert answers(other, "a")[-1] == f"answer: {CONCLUSION}"
