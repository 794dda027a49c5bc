"""deck-stopwatch's own tests, with deck.testing's make_deck fixture and deck's demo agent."""

from __future__ import annotations

import pytest

from deck.testing import demo_agent

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_slow_turn_is_said_and_every_turn_is_listed(make_deck):
    deck, rec = make_deck("[stopwatch]\nslow = 0\n" + demo_agent("demo"))
    assert deck.pm.has_plugin("stopwatch")
    assert [a["name"] for a in await deck.call("DeckService.Actions", {}) if a["source"] == "stopwatch"] == ["turns"]
    deck.chat.send("demo", "echo hi")
    notice = await rec.wait_event("deck:notice", source="stopwatch")
    assert notice["agent"] == "demo" and notice["text"].startswith("turn 1 took ")
    [turn] = await deck.call("StopwatchService.Turns", {"agent": "demo"})
    assert turn["agent"] == "demo" and turn["turn"] == 1 and turn["seconds"] >= 0
