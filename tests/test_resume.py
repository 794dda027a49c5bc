"""A conversation outlives deck: the next deck shows it before the agent runs, and the agent's next
start resumes its session, or loads it (the replay is not added twice), or, where it cannot or
refuses, starts a new one with a note that says why. Real fake-agent processes, a real database."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from deck.agent import FORGETS
from deck.conversation import Conversation, DictPart, TextPart
from deck.plugins.history.store import HistoryStore

from .conftest import agent_block
from .deck_process import DeckProcess, write_config

pytestmark = pytest.mark.timeout(60)


class Run:
    """The fake agent `a` of every deck in a test: the prompts it keeps, the requests it got."""

    def __init__(self, tmp_path: Path, *flags: str) -> None:
        self.requests = tmp_path / "requests.jsonl"
        sessions = str(tmp_path / "sessions.json")
        self.toml = agent_block("a", "--sessions", sessions, "--requests", str(self.requests), *flags)

    def methods(self) -> list[str]:
        return [r["method"] for r in self.got()]

    def got(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.requests.read_text().splitlines()] if self.requests.exists() else []


def turns_ended(rec: Any) -> int:
    return len([p for p in rec.named("turn:changed", "a") if not p["busy"]])


async def chat(deck: Any, rec: Any, *prompts: str) -> None:
    for prompt in prompts:
        ended = turns_ended(rec)
        await deck.call("ChatService.Send", {"agent": "a", "text": prompt})
        await rec.wait(lambda r, ended=ended: turns_ended(r) > ended)


async def first_deck(make_deck: Any, run: Run, *prompts: str) -> tuple[list[dict[str, Any]], str]:
    """A deck that chats, then shuts down: the messages it showed and its agent's session id."""
    deck, rec = make_deck(run.toml)
    await deck.startup()
    await chat(deck, rec, *prompts)
    shown = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
    session_id = deck.agents["a"].session_id
    await deck.shutdown()
    return shown, session_id


def texts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], "".join(p.get("text", "") for p in m["parts"])) for m in messages]


@pytest.mark.anyio
async def test_the_next_deck_shows_the_conversation_and_resumes_the_agents_session(make_deck, tmp_path: Path) -> None:
    run = Run(tmp_path, "--resume")
    before, session_id = await first_deck(make_deck, run, "hello", "second")
    assert run.methods() == ["initialize", "session/new", "session/prompt", "session/prompt"]  # a first start: no note
    assert [m for m in before if m["role"] == "system"] == []

    deck, rec = make_deck(run.toml)
    await deck.startup()
    assert deck.agents["a"].state.value == "stopped"
    restored = await deck.call("ChatService.Conversation", {"agent": "a"})
    assert restored["messages"] == before  # before the agent runs
    snapshot = await deck.call("DeckService.Snapshot", {})
    assert json.dumps(before[0]) in json.dumps(snapshot)

    await chat(deck, rec, "recall")
    (resume,) = [r for r in run.got() if r["method"] == "session/resume"]
    assert resume["params"]["sessionId"] == session_id
    assert set(resume["params"]) == {"sessionId", "cwd", "mcpServers"}
    assert run.methods()[4:] == ["initialize", "session/resume", "session/prompt"]  # no session/new
    now = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
    assert now[: len(before)] == before
    assert texts(now[len(before):]) == [("user", "recall"), ("agent", "I remember: hello | second")]
    await deck.shutdown()

    with HistoryStore() as store:  # one conversation, continued: every message once
        (row,) = store.list()
        kept = store.get(row["id"])
    assert kept is not None and kept["sessionId"] == session_id
    assert [m["id"] for m in kept["messages"]] == [m["id"] for m in now]


