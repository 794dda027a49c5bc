"""Subagents (ACP `subagent_update`, stable since 2026-11-20), against a real agent that delegates
(tests/agents/subagent_agent.py): deck advertises them, a child's updates build a child conversation
nested in its parent's (messages marked with its `session`), messages between sessions show their
sender and recipient, a request of a child's names it, a child is cancelled alone where it offers
it, and every malformed shape is a log line with nothing lost."""

from __future__ import annotations

import json
import sys

import pytest
from deck.chat.children import Children
from deck.chat.conversation import Conversation
from deck.errors import ServiceError

from tests.conftest import AGENTS, agent_table
from tests.turns import ask

pytestmark = [pytest.mark.timeout(60)]

SUBAGENT_AGENT = [sys.executable, str(AGENTS / "subagent_agent.py")]


def deleg(make_deck):
    return make_deck(agent_table("a", SUBAGENT_AGENT))


def of(conv: Conversation, session: str | None) -> list:
    return [m for m in conv.messages if m.session == session]


@pytest.mark.anyio
async def test_deck_advertises_subagents(make_deck):
    deck, rec = deleg(make_deck)
    reply = await ask(deck, rec, "caps")
    assert json.loads(reply.text)["subagents"] == {}


@pytest.mark.anyio
async def test_a_childs_work_is_a_child_conversation_nested_in_its_parents(make_deck):
    deck, rec = deleg(make_deck)
    reply = await ask(deck, rec, "delegate")
    conv = deck.chat.conversation("a")
    assert reply.text == "delegated" and reply.session is None
    (child,) = conv.snapshot()["children"]
    assert child == {"session": "c1", "parent": conv.session_id, "title": "Explore", "state": "idle",
                     "cancel": True, "description": "Find the config loader", "stopReason": "end_turn"}  # fmt: skip
    (work,) = [m for m in of(conv, "c1") if m.sender is None]
    kinds = [(p.type, p.to_dict().get("text") or p.to_dict().get("title")) for p in work.parts]
    assert kinds == [("thought", "reading files"), ("tool", "Read config.py"), ("text", "The loader is in config.py")]
    task = next(p.to_dict() for p in reply.parts if p.type == "tool")
    assert task["sessions"] == ["c1"]  # the parent's tool call links to the child doing the work
    # Messages between sessions: sender and recipient, content replaced by an upsert or streamed.
    between = [(m.sender, m.recipient, m.text) for m in conv.messages if m.sender is not None]
    assert between == [(conv.session_id, "c1", "Look for the loader"), ("c1", conv.session_id, "Found: config.py")]
    # Events: subagent:changed as it went, and every event about the child's messages carries its session.
    changes = [(e["session"], e["title"], e["state"]) for e in rec.named("subagent:changed", "a")]
    assert changes == [("c1", "Explore", "running"), ("c1", "Explore", "idle")]
    child_ids = {m.id for m in of(conv, "c1")}
    deltas = [d for d in rec.named("message:delta", "a") if d["messageId"] in child_ids]
    assert deltas and all(d["session"] == "c1" for d in deltas)
    assert all("session" not in d for d in rec.named("message:delta", "a") if d["messageId"] == reply.id)
    # A child's message streams as the agent's do: opened not done, finished with its text when its work ends.
    told = [u["message"] for u in rec.named("message:updated", "a") if u["message"]["id"] == work.id]
    assert (told[0]["done"], told[-1]["done"]) == (False, True) and told[-1]["stopReason"] == "end_turn"
    assert [p["text"] for p in told[-1]["parts"] if p["type"] == "text"] == ["The loader is in config.py"]
    found = next(m for m in conv.messages if m.sender == "c1")
    assert [u["message"]["done"] for u in rec.named("message:updated", "a") if u["message"]["id"] == found.id][-1]


@pytest.mark.anyio
async def test_a_childs_own_state_where_it_works_and_its_compaction_are_kept_as_the_agent_sent_them(make_deck):
    deck, rec = deleg(make_deck)
    reply = await ask(deck, rec, "official")
    conv = deck.chat.conversation("a")
    assert reply.text == "reviewed"
    (child,) = conv.snapshot()["children"]
    assert (child["state"], child["stopReason"], child["cwd"]) == ("_paused", "_waiting", "/work/app")
    assert "additionalDirectories" not in child  # cleared by null
    first, last = rec.named("subagent:changed", "a")
    assert (first["state"], first["cwd"], first["additionalDirectories"]) == ("running", "/work/app", ["/work/lib", "/work/docs"])
    assert (last["state"], last["stopReason"], last["cwd"]) == ("_paused", "_waiting", "/work/app")
    assert "additionalDirectories" not in last
    # The child's compaction is a part of its conversation, as the agent's own is; nothing passed on raw.
    parts = [p.to_dict() for m in of(conv, "c1") for p in m.parts if p.type == "compaction"]
    assert parts == [{"type": "compaction", "id": "k1", "status": "completed", "summary": "kept: the diff"}]
    assert not [e for e in rec.named("session:update", "a") if "compaction" in str(e["update"].get("sessionUpdate"))]
    assert [m.text for m in of(conv, None) if m.sender is None and m.role == "agent"] == ["reviewed"]  # none dropped


