"""Inter-agent asks (SPEC §9): a requester agent calls the real `deck` MCP server, a target answers in its own session."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys

import pytest

from deck.plugins import announcements
from deck.plugins.announcements import bridge

from .conftest import agent_block

pytestmark = pytest.mark.anyio

#: The fake agent's `multi` messages (tests/agents/fake_agent.py MULTI).
PREAMBLE, MIDDLE, CONCLUSION = "Let me look into it.", "Found the file, reading on.", "The answer is 42."


def answers(deck, agent: str) -> list[str]:
    """The text of `agent`'s finished agent messages in its own conversation."""
    return [
        "".join(p["text"] for p in m["parts"] if p["type"] == "text")
        for m in deck.chat.conversation(agent).snapshot()["messages"]
        if m["role"] == "agent" and m["done"]
    ]


def all_conversation_text(deck) -> str:
    return json.dumps({name: conv.snapshot() for name, conv in deck.chat.conversations.items()})


async def turn_done(rec, agent: str, count: int = 1):
    await rec.wait(lambda r: len([p for p in r.named("message:updated", agent) if p["message"]["done"]
                                  and p["message"]["role"] == "agent"]) >= count, timeout=30)


async def test_requester_gets_only_the_final_message_and_the_rest_are_announcements(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    deck.chat.send("a", "ask b multi")
    await turn_done(rec, "a")
    assert answers(deck, "a") == [f"answer: {CONCLUSION}"]
    announced = rec.named("agent:announcement")
    assert [p["text"] for p in announced] == [PREAMBLE, MIDDLE]
    assert {(p["requester"], p["target"]) for p in announced} == {("a", "b")}
    assert len({p["ticketId"] for p in announced}) == 1
    assert all(p["at"].endswith("Z") for p in announced)
    # Announcements are never stored; thoughts are never announced.
    text = all_conversation_text(deck)
    assert PREAMBLE not in text and MIDDLE not in text
    assert not any("pondering" in p["text"] for p in announced)
    # b was busy while it answered, and is ready again.
    assert rec.states("b") == ["starting", "ready", "busy", "ready"]
