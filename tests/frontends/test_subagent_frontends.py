"""Subagents in the frontends: line mode names a child's lines `[agent › child]` and a message
between sessions `[agent · sender → recipient]`; a child's permission request says which child asks."""

from __future__ import annotations

import sys

from tests.conftest import AGENTS, agent_table
from tests.frontends.test_line import line_deck  # noqa: F401  (the fixture)

TOML = agent_table("a", [sys.executable, str(AGENTS / "subagent_agent.py")])


def test_line_mode_nests_a_childs_lines_under_its_agent(line_deck):  # noqa: F811
    deck = line_deck(TOML)
    deck.send("@a delegate")
    deck.expect(r"\[a › Explore\] subagent: running")
    deck.expect(r"\[a · a → Explore\] Look for the loader")
    deck.expect(r"\[a › Explore\] thinking: reading files")
    deck.expect(r"\[a › Explore\] Read config\.py \[completed\]")
    deck.expect(r"\[a › Explore\] The loader is in config\.py")
    deck.expect(r"\[a › Explore\] subagent: idle")
    deck.expect(r"\[a\] delegated")
    deck.expect(r"\[a · Explore → a\] Found: config\.py")  # a line without its end: shown as the turn ends
    deck.send("@a nested")
    deck.expect(r"\[a › Searcher\] deep")
    assert deck.close() == 0


def test_line_mode_says_which_child_asks_and_answers_it(line_deck):  # noqa: F811
    deck = line_deck(TOML)
    deck.send("@a perm")
    deck.expect(r"\[a › Editor\] permission\? edit main\.py")
    deck.send("/allow")
    deck.expect(r'\[a\] .*"optionId": "ok".*')
    assert deck.close() == 0
