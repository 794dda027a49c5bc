"""The console's history view (F8), rendered to text on urwid canvases, on a real deck with the fake
agent and a real history database: the agent's past conversations, a search over every agent's
as the user types, Enter to reopen one, Esc to close; history off says so."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from deck.frontends.urwid.app import ConsoleApp
from deck.frontends.urwid.common import canvas_text
from deck.frontends.urwid.history import search_words, snippet_markup

from tests.conftest import agent_block
from tests.frontends.urwid.test_urwid_widgets import console
from tests.plugins.history.test_history import send, turn_done

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SIZE = (120, 40)


async def settled(app: ConsoleApp) -> str:
    """The screen once the service calls the console made are answered."""
    while app._tasks:
        await asyncio.gather(*list(app._tasks))
    app.refresh()
    return canvas_text(app.root, *SIZE)


async def shown(app: ConsoleApp) -> str:
    """The history view alone, once its service calls are answered."""
    await settled(app)
    assert app.dialog_kind == "history"
    return canvas_text(app.shown_dialog, 100, 30)


def type_keys(app: ConsoleApp, text: str) -> None:
    for key in text:
        app.root.keypress(SIZE, key)


async def two_conversations(make_deck: Any, config: str = "") -> tuple[Any, Any]:
    """A deck whose agent `a` had a conversation about pineapples, then a new one about kiwis; `b` one about figs."""
    deck, rec = make_deck(config + agent_block("a") + agent_block("b"))
    await deck.startup()
    await send(deck, "a", "pineapple please")
    await turn_done(rec, "a", 1)
    await deck.call("ChatService.NewConversation", {"agent": "a"})
    await send(deck, "a", "kiwi time")
    await turn_done(rec, "a", 2)
    await send(deck, "b", "figs\x1b[2J for b")
    await turn_done(rec, "b", 1)
    return deck, rec


async def test_f8_lists_the_agents_conversations_searches_every_agent_and_reopens_one(make_deck) -> None:
    deck, _rec = await two_conversations(make_deck)
    app = await console(deck)
    try:
        app.root.keypress(SIZE, "f8")
        screen = await shown(app)
        assert "History of a" in screen
        rows = [line for line in screen.split("\n") if "2 messages" in line]
        assert "kiwi time" in rows[0] and "pineapple please" in rows[1]  # newest first, the agent's own only
        assert "figs" not in screen

        type_keys(app, "fig")  # every agent's, as it is typed: the last word a prefix
        screen = await shown(app)
        assert "b · " in screen and "figs␛[2J for b" in screen and "kiwi" not in screen
        drawn = b"".join(seg for row in app.root.render(SIZE).content() for _a, _c, seg in row)
        assert b"\x1b" not in drawn  # the snippet is made printable

        for _ in "fig":
            app.root.keypress(SIZE, "backspace")
        type_keys(app, "pinea")
        app.root.keypress(SIZE, "enter")  # before the hits come: the list shown is the last question's
        assert app.dialog_kind == "history"
        screen = await shown(app)
        assert "pineapple please" in screen and "kiwi" not in screen
        app.root.keypress(SIZE, "down")  # into the list, then Enter reopens the hit
        app.root.keypress(SIZE, "enter")
        screen = await settled(app)
        assert app.dialog_kind == "" and app.selected == "a"
        assert "pineapple please" in screen and "kiwi time" not in screen
        assert "reopened a conversation of a" in screen
        current = await deck.call("ChatService.Conversation", {"agent": "a"})
        assert current["messages"][0]["parts"][0]["text"] == "pineapple please"

        app.root.keypress(SIZE, "f8")
        type_keys(app, "nothing-like-this")
        assert "(nothing found)" in await shown(app)
        app.root.keypress(SIZE, "esc")  # closes the view, and cancels nothing
        assert app.dialog_kind == "" and "History of" not in canvas_text(app.root, *SIZE)
    finally:
        app.detach()
        await deck.shutdown()


async def test_the_history_view_says_history_is_off_when_it_is(make_deck) -> None:
    deck, rec = make_deck("[history]\nenabled = false\n" + agent_block("a"))
    await deck.startup()
    app = await console(deck)
    try:
        app.root.keypress(SIZE, "f8")
        screen = await shown(app)
        assert "History of a" in screen and "history is off: it is disabled" in screen
        type_keys(app, "words")
        assert "history is off" in await shown(app)
    finally:
        app.detach()
        await deck.shutdown()


async def test_the_history_view_in_french_and_its_hint(make_deck) -> None:
    deck, _rec = make_deck('language = "fr"\n' + agent_block("a"))
    await deck.startup()
    app = await console(deck)
    try:
        assert "F8 historique" in canvas_text(app.root, 160, 30).split("\n")[-1]
        app.root.keypress(SIZE, "f8")
        screen = await shown(app)
        assert "Historique de a" in screen and "Chercher chez tous les agents :" in screen
        assert "(aucune conversation passée de a)" in screen
    finally:
        app.detach()
        await deck.shutdown()


def test_snippets_keep_one_line_with_the_words_found_in_bold_and_typing_searches_a_prefix() -> None:
    assert snippet_markup("the **pine**apple\nis\tripe **here**") == [
        "the ", ("strong", "pine"), "apple is ripe ", ("strong", "here"), ""]  # fmt: skip
    assert (search_words("pinea"), search_words("pinea "), search_words("  "), search_words("a-")) == ("pinea*", "pinea", "", "a-")


# -- end to end: `deck run --frontend=urwid` in tmux --------------------------------------------------


def test_the_console_history_view_end_to_end(tmp_path, monkeypatch) -> None:
    """Two stored conversations of alpha (the latest is shown at start); F8, a search, Enter reopens the other."""
    from deck.chat.conversation import Conversation as Messages
    from deck.plugins.history.recorder import config_key
    from deck.plugins.history.store import HistoryStore

    from tests.frontends.urwid.test_urwid_e2e import Console

    config = tmp_path / "deck.toml"
    config.write_text(agent_block("alpha"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the console's state folder
    with HistoryStore() as store:
        for words in ("pineapple please", "kiwi time"):
            earlier = Messages("alpha", lambda _event: None)
            earlier.add_user(words, queued=False)
            earlier.add_system("agent-unavailable", error="it was a test")
            cid = store.new_conversation(config_key(config), "alpha", None, words)
            store.put_messages(cid, [m.to_dict() for m in earlier.messages])
    c = Console(tmp_path, config, cols=140)  # wide enough for every hint, F8's the first left out
    try:
        screen = c.wait("Message to alpha")
        assert "kiwi time" in screen and "F8 history" in screen
        c.keys("F8")
        c.wait(lambda s: "History of alpha" in s and "pineapple please" in s and "2 messages" in s)
        c.type("pinea")
        c.wait(lambda s: "pineapple" in s.split("History of alpha")[1] and "kiwi" not in s.split("History of alpha")[1])
        c.keys("Enter")  # the first hit, from the search field
        c.wait(lambda s: "reopened a conversation of alpha" in s and "pineapple please" in s and "kiwi time" not in s
               and "History of" not in s)  # fmt: skip
        c.keys("F8")
        c.wait("History of alpha")
        c.keys("Escape")
        c.wait(lambda s: "History of" not in s)
        c.keys("C-q")
        c.wait("DECK-EXITED-0")
    finally:
        c.close()