@pytest.mark.anyio
async def test_a_child_of_a_child_names_its_own_parent(make_deck):
    deck, rec = deleg(make_deck)
    await ask(deck, rec, "nested")
    conv = deck.chat.conversation("a")
    parents = {c["session"]: c["parent"] for c in conv.snapshot()["children"]}
    assert parents == {"c1": conv.session_id, "c2": "c1"}
    assert [m.text for m in of(conv, "c2")] == ["deep"]


@pytest.mark.anyio
async def test_malformed_subagent_shapes_are_logged_and_nothing_is_lost(make_deck, caplog):
    deck, rec = deleg(make_deck)
    reply = await ask(deck, rec, "junk")
    conv = deck.chat.conversation("a")
    assert reply.text == "survived"
    children = {c["session"]: c for c in conv.snapshot()["children"]}
    assert set(children) == {"c1", "c2"}  # no child without an id, none named after the parent
    assert children["c1"]["parent"] == conv.session_id and children["c1"]["title"] == "Renamed"
    assert [m.text for m in of(conv, "c1")] == ["still here"]
    assert not any("nobody announced me" in m.text for m in conv.messages)
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert "announced again by another session" in log
    assert "names the conversation's own session" in log
    assert "without a session id" in log


@pytest.mark.anyio
async def test_a_thousand_children(make_deck):
    deck, rec = deleg(make_deck)
    reply = await ask(deck, rec, "many 1000", )
    conv = deck.chat.conversation("a")
    assert reply.text == "many done" and len(conv.children) == 1000
    assert [m.text for m in of(conv, "k999")] == ["child 999"]


@pytest.mark.anyio
async def test_a_childs_permission_request_names_the_child_in_the_event_and_the_inbox(make_deck):
    deck, rec = deleg(make_deck)
    await deck.startup()
    deck.chat.turns.send("a", "perm")
    asked = await rec.wait_event("permission:requested", agent="a")
    assert asked["session"] == "c1"
    (entry,) = await deck.call("DeckService.Inbox", {})
    assert (entry["session"], entry["subagent"]) == ("c1", "Editor")
    await deck.call("ChatService.AnswerPermission", {"id": asked["id"], "optionId": "ok"})
    await rec.wait(lambda r: any("selected" in m.text for m in deck.chat.conversation("a").messages if m.role == "agent"))


@pytest.mark.anyio
async def test_cancel_a_child_alone_where_it_offers_it(make_deck):
    deck, rec = deleg(make_deck)
    await deck.startup()
    deck.chat.turns.send("a", "hold")
    await rec.wait_event("subagent:changed", agent="a", state="running")
    result = await deck.call("ChatService.Cancel", {"agent": "a", "session": "c1"})
    assert result == {"cancelled": True, "session": "c1"}
    await rec.wait(lambda r: any(m.text == "child cancelled" for m in deck.chat.conversation("a").messages))
    (child,) = deck.chat.conversation("a").snapshot()["children"]
    assert (child["state"], child["stopReason"]) == ("idle", "cancelled")


@pytest.mark.anyio
async def test_hostile_request_of_a_child_cancelled_alone_is_answered_cancelled_until_it_reports_new_work(make_deck):
    deck, rec = deleg(make_deck)
    await deck.startup()
    deck.chat.turns.send("a", "late")
    await rec.wait_event("subagent:changed", agent="a", state="running")
    await deck.call("ChatService.Cancel", {"agent": "a", "session": "c1"})
    asked = await rec.wait_event("permission:requested", agent="a")
    assert asked["toolCall"]["title"] == "new work"  # the two asked after the cancel never reached the inbox
    await deck.call("ChatService.AnswerPermission", {"id": asked["id"], "optionId": "ok"})
    await rec.wait(lambda r: not deck.chat.conversation("a").busy)
    reply = [m for m in deck.chat.conversation("a").messages if m.role == "agent" and m.session is None][-1]
    cancelled = {"outcome": {"outcome": "cancelled"}}
    assert json.loads(reply.text) == [{"result": cancelled}, {"result": cancelled},
                                      {"result": {"outcome": {"outcome": "selected", "optionId": "ok"}}}]  # fmt: skip
    assert len(rec.named("permission:requested", "a")) == 1


@pytest.mark.anyio
async def test_cancel_of_a_child_that_offers_none_or_is_unknown_is_refused(make_deck):
    deck, rec = deleg(make_deck)
    await deck.startup()
    deck.chat.turns.send("a", "hold nocancel")
    await rec.wait_event("subagent:changed", agent="a", state="running")
    with pytest.raises(ServiceError, match="cannot be cancelled alone"):
        await deck.call("ChatService.Cancel", {"agent": "a", "session": "c1"})
    with pytest.raises(ServiceError, match="no subagent session 'zz'"):
        await deck.call("ChatService.Cancel", {"agent": "a", "session": "zz"})
    await deck.call("ChatService.Cancel", {"agent": "a"})  # the parent's cancel still ends it all
    await rec.wait(lambda r: not deck.chat.conversation("a").busy)


