"""A conversation outlives deck: the next deck shows it before the agent runs, and the agent's next
start resumes its session, or loads it (the replay is not added twice), or, where it cannot or
refuses, starts a new one with a note that says why. Real fake-agent processes, a real database."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from deck.agent.agent import FORGETS
from deck.chat.conversation import Conversation, DictPart, TextPart
from deck.errors import ServiceError
from deck.plugins.history.store import HistoryStore

from tests.conftest import agent_block
from tests.deck_process import DeckProcess, write_config

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
async def test_a_load_started_by_a_message_adds_the_turns_made_elsewhere_too(make_deck, tmp_path: Path) -> None:
    """The message whose send starts the agent is in the conversation already, but not the agent's
    yet: the replay is matched against what the agent got, before it."""
    run = Run(tmp_path, "--load")
    before, session_id = await first_deck(make_deck, run, "hello")
    sessions = tmp_path / "sessions.json"
    kept = json.loads(sessions.read_text())
    kept[session_id].append("from another client")
    sessions.write_text(json.dumps(kept))
    deck, rec = make_deck(run.toml)
    await deck.startup()
    await chat(deck, rec, "recall")
    now = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
    assert now[: len(before)] == before
    assert texts(now[len(before) :])[:3] == [("user", "recall"), ("user", "from another client"),
                                              ("agent", "You said: from another client")]  # fmt: skip
    assert any("replayed 2 message(s) deck did not hold: added" in line for line in deck.agents["a"].logs)


@pytest.mark.anyio
async def test_a_loaded_session_adds_once_the_turns_made_elsewhere_since(make_deck, tmp_path: Path) -> None:
    run = Run(tmp_path, "--load")
    before, session_id = await first_deck(make_deck, run, "hello")
    sessions = tmp_path / "sessions.json"
    kept = json.loads(sessions.read_text())
    kept[session_id].append("from another client")  # the agent's session went on without deck
    sessions.write_text(json.dumps(kept))
    deck, rec = make_deck(run.toml)
    await deck.startup()
    await deck.call("AgentService.Start", {"name": "a"})
    now = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
    assert now[: len(before)] == before
    assert texts(now[len(before) :]) == [("user", "from another client"), ("agent", "You said: from another client")]
    assert any("replayed 2 message(s) deck did not hold: added" in line for line in deck.agents["a"].logs)
    await chat(deck, rec, "recall")
    await deck.shutdown()
    # The next deck holds all of it, and its load, replaying all of it, adds nothing.
    again, _rec = make_deck(run.toml)
    await again.startup()
    await again.call("AgentService.Start", {"name": "a"})
    shown = texts((await again.call("ChatService.Conversation", {"agent": "a"}))["messages"])
    assert shown == [("user", "hello"), ("agent", "You said: hello"), ("user", "from another client"),
                     ("agent", "You said: from another client"), ("user", "recall"),
                     ("agent", "I remember: hello | from another client")]  # fmt: skip
    await again.shutdown()


def test_what_a_replay_holds_beyond_the_conversation_is_found_from_its_last_user_message() -> None:
    from deck.chat.book import unheld

    def conv(*said: tuple[str, str]) -> list[Any]:
        c = Conversation("a", lambda event: None)
        for role, text in said:
            if role == "user":
                c.add_user(text, False)
            elif role == "system":
                c.add_system("note", text=text)
            else:
                c.begin_reply().parts.append(TextPart("text", text))
        return c.messages

    held = conv(("user", "one"), ("agent", "1"), ("system", "restarted"), ("user", "two"), ("agent", "2"))
    same = conv(("user", "one"), ("agent", "1"), ("user", "/model x two"), ("agent", "2"))
    assert unheld(held, same) == []  # words the agent puts before the user's are no new turn
    more = conv(("user", "one"), ("agent", "1"), ("user", "two"), ("agent", "2"), ("user", "three"), ("agent", "3"))
    assert [m.text for m in unheld(held, more)] == ["three", "3"]
    assert unheld(held, conv(("user", "other"), ("agent", "x"))) == []  # no place to start from: nothing
    unanswered = conv(("user", "one"), ("agent", "1"), ("user", "two"))
    assert [m.text for m in unheld(unanswered, more)] == ["2", "three", "3"]  # the answer deck missed too
    assert unheld(conv(), more) == []
    book = conv(("user", "one"), ("agent", "1"), ("user", "two"), ("agent", "2"), ("user", "the two"), ("agent", "x"))
    assert [m.text for m in unheld(held, book)] == []  # ends with the words "two": the last such is the match
    ok = conv(("user", "ok"), ("agent", "A"), ("user", "book"), ("agent", "B"))
    assert [m.text for m in unheld(conv(("user", "ok"), ("agent", "A")), ok)] == ["book", "B"]  # words, not letters
    never_sent = conv(("user", "one"), ("agent", "1"), ("user", "two"), ("agent", "2"), ("user", "one"))
    never_sent[-1].error = "cancelled"  # abandoned in the queue: the agent never saw it
    assert unheld(never_sent, more[:4]) == []


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


@pytest.mark.anyio
@pytest.mark.parametrize("method", ["session/load", "session/resume"])
async def test_an_agent_that_exits_while_it_continues_the_session_gets_a_new_one_at_its_next_start(
    make_deck, tmp_path: Path, method: str
) -> None:
    run = Run(tmp_path, "--crash-load" if method == "session/load" else "--crash-resume")
    before, session_id = await first_deck(make_deck, run, "hello")
    deck, rec = make_deck(run.toml)
    await deck.startup()
    with pytest.raises(ServiceError, match=f"the agent exited during {method} \\(code 7\\)"):
        await deck.call("AgentService.Start", {"name": "a"})
    assert run.methods()[3:] == ["initialize", method]
    await chat(deck, rec, "recall")  # the next start does not try that session again
    assert run.methods()[5:] == ["initialize", "session/new", "session/prompt"]
    now = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
    assert now[: len(before)] == before  # the replay cut short added nothing
    user, note, reply = now[len(before) :]
    assert (note["role"], note.get("code")) == ("system", "agent-restarted")
    assert note["parts"][0]["text"] == f"The agent exited during {method} (code 7): {FORGETS}"
    assert texts([user, reply]) == [("user", "recall"), ("agent", "I remember: ")]
    assert deck.agents["a"].state.value == "ready" and deck.agents["a"].session_id != session_id


@pytest.mark.anyio
async def test_an_agent_that_never_answers_session_load_gets_a_new_session_at_its_next_start(
    make_deck, tmp_path: Path
) -> None:
    run = Run(tmp_path, "--hang-load")
    before, session_id = await first_deck(make_deck, run, "hello")
    deck, rec = make_deck('[limits]\nhandshakeTimeout = "1s"\n' + run.toml)
    await deck.startup()
    with pytest.raises(ServiceError, match="handshake timed out after 1s during session/load"):
        await deck.call("AgentService.Start", {"name": "a"})
    await chat(deck, rec, "recall")  # not that session again: a new one, at once
    assert run.methods()[3:] == ["initialize", "session/load", "initialize", "session/new", "session/prompt"]
    now = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
    assert now[: len(before)] == before
    note = now[len(before) + 1]
    assert note["parts"][0]["text"] == f"The agent did not answer session/load within 1s: {FORGETS}"
    await deck.shutdown()


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


# -- the agent's own sessions: ChatService.AgentSessions, OpenConversation({agent, sessionId}) ------


def kept_elsewhere(tmp_path: Path, sessions: dict[str, list[str]]) -> None:
    """Sessions the fake agent keeps from other clients (its --sessions file): id → prompts."""
    (tmp_path / "sessions.json").write_text(json.dumps(sessions))


@pytest.mark.anyio
async def test_agent_sessions_starts_the_agent_and_reads_every_page_of_its_session_list(make_deck, tmp_path: Path) -> None:
    kept_elsewhere(tmp_path, {"x1": ["fix the bug"], "x2": ["write docs"], "x3": []})
    run = Run(tmp_path, "--list")
    deck, _rec = make_deck(run.toml)
    await deck.startup()
    listed = await deck.call("ChatService.AgentSessions", {"agent": "a"})
    cwd = deck.agents["a"].cwd
    assert listed == [
        {"sessionId": "x1", "cwd": cwd, "title": "fix the bug", "updatedAt": "2026-01-01T00:00:00Z"},
        {"sessionId": "x2", "cwd": cwd, "title": "write docs", "updatedAt": "2026-01-01T00:00:00Z"},
        {"sessionId": "x3", "cwd": cwd, "title": None, "updatedAt": "2026-01-01T00:00:00Z"},
    ]
    pages = [r["params"] for r in run.got() if r["method"] == "session/list"]
    assert pages == [{"cwd": cwd}, {"cwd": cwd, "cursor": "2"}]  # started for it, as Send would
    await deck.shutdown()


@pytest.mark.anyio
async def test_agent_sessions_reads_a_bounded_number_of_pages_from_an_agent_that_pages_forever(
    make_deck, tmp_path: Path
) -> None:
    from deck.agent.listing import MAX_SESSION_PAGES

    kept_elsewhere(tmp_path, {"x1": ["one"]})
    run = Run(tmp_path, "--list-pages-forever")
    deck, _rec = make_deck(run.toml)
    await deck.startup()
    listed = await deck.call("ChatService.AgentSessions", {"agent": "a"})
    assert [s["sessionId"] for s in listed] == ["x1"]
    assert run.methods().count("session/list") == MAX_SESSION_PAGES
    await deck.shutdown()


@pytest.mark.anyio
async def test_agent_sessions_of_an_agent_that_cannot_list_or_start_is_a_clear_error(make_deck, tmp_path: Path) -> None:
    from deck.errors import ServiceError

    run = Run(tmp_path, "--load")
    deck, _rec = make_deck(run.toml)
    await deck.startup()
    with pytest.raises(ServiceError, match="a cannot list its sessions: .*sessionCapabilities.list"):
        await deck.call("ChatService.AgentSessions", {"agent": "a"})
    assert "session/list" not in run.methods()
    await deck.shutdown()

    broken, _rec = make_deck(agent_block("a", "--list", "--fail-start"))
    await broken.startup()
    with pytest.raises(ServiceError, match="(?s)a could not start: .*missing API key"):  # started as for Send: said why
        await broken.call("ChatService.AgentSessions", {"agent": "a"})
    await broken.shutdown()


@pytest.mark.anyio
async def test_an_agents_own_session_opens_as_a_new_stored_conversation_formed_by_its_replay(
    make_deck, tmp_path: Path
) -> None:
    from deck.errors import ServiceError

    kept_elsewhere(tmp_path, {"x1": ["hello", "how are you"]})
    run = Run(tmp_path, "--list", "--load", "--resume")
    deck, rec = await started(make_deck, run, "mine")
    (listed,) = [s for s in await deck.call("ChatService.AgentSessions", {"agent": "a"}) if s["sessionId"] == "x1"]
    opened = await deck.call("ChatService.OpenConversation", {"agent": "a", "sessionId": listed["sessionId"]})
    assert opened["agent"] == "a" and opened["sessionId"] == "x1" and opened["conversationId"]
    assert rec.named("conversation:reset", "a")[-1] == {"agent": "a", "conversationId": opened["conversationId"]}
    assert deck.agents["a"].session_id == "x1"
    assert run.methods()[-2:] == ["initialize", "session/load"]  # loaded, not resumed: the replay is wanted
    shown = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
    assert texts(shown) == [("user", "hello"), ("agent", "You said: hello"),
                            ("user", "how are you"), ("agent", "You said: how are you")]  # fmt: skip
    assert all(m["done"] for m in shown)
    with pytest.raises(ServiceError, match="session 'x1' is the current conversation of a already"):
        await deck.call("ChatService.OpenConversation", {"agent": "a", "sessionId": "x1"})
    await chat(deck, rec, "recall")  # the agent goes on in that session
    assert texts((await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"])[-1] == (
        "agent", "I remember: hello | how are you")  # fmt: skip
    now = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
    newer, older = await deck.call("ChatService.History", {"agent": "a"})
    assert (newer["id"], newer["title"], newer["messages"]) == (opened["conversationId"], "hello", 6)
    assert older["title"] == "mine"  # the conversation left stays as it was
    await deck.shutdown()
    with HistoryStore() as store:
        kept = store.get(opened["conversationId"])
    assert kept is not None and kept["sessionId"] == "x1" and kept["messages"] == now


@pytest.mark.anyio
async def test_an_agents_own_session_is_refused_with_nothing_changed_when_it_can_neither_load_nor_resume(
    make_deck, tmp_path: Path
) -> None:
    from deck.errors import ServiceError

    kept_elsewhere(tmp_path, {"x1": ["hello"]})
    run = Run(tmp_path, "--list")
    deck, rec = await started(make_deck, run, "mine")
    before = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
    with pytest.raises(ServiceError, match="a cannot load or resume sessions"):
        await deck.call("ChatService.OpenConversation", {"agent": "a", "sessionId": "x1"})
    assert (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"] == before
    assert rec.named("conversation:reset", "a") == [] and deck.agents["a"].running
    with pytest.raises(ServiceError, match="give the id of a stored conversation, or an agent"):
        await deck.call("ChatService.OpenConversation", {"agent": "a"})
    await deck.shutdown()


@pytest.mark.anyio
async def test_an_agents_own_session_it_refuses_to_load_is_an_error_that_says_why(make_deck, tmp_path: Path) -> None:
    from deck.errors import ServiceError

    run = Run(tmp_path, "--refuse-resume")
    deck, _rec = await started(make_deck, run, "mine")
    with pytest.raises(ServiceError, match="could not open session 'nope': session/resume failed: Resource not found"):
        await deck.call("ChatService.OpenConversation", {"agent": "a", "sessionId": "nope"})
    assert deck.agents["a"].running and deck.agents["a"].session_id != "nope"
    await deck.shutdown()


async def started(make_deck: Any, run: Run, *prompts: str) -> tuple[Any, Any]:
    """A started deck whose agent `a` answered `prompts`."""
    deck, rec = make_deck(run.toml)
    await deck.startup()
    await chat(deck, rec, *prompts)
    return deck, rec


@pytest.mark.anyio
async def test_an_agent_that_replays_on_resume_has_the_replay_dropped_and_its_commands_kept(
    make_deck, tmp_path: Path
) -> None:
    run = Run(tmp_path, "--resume-replays")
    before, session_id = await first_deck(make_deck, run, "hello")
    deck, rec = make_deck(run.toml)
    await deck.startup()
    await chat(deck, rec, "recall")
    assert run.methods()[3:5] == ["initialize", "session/resume"]
    now = await deck.call("ChatService.Conversation", {"agent": "a"})
    assert texts(now["messages"]) == [("user", "hello"), ("agent", "You said: hello"),
                                      ("user", "recall"), ("agent", "I remember: hello")]  # fmt: skip
    assert [c["name"] for c in now["commands"]] == ["resumed"]  # what describes the session now is kept
    await deck.shutdown()


#: An agent whose session/load replays its first user message in several chunks, as real agents do.
CHUNKED_REPLAY_AGENT = r"""
import json, sys
def send(m):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **m}) + "\n")
    sys.stdout.flush()
