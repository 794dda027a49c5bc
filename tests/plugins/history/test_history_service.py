"""ChatService.History, Search, NewConversation and OpenConversation on a real deck with real
fake agents and a real history database; the clear error when history is off; and `/history`,
`/search`, `/new` in a real `deck run --frontend=line`."""

from __future__ import annotations

from typing import Any

import pytest
from deck.errors import ServiceError

from tests.conftest import agent_block
from tests.frontends.test_line import line_deck  # noqa: F401  (the fixture)
from tests.plugins.history.test_history import send, turn_done

pytestmark = [pytest.mark.timeout(60), pytest.mark.anyio]

OFF = "[history]\nenabled = false\n"


async def talked(make_deck: Any, *prompts: str, config: str = "") -> tuple[Any, Any]:
    """A started deck whose agent `a` answered each of `prompts`."""
    deck, rec = make_deck(config + agent_block("a"))
    await deck.startup()
    for n, prompt in enumerate(prompts, 1):
        await send(deck, "a", prompt)
        await turn_done(rec, "a", n)
    return deck, rec


def texts(conversation: dict[str, Any]) -> list[str]:
    return [p["text"] for m in conversation["messages"] for p in m["parts"] if p["type"] == "text"]


async def test_history_lists_the_conversation_after_a_turn(make_deck) -> None:
    deck, _rec = await talked(make_deck, "hello there")
    try:
        (row,) = await deck.call("ChatService.History", {"agent": "a"})
        assert set(row) == {"id", "agent", "title", "createdAt", "updatedAt", "messages"}
        assert (row["agent"], row["title"], row["messages"]) == ("a", "hello there", 2)
        assert await deck.call("ChatService.History", {"agent": "nobody"}) == []
    finally:
        await deck.shutdown()


async def test_search_finds_a_word_of_the_conversation(make_deck) -> None:
    deck, _rec = await talked(make_deck, "pineapple please")
    try:
        (row,) = await deck.call("ChatService.History", {})
        hits = await deck.call("ChatService.Search", {"query": "pineapple"})
        found = {(h["conversationId"], h["agent"], h["role"]) for h in hits}
        assert found == {(row["id"], "a", "user"), (row["id"], "a", "agent")}
        assert all("**pineapple**" in h["snippet"] and h["messageId"] and h["at"] for h in hits)
        assert await deck.call("ChatService.Search", {"query": "kiwi"}) == []
        with pytest.raises(ServiceError, match="empty query"):
            await deck.call("ChatService.Search", {"query": "  "})
    finally:
        await deck.shutdown()


async def test_new_conversation_is_empty_and_the_next_message_is_stored_apart(make_deck) -> None:
    deck, rec = await talked(make_deck, "first words")
    try:
        old_process = deck.agents["a"].process
        assert await deck.call("ChatService.NewConversation", {"agent": "a"}) == {"agent": "a"}
        assert rec.named("conversation:reset", "a") == [{"agent": "a"}]
        conversation = await deck.call("ChatService.Conversation", {"agent": "a"})
        assert conversation["messages"] == []
        assert deck.agents["a"].running and deck.agents["a"].process is not old_process  # a new session serves it
        await send(deck, "a", "second words")
        await turn_done(rec, "a", 2)
        newer, older = await deck.call("ChatService.History", {"agent": "a"})
        assert (newer["title"], newer["messages"]) == ("second words", 2)
        assert (older["title"], older["messages"]) == ("first words", 2)  # the old one stays, untouched
        assert texts(await deck.call("ChatService.Conversation", {"agent": "a"}))[0] == "second words"
    finally:
        await deck.shutdown()


async def test_open_conversation_brings_back_the_first_ones_messages(make_deck) -> None:
    deck, rec = await talked(make_deck, "first words")
    try:
        (first,) = await deck.call("ChatService.History", {})
        await deck.call("ChatService.NewConversation", {"agent": "a"})
        await send(deck, "a", "second words")
        await turn_done(rec, "a", 2)
        opened = await deck.call("ChatService.OpenConversation", {"id": first["id"]})
        assert opened == {"agent": "a", "conversationId": first["id"]}
        assert rec.named("conversation:reset", "a")[-1] == {"agent": "a", "conversationId": first["id"]}
        assert not deck.agents["a"].running  # its next start resumes the stored session
        conversation = await deck.call("ChatService.Conversation", {"agent": "a"})
        assert texts(conversation)[0] == "first words" and "second words" not in texts(conversation)
        await send(deck, "a", "third words")  # goes on in the first stored conversation
        await turn_done(rec, "a", 3)
        conversation = await deck.call("ChatService.Conversation", {"agent": "a"})
        roles = [(m["role"], m.get("code")) for m in conversation["messages"]]
        assert ("system", "agent-restarted") in roles  # this agent cannot resume: it says it forgot
        rows = await deck.call("ChatService.History", {})
        assert [(r["title"], r["messages"]) for r in rows] == [("first words", 5), ("second words", 2)]
        with pytest.raises(ServiceError, match="no conversation 'nope'"):
            await deck.call("ChatService.OpenConversation", {"id": "nope"})
    finally:
        await deck.shutdown()


