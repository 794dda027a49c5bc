"""A conversation outlives deck with real agents: a real `deck` process chats, exits, and the next
one, on the same state folder (and the agent's own home), shows the conversation and the agent
carries on in its earlier session. Also the agents' own session lists (ChatService.AgentSessions)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ..deck_process import DeckProcess, wait_dead, write_config
from .conftest import agent_toml, claude_command, fast_agent_command
from .fake_anthropic import FakeAnthropic, Reply, last_user_text
from .test_claude_agent_acp import QUIET
from .test_jsonl_bridge import conformant

pytestmark = pytest.mark.timeout(180)


def answered(agent: str, after: int = 0):
    """A predicate on a deck process's lines: the `after`+1-th finished answer of `agent`."""

    def find(lines: list[dict[str, Any]]) -> dict[str, Any] | None:
        done = [x["message"] for x in lines if x.get("event") == "message:updated" and x.get("agent") == agent
                and x["message"]["role"] == "agent" and x["message"]["done"]]  # fmt: skip
        return done[after] if len(done) > after else None

    return find


def turns_over(agent: str, n: int = 1):
    """A predicate on a deck process's lines: `agent` ended its `n`-th turn (and takes requests again)."""

    def find(lines: list[dict[str, Any]]) -> bool:
        return len([x for x in lines if x.get("event") == "turn:changed" and x.get("agent") == agent
                    and not x["busy"]]) >= n  # fmt: skip

    return find


def texts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], "".join(p.get("text", "") for p in m["parts"] if p["type"] == "text")) for m in messages]


def ended(deck: DeckProcess) -> None:
    """End of input: the deck stops its agents and exits 0, leaving no process behind."""
    pids = deck.descendants()
    deck.close_stdin()
    assert deck.wait(60) == 0, deck.stderr
    assert wait_dead(pids) == [], "agent processes left behind"