@pytest.mark.anyio
async def test_a_childs_cost_is_never_added_to_its_parents(make_deck):
    """ACP: a parent's cost may hold its children's already, so a client never adds them up."""
    deck, rec = deleg(make_deck)
    await ask(deck, rec, "cost")
    usage = await deck.call("DeckService.Usage", {})
    assert usage["agents"]["a"]["spent"] == {"USD": 2.0}  # the parent's report alone
    assert [e["spent"] for e in rec.named("usage:changed", "a") if e.get("spent")] == [{"amount": 2.0, "currency": "USD"}]


def test_patch_semantics_of_a_child():
    conv = Conversation("a", lambda event: None)
    conv.session_started("s1", {})
    sub = {"sessionUpdate": "subagent_update", "sessionId": "c"}
    conv.apply_update({**sub, "title": "T", "description": "D", "capabilities": {"cancel": {}}, "state": "running",
                       "cwd": "/w", "additionalDirectories": ["/x", 3, "/y"]})  # fmt: skip
    # null clears; a state ACP does not list is kept as sent (cut), with its stop reason
    conv.apply_update({**sub, "description": None, "state": {"state": "_custom" + "x" * 500, "stopReason": "_mine"}})
    (child,) = conv.snapshot()["children"]
    assert child == {"session": "c", "parent": "s1", "title": "T", "state": "_custom" + "x" * 93, "cancel": True,
                     "stopReason": "_mine", "cwd": "/w", "additionalDirectories": ["/x", "/y"]}  # fmt: skip
    conv.apply_update({**sub, "capabilities": None, "title": ["junk"], "cwd": None, "additionalDirectories": None,
                       "state": {"state": ["junk"]}})  # fmt: skip
    (child,) = conv.snapshot()["children"]
    assert (child["cancel"], child["title"], child["state"]) == (False, None, "unknown")
    assert "cwd" not in child and "additionalDirectories" not in child and "stopReason" not in child


def test_a_childs_tool_call_in_a_message_let_go_is_never_patched_there():
    """Earlier messages leave memory (a compaction, the cap): a child's later update of a tool call
    they held starts afresh in a message in memory, never in one gone."""
    conv = Conversation("a", lambda event: None)
    conv.session_started("s1", {})
    conv.apply_update({"sessionUpdate": "subagent_update", "sessionId": "c", "title": "T", "state": "running"})
    conv.apply_child_update("c", {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read", "status": "pending"})
    conv.apply_child_update("c", {"sessionUpdate": "compaction_update", "compactionId": "k", "status": "in_progress"})
    (gone,) = [m for m in conv.messages if m.session == "c"]
    conv.add_system("note", text="first")  # the first message stays; what follows it goes
    conv.messages.insert(0, conv.messages.pop())
    conv._let_go(len(conv.messages))
    assert gone not in conv.messages
    conv.apply_child_update("c", {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"})
    conv.apply_child_update("c", {"sessionUpdate": "compaction_update", "compactionId": "k", "status": "completed"})
    assert [p.to_dict()["status"] for p in gone.parts if p.type == "tool"] == ["pending"]  # untouched
    assert all(p.to_dict().get("status") == "in_progress" for p in gone.parts if p.type == "compaction")


def test_a_child_restored_from_the_history_is_no_longer_working():
    conv = Conversation("a", lambda event: None)
    stored = [{"session": "c", "parent": "s1", "title": "T", "state": "running"}, {"title": "no id"}, "junk"]
    conv.restore([{"id": "m1", "agent": "a", "role": "agent", "parts": [{"type": "text", "text": "hi"}],
                   "session": "c"}], "s1", None, children=stored)  # type: ignore[list-item]  # fmt: skip
    assert conv.snapshot()["children"] == [{"session": "c", "parent": "s1", "title": "T", "state": "idle", "cancel": False}]
    assert conv.messages[0].session == "c"
    kept = {"session": "c", "parent": "s1", "title": "T", "state": "_paused", "stopReason": "_waiting", "cwd": "/w",
            "additionalDirectories": ["/x"], "cancel": False}  # fmt: skip
    conv.restore([], "s1", None, children=[kept])
    assert conv.snapshot()["children"] == [kept]  # where it worked, and its own state, as the agent said them


def test_a_child_below_one_cancelled_alone_is_stopped_with_it_until_it_works_again():
    children = Children("a")
    children.announce("s1", {"sessionId": "c1", "state": {"state": "running"}})
    children.announce("c1", {"sessionId": "c2"})
    children.announce("s1", {"sessionId": "c3"})
    children.by_id["c1"].stopping = True
    assert [children.stopped(c) for c in ("c1", "c2", "c3", "unknown")] == [True, True, False, False]
    children.announce("s1", {"sessionId": "c1", "title": "renamed", "state": {"state": "idle"}})
    assert children.stopped("c2")  # idle is no new work
    children.announce("s1", {"sessionId": "c1", "state": {"state": "running"}})
    assert not children.stopped("c1") and not children.stopped("c2")