def chunk(sid, kind, text):
    update = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    send({"method": "session/update", "params": {"sessionId": sid, "update": update}})
for line in sys.stdin:
    msg = json.loads(line)
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method == "initialize":
        send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}}})
    elif method == "session/new":
        send({"id": rid, "result": {"sessionId": "fresh"}})
    elif method == "session/load":
        for piece in ("several ", "words of ", "the first question"):
            chunk(params["sessionId"], "user_message_chunk", piece)
        chunk(params["sessionId"], "agent_message_chunk", "an answer")
        send({"id": rid, "result": {}})
    elif rid is not None:
        send({"id": rid, "error": {"code": -32601, "message": "Method not found"}})
"""


@pytest.mark.anyio
async def test_a_loaded_session_is_titled_by_its_whole_first_user_message(make_deck, tmp_path: Path) -> None:
    script = tmp_path / "chunked_replay_agent.py"
    script.write_text(CHUNKED_REPLAY_AGENT)
    deck, _rec = make_deck(agent_block("a", command=[sys.executable, str(script)]))
    await deck.startup()
    opened = await deck.call("ChatService.OpenConversation", {"agent": "a", "sessionId": "kept"})
    shown = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
    assert texts(shown) == [("user", "several words of the first question"), ("agent", "an answer")]
    [listed] = await deck.call("ChatService.History", {"agent": "a"})
    await deck.shutdown()
    assert listed["id"] == opened["conversationId"]
    assert listed["title"] == "several words of the first question"  # not its first chunk: "several"


def test_a_session_list_entry_is_taken_only_as_far_as_it_makes_sense() -> None:
    from deck.agent.listing import MAX_SESSION_STRING
    from deck.agent.listing import session_info as _session_info

    good = {"sessionId": "s1", "cwd": "/w", "title": "t" * 500, "updatedAt": "2026-01-01T00:00:00Z", "_meta": {"x": 1}}
    assert _session_info(good) == {"sessionId": "s1", "cwd": "/w", "title": "t" * MAX_SESSION_STRING,
                                   "updatedAt": "2026-01-01T00:00:00Z"}  # fmt: skip
    assert _session_info({"sessionId": "s2", "cwd": "/w", "title": 7, "updatedAt": "x" * 500}) == {
        "sessionId": "s2", "cwd": "/w", "title": None, "updatedAt": None}  # fmt: skip
    for junk in ("s3", None, {"cwd": "/w"}, {"sessionId": "", "cwd": "/w"}, {"sessionId": "s" * 500, "cwd": "/w"},
                 {"sessionId": 3, "cwd": "/w"}, {"sessionId": "s4"}):  # fmt: skip
        assert _session_info(junk) is None


@pytest.mark.anyio
async def test_the_users_model_and_mode_are_set_again_on_the_resumed_session(make_deck, tmp_path: Path) -> None:
    """What the user chose is kept with the conversation; the agent's next process resumes the session with
    its defaults, and deck sets the choices again, each once; a new conversation starts from the defaults."""
    run = Run(tmp_path, "--resume", "--mode-option", "--boolean-option")
    deck, rec = make_deck(run.toml)
    await deck.startup()
    await deck.call("AgentService.Start", {"name": "a"})
    await deck.call("ChatService.SetConfigOption", {"agent": "a", "configId": "model", "value": "m2"})
    await deck.call("ChatService.SetConfigOption", {"agent": "a", "configId": "fast", "value": True})
    await chat(deck, rec, "hello")
    await deck.shutdown()
    first = len(run.got())

    deck, rec = make_deck(run.toml)
    await deck.startup()
    await chat(deck, rec, "again")
    again = run.got()[first:]
    assert [r["method"] for r in again][:2] == ["initialize", "session/resume"]
    chosen = [(r["params"]["configId"], r["params"]["value"]) for r in again if r["method"] == "session/set_config_option"]
    assert sorted(chosen) == [("fast", True), ("model", "m2")]  # set again, each once
    methods = [r["method"] for r in again]
    assert methods.index("session/prompt") > max(i for i, m in enumerate(methods) if m == "session/set_config_option")
    conv = await deck.call("ChatService.Conversation", {"agent": "a"})
    assert {o["id"]: o["currentValue"] for o in conv["configOptions"]} == {"mode": "default", "model": "m2", "fast": True}

    await deck.call("ChatService.NewConversation", {"agent": "a"})
    await chat(deck, rec, "fresh")
    later = [r for r in run.got()[first + len(again):] if r["method"] == "session/set_config_option"]
    assert later == []  # a new conversation: the agent's defaults
    await deck.shutdown()


@pytest.mark.anyio
async def test_a_choice_the_agent_no_longer_offers_is_not_sent(make_deck, tmp_path: Path) -> None:
    """Stored choices of a value the resumed session does not offer (its models changed) or of an option it no
    longer has are left out; a stored session mode it offers is set again with session/set_mode."""
    run = Run(tmp_path, "--resume", "--mode-option")
    deck, rec = make_deck(run.toml)
    await deck.startup()
    await chat(deck, rec, "hello")
    await deck.shutdown()
    store = HistoryStore(tmp_path / "state" / "deck" / "history.db")
    try:
        [row] = store.list()
        store.set_choices(row["id"], {"options": {"model": "m9", "gone": "x"}, "mode": "plan"})
    finally:
        store.close()
    first = len(run.got())
    deck, rec = make_deck(run.toml)
    await deck.startup()
    await chat(deck, rec, "again")
    again = run.got()[first:]
    assert [r for r in again if r["method"] == "session/set_config_option"] == []
    assert [r["params"]["modeId"] for r in again if r["method"] == "session/set_mode"] == ["plan"]
    await deck.shutdown()
