"""Context compaction (ACP `compaction_update`, `compaction_summary_chunk`, unstable), against a real
fake agent: deck advertises it, a compaction is a part of the conversation with its status and its
summary, the history keeps it, line mode says it once as it starts and once as it ends."""

from __future__ import annotations

import json

import pytest
from deck.chat.conversation import Conversation

from tests.conftest import agent_block
from tests.frontends.test_line import line_deck  # noqa: F401  (the fixture)
from tests.plugins.history.test_history import send, turn_done
from tests.turns import ask

pytestmark = [pytest.mark.timeout(60)]

SUMMARY = "Kept the plan and the file list.\nDropped the rest."


def compactions(message) -> list[dict]:
    return [p.to_dict() for p in message.parts if p.type == "compaction"]


@pytest.mark.anyio
async def test_deck_advertises_compaction_and_a_compaction_becomes_a_part(make_deck, tmp_path):
    requests = tmp_path / "requests.jsonl"
    deck, rec = make_deck(agent_block("a", "--requests", str(requests)))
    reply = await ask(deck, rec, "compact")
    init = json.loads(requests.read_text().splitlines()[0])
    assert init["method"] == "initialize" and init["params"]["clientCapabilities"]["session"]["compaction"] == {}
    assert compactions(reply) == [{"type": "compaction", "id": "c1", "status": "completed", "summary": SUMMARY}]
    sent = [(d["part"]["status"], d["part"]["summary"]) for d in rec.named("message:delta") if d["kind"] == "compaction"]
    assert sent == [("in_progress", ""), ("in_progress", "Kept the plan"), ("in_progress", SUMMARY), ("completed", SUMMARY)]
    assert reply.text == "compacted"


@pytest.mark.anyio
async def test_a_failed_compaction_clears_its_summary_and_keeps_its_error(make_deck):
    deck, rec = make_deck(agent_block("a"))
    reply = await ask(deck, rec, "compact fail")
    assert compactions(reply) == [
        {"type": "compaction", "id": "c1", "status": "failed", "summary": "", "error": "the model refused"}
    ]


def test_patch_semantics_and_junk():
    conv = Conversation("a", lambda event: None)
    conv.session_started("s1", {})
    conv.apply_update({"sessionUpdate": "compaction_update", "compactionId": "k", "status": "in_progress"})
    conv.apply_update({"sessionUpdate": "compaction_update", "status": "in_progress"})  # no id: skipped
    conv.apply_update({"sessionUpdate": "compaction_update", "compactionId": "k", "status": "completed",
                       "summary": [{"type": "text", "text": "one"}, {"type": "text", "text": " two"}]})  # fmt: skip
    (part,) = compactions(conv.messages[-1])
    assert (part["status"], part["summary"]) == ("completed", "one two")
    conv.apply_update({"sessionUpdate": "compaction_update", "compactionId": "k", "status": "_later"})
    assert compactions(conv.messages[-1])[0]["status"] == "_later"  # one deck does not know: kept as said (ACP)
    conv.apply_update({"sessionUpdate": "compaction_update", "compactionId": "k", "status": ["junk"]})
    assert compactions(conv.messages[-1])[0]["status"] == "_later"  # no word: the status it had stays
    conv.apply_update({"sessionUpdate": "compaction_update", "compactionId": "k", "status": "completed", "summary": []})
    assert compactions(conv.messages[-1])[0]["summary"] == ""
    assert len(conv.messages) == 1


@pytest.mark.anyio
async def test_the_history_keeps_a_compaction(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    try:
        await send(deck, "a", "compact")
        await turn_done(rec, "a")
        (row,) = await deck.call("ChatService.History", {"agent": "a"})
        stored = await deck.chat.history.get(row["id"])
        parts = [p for m in stored["messages"] for p in m["parts"] if p["type"] == "compaction"]
        assert parts == [{"type": "compaction", "id": "c1", "status": "completed", "summary": SUMMARY}]
    finally:
        await deck.shutdown()


def test_line_mode_says_compacting_then_compacted_or_failed(line_deck):  # noqa: F811
    deck = line_deck(agent_block("a"))
    deck.send("@a compact")
    deck.expect(r"\[a\] compacting…")
    deck.expect(r"\[a\] compacted: Kept the plan and the file list\.")
    deck.expect(r"\[a\] compacted")
    deck.send("compact fail")
    deck.expect(r"\[a\] compacting…")
    deck.expect(r"\[a\] compaction failed: the model refused")
    assert deck.close() == 0
    assert len([line for line in deck.lines if line == "[a] compacting…"]) == 2


def test_a_finished_compaction_lets_what_precedes_it_go_from_memory():
    events = []
    conv = Conversation("a", events.append)
    conv.session_started("s1", {})
    for word in ("one", "two"):
        conv.add_user(word, queued=False)
        conv.begin_reply()
        conv.apply_update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"re {word}"}})
    before = [m.id for m in conv.messages]
    conv.apply_update({"sessionUpdate": "compaction_update", "compactionId": "k", "status": "in_progress"})
    assert len(conv.messages) == 4  # in progress: nothing goes yet
    conv.apply_update({"sessionUpdate": "compaction_update", "compactionId": "k", "status": "completed"})
    assert [m.id for m in conv.messages] == [before[0], before[3]]  # the first stays, and the one compacting
    assert conv.cut["messages"] == 2
    (cut,) = [e for e in events if getattr(e, "field", None) == "cut"]
    assert cut.value["messageIds"] == before[1:3]
    conv.apply_update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": " after"}})
    assert conv.messages[-1].text == "re two after"


@pytest.mark.anyio
async def test_the_history_keeps_what_a_compaction_let_go(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    try:
        await ask(deck, rec, "hello")
        deck.chat.turns.send("a", "compact")  # the reply's user message is let go too: waited for by its end
        conv = deck.chat.conversation("a")
        await rec.wait(lambda r: not conv.busy and conv.messages[-1].text == "compacted")
        assert [m.text for m in deck.chat.conversation("a").messages] == ["hello", "compacted"]
        (row,) = await deck.call("ChatService.History", {"agent": "a"})
        stored = await deck.chat.history.get(row["id"])
        assert [m["role"] for m in stored["messages"]] == ["user", "agent", "user", "agent"]
    finally:
        await deck.shutdown()
