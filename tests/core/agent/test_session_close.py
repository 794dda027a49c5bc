"""`session/close`: deck closes a session it leaves for good (a new conversation, another opened, the agent
removed from the config) when the agent lists `sessionCapabilities.close`, and sends nothing to one that
does not. Real fake agents; what deck sent read back from their --requests file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import agent_block

pytestmark = pytest.mark.anyio


async def turn(deck, rec, text: str) -> None:
    """`text` sent to a, its turn waited for (in whichever conversation is a's now)."""
    before = len([t for t in rec.named("turn:changed", "a") if not t["busy"]])
    await deck.call("ChatService.Send", {"agent": "a", "text": text})
    await rec.wait(lambda r: len([t for t in r.named("turn:changed", "a") if not t["busy"]]) > before)


def sent(requests: Path, method: str) -> list[dict]:
    return [r["params"] for r in map(json.loads, requests.read_text().splitlines()) if r["method"] == method]


async def test_a_new_conversation_closes_the_session_it_leaves(make_deck, tmp_path):
    requests = tmp_path / "requests.jsonl"
    deck, rec = make_deck(agent_block("a", "--close", "--requests", str(requests)))
    await turn(deck, rec, "hello")
    [first] = [p["sessionId"] for p in sent(requests, "session/prompt")]
    await deck.call("ChatService.NewConversation", {"agent": "a"})
    assert sent(requests, "session/close") == [{"sessionId": first}]
    await turn(deck, rec, "again")
    assert len(sent(requests, "session/new")) == 2  # a new session serves the new conversation
    assert sent(requests, "session/close") == [{"sessionId": first}]  # and stays open


async def test_an_agent_that_does_not_list_close_is_sent_none(make_deck, tmp_path):
    requests = tmp_path / "requests.jsonl"
    deck, rec = make_deck(agent_block("a", "--requests", str(requests)))
    await turn(deck, rec, "hello")
    await deck.call("ChatService.NewConversation", {"agent": "a"})
    await turn(deck, rec, "again")
    assert sent(requests, "session/close") == []
    assert not any("session/close" in line for line in deck.agent("a").logs)


async def test_an_agent_removed_from_the_config_has_its_session_closed_then_stops(make_deck, tmp_path):
    requests = tmp_path / "requests.jsonl"
    deck, rec = make_deck(agent_block("a", "--close", "--requests", str(requests)) + agent_block("b"))
    await turn(deck, rec, "hello")
    session = sent(requests, "session/prompt")[0]["sessionId"]
    assert (await deck.call("ConfigService.Save", {"text": agent_block("b")}))["saved"]
    await rec.wait(lambda r: "a" not in deck.agents, timeout=20)
    await rec.wait_event("agent:state", agent="a", state="stopped")
    assert sent(requests, "session/close") == [{"sessionId": session}]


async def test_a_close_refused_is_logged_and_the_stop_goes_on(make_deck, tmp_path):
    """An agent that lists close but answers it with an error: the log says so, the new conversation comes all the same."""
    deck, rec = make_deck(agent_block("a", "--close", "--refuse-close"))
    await turn(deck, rec, "hello")
    assert await deck.call("ChatService.NewConversation", {"agent": "a"}) == {"agent": "a"}
    assert any("session/close of" in line and "failed" in line for line in deck.agent("a").logs)
