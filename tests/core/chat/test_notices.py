"""An agent's notices (the `notice` session update), against a real fake agent: a note in the
conversation with its severity, a `deck:notice` of source "agent", kept by the history, shown once
by line mode."""

from __future__ import annotations

import json
import pytest

from tests.conftest import agent_block
from tests.frontends.test_line import line_deck  # noqa: F401  (the fixture)
from tests.plugins.history.test_history import send, turn_done
from tests.turns import ask

pytestmark = [pytest.mark.timeout(60), pytest.mark.anyio]


def notes(deck) -> list[dict]:
    return [m.to_dict() for m in deck.chat.conversation("a").messages if m.code == "notice"]


async def test_a_notice_becomes_a_note_with_its_severity_and_a_deck_notice(make_deck, tmp_path):
    requests = tmp_path / "requests.jsonl"
    deck, rec = make_deck(agent_block("a", "--requests", str(requests)))
    reply = await ask(deck, rec, "notice warning Rate limit close")
    init = json.loads(requests.read_text().splitlines()[0])  # ACP v1: notices go to a client that opts in
    assert init["method"] == "initialize" and init["params"]["clientCapabilities"]["session"]["notices"] == {}
    assert reply.text == "noted"
    (note,) = notes(deck)
    assert (note["role"], note["code"], note["level"]) == ("system", "notice", "warning")
    assert note["parts"] == [{"type": "text", "text": "Rate limit close\nsee the log"}]
    assert all(p.get("text") != "Rate limit close" for p in reply.to_dict()["parts"])  # not the agent's own text
    notice = await rec.wait_event("deck:notice", source="agent")
    assert notice == {"source": "agent", "level": "warning", "text": "Rate limit close\nsee the log", "agent": "a", "sticky": False}


async def test_an_unknown_severity_is_kept_shown_plainly_and_a_long_title_is_cut(make_deck):
    """ACP: an unknown severity is kept as it is, with no salience read into it (`deck:notice` says info)."""
    deck, rec = make_deck(agent_block("a"))
    await ask(deck, rec, "notice _custom " + "x" * 5000)
    (note,) = notes(deck)
    assert note["level"] == "_custom"
    assert note["parts"][0]["text"] == "x" * 500 + "\nsee the log"
    assert rec.named("deck:notice")[-1]["level"] == "info"


async def test_the_history_keeps_a_notice(make_deck):
    deck, rec = make_deck(agent_block("a"))
    await deck.startup()
    try:
        await send(deck, "a", "notice error Quota exceeded")
        await turn_done(rec, "a")
        (row,) = await deck.call("ChatService.History", {"agent": "a"})
        stored = await deck.chat.history.get(row["id"])
        (note,) = [m for m in stored["messages"] if m.get("code") == "notice"]
        assert note["level"] == "error" and note["parts"][0]["text"] == "Quota exceeded\nsee the log"
    finally:
        await deck.shutdown()


def test_line_mode_shows_a_notice_once(line_deck):  # noqa: F811
    deck = line_deck(agent_block("a"))
    deck.send("@a notice warning Disk \x1b[31malmost full")
    deck.expect(r"\[a\] warning: Disk .*almost full")
    deck.expect(r"\[a\] see the log")
    deck.expect(r"\[a\] noted")
    assert deck.close() == 0
    assert len([line for line in deck.lines if "almost full" in line and not line.startswith("[a] >")]) == 1
    assert len([line for line in deck.lines if "see the log" in line]) == 1
    assert b"\x1b[31m" not in deck.output
