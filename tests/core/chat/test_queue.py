"""The queue: messages sent while a turn runs wait, and can be listed, edited and removed until they go.

Through the services' wire names (`ChatService.Queue`, `Unqueue`, `EditQueued`), with a real fake agent."""

from __future__ import annotations

import pytest
from deck.chat.turns import REMOVED
from deck.errors import ServiceError

from tests.conftest import agent_block
from tests.turns import wait_reply

pytestmark = pytest.mark.anyio


async def test_queued_messages_are_listed_edited_and_removed_before_they_are_sent(make_deck):
    deck, rec = make_deck(agent_block("a"))
    first = deck.chat.turns.send("a", "sleep 0.8")
    await rec.wait_event("turn:changed", agent="a", busy=True)
    ids = [await deck.call("ChatService.Send", {"agent": "a", "text": text}) for text in ("one", "two", "three")]
    waiting = await deck.call("ChatService.Queue", {"agent": "a"})
    assert [(w["id"], w["text"]) for w in waiting] == list(zip(ids, ["one", "two", "three"]))
    assert all(w["createdAt"] for w in waiting)

    assert await deck.call("ChatService.EditQueued", {"agent": "a", "id": ids[1], "text": "deux"}) == {"id": ids[1], "text": "deux"}
    assert await deck.call("ChatService.Unqueue", {"agent": "a", "id": ids[2]}) == {"id": ids[2], "queued": 2}
    assert [w["text"] for w in await deck.call("ChatService.Queue", {"agent": "a"})] == ["one", "deux"]
    assert rec.named("turn:changed", "a")[-1] == {"agent": "a", "busy": True, "queued": 2}  # the count said at once
    edited = [u["message"] for u in rec.named("message:updated") if u["message"]["id"] == ids[1]][-1]
    assert edited["parts"] == [{"type": "text", "text": "deux"}] and edited["queued"] is True
    removed = [u["message"] for u in rec.named("message:updated") if u["message"]["id"] == ids[2]][-1]
    assert removed["queued"] is False and removed["error"] == REMOVED

    conv = deck.chat.conversation("a")
    by_id = {m.id: m for m in conv.messages}
    assert (await wait_reply(deck, rec, by_id[ids[0]])).text == "You said: one"
    assert (await wait_reply(deck, rec, by_id[ids[1]])).text == "You said: deux"  # the agent got the edited text
    await rec.wait(lambda r: r.named("turn:changed", "a")[-1] == {"agent": "a", "busy": False, "queued": 0})
    assert (await wait_reply(deck, rec, first)).text == "slept"
    answers = [m.text for m in conv.messages if m.role == "agent"]
    assert answers == ["slept", "You said: one", "You said: deux"]  # "three" was never sent
    assert await deck.call("ChatService.Queue", {"agent": "a"}) == []


async def test_a_message_that_no_longer_waits_cannot_be_edited_or_removed(make_deck):
    deck, rec = make_deck(agent_block("a"))
    sent = await deck.call("ChatService.Send", {"agent": "a", "text": "sleep 0.5"})
    await rec.wait_event("turn:changed", agent="a", busy=True)
    queued = await deck.call("ChatService.Send", {"agent": "a", "text": "later"})
    with pytest.raises(ServiceError, match="does not wait in a's queue: it was sent"):
        await deck.call("ChatService.Unqueue", {"agent": "a", "id": sent})  # in progress: gone from the queue
    with pytest.raises(ServiceError, match="does not wait"):
        await deck.call("ChatService.EditQueued", {"agent": "a", "id": "msg-nope", "text": "x"})
    with pytest.raises(ServiceError, match="empty message"):
        await deck.call("ChatService.EditQueued", {"agent": "a", "id": queued, "text": "  "})
    with pytest.raises(ServiceError, match="unknown agent"):
        await deck.call("ChatService.Queue", {"agent": "zz"})
    with pytest.raises(ServiceError, match="id"):
        await deck.call("ChatService.Unqueue", {"agent": "a"})  # a missing parameter is named
    await deck.call("ChatService.Unqueue", {"agent": "a", "id": queued})
    with pytest.raises(ServiceError, match="does not wait"):
        await deck.call("ChatService.Unqueue", {"agent": "a", "id": queued})  # removed once only
    await rec.wait(lambda r: r.named("turn:changed", "a")[-1] == {"agent": "a", "busy": False, "queued": 0})
    assert [m.text for m in deck.chat.conversation("a").messages if m.role == "agent"] == ["slept"]


async def test_a_cancel_abandons_what_waits_and_the_queue_is_empty_after(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await deck.call("ChatService.Send", {"agent": "a", "text": "slow"})
    await rec.wait_event("turn:changed", agent="a", busy=True)
    await deck.call("ChatService.Send", {"agent": "a", "text": "never"})
    assert len(await deck.call("ChatService.Queue", {"agent": "a"})) == 1
    assert (await deck.call("ChatService.Cancel", {"agent": "a"}))["abandoned"] == 1
    assert await deck.call("ChatService.Queue", {"agent": "a"}) == []