def every_text(body: dict[str, Any]) -> str:
    """All the text of a Messages API request's messages (what the model is given)."""
    out = []
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        out += [b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(out)


def test_claude_resumes_its_session_in_the_next_deck_process(home: Path, workdir: Path, tmp_path: Path) -> None:
    with FakeAnthropic(lambda body: Reply(text="Noted, and answered.")) as fake:
        config = write_config(tmp_path / "deck.toml", agent_toml(
            "claude", claude_command(), workdir,
            env={**QUIET, "ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "sk-ant-fake-key"}))  # fmt: skip
        first_trace = tmp_path / "first.jsonl"
        first = DeckProcess("--config", str(config), "--trace", str(first_trace), env=dict(os.environ))
        try:
            first.call("ChatService.Send", {"agent": "claude", "text": "the secret word is pineapple"})
            first.wait_for(answered("claude"), timeout=90)
            shown = first.call("ChatService.Conversation", {"agent": "claude"})["messages"]
            ended(first)
        finally:
            first.kill_everything()
        assert len(fake.turns) == 1 and "pineapple" in last_user_text(fake.turns[0])
        _new, opened = answer_of(traced(first_trace), "session/new")
        session_id = opened["result"]["sessionId"]

        trace = tmp_path / "second.jsonl"
        second = DeckProcess("--config", str(config), "--trace", str(trace), env=dict(os.environ))
        try:
            assert second.call("ChatService.Conversation", {"agent": "claude"})["messages"] == shown
            second.call("ChatService.Send", {"agent": "claude", "text": "what was the secret word?"})
            reply = second.wait_for(answered("claude"), timeout=90)
            now = second.call("ChatService.Conversation", {"agent": "claude"})["messages"]
            second.wait_for(turns_over("claude"))
            listed = second.call("ChatService.AgentSessions", {"agent": "claude"}, timeout=30)
            # Its own session, opened as a new conversation: loaded (it lists loadSession), the replay forms it.
            second.call("ChatService.NewConversation", {"agent": "claude"}, timeout=30)
            second.call("ChatService.OpenConversation", {"agent": "claude", "sessionId": session_id}, timeout=60)
            loaded = second.call("ChatService.Conversation", {"agent": "claude"})["messages"]
            ended(second)
        finally:
            second.kill_everything()
    later = fake.turns[-1]  # the model is given the earlier turn: the session went on
    assert "what was the secret word?" in last_user_text(later) and "pineapple" in every_text(later)
    assert texts([reply]) == [("agent", "Noted, and answered.")]
    _resume, resumed = answer_of(traced(trace), "session/resume")  # it lists sessionCapabilities.resume
    assert "result" in resumed, resumed
    (mine,) = [s for s in listed if s["sessionId"] == session_id]  # its own list has it
    assert mine["cwd"] == str(workdir)
    conformant(trace)  # session/resume and session/list as the ACP schema has them
    assert "agent-restarted" not in [m.get("code") for m in now]
    assert now[: len(shown)] == shown
    load, loaded_answer = answer_of(traced(trace), "session/load")
    assert load["params"]["sessionId"] == session_id and "result" in loaded_answer, loaded_answer
    # Both turns, each user text as typed (the adapter's replay puts the /model command it ran before it).
    replayed = texts(loaded)
    assert [role for role, _text in replayed] == ["user", "agent", "user", "agent"]
    assert replayed[0][1].endswith("the secret word is pineapple") and replayed[2][1].endswith("what was the secret word?")
    assert replayed[1] == replayed[3] == ("agent", "Noted, and answered.")


def traced(trace: Path) -> list[dict[str, Any]]:
    """The ACP messages of a `--trace` file, each with its `direction`."""
    return [{**(r := json.loads(line))["message"], "direction": r["direction"]} for line in trace.read_text().splitlines()]


def answer_of(messages: list[dict[str, Any]], method: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """deck's one `method` request and the agent's answer to it (the first answer with its id after it:
    a trace holds every connection of the run, and each new one counts its ids from 0 again)."""
    (at,) = [n for n, m in enumerate(messages) if m["direction"] == "out" and m.get("method") == method]
    request = messages[at]
    answer = next(m for m in messages[at:] if m["direction"] == "in" and "method" not in m and m.get("id") == request["id"])
    return request, answer


def test_fast_agent_resumes_lists_and_loads_its_sessions_across_deck_processes(
    home: Path, workdir: Path, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "deck.toml", agent_toml("fast", fast_agent_command(home), workdir))
    first_trace, second_trace = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first = DeckProcess("--config", str(config), "--trace", str(first_trace), env=dict(os.environ))
    try:
        first.call("ChatService.Send", {"agent": "fast", "text": "the secret word is apricot"})
        first.wait_for(answered("fast"), timeout=60)
        shown = first.call("ChatService.Conversation", {"agent": "fast"})["messages"]
        ended(first)
    finally:
        first.kill_everything()
    _new, opened = answer_of(traced(first_trace), "session/new")
    session_id = opened["result"]["sessionId"]
    assert texts(shown) == [("user", "the secret word is apricot"), ("agent", "the secret word is apricot")]

    second = DeckProcess("--config", str(config), "--trace", str(second_trace), env=dict(os.environ))
    try:
        assert second.call("ChatService.Conversation", {"agent": "fast"})["messages"] == shown
        second.call("ChatService.Send", {"agent": "fast", "text": "and the number is 7"})
        second.wait_for(answered("fast"), timeout=60)
        second.wait_for(turns_over("fast"))
        now = second.call("ChatService.Conversation", {"agent": "fast"})["messages"]
        listed = second.call("ChatService.AgentSessions", {"agent": "fast"}, timeout=30)

        # Its own session, opened as a new conversation: loaded, the replay forms the conversation.
        second.call("ChatService.NewConversation", {"agent": "fast"}, timeout=30)
        reopened = second.call("ChatService.OpenConversation", {"agent": "fast", "sessionId": session_id}, timeout=60)
        loaded = second.call("ChatService.Conversation", {"agent": "fast"})["messages"]
        history = second.call("ChatService.History", {"agent": "fast"})
        ended(second)
    finally:
        second.kill_everything()
    messages = traced(second_trace)
    resume, resumed = answer_of(messages, "session/resume")
    assert resume["params"]["sessionId"] == session_id and "result" in resumed, resumed
    assert texts(now) == [*texts(shown), ("user", "and the number is 7"), ("agent", "and the number is 7")]
    assert now[: len(shown)] == shown  # the replay fast-agent sends on resume is not added again
    assert session_id in [s["sessionId"] for s in listed]
    (mine,) = [s for s in listed if s["sessionId"] == session_id]
    assert mine["cwd"] == str(workdir) and mine["updatedAt"]
    load, answer = answer_of(messages, "session/load")
    assert load["params"]["sessionId"] == session_id and "result" in answer, answer
    assert texts(loaded) == texts(now)  # the four messages, as the agent replayed them
    assert history[0]["id"] == reopened["conversationId"] and history[0]["messages"] == len(loaded)
    conformant(second_trace)
