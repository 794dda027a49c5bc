"""A tool call's programmatic `name` (ACP ToolCall.name), against a real fake agent: kept on the
tool part, changed by an update, shown beside the title by line mode."""

from __future__ import annotations

import pytest
from deck.acp.updates import tool_part

from tests.conftest import agent_block
from tests.frontends.test_line import line_deck  # noqa: F401  (the fixture)
from tests.turns import ask

pytestmark = [pytest.mark.timeout(60)]


@pytest.mark.anyio
async def test_the_tool_part_keeps_the_name_and_its_update(make_deck):
    deck, rec = make_deck(agent_block("a"))
    reply = await ask(deck, rec, "named-tool")
    (tool,) = [p.to_dict() for p in reply.parts if p.type == "tool"]
    assert (tool["title"], tool["name"], tool["status"]) == ("Read a.txt", "fs.read", "completed")
    sent = [d["part"]["name"] for d in rec.named("message:delta") if d["kind"] == "tool"]
    assert sent == ["read_file", "fs.read"]


def test_a_name_that_is_no_string_or_null_leaves_the_name_it_had():
    part = tool_part({"toolCallId": "t", "title": "x", "name": "grep"})
    assert tool_part({"toolCallId": "t", "name": None}, part)["name"] == "grep"
    assert tool_part({"toolCallId": "t", "name": 7}, part)["name"] == "grep"
    assert "name" not in tool_part({"toolCallId": "t", "title": "x"})
    assert len(tool_part({"toolCallId": "t", "name": "n" * 1000})["name"]) == 200
    assert tool_part({"toolCallId": "t", "name": ""}, part)["name"] == ""  # a string sets it, "" too


def test_switch_mode_is_a_tool_kind_of_its_own():
    assert tool_part({"toolCallId": "t", "kind": "switch_mode"})["kind"] == "switch_mode"
    assert tool_part({"toolCallId": "t", "kind": "teleport"})["kind"] == "other"


def test_line_mode_shows_the_name_beside_the_title(line_deck):  # noqa: F811
    deck = line_deck(agent_block("a"))
    deck.send("@a named-tool")
    deck.expect(r"\[a\] Read a\.txt \(read_file\) \[pending\]")
    deck.expect(r"\[a\] Read a\.txt \(fs\.read\) \[completed\]")
    assert deck.close() == 0
