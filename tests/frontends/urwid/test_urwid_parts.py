"""The console's conversation of a tool's name, a context compaction and an agent's notice, fed
with what a real deck says of the fake agent's (`named-tool`, `compact`, `notice SEVERITY TITLE`)."""

from __future__ import annotations

from typing import Any

import pytest
from deck.events import MessageDelta, MessageUpdated
from deck.frontends.urwid.common import canvas_text
from deck.frontends.urwid.conversation import ConversationView
from deck.frontends.urwid.i18n import Strings

from tests.frontends.urwid.test_urwid_widgets import conversation_text, feed, roster, run_prompts

pytestmark = pytest.mark.anyio


def attr_of(view: ConversationView, words: str, size: tuple[int, int] = (90, 60)) -> Any:
    """The attribute of the first run of the view drawn that reads `words`, exactly."""
    for row in view.render(size).content():
        for attr, _cs, text in row:
            if text.decode().strip() == words:
                return attr
    raise AssertionError(f"{words!r} not drawn")


async def test_a_tools_name_stands_beside_its_title(make_deck):
    _deck, model, _ = await run_prompts(make_deck, ["named-tool"])
    view, text = conversation_text(model, "a")
    assert "⚙ read Read a.txt (fs.read) · completed" in text  # the name its update gave last
    assert attr_of(view, "(fs.read)") == "dim"
    _view, french = conversation_text(model, "a", "fr")
    assert "⚙ lecture Read a.txt (fs.read) · terminé" in french


async def test_a_compaction_is_one_line_as_it_goes_and_as_it_ends(make_deck):
    _deck, failed, _ = await run_prompts(make_deck, ["compact fail"])
    view, text = conversation_text(failed, "a")
    assert "◆ A\n  compaction failed: the model refused\n  compacted\n" in text and "Kept" not in text
    assert attr_of(view, "compaction failed: the model refused") == "error"
    assert "  échec du compactage : the model refused" in conversation_text(failed, "a", "fr")[1]
    _deck, model, events = await run_prompts(make_deck, ["compact"])
    view, text = conversation_text(model, "a")
    assert "◆ A\n  compacted: Kept the plan and the file list.\n  compacted\n" in text and "Dropped the rest" not in text
    assert attr_of(view, "compacted: Kept the plan and the file list.") == "ok"
    # As it began: the first of its updates alone.
    first = next(i for i, e in enumerate(events) if isinstance(e, MessageDelta) and e.kind == "compaction")
    started = roster("a")
    feed(started, events[: first + 1])
    view, text = conversation_text(started, "a")
    assert "  compacting…" in text and "compacted" not in text and attr_of(view, "compacting…") == "dim"
    assert "  compactage…" in conversation_text(started, "a", "fr")[1]
    # Cancelled, as the core words that status.
    (part,) = [p.data for m in started.agents["a"].messages for p in m.parts if p.type == "compaction"]
    message_id = events[first].message_id
    feed(started, [MessageDelta("a", message_id, events[first].index, "compaction", part={**part, "status": "cancelled"})])
    view, text = conversation_text(started, "a")
    assert "  compaction cancelled" in text and "compacting" not in text and attr_of(view, "compaction cancelled") == "warning"


async def test_an_agents_notice_is_drawn_in_its_levels_colour(make_deck):
    prompts = ["notice warning Budget low", "notice error Disk full", "notice info Indexed"]
    _deck, model, _ = await run_prompts(make_deck, prompts)
    view, text = conversation_text(model, "a", size=(90, 80))
    assert "! deck · warning\n  Budget low\n  see the log" in text
    assert "! deck · error\n  Disk full\n  see the log" in text
    assert "! deck · notice\n  Indexed\n  see the log" in text
    assert "Notices" not in text and not model.agents["a"].said  # said once, in the conversation
    assert attr_of(view, "Budget low", (90, 80)) == "warning" and attr_of(view, "warning", (90, 80)) == "warning"
    assert attr_of(view, "! deck", (90, 80)) == "system" and attr_of(view, "see the log", (90, 80)) == "warning"
    assert attr_of(view, "Disk full", (90, 80)) == "error" and attr_of(view, "Indexed", (90, 80)) == "text"
    _view, french = conversation_text(model, "a", "fr", size=(90, 80))
    assert "! deck · avertissement\n  Budget low" in french and "! deck · erreur\n  Disk full" in french


def test_a_notice_of_a_level_the_console_does_not_know_says_it_as_given():
    model = roster("a")
    feed(model, [MessageUpdated("a", {"id": "n1", "role": "system", "code": "notice", "level": "odd", "done": True,
                                      "parts": [{"type": "text", "text": "strange"}]})])  # fmt: skip
    view = ConversationView(Strings("en"))
    view.show(model.agents["a"])
    assert "! deck · odd\n  strange" in canvas_text(view, 60, 10)
