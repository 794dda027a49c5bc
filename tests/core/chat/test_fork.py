"""`session/fork` (unstable), against a real fake agent: ChatService.Fork makes a new conversation,
a copy of the current one served by the forked session; refused for an agent that does not offer
it; kept by the history; `/fork` in line mode."""

from __future__ import annotations

import pytest
from deck.errors import ServiceError

from tests.conftest import agent_block, agent_table
from tests.core.chat.test_subagents import SUBAGENT_AGENT
from tests.frontends.test_line import line_deck  # noqa: F401  (the fixture)
from tests.plugins.history.test_history import send, turn_done
from tests.turns import ask

pytestmark = [pytest.mark.timeout(60)]


def texts(messages) -> list[tuple[str, str]]:
    return [(m["role"], "".join(p.get("text", "") for p in m["parts"])) for m in messages]


@pytest.mark.anyio
async def test_fork_copies_the_conversation_into_the_forked_session(make_deck):
    deck, rec = make_deck(agent_block("a", "--fork"))
    await deck.startup()
    try:
        await send(deck, "a", "first words")
        await turn_done(rec, "a")
        before = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
        old = deck.agents["a"].session_id
        result = await deck.call("ChatService.Fork", {"agent": "a"})
        assert result["forkedFrom"] == old and result["sessionId"].endswith(f"-of-{old}")
        assert result["conversationId"] and deck.chat.conversation("a").session_id == result["sessionId"]
        after = (await deck.call("ChatService.Conversation", {"agent": "a"}))["messages"]
        assert texts(after) == texts(before) == [("user", "first words"), ("agent", "You said: first words")]
        assert {m["id"] for m in after}.isdisjoint(m["id"] for m in before)
        assert rec.named("conversation:reset", "a")[-1] == {"agent": "a", "conversationId": result["conversationId"]}
        await send(deck, "a", "whoami")  # the next prompt goes to the forked session
        await turn_done(rec, "a", 2)
        assert deck.chat.conversation("a").messages[-1].text == f"session {result['sessionId']}"
        rows = await deck.call("ChatService.History", {"agent": "a"})
        assert len(rows) == 2 and rows[0]["id"] == result["conversationId"]
        stored = await deck.chat.history.get(result["conversationId"])
        assert stored["sessionId"] == result["sessionId"]
        assert texts(stored["messages"])[:2] == texts(before)
        assert len(stored["messages"]) == 4
    finally:
        await deck.shutdown()


@pytest.mark.anyio
async def test_fork_is_refused_when_the_agent_does_not_offer_it(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await ask(deck, rec, "hello")
    with pytest.raises(ServiceError, match="cannot fork its session: its initialize answer has no sessionCapabilities.fork"):
        await deck.call("ChatService.Fork", {"agent": "a"})
    assert [m.text for m in deck.chat.conversation("a").messages] == ["hello", "You said: hello"]


@pytest.mark.anyio
async def test_hostile_fork_answer_naming_an_open_session_or_too_long_is_refused_and_changes_nothing(make_deck):
    deck, rec = make_deck(agent_table("a", SUBAGENT_AGENT))
    await ask(deck, rec, "forkas child")  # the child "c1" is announced, its session open
    agent = deck.agents["a"]
    parent, routed = agent.session_id, dict(agent.sessions)
    refusals = (("parent", "the id of a session open already"), ("child", "the id of a session open already"),
                ("huge", "a sessionId of 5000000 characters: deck takes 200 at most"))  # fmt: skip
    for answer, why in refusals:
        await ask(deck, rec, f"forkas {answer}")
        with pytest.raises(ServiceError, match=why):
            await deck.call("ChatService.Fork", {"agent": "a"})
        assert agent.session_id == deck.chat.conversation("a").session_id == parent
        assert agent.sessions == routed  # the child's updates still go to the child
    await ask(deck, rec, "forkas fresh")
    assert (await deck.call("ChatService.Fork", {"agent": "a"}))["sessionId"] == "f1"


@pytest.mark.anyio
async def test_hostile_session_new_answer_of_five_megabytes_fails_the_start(make_deck):
    deck, rec = make_deck(agent_table("a", [*SUBAGENT_AGENT, "--new-id", "huge"]))
    await deck.startup()
    with pytest.raises(ServiceError, match="session/new returned a sessionId of 5000000 characters"):
        await deck.call("AgentService.Start", {"name": "a"})
    assert deck.agents["a"].session_id is None


def test_line_mode_forks_with_slash_fork(line_deck):  # noqa: F811
    deck = line_deck(agent_block("a", "--fork"))
    deck.send("@a hello")
    deck.expect(r"\[a\] You said: hello")
    deck.send("/fork")
    deck.expect(r"\[a\] forked session s\d+ as fork\d+-of-s\d+")
    deck.send("whoami")
    deck.expect(r"\[a\] session fork\d+-of-s\d+")
    assert deck.close() == 0


def test_line_mode_says_why_a_fork_is_refused(line_deck):  # noqa: F811
    deck = line_deck(agent_block("a"))
    deck.send("/fork a")
    deck.expect(r"\[a\] a cannot fork its session: .*sessionCapabilities\.fork")
    assert deck.close() == 0