async def test_opening_the_conversation_that_is_current_already_changes_nothing(make_deck) -> None:
    """A client that opens the agent's current conversation again (an editor reconnecting through
    `deck acp`) neither stops the agent nor replaces the conversation."""
    deck, rec = await talked(make_deck, "first words")
    try:
        (first,) = await deck.call("ChatService.History", {})
        assert deck.agents["a"].running
        resets = len(rec.named("conversation:reset", "a"))
        opened = await deck.call("ChatService.OpenConversation", {"id": first["id"]})
        assert opened == {"agent": "a", "conversationId": first["id"], "current": True}
        assert deck.agents["a"].running and len(rec.named("conversation:reset", "a")) == resets
        await deck.call("ChatService.NewConversation", {"agent": "a"})
        again = await deck.call("ChatService.OpenConversation", {"id": first["id"]})  # not current now: opened
        assert "current" not in again and not deck.agents["a"].running
    finally:
        await deck.shutdown()


async def test_a_conversation_reopened_is_the_one_the_next_start_brings_back(make_deck) -> None:
    deck, rec = await talked(make_deck, "first words")
    (first,) = await deck.call("ChatService.History", {})
    await deck.call("ChatService.NewConversation", {"agent": "a"})
    await send(deck, "a", "second words")
    await turn_done(rec, "a", 2)
    await deck.call("ChatService.OpenConversation", {"id": first["id"]})
    await deck.shutdown()  # nothing said in it since it was reopened
    again, _rec = make_deck(agent_block("a"))
    await again.startup()
    try:
        assert texts(await again.call("ChatService.Conversation", {"agent": "a"}))[0] == "first words"
        assert [r["title"] for r in await again.call("ChatService.History", {})] == ["first words", "second words"]
    finally:
        await again.shutdown()


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("ChatService.History", {}),
        ("ChatService.Search", {"query": "x"}),
        ("ChatService.OpenConversation", {"id": "x"}),
    ],
)
async def test_with_history_off_the_history_services_say_so(make_deck, method: str, params: dict[str, Any]) -> None:
    deck, _rec = make_deck(OFF + agent_block("a"))
    await deck.startup()
    try:
        with pytest.raises(ServiceError, match=r"^history is off: it is disabled \(\[history\] enabled = false\)"):
            await deck.call(method, params)
    finally:
        await deck.shutdown()


async def test_with_history_off_new_conversation_still_empties_the_conversation(make_deck) -> None:
    deck, _rec = await talked(make_deck, "hello", config=OFF)
    try:
        assert await deck.call("ChatService.NewConversation", {"agent": "a"}) == {"agent": "a"}
        assert (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"] == []
    finally:
        await deck.shutdown()


def test_line_history_search_new_and_open(line_deck) -> None:
    deck = line_deck(agent_block("a"))
    deck.send("@a pineapple please")
    deck.expect(r"\[a\] You said: pineapple please")
    deck.expect(r"\[a\] ready")
    deck.send("/history")
    first = deck.expect(r"\[a\] ([0-9a-f-]{36})  \d{4}-\d\d-\d\d \d\d:\d\d  2 messages  pineapple please").group(1)
    deck.send("/search pineapple")
    found = deck.expect(rf"\[a\] {first}  (user|agent): .*pineapple please")
    assert "**" not in found.group(0)  # the word found is in bold, its marks are not shown
    deck.send("/new")
    deck.expect(r"\[a\] new conversation")
    deck.send("kiwi now")
    deck.expect(r"\[a\] You said: kiwi now")
    deck.expect(r"\[a\] ready")
    deck.send("/history a")
    deck.expect(r"\[a\] [0-9a-f-]{36}  .*  2 messages  kiwi now")
    deck.expect(rf"\[a\] {first}  .*  2 messages  pineapple please")
    deck.send(f"/open {first}")
    deck.expect(rf"\[a\] conversation {first} opened")
    deck.send("/open nope")
    deck.expect(r"\[deck\] no conversation 'nope' in the history of this config")
    deck.send("/help")
    deck.expect(r"\[deck\] /history \[AGENT\] +the stored conversations.*")
    deck.send("/quit")
    assert deck.wait() == 0


def test_line_history_when_history_is_off(line_deck) -> None:
    deck = line_deck(OFF + agent_block("a"))
    deck.send("/history")
    deck.expect(r"\[deck\] history is off: .*")
    deck.send("/search x")
    deck.expect(r"\[deck\] history is off: .*")
    assert deck.close() == 0


async def test_a_conversation_is_not_replaced_while_its_agent_answers(make_deck) -> None:
    deck, rec = await talked(make_deck, "first words")
    try:
        (first,) = await deck.call("ChatService.History", {})
        await deck.call("ChatService.NewConversation", {"agent": "a"})
        await send(deck, "a", "sleep 10")
        await rec.wait(lambda r: len([p for p in r.named("turn:changed", "a") if p["busy"]]) == 2)  # 2nd turn runs
        for method, params in (
            ("ChatService.NewConversation", {"agent": "a"}),
            ("ChatService.OpenConversation", {"id": first["id"]}),
        ):
            with pytest.raises(ServiceError, match="a is answering: cancel its answer first"):
                await deck.call(method, params)
        assert texts(await deck.call("ChatService.Conversation", {"agent": "a"}))[0] == "sleep 10"
        await deck.call("ChatService.Cancel", {"agent": "a"})
    finally:
        await deck.shutdown()