@pytest.mark.anyio
async def test_a_loaded_session_replays_its_history_and_nothing_is_added_twice(make_deck, tmp_path: Path) -> None:
    run = Run(tmp_path, "--load")
    before, session_id = await first_deck(make_deck, run, "hello")
    deck, rec = make_deck(run.toml)
    await deck.startup()
    await deck.call("AgentService.Start", {"name": "a"})
    (load,) = [r for r in run.got() if r["method"] == "session/load"]
    assert load["params"]["sessionId"] == session_id and "session/new" not in run.methods()[2:]
    assert (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"] == before
    await chat(deck, rec, "recall")
    now = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
    assert texts(now) == [("user", "hello"), ("agent", "You said: hello"),
                          ("user", "recall"), ("agent", "I remember: hello")]  # fmt: skip
    assert rec.named("message:delta", "a")[0]["text"] == "I remember: hello"  # the replay was never shown


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("flag", "why"),
    [
        ("--refuse-resume", "session/resume failed: Resource not found (-32002): no such session: " + FORGETS),
        ("--modes", "The agent cannot resume sessions: " + FORGETS),
    ],
    ids=["refused", "unable"],
)
async def test_an_agent_that_cannot_or_will_not_resume_gets_a_new_session_and_a_note(
    make_deck, tmp_path: Path, flag: str, why: str
) -> None:
    run = Run(tmp_path, flag)
    before, session_id = await first_deck(make_deck, run, "hello")
    deck, rec = make_deck(run.toml)
    await deck.startup()
    await chat(deck, rec, "recall")
    later = run.methods()[3:]
    tried = ["session/resume"] if flag == "--refuse-resume" else []
    assert later[: len(tried) + 2] == ["initialize", *tried, "session/new"]
    now = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
    assert now[: len(before)] == before
    user, note, reply = now[len(before) :]  # the message that started the agent, then its start
    assert (note["role"], note.get("code")) == ("system", "agent-restarted")
    assert note["parts"][0]["text"] == why
    assert texts([user, reply]) == [("user", "recall"), ("agent", "I remember: ")]  # a new session
    assert deck.agents["a"].session_id != session_id


def test_a_restored_message_is_the_message_it_was_and_an_unfinished_answer_is_finished() -> None:
    events: list[Any] = []
    earlier = Conversation("a", events.append)
    earlier.add_user("hi", queued=False)
    reply = earlier.begin_reply()
    reply.parts += [TextPart("thought", "hm"), TextPart("text", "half an ans"),
                    DictPart({"type": "tool", "id": "t1", "title": "Read", "status": "completed"})]  # fmt: skip
    done = earlier.add_system("agent-unavailable", error="why")
    stored = [m.to_dict() for m in earlier.messages]

    events.clear()
    conv = Conversation("a", events.append)
    finished = conv.restore(stored, "s-1", "A title")
    assert [m.to_dict() for m in conv.messages if m is not finished[0]] == [stored[0], done.to_dict()]
    assert (conv.session_id, conv.title, conv.snapshot()["title"]) == ("s-1", "A title", "A title")
    (again,) = finished  # the answer the earlier run never finished: finished now, and said once
    assert again.to_dict()["parts"] == stored[1]["parts"] and again.id == reply.id
    assert (again.done, again.error) == (True, "deck stopped before this answer ended")
    assert [e.payload()["message"]["id"] for e in events] == [reply.id]


def test_a_deck_process_run_again_shows_the_conversation_and_the_agent_remembers(tmp_path: Path) -> None:
    """Real `deck run --frontend=jsonl` processes, one after the other, on one database."""
    run = Run(tmp_path, "--resume")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("DECK_CONFIG", None)
    config = write_config(tmp_path / "deck.toml", run.toml)

    def answered(lines: list[dict[str, Any]]) -> dict[str, Any] | None:
        return next((x["message"] for x in lines if x.get("event") == "message:updated"
                     and x["message"]["role"] == "agent" and x["message"]["done"]), None)  # fmt: skip

    first = DeckProcess("--config", str(config), env=env)
    try:
        first.call("ChatService.Send", {"agent": "a", "text": "hello"})
        first.wait_for(answered)
        shown = first.call("ChatService.Conversation", {"agent": "a"})["messages"]
        first.close_stdin()
        assert first.wait(15) == 0, first.stderr
    finally:
        first.kill_everything()
    second = DeckProcess("--config", str(config), env=env)
    try:
        assert second.call("ChatService.Conversation", {"agent": "a"})["messages"] == shown
        assert texts(shown) == [("user", "hello"), ("agent", "You said: hello")]
        second.call("ChatService.Send", {"agent": "a", "text": "recall"})
        assert texts([second.wait_for(answered)]) == [("agent", "I remember: hello")]
        assert run.methods()[3:5] == ["initialize", "session/resume"]
    finally:
        second.kill_everything()


@pytest.mark.anyio
async def test_after_a_crash_the_restarted_agent_resumes_its_session_with_no_note(make_deck, tmp_path: Path) -> None:
    run = Run(tmp_path, "--resume")
    deck, rec = make_deck(run.toml)
    await deck.startup()
    await chat(deck, rec, "hello", "crash")
    await rec.wait(lambda r: deck.agents["a"].state.value == "error")
    session_id = deck.agents["a"].session_id
    await chat(deck, rec, "recall")  # starts it again
    assert [r["params"]["sessionId"] for r in run.got() if r["method"] == "session/resume"] == [session_id]
    messages = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
    assert "agent-restarted" not in [m.get("code") for m in messages]
    assert texts(messages)[-1] == ("agent", "I remember: hello | crash")
