"""Subagents in the history: a child's messages are kept in its parent's conversation, linked by their
`session`, with the children themselves; search finds a child's words; the Markdown export nests them
under the parent; the next deck restores the children with the conversation."""

from __future__ import annotations

import sys

import pytest
from deck.plugins.history.cli import to_markdown

from tests.conftest import AGENTS, agent_table
from tests.turns import ask

pytestmark = [pytest.mark.timeout(60)]

TOML = agent_table("a", [sys.executable, str(AGENTS / "subagent_agent.py")])


@pytest.mark.anyio
async def test_the_history_keeps_children_linked_to_their_parent_and_the_next_deck_restores_them(make_deck):
    deck, rec = make_deck(TOML)
    await deck.startup()
    await ask(deck, rec, "delegate")
    await ask(deck, rec, "nested")
    await deck.shutdown()

    deck, rec = make_deck(TOML)
    await deck.startup()
    (row,) = await deck.call("ChatService.History", {"agent": "a"})
    stored = await deck.chat.history.get(row["id"])
    parents = {c["session"]: c["parent"] for c in stored["children"]}
    assert parents == {"c1": stored["sessionId"], "c2": "c1"}
    child_texts = [m for m in stored["messages"] if m.get("session") == "c1" and not m.get("sender")]
    assert "The loader is in config.py" in [p.get("text") for m in child_texts for p in m["parts"]]
    # The next deck shows the conversation with its children, their work over.
    restored = await deck.call("ChatService.Conversation", {"agent": "a"})
    assert {c["session"]: c["state"] for c in restored["children"]} == {"c1": "idle", "c2": None}
    assert any(m.get("session") == "c2" for m in restored["messages"])
    # Search finds a child's words.
    found = await deck.call("ChatService.Search", {"query": "loader"})
    assert any(hit["conversationId"] == row["id"] for hit in found)
    # The export nests them: the tree of subagents, each child's message under its parent's name.
    text = to_markdown(stored)
    assert "- Subagents:\n  - Planner (c1) · idle\n    - Searcher (c2) · unknown\n" in text  # c1 renamed by `nested`
    assert "## Agent › Planner ·" in text and "## Agent › Searcher ·" in text
    assert "## Agent · message a → Planner ·" in text and "## Agent · message Planner → a ·" in text


@pytest.mark.anyio
async def test_the_next_deck_restores_where_a_child_worked_and_its_own_state(make_deck):
    deck, rec = make_deck(TOML)
    await deck.startup()
    await ask(deck, rec, "official")
    await deck.shutdown()

    deck, rec = make_deck(TOML)
    await deck.startup()
    restored = await deck.call("ChatService.Conversation", {"agent": "a"})
    (child,) = restored["children"]
    assert (child["state"], child["stopReason"], child["cwd"]) == ("_paused", "_waiting", "/work/app")
    assert "additionalDirectories" not in child  # the agent cleared them
    compactions = [p for m in restored["messages"] if m.get("session") == "c1" for p in m["parts"] if p["type"] == "compaction"]
    assert [(p["id"], p["status"], p["summary"]) for p in compactions] == [("k1", "completed", "kept: the diff")]
