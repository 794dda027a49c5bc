"""Subagents in the frontends: line mode names a child's lines `[agent › child]` and a message
between sessions `[agent · sender → recipient]`; a child's permission request says which child asks;
the console nests them (the web page's: tests/frontends/web/test_web_subagents.py, as the browser's
tests run apart from those of an event loop)."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import AGENTS, agent_table
from tests.deck_process import run_deck  # noqa: F401 (a fixture)
from tests.frontends.test_line import line_deck  # noqa: F401  (the fixture)

TOML = agent_table("a", [sys.executable, str(AGENTS / "subagent_agent.py")])


def test_the_jsonl_bridge_carries_a_childs_session_on_its_events(run_deck):  # noqa: F811
    deck = run_deck(TOML)
    deck.call("ChatService.Send", {"agent": "a", "text": "delegate"})
    running = deck.event("subagent:changed", agent="a", state="running")
    assert (running["session"], running["title"], running["cancel"]) == ("c1", "Explore", True)
    delta = deck.event("message:delta", agent="a", session="c1", kind="text")
    assert delta["text"] == "The loader is "
    deck.event("turn:changed", agent="a", busy=False, queued=0)
    parent = [d for d in deck.events("message:delta", agent="a") if d.get("text") == "delegated"]
    assert parent and "session" not in parent[0]
    (child,) = deck.call("ChatService.Conversation", {"agent": "a"})["children"]
    assert (child["session"], child["state"]) == ("c1", "idle")
    deck.close_stdin()
    assert deck.wait(15) == 0


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


def test_line_mode_shows_a_childs_own_state_as_the_agent_says_it(line_deck):  # noqa: F811
    deck = line_deck(TOML)
    deck.send("@a official")
    deck.expect(r"\[a › Review\] subagent: running")
    deck.expect(r"\[a › Review\] subagent: _paused")  # a word of the agent's own: shown as is
    deck.expect(r"\[a\] reviewed")
    assert deck.close() == 0


def test_line_mode_says_which_child_asks_and_answers_it(line_deck):  # noqa: F811
    deck = line_deck(TOML)
    deck.send("@a perm")
    deck.expect(r"\[a › Editor\] permission\? edit main\.py")
    deck.send("/allow")
    deck.expect(r'\[a\] .*"optionId": "ok".*')
    assert deck.close() == 0


async def _console_model(make_deck, prompts):
    from tests.frontends.urwid.test_urwid_widgets import roster

    deck, rec = make_deck(TOML)
    model = roster("a")
    deck.subscribe(model.apply)
    for prompt in prompts:
        count = len(rec.named("turn:changed", "a"))
        deck.chat.send("a", prompt)
        await rec.wait(lambda r, c=count: any(not p["busy"] for p in r.named("turn:changed", "a")[c:]))
    return model


def _drawn(model, fold: str | None = None) -> str:
    from deck.frontends.urwid.common import canvas_text
    from deck.frontends.urwid.conversation import ConversationView
    from deck.frontends.urwid.i18n import Strings

    view = ConversationView(Strings("en"))
    view.renderer.subagents = lambda: model.subagents
    view.show(model.agents["a"])
    if fold == "all":
        view.toggle_all("children")
    elif fold is not None:
        view._fold(fold)
    return canvas_text(view, 90, 80)


@pytest.mark.anyio
async def test_the_console_nests_children_under_their_parent_and_folds_them(make_deck):
    model = await _console_model(make_deck, ["delegate", "nested"])
    text = _drawn(model)
    assert "◆ A · ✉ a → Planner\n  Look for the loader" in text  # c1, renamed Planner by `nested`
    assert "  ▾ A › Planner\n    ∴ thought\n    reading files\n    ⚙ read Read config.py · completed" in text
    assert "◆ A · ✉ Planner → a\n  Found: config.py" in text
    assert "    The loader is in config.py" in text
    assert "    ▾ A › Searcher\n      deep" in text  # a child's child, one step deeper
    folded = _drawn(model, "c1")
    assert "  ▸ A › Planner\n" in folded and "The loader is in config.py" not in folded and "      deep" in folded
    everything = _drawn(model, "all")
    assert "deep" not in everything and "▸ A › Searcher" in everything and "delegated" in everything




def test_the_consoles_request_dialogs_name_the_child_that_asks():
    from deck.frontends.urwid.dialogs import asker

    titles = {"a": "Alpha"}
    assert asker(titles, {"agent": "a", "session": "c1", "subagent": "Editor"}) == "Alpha › Editor"
    assert asker(titles, {"agent": "a", "session": "c1"}) == "Alpha › c1"
    assert asker(titles, {"agent": "a"}) == "Alpha"


def test_the_console_draws_a_childs_messages_again_when_it_is_renamed_only():
    from deck.events import MessageUpdated, SubagentChanged

    from tests.frontends.urwid.test_urwid_widgets import roster

    model = roster("a")
    model.apply(SubagentChanged("a", "s1", "c1", "Explore", "running"))
    model.apply(MessageUpdated("a", {"id": "m1", "agent": "a", "role": "agent", "parts": [], "session": "c1"}))
    model.take_changes()
    model.apply(SubagentChanged("a", "s1", "c1", "Explore", "idle"))  # its state: no head names it
    assert model.take_changes().messages == {}
    model.apply(SubagentChanged("a", "s1", "c1", "Planner", "idle"))
    assert model.take_changes().messages == {"a": {"m1"}}
    assert model.subagents.name("a", "c1") == "Planner"


@pytest.mark.anyio
async def test_messages_between_sessions_past_what_is_kept_open_lose_nothing(make_deck):
    """1,100 messages between sessions: each kept whole in the conversation, while the conversation and
    line mode keep at most their caps of them open to more chunks."""
    import asyncio
    import os

    from deck.chat.conversation import MAX_BETWEEN
    from deck.runtime.local import LocalClient
    from deck.frontends.line import BETWEEN_KEPT, LineFrontend

    from tests.turns import ask

    deck, rec = make_deck(TOML)
    stdin_read, stdin_write = os.pipe()
    out_read, out_write = os.pipe()
    frontend = LineFrontend(LocalClient(deck), stdin_fd=stdin_read, stdout_fd=out_write)
    running = asyncio.create_task(frontend.run())
    drained = asyncio.get_running_loop().run_in_executor(None, lambda: b"".join(iter(lambda: os.read(out_read, 65536), b"")))
    try:
        await ask(deck, rec, "between 1100")
        conv = deck.chat.conversation("a")
        notes = [m.text for m in conv.messages if m.sender == "c1"]
        assert len(notes) == 1100 and notes[-1] == "note 1099"
        assert len(conv._between) == MAX_BETWEEN and len(frontend._between) == BETWEEN_KEPT
    finally:
        os.close(stdin_write)
        await running
        os.close(out_write)
        shown = (await drained).decode()
    assert "[a · Chatty → a] note 1099" in shown
