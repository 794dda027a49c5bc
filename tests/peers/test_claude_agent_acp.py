"""deck against claude-agent-acp (npm @zed-industries/claude-agent-acp 0.23.1), offline.

Without a key the agent still does the handshake; with ANTHROPIC_BASE_URL pointing
at tests/peers/fake_anthropic.py it runs whole turns with real Claude Code behaviour.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from deck.errors import ServiceError

from .conftest import agent_toml, claude_command
from .fake_anthropic import FakeAnthropic, Reply, StalledAnthropic, last_user_text, tool_results

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

#: Keeps Claude Code off the network for everything but the model (telemetry, updates).
QUIET = {"IS_SANDBOX": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}


def claude(cwd: Path, **env: str) -> str:
    return agent_toml("claude", claude_command(), cwd, env={**QUIET, **env})


def last_reply(pd):
    messages = pd.deck.chat.conversation("claude").messages
    return messages[-1] if messages and messages[-1].role == "agent" and messages[-1].done else None


async def test_handshake_and_session_new(peer_deck, workdir):
    pd = peer_deck(claude(workdir))
    info = await pd.deck.agent_service.start("claude")
    assert info["state"] == "ready" and info["error"] is None
    agent = pd.deck.agents["claude"]
    assert agent.init_result["protocolVersion"] == 1
    assert agent.init_result["agentInfo"]["name"] == "@zed-industries/claude-agent-acp"
    (new,) = pd.schema.sent("session/new")
    assert new["params"]["cwd"] == str(workdir)
    assert isinstance(new["params"]["mcpServers"], list)  # what plugins offer (announcements: a `deck` server)
    # session/new returns modes and config options; deck's conversation shows them.
    snapshot = await pd.deck.chat.conversation_snapshot("claude")
    assert snapshot["modes"]["currentModeId"] == "default"
    assert {"default", "acceptEdits", "plan"} <= {m["id"] for m in snapshot["modes"]["availableModes"]}
    assert "mode" in {o["id"] for o in snapshot["configOptions"]}
    changed = {e["field"] for e in pd.rec.named("conversation:changed", "claude")}
    assert {"modes", "configOptions"} <= changed
    # It does not exit when its stdin closes: the stop escalation ends it.
    await pd.deck.agent_service.stop("claude")
    assert pd.rec.states("claude") == ["starting", "ready", "stopped"]
    assert any("SIGTERM" in line for line in await pd.deck.agent_service.logs("claude"))
    await pd.close()


async def test_prompt_without_a_key_is_a_clear_error(peer_deck, workdir):
    pd = peer_deck(claude(workdir))
    started = time.monotonic()
    pd.deck.chat.send("claude", "hello")
    reply = await pd.rec.wait(lambda r: last_reply(pd), timeout=30)
    assert time.monotonic() - started < 20
    assert reply.stop_reason is None and reply.error and "Authentication required" in reply.error
    # It offers deck no authenticate method (only terminal logins, and deck runs no terminal).
    assert reply.error.splitlines()[1] == "claude lists no authentication methods: log in with the agent's own tool, or set its key in env."
    final = pd.rec.named("message:updated", "claude")[-1]["message"]
    assert final["id"] == reply.id and final["done"] and "Authentication required" in final["error"]
    await pd.rec.wait_event("turn:changed", agent="claude", busy=False, queued=0)
    assert pd.deck.agents["claude"].state.value == "ready"  # the agent is fine, only the turn failed
    await pd.close()


async def test_whole_turn_with_tool_call_diff_permission_and_usage(peer_deck, workdir):
    target = workdir / "greeting.txt"
    script = [  # one model turn per POST /v1/messages, in order
        Reply(text="I will write it.", tool_uses=[("Write", {"file_path": str(target), "content": "hello from claude\n"})]),
        Reply(text="Done: the greeting is written.", input_tokens=1500),
        Reply(tool_uses=[("Read", {"file_path": str(target)})]),
        Reply(tool_uses=[("Edit", {"file_path": str(target), "old_string": "claude", "new_string": "deck"})]),
        Reply(text="Changed it.", input_tokens=2500),
    ]

    with FakeAnthropic(lambda body: script[len(fake.turns) - 1]) as fake:
        pd = peer_deck(claude(workdir, ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="sk-ant-fake-key"))
        pd.deck.chat.send("claude", "please write the greeting")
        request = await pd.rec.wait_event("permission:requested", agent="claude", timeout=60)
        tool = request["toolCall"]
        assert tool["kind"] == "edit" and tool["title"] == "Write greeting.txt"  # relative to cwd
        assert tool["diffs"] == [{"path": str(target), "oldText": "", "newText": "hello from claude\n", "newFile": True}]
        assert tool["locations"] == [{"path": str(target)}]
        assert [o["kind"] for o in request["options"]][0] == "allow_always"
        allow_once = next(o["optionId"] for o in request["options"] if o["kind"] == "allow_once")
        assert allow_once == "allow"
        assert not target.exists()  # nothing written before the answer
        pd.deck.chat.answer_permission(request["id"], allow_once)
        first = await pd.rec.wait(lambda r: last_reply(pd), timeout=60)
        assert len(fake.turns) == 2  # one POST /v1/messages per model turn
        assert "please write the greeting" in last_user_text(fake.turns[0])
        assert tool_results(fake.turns[1])[0]["content"]  # the tool's result went back to the model

        assert first.stop_reason == "end_turn" and first.error is None
        parts = [p.to_dict() for p in first.parts]
        assert [p["type"] for p in parts] == ["text", "tool", "text"]
        assert parts[0]["text"] == "I will write it." and parts[2]["text"] == "Done: the greeting is written."
        assert parts[1]["status"] == "completed" and parts[1]["diffs"][0]["newText"] == "hello from claude\n"
        assert target.read_text() == "hello from claude\n"  # Claude Code writes files itself
        usage = pd.rec.named("usage:changed", "claude")
        assert usage and usage[-1]["usage"]["size"] == 200000 and usage[-1]["usage"]["used"] > 0
        assert (await pd.deck.chat.conversation_snapshot("claude"))["usage"] == usage[-1]["usage"]
        assert first.usage and first.usage["inputTokens"] > 0  # the prompt response's usage is kept

        # A second prompt in the same session: a read (no permission needed), then an edit with its diff.
        pd.deck.chat.send("claude", "now make it greet deck")
        edit = await pd.rec.wait(lambda r: r.named("permission:requested", "claude")[1:], timeout=60)
        assert edit[0]["toolCall"]["title"] == "Edit greeting.txt"
        (asked,) = edit[0]["toolCall"]["diffs"]
        assert (asked["path"], asked["oldText"], asked["newText"], asked["newFile"]) == (str(target), "claude", "deck", False)
        pd.deck.chat.answer_permission(edit[0]["id"], "allow")
        second = await pd.rec.wait(lambda r: (m := last_reply(pd)) is not None and m is not first and m, timeout=60)
        assert len(fake.turns) == 5

    assert second.stop_reason == "end_turn"
    assert [(p.type, p.to_dict().get("title") or p.to_dict().get("text")) for p in second.parts] == [
        ("tool", "Read greeting.txt"), ("tool", "Edit greeting.txt"), ("text", "Changed it.")]  # fmt: skip
    assert all(p.to_dict()["status"] == "completed" for p in second.parts if p.type == "tool")
    (done,) = second.parts[1].to_dict()["diffs"]  # once applied, the diff shows the edited lines whole
    assert done["oldText"].startswith("hello from claude") and done["newText"].startswith("hello from deck")
    assert target.read_text() == "hello from deck\n"
    assert [m.role for m in pd.deck.chat.conversation("claude").messages] == ["user", "agent", "user", "agent"]
    perms = pd.schema.received("session/request_permission")
    assert [pd.schema.answer_to(p)["result"]["outcome"]["optionId"] for p in perms] == ["allow", "allow"]
    await pd.close()


async def test_cancel_while_it_waits_on_the_model(peer_deck, workdir):
    with StalledAnthropic() as stalled:  # never answers: the turn would wait for minutes
        pd = peer_deck(claude(workdir, ANTHROPIC_BASE_URL=stalled.url, ANTHROPIC_API_KEY="sk-ant-fake-key"))
        await pd.deck.agent_service.start("claude")
        pd.deck.chat.send("claude", "hello?")
        await pd.rec.wait_event("turn:changed", agent="claude", busy=True)
        assert await asyncio.to_thread(stalled.requested.wait, 60), f"no model request; seen: {stalled.requests}"
        assert last_reply(pd) is None and pd.deck.agents["claude"].state.value == "busy"
        # deck stays responsive meanwhile.
        assert [a["state"] for a in await pd.deck.agent_service.list_agents()] == ["busy"]
        started = time.monotonic()
        assert (pd.deck.chat.cancel("claude"))["cancelled"] is True
        reply = await pd.rec.wait(lambda r: last_reply(pd), timeout=30)
        elapsed = time.monotonic() - started
        print(f"cancelled turn ended {elapsed:.2f}s after the cancel")
        assert reply.stop_reason == "cancelled"
        assert elapsed < 6, f"the cancelled turn took {elapsed:.1f}s to end"
        await pd.rec.wait_event("turn:changed", agent="claude", busy=False, queued=0)
        assert pd.deck.agents["claude"].state.value == "ready"
        await pd.close()


def test_a_bare_allow_in_line_mode_allows_once_with_claude_code(workdir, tmp_path):
    """Claude Code offers Always Allow first: a bare /allow picks its Allow, never Always Allow."""
    from tests.frontends.test_line import LineDeck

    target = workdir / "greeting.txt"
    script = [Reply(tool_uses=[("Write", {"file_path": str(target), "content": "hi\n"})]), Reply(text="Written.")]
    with FakeAnthropic(lambda body: script[min(len(fake.turns), len(script)) - 1]) as fake:
        config = tmp_path / "deck.toml"
        config.write_text(claude(workdir, ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="sk-ant-fake-key"))
        deck = LineDeck(config)
        try:
            deck.send("please write the greeting")
            deck.expect(r"\[claude\]   1\. Always Allow   2\. Allow   3\. Reject   → /allow \(once\), /allow always.*", timeout=60)
            deck.send("/allow")
            deck.expect(r"\[claude\] permission: Allow", timeout=30)
            deck.expect(r"\[claude\] Written\.", timeout=60)
        finally:
            assert deck.close() == 0
    assert target.read_text() == "hi\n"


async def test_its_cost_is_counted_and_a_budget_stops_it(peer_deck, workdir):
    """Claude Code reports the session's cost so far in each usage_update: deck counts what each adds,
    and an agent budget below it refuses the next prompt, naming the budget."""
    with FakeAnthropic(lambda body: Reply(text="Hello.", input_tokens=20000)) as fake:
        pd = peer_deck(
            claude(workdir, ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="sk-ant-fake-key")
            + 'budget = "0.000001 USD"\n'
        )
        await pd.deck.startup()
        pd.deck.chat.send("claude", "hello")
        usage = await pd.rec.wait_event("usage:changed", agent="claude", timeout=60)
        cost = usage["usage"]["cost"]
        assert cost["currency"] == "USD" and cost["amount"] > 0 and usage["spent"] == cost  # the session's first
        reached = await pd.rec.wait_event("budget:reached", agent="claude", timeout=30)
        assert reached["budget"] == "0.000001 USD" and reached["period"] == "day"
        found = await pd.deck.call("DeckService.Usage", {})
        assert found["agents"]["claude"]["spent"] == {"USD": cost["amount"]} and found["notCounted"] == []
        await pd.rec.wait(lambda r: [p for p in r.named("turn:changed", "claude") if not p["busy"]], timeout=60)
        with pytest.raises(ServiceError, match=r"the budget of claude \(0.000001 USD per day\) is reached"):
            pd.deck.chat.send("claude", "more")
        await pd.close()


def test_its_model_mode_and_commands_through_line_mode(workdir, tmp_path):
    """Claude Code's config options (model, mode) are listed and set with /model and /mode; its own slash
    commands are listed by /help apart from deck's. No model call: the session's options alone."""
    from tests.frontends.test_line import LineDeck

    config = tmp_path / "deck.toml"
    config.write_text(claude(workdir))
    deck = LineDeck(config)
    try:
        deck.send("/model")
        deck.expect(r"\[claude\] model = default \(Model: default, .*haiku.*\)", timeout=60)
        deck.send("/model haiku")
        deck.expect(r"\[claude\] model = haiku \(Model: .*\)", timeout=30)
        deck.send("/mode plan")
        deck.expect(r"\[claude\] mode = plan \(Mode: default, acceptEdits, plan.*\)", timeout=30)
        deck.send("/help")
        deck.expect(r"\[deck\] claude's own commands \(sent to it as a message; //NAME for one that deck's hides\):")
        deck.expect(r"\[deck\] /review .*", timeout=10)
    finally:
        assert deck.close() == 0
