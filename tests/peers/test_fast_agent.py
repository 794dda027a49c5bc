"""deck against fast-agent (PyPI fast-agent-mcp 0.10.48) with its offline `passthrough` and `slow` models."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from .conftest import agent_toml, fast_agent_command

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


def fast(home: Path, cwd: Path, model: str = "passthrough", **keys) -> str:
    return agent_toml("fast", fast_agent_command(home, model), cwd, **keys)


async def test_plain_turn(peer_deck, home, workdir):
    pd = peer_deck(fast(home, workdir))
    deck, rec = pd.deck, pd.rec
    message = deck.chat.turns.send("fast", "hello from deck")
    await rec.wait_event("turn:changed", agent="fast", busy=False, timeout=60)
    conv = deck.chat.conversation("fast")
    user, reply = conv.messages
    assert user.id == message.id and user.role == "user" and user.text == "hello from deck"
    assert reply.role == "agent" and reply.done and reply.stop_reason == "end_turn" and reply.error is None
    assert "hello from deck" in reply.text
    deltas = rec.named("message:delta", "fast")
    assert deltas and all(d["messageId"] == reply.id and d["kind"] == "text" for d in deltas)
    assert rec.states("fast") == ["starting", "ready", "busy", "ready"]
    assert [t["busy"] for t in rec.named("turn:changed", "fast")] == [True, False]
    await pd.close()
    assert rec.states("fast")[-1] == "stopped"


def call_tool(tool: str, **args) -> str:
    return f"***CALL_TOOL {tool} {json.dumps(args)}"


async def answer_next_permission(pd, option_kind: str, after: int = 0) -> dict:
    """Wait for the next permission:requested, check it, and answer with the option of `option_kind`."""
    rec = pd.rec
    await rec.wait(lambda r: len(r.named("permission:requested", "fast")) > after, timeout=30)
    request = rec.named("permission:requested", "fast")[after]
    assert [o["kind"] for o in request["options"]] == ["allow_once", "allow_always", "reject_once", "reject_always"]
    assert pd.deck.chat.conversation("fast").snapshot()["permissions"] == [request]  # pending, visible in Conversation
    option = next(o["optionId"] for o in request["options"] if o["kind"] == option_kind)
    pd.deck.chat.answer_permission(request["id"], option)
    resolved = await rec.wait_event("permission:resolved", id=request["id"])
    assert resolved == {"id": request["id"], "agent": "fast", "optionId": option}
    return request


async def finished_reply(pd, nth: int = 1, timeout: float = 60):
    """The agent's `nth` reply, once it is done and the turn is over."""
    conv = pd.deck.chat.conversation("fast")

    def done():
        replies = [m for m in conv.messages if m.role == "agent"]
        return len(replies) >= nth and replies[nth - 1].done and not conv.busy and replies[nth - 1]

    reply = await pd.rec.wait(lambda r: done(), timeout=timeout)
    assert pd.rec.named("turn:changed", "fast")[-1]["busy"] is False
    return reply


def tool_parts(reply) -> list[dict]:
    return [p.to_dict() for p in reply.parts if p.type == "tool"]


async def test_read_text_file_inside_cwd_after_permission(peer_deck, home, workdir):
    (workdir / "notes.txt").write_text("line one\nline two\n")
    pd = peer_deck(fast(home, workdir))
    path = str(workdir / "notes.txt")
    pd.deck.chat.send("fast", call_tool("read_text_file", path=path))
    request = await answer_next_permission(pd, "allow_once")
    assert request["toolCall"]["title"] == "read_text_file" and request["toolCall"]["kind"] == "read"
    assert json.loads(request["toolCall"]["input"]) == {"path": path}
    assert request["rejections"] == 0 and request["messageId"] == pd.deck.chat.conversation("fast").messages[-1].id
    reply = await finished_reply(pd)
    assert reply.stop_reason == "end_turn"
    (tool,) = tool_parts(reply)
    assert tool["status"] == "completed" and tool["output"] == "line one\nline two\n"
    assert "line one" in reply.text
    # deck served the read itself, answering the agent's fs/read_text_file request.
    (read,) = pd.schema.received("fs/read_text_file")
    assert read["params"]["path"] == path
    assert pd.schema.answer_to(read)["result"] == {"content": "line one\nline two\n"}
    # The permission answer went back as ACP's selected outcome.
    (perm,) = pd.schema.received("session/request_permission")
    assert pd.schema.answer_to(perm)["result"] == {"outcome": {"outcome": "selected", "optionId": "allow_once"}}
    await pd.close()


async def test_read_outside_cwd_is_refused(peer_deck, home, workdir, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret\n")
    (workdir / "link.txt").symlink_to(secret)  # a symlink does not get around the refusal
    pd = peer_deck(fast(home, workdir))
    for n, path in enumerate((str(secret), str(workdir / "link.txt"))):
        pd.deck.chat.send("fast", call_tool("read_text_file", path=path))
        await answer_next_permission(pd, "allow_once", after=n)
        reply = await finished_reply(pd, n + 1)
        (tool,) = tool_parts(reply)
        assert tool["status"] == "failed"
        assert "outside the agent's working directory" in tool["output"]
        assert "top secret" not in json.dumps(reply.to_dict())
    reads = pd.schema.received("fs/read_text_file")
    assert len(reads) == 2
    for read in reads:
        error = pd.schema.answer_to(read)["error"]
        assert error["code"] == -32602 and "outside the agent's working directory refused" in error["message"]
    await pd.close()


async def test_write_text_file_with_diff(peer_deck, home, workdir):
    target = workdir / "hello.py"
    target.write_text("print('hello')\n")
    pd = peer_deck(fast(home, workdir))
    pd.deck.chat.send("fast", call_tool("write_text_file", path=str(target), content="print('hello, deck')\n"))
    request = await answer_next_permission(pd, "allow_once")
    assert request["toolCall"]["kind"] == "edit"
    reply = await finished_reply(pd)
    assert reply.stop_reason == "end_turn"
    (tool,) = tool_parts(reply)
    assert tool["status"] == "completed" and tool["kind"] == "edit"
    assert tool["diffs"] == [
        {"path": str(target), "oldText": "print('hello')\n", "newText": "print('hello, deck')\n", "newFile": False}
    ]
    diff_deltas = [d for d in pd.rec.named("message:delta", "fast") if d["kind"] == "tool" and d["part"]["diffs"]]
    assert diff_deltas and diff_deltas[0]["messageId"] == reply.id
    # deck wrote the file, answering fs/write_text_file.
    assert target.read_text() == "print('hello, deck')\n"
    (write,) = pd.schema.received("fs/write_text_file")
    assert write["params"]["content"] == "print('hello, deck')\n"
    assert pd.schema.answer_to(write)["result"] in ({}, None)
    await pd.close()


async def test_rejected_write_leaves_the_file_and_counts_the_rejection(peer_deck, home, workdir):
    target = workdir / "keep.txt"
    target.write_text("keep me\n")
    pd = peer_deck(fast(home, workdir))
    for n in range(2):
        pd.deck.chat.send("fast", call_tool("write_text_file", path=str(target), content="overwritten\n"))
        request = await answer_next_permission(pd, "reject_once", after=n)
        assert request["rejections"] == 0  # a new turn starts the count again
        reply = await finished_reply(pd, n + 1)
        (tool,) = tool_parts(reply)
        assert tool["status"] == "failed"
    assert target.read_text() == "keep me\n"
    assert pd.schema.received("fs/write_text_file") == []
    await pd.close()


async def test_unknown_tool_is_a_refusal(peer_deck, home, workdir):
    pd = peer_deck(fast(home, workdir))
    pd.deck.chat.send("fast", call_tool("no_such_tool", x=1))
    reply = await finished_reply(pd)
    assert reply.stop_reason == "refusal" and reply.error is None
    assert "not available" in reply.text
    final = pd.rec.named("message:updated", "fast")[-1]["message"]
    assert final["id"] == reply.id and final["stopReason"] == "refusal" and final["done"]
    assert pd.rec.named("permission:requested") == []
    await pd.close()


async def agent_traced(trace: Path, event: str, timeout: float = 30) -> dict:
    """The first record `event` in fast-agent's own diagnostic trace (FAST_AGENT_INTERACTIVE_DEBUG_TRACE)."""
    deadline = time.monotonic() + timeout
    while True:
        for line in trace.read_text().splitlines() if trace.exists() else []:
            try:
                record = json.loads(line)
            except ValueError:  # a line being written
                continue
            if record.get("event") == event:
                return record
        assert time.monotonic() < deadline, f"fast-agent traced no {event!r} within {timeout}s"
        await asyncio.sleep(0.02)


async def test_slow_model_cancelled_mid_turn(peer_deck, home, workdir, tmp_path):
    # The slow model waits 3 s before every answer and sends nothing meanwhile; fast-agent's
    # diagnostic trace shows when its prompt task runs (a cancel before that would be lost).
    # The prompt asks for a tool: had the cancel not worked, the turn would go on after the
    # wait to a permission request nobody answers, and never end.
    (workdir / "a.txt").write_text("a\n")
    trace = tmp_path / "fast-agent-trace.jsonl"
    env = {"FAST_AGENT_INTERACTIVE_DEBUG_TRACE": str(trace)}
    pd = peer_deck(fast(home, workdir, model="slow", env=env))
    await pd.deck.agent_service.start("fast")
    pd.deck.chat.send("fast", call_tool("read_text_file", path=str(workdir / "a.txt")))
    queued = pd.deck.chat.turns.send("fast", "and then this")  # waits behind the first; Cancel abandons it
    await pd.rec.wait_event("turn:changed", agent="fast", busy=True, timeout=30)
    await agent_traced(trace, "acp.prompt.start")  # fast-agent is in the turn, waiting on the slow model
    started = time.monotonic()
    result = pd.deck.chat.cancel("fast")
    assert result == {"cancelled": True, "abandoned": 1}
    reply = await finished_reply(pd, timeout=10)
    elapsed = time.monotonic() - started
    print(f"cancelled slow turn ended {elapsed:.2f}s after the cancel")
    assert reply.stop_reason == "cancelled" and reply.error is None
    assert elapsed < 2, f"the cancelled turn took {elapsed:.1f}s to end (the slow model answers after 3 s)"
    await agent_traced(trace, "acp.cancel.task_cancelled", timeout=5)  # it cut its running prompt short
    assert tool_parts(reply) == [] and pd.rec.named("permission:requested") == []  # the model never answered
    assert pd.schema.received("fs/read_text_file") == []
    assert queued.error == "cancelled" and not queued.queued
    (cancel,) = pd.schema.sent("session/cancel")
    assert cancel["params"] == {"sessionId": pd.deck.agents["fast"].session_id}
    assert pd.deck.agents["fast"].state.value == "ready"
    # The agent is still usable after a cancel.
    pd.deck.chat.send("fast", "still there?")
    again = await finished_reply(pd, 2, timeout=30)
    assert again.stop_reason == "end_turn" and "still there?" in again.text
    await pd.close()


async def test_cancel_while_a_permission_is_pending(peer_deck, home, workdir):
    (workdir / "a.txt").write_text("a\n")
    pd = peer_deck(fast(home, workdir))
    pd.deck.chat.send("fast", call_tool("read_text_file", path=str(workdir / "a.txt")))
    request = await pd.rec.wait_event("permission:requested", agent="fast", timeout=30)
    pd.deck.chat.cancel("fast")
    assert await pd.rec.wait_event("permission:resolved", id=request["id"]) == {"id": request["id"], "agent": "fast"}
    reply = await finished_reply(pd, timeout=15)
    assert reply.stop_reason == "cancelled"
    (perm,) = pd.schema.received("session/request_permission")
    assert pd.schema.answer_to(perm)["result"] == {"outcome": {"outcome": "cancelled"}}
    assert pd.schema.received("fs/read_text_file") == []  # the tool never ran
    assert pd.deck.chat.conversation("fast").snapshot()["permissions"] == []
    await pd.close()


async def test_stop_during_a_turn_ends_it_with_an_error(peer_deck, home, workdir):
    pd = peer_deck(fast(home, workdir, model="slow"))
    pd.deck.chat.send("fast", "a long answer")
    await pd.rec.wait_event("turn:changed", agent="fast", busy=True, timeout=30)
    started = time.monotonic()
    await pd.deck.agent_service.stop("fast")
    reply = await finished_reply(pd, timeout=15)
    assert time.monotonic() - started < 5
    assert reply.stop_reason is None and reply.error == "agent stopped", reply.error
    assert pd.rec.states("fast")[-1] == "stopped"
    await pd.close()


def test_its_modes_and_its_commands_beside_decks_own_in_line_mode(home, workdir, tmp_path):
    """fast-agent offers a legacy session mode and no config options; its own /model and /history are named
    as deck's are: deck's win, //NAME reaches fast-agent's, and /help says so."""
    from tests.frontends.test_line import LineDeck

    config = tmp_path / "deck.toml"
    config.write_text(fast(home, workdir))
    deck = LineDeck(config)
    try:
        deck.send("/mode")
        deck.expect(r"\[fast\] \* agent  Agent", timeout=60)
        deck.send("/model")  # deck's: fast-agent has no model option
        deck.expect(r".*fast offers no model to choose \(its config options: /set\)")
        deck.send("/help")
        deck.expect(r"\[deck\] fast's own commands \(sent to it as a message; //NAME for one that deck's hides\):")
        deck.expect(r"\[deck\] /history .*\(//history: deck has a /history\)")
        deck.expect(r"\[deck\] /model .*\(//model: deck has a /model\)")
        deck.send("//status")  # not deck's: reached either way; // makes sure
        deck.expect(r"\[fast\] > /status", timeout=10)
        deck.expect(r"\[fast\] ready", timeout=60)
    finally:
        assert deck.close() == 0
    assert not any(line.startswith("[deck] unknown command") for line in deck.lines)
