"""The console's widgets rendered to text (urwid canvases, no terminal), fed with real event payloads.

Most payloads come from a real deck driving the fake agent; the rest are built with the
core's own event classes, so a change of wire format breaks these tests too.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import urwid
from deck.agent.agent import LOG_LINES
from deck.events import (
    AgentLog,
    AgentStateChanged,
    MessageDelta,
    MessageUpdated,
    Notice,
    PermissionRequested,
    QuestionRequested,
    TurnChanged,
    UnknownEvent,
    UsageChanged,
    from_wire,
)
from deck.frontends.urwid import app as console_app
from deck.frontends.urwid import markdown
from deck.frontends.urwid.agents import AgentsPanel
from deck.frontends.urwid.app import FPS, HINTS, KEYS, WORKTREE_ACTIONS, ConsoleApp, panel_width
from deck.frontends.urwid.common import Binding, canvas_text, keys_label
from deck.frontends.urwid.conversation import ConversationView
from deck.frontends.urwid.dialogs import PERMISSION_KEYS, QUESTION_KEYS, PermissionDialog, QuestionDialog
from deck.frontends.urwid.i18n import Strings
from deck.frontends.urwid.model import LOG_LINES as CONSOLE_LOG_LINES
from deck.frontends.urwid.model import Model
from deck.frontends.urwid.views import LogsView
from deck.plugins.announcements.events import AskChanged
from deck.plugins.worktrees.events import WorktreeChanged, WorktreeOverlap
from deck.runtime.local import LocalClient
from deck.testing import agent_table

from tests.conftest import AGENTS, agent_block
from tests.core.runtime.test_diffs import DIFF_PATH, HOSTILE_LINES, diff_agent, forget_comparisons, timed

pytestmark = pytest.mark.anyio


def feed(model: Model, events: list) -> None:
    for event in events:
        model.apply(event)


async def console(deck) -> ConsoleApp:
    """The console of `deck`, following its events (the caller detaches it)."""
    client = LocalClient(deck)
    app = ConsoleApp(client, await client.call("ConfigService.Current"))
    await app.attach(asyncio.get_running_loop())
    return app


def roster(*names: str) -> Model:
    model = Model()
    model.set_roster([{"name": n, "title": n.title(), "icon": n[0].upper(), "state": "stopped"} for n in names])
    model.take_changes()
    return model


def panel_text(model: Model, language: str = "en", frame: int = 0, width: int = 34, height: int = 20) -> str:
    panel = AgentsPanel(Strings(language), lambda name: None, lambda action: None)
    panel.set_roster(list(model.agents))
    for number, agent in enumerate(model.agents.values(), 1):
        panel.update(agent, number, number == 1, frame)
    return canvas_text(panel, width, height)


def conversation_text(model: Model, agent: str, language: str = "en", size: tuple[int, int] = (90, 60)) -> tuple[ConversationView, str]:
    view = ConversationView(Strings(language))
    view.show(model.agents[agent])
    return view, canvas_text(view, *size)


# -- Markdown ------------------------------------------------------------------------------------


def test_markdown_blocks_split_at_paragraphs_fences_and_length():
    text = "# Title\n\nsome **bold** and `code`\n\n```py\nx = 1\n\ny = 2\n```\n- item\n" + "word " * 1000
    pieces = markdown.blocks(text)
    assert pieces[0] == ("# Title", False, False)
    assert pieces[1] == ("some **bold** and `code`", False, True)
    assert pieces[2] == ("```py\nx = 1\n\ny = 2\n```", True, True)  # a blank line inside code stays inside
    assert all(len(p[0]) <= markdown.MAX_BLOCK for p in pieces)
    assert "".join(p[0] for p in pieces[3:]).startswith("- item\nword word")
    markup = markdown.render("some **bold** and `code` and [docs](https://x.y)", False)
    assert ("strong", "bold") in markup and ("code", "code") in markup and ("link", "docs") in markup
    assert markdown.render("- item", False)[0] == ("text", "• ")
    assert markdown.render("```py\nx = 1\n```", True) == [("code", "x = 1")]


# -- agents panel --------------------------------------------------------------------------------


def test_agents_panel_states_marks_and_gauge_in_english():
    model = roster("alpha", "beta", "gamma")
    feed(model, [
        AgentStateChanged("alpha", "starting", False),
        AgentStateChanged("beta", "busy", True),
        TurnChanged("beta", True, 2),
        UsageChanged("beta", {"used": 50000, "size": 200000}),
        AgentStateChanged("gamma", "error", False, "start failed: exit 3\nfatal: missing API key"),
    ])  # fmt: skip
    model.apply(PermissionRequested("perm-1", "beta", "", {}, [], 0))
    text = panel_text(model, frame=0)
    assert "1 A Alpha" in text and "⠋ starting…" in text
    assert "│   busy ⠋" in text and "│   ! needs input" in text
    assert "⟳ restart to apply changes" in text
    assert "ctx ██░░░░░░░░ 25%" in text and "cost unknown (not counted)" in text  # never 0
    assert "error" in text and "start failed: exit 3" in text and "missing API key" not in text
    assert "⠙ starting…" in panel_text(model, frame=1)  # the spinner turns


def test_agents_panel_in_french():
    model = roster("alpha", "beta")
    feed(model, [AgentStateChanged("alpha", "ready", True), AgentStateChanged("beta", "stopped", False),
                 UsageChanged("alpha", {"used": 1500, "size": 0, "cost": {"amount": 1.5, "currency": "EUR"}})])  # fmt: skip
    model.apply(PermissionRequested("perm-1", "alpha", "", {}, [], 0))
    text = panel_text(model, "fr")
    assert "coût 1.50 EUR" in text
    assert "prêt" in text and "arrêté" in text and "à redémarrer" in text and "attend une réponse" in text
    assert "ctx 1.5k" in text
    assert "▶ démarrer" in text and "■ arrêter" in text and "↻ redémarrer" in text


# -- conversation, from a real deck --------------------------------------------------------------


async def run_prompts(make_deck, prompts: list[str], flags: tuple[str, ...] = ()) -> tuple[object, Model, list]:
    deck, rec = make_deck(agent_block("a", *flags))
    model = roster("a")
    deck.subscribe(model.apply)
    for prompt in prompts:
        deck.chat.send("a", prompt)
        count = len(rec.named("turn:changed", "a"))
        if prompt == "perm":
            request = await rec.wait_event("permission:requested", agent="a")
            deck.chat.answer_permission(request["id"], "yes")
        await rec.wait(lambda r, c=count: any(not p["busy"] for p in r.named("turn:changed", "a")[c:]))
    return deck, model, rec.events


async def test_conversation_shows_thoughts_plan_tool_and_diff(make_deck):
    deck, model, _ = await run_prompts(make_deck, ["thought", "plan", "perm"])
    view, text = conversation_text(model, "a")
    assert text.count("▸ you") == 3 and "◆ A" in text
    assert "∴ thought\n  thinking\n  answer\n  ∴ thought\n   more thinking" in text  # dimmed, in stream order
    assert "Plan\n  [x] one" in text
    assert "⚙ edit Edit file · completed" in text and '{"path":"/x"}' in text
    assert "diff /x (+1 −1) · Ctrl-E to show" in text and "permission: yes" in text
    assert "+b" not in text
    view.toggle_all("diffs")
    text = canvas_text(view, 90, 60)
    assert "--- a/x" in text and "-a" in text and "+b" in text
    view.toggle_all("thoughts")
    text = canvas_text(view, 90, 60)
    assert "∴ thought (1 line, Ctrl-T to show)" in text and "thinking" not in text.replace("thinking (", "")


async def test_a_diff_made_to_stall_difflib_renders_at_once_hidden_or_shown(make_deck, tmp_path):
    """The hostile diff (tests/core/runtime/test_diffs.py) from a real agent: difflib took 3.9 s per render of it."""
    deck, rec = make_deck(diff_agent(tmp_path, updates=1))
    model = roster("a")
    deck.subscribe(model.apply)
    deck.chat.send("a", "rewrite")
    await rec.wait(lambda r: any(not p["busy"] for p in r.named("turn:changed", "a")))
    shown = f"diff {DIFF_PATH} ({HOSTILE_LINES} → {HOSTILE_LINES} lines, too large to compare)"
    forget_comparisons()
    (view, text), took = timed(conversation_text, model, "a", size=(120, 40))
    assert took < 0.5 and shown in text and "after" in text
    view.toggle_all("diffs")
    text, took = timed(canvas_text, view, 120, 40)
    assert took < 0.5 and shown in text
    french, took = timed(conversation_text, model, "a", "fr", size=(120, 40))
    assert took < 0.5 and f"diff {DIFF_PATH} ({HOSTILE_LINES} → {HOSTILE_LINES} lignes, trop grand pour être comparé)" in french[1]


async def test_conversation_thought_collapses_by_click(make_deck):
    deck, model, _ = await run_prompts(make_deck, ["thought"])
    view, text = conversation_text(model, "a")
    assert "  thinking" in text
    rows = text.split("\n")
    header = rows.index("  ∴ thought")
    view.mouse_event((90, 60), "mouse press", 1, 4, header, True)
    assert "  thinking" not in canvas_text(view, 90, 60)


async def test_streamed_deltas_equal_the_final_message(make_deck):
    """Deltas folded by the model render the same as the finished message's full payload."""
    deck, model, events = await run_prompts(make_deck, ["stream 300", "thought"])
    _, streamed = conversation_text(model, "a")
    final = roster("a")
    feed(final, [e for e in events if e.name == "message:updated"])
    _, whole = conversation_text(final, "a")
    assert streamed == whole and "c299" in streamed


async def test_queued_messages_and_system_messages(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("down", "--fail-start"))
    model = roster("a", "down")
    deck.subscribe(model.apply)
    deck.chat.send("a", "slow")
    await rec.wait_event("turn:changed", agent="a", busy=True)
    deck.chat.send("a", "after the slow one")
    await rec.wait_event("turn:changed", agent="a", queued=1)
    _, text = conversation_text(model, "a")
    assert "▸ you (queued)\n  after the slow one" in text
    deck.chat.cancel("a")
    await rec.wait_event("turn:changed", agent="a", busy=False)
    _, text = conversation_text(model, "a")
    assert "stopped: cancelled" in text and "(cancelled)" in text
    deck.chat.send("down", "hi")
    await rec.wait(lambda r: any(p["message"]["role"] == "system" for p in r.named("message:updated", "down")))
    _, text = conversation_text(model, "down")
    assert "! deck" in text and "The agent is unavailable:" in text and "missing API key" in text
    _, text = conversation_text(model, "down", "fr")
    assert "L'agent est indisponible" in text and "▸ vous" in text


async def test_streaming_rebuilds_only_the_last_block(make_deck):
    model = roster("a")
    view = ConversationView(Strings("en"))
    view.show(model.agents["a"])
    feed(model, [MessageUpdated("a", {"id": "m1", "role": "agent", "parts": [], "done": False, "queued": False})])
    feed(model, [MessageDelta("a", "m1", 0, "text", text="first paragraph\n\nsecond ")])
    view.rebuild({"m1"})
    first = [w for w in view.walker]
    feed(model, [MessageDelta("a", "m1", 0, "text", text="grows")])
    view.rebuild({"m1"})
    assert view.walker[1] is first[1]  # the finished paragraph's widget is reused as is
    assert view.walker[2] is not first[2]
    assert "second grows" in canvas_text(view, 60, 10)


def test_incremental_rebuilds_match_a_fresh_view():
    """Messages changed in the middle of the list, grown or shrunk, and new ones at the end:
    the list updated in place shows exactly what a view built from scratch shows."""
    model = roster("a")
    view = ConversationView(Strings("en"))
    view.show(model.agents["a"])
    steps = [
        [MessageUpdated("a", {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "first"}], "done": True})],
        [MessageUpdated("a", {"id": "m1", "role": "agent", "parts": [], "done": False})],
        [MessageDelta("a", "m1", 0, "text", text="one\n\ntwo")],
        [MessageUpdated("a", {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "next"}], "done": True,
                              "queued": True})],  # fmt: skip
        [MessageDelta("a", "m1", 0, "text", text="\n\nthree\n\nfour"), MessageDelta("a", "m1", 1, "thought", text="hmm")],
        [MessageDelta("a", "m1", 1, "thought", text="\n\nmore"), MessageDelta("a", "m1", 2, "text", text="five"),
         MessageUpdated("a", {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "next"}], "done": True})],
        [MessageUpdated("a", {"id": "m1", "role": "agent", "parts": [{"type": "text", "text": "short"}], "done": True,
                              "stopReason": "end_turn"})],  # fmt: skip
        [MessageUpdated("a", {"id": "m2", "role": "agent", "parts": [], "done": False}),
         MessageDelta("a", "m2", 0, "text", text="second answer")],
    ]  # fmt: skip
    written: list[int] = []  # the number of widgets put in the list by each change of it
    view.walker.set_validate_contents_modified(lambda indices, new_items: written.append(len(new_items)))
    for events in steps:
        feed(model, events)
        changed = model.take_changes().messages.get("a", set())
        assert len(changed) >= 1
        before = list(view.walker)
        written.clear()
        view.rebuild(changed)
        kept = [w for w in before if w in list(view.walker)]
        assert sum(written) == sum(len(view.segments[mid]) for mid in changed)  # only the changed messages' widgets
        fresh = ConversationView(Strings("en"))
        fresh.show(model.agents["a"])
        assert canvas_text(view, 60, 40) == canvas_text(fresh, 60, 40)
        assert len(view.walker) == len(fresh.walker)
        unchanged = [mid for mid in view.order if mid not in changed]
        assert all(w in kept for mid in unchanged for w in view.segments[mid])  # untouched messages keep their widgets
    assert "short" in canvas_text(view, 60, 40) and "four" not in canvas_text(view, 60, 40)


def test_logs_view_keeps_the_last_lines_like_the_core():
    model = roster("a")
    feed(model, [AgentLog("a", f"line {i}") for i in range(LOG_LINES + 50)])
    assert len(model.agents["a"].logs) == CONSOLE_LOG_LINES == LOG_LINES == 200
    view = LogsView(Strings("en"))
    view.show("a", "A", [])
    assert "(no log lines yet)" in canvas_text(view, 40, 5)
    for start in range(0, 3 * LOG_LINES, 10):  # live lines arrive in batches while the view is open
        view.append([f"live {i}" for i in range(start, start + 10)])
    assert len(view.walker) == LOG_LINES
    assert view.walker[0].text == f"live {2 * LOG_LINES}" and view.walker[-1].text == f"live {3 * LOG_LINES - 1}"
    assert f"live {3 * LOG_LINES - 1}" in canvas_text(view, 40, 5) and "no log lines" not in canvas_text(view, 40, 5)
    view.show("a", "A", model.agents["a"].logs)
    assert len(view.walker) == LOG_LINES and view.walker[-1].text == f"line {LOG_LINES + 49}"


# -- permission dialog ---------------------------------------------------------------------------


async def test_permission_dialog_from_real_requests_of_two_agents(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    model = roster("a", "b")
    deck.subscribe(model.apply)
    deck.chat.send("a", "perm")
    deck.chat.send("b", "perm")
    await rec.wait(lambda r: len(r.named("permission:requested")) == 2)
    assert [kind for kind, _ in model.pending()] == ["permission", "permission"]
    requests = [p for _, p in model.pending()]
    assert [p["agent"] for p in requests] == [p["agent"] for p in rec.named("permission:requested")]  # as asked
    titles = {"a": "Alpha", "b": "Beta"}
    answers, moves = [], []
    dialog = PermissionDialog(Strings("en"), requests, 1, titles, lambda *a: answers.append(a),
                              lambda: moves.append("closed"), moves.append)  # fmt: skip
    text = canvas_text(dialog, 80, 30)
    assert f"Permission requested by {titles[requests[1]['agent']]}" in text and "request 2 of 2" in text
    assert "⚙ edit Edit file · pending" in text and "-a" in text and "+b" in text
    assert "1 Allow" in text and "2 Reject" in text
    dialog.keypress((80, 30), "tab")
    dialog.keypress((80, 30), "esc")
    assert moves == [1, "closed"]
    dialog.keypress((80, 30), "2")
    assert answers == [(requests[1]["id"], "no")]
    deck.chat.answer_permission(*answers[0])
    deck.chat.answer_permission(requests[0]["id"], "yes")
    await rec.wait(lambda r: len(r.named("permission:resolved")) == 2)
    assert model.pending() == []
    fr = canvas_text(PermissionDialog(Strings("fr"), requests, 0, {}, print, print, print), 80, 30)
    assert f"Autorisation demandée par {requests[0]['agent']}" in fr and "demande 1 sur 2" in fr


# -- questions ---------------------------------------------------------------------------------------


def type_keys(widget, size, text: str) -> None:
    for ch in text:
        widget.keypress(size, ch)


def test_a_list_field_is_answered_as_a_list_of_its_comma_separated_values():
    question = {"id": "q", "agent": "a", "message": "Pick", "schema": {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}}}}}
    answers: list[Any] = []
    dialog = QuestionDialog(Strings("en"), [question], 0, {}, lambda *a: answers.append(a), print, print)
    size = (80, 24)
    assert "values separated by commas" in canvas_text(dialog, *size)
    type_keys(dialog, size, "red, blue")
    dialog.keypress(size, "enter")
    assert answers == [("q", {"tags": ["red", "blue"]})]
    type_keys(dialog, size, ", pink")
    dialog.keypress(size, "enter")
    assert len(answers) == 1 and "red, green, blue" in canvas_text(dialog, *size)  # not a choice: not sent


async def test_question_dialog_from_a_real_question(make_deck):
    deck, rec = make_deck(agent_block("a"))
    model = roster("a")
    deck.subscribe(model.apply)
    deck.chat.send("a", "question")
    await rec.wait_event("question:requested", agent="a")
    assert [kind for kind, _ in model.pending()] == ["question"] and model.agents["a"].needs_input
    assert "! needs input" in panel_text(model)
    question = model.pending()[0][1]
    answers, moves = [], []
    dialog = QuestionDialog(Strings("en"), [question], 0, {"a": "Alpha"}, lambda *a: answers.append(a),
                            lambda: moves.append("closed"), moves.append)  # fmt: skip
    size = (80, 24)
    text = canvas_text(dialog, *size)
    assert "Question from Alpha" in text and "request 1 of 1" in text and "Your name?" in text
    assert "name" in text and "Submit (Ctrl-S)" in text and "Decline (Ctrl-D)" in text and "Ctrl-D decline" in text
    assert "*" not in text  # nothing is required
    type_keys(dialog, size, "Ann")
    assert "› Ann" in canvas_text(dialog, *size)
    dialog.keypress(size, "tab")  # one request only: nothing to move to
    dialog.keypress(size, "esc")
    assert moves == ["closed"] and answers == []
    dialog.keypress(size, "ctrl d")
    assert answers == [(question["id"], None)]
    dialog.keypress(size, "enter")  # Enter on the last (only) field submits
    assert answers[1] == (question["id"], {"name": "Ann"})
    deck.chat.answer_question(*answers[1])
    await rec.wait_event("question:resolved", id=question["id"])
    await rec.wait_event("turn:changed", agent="a", busy=False)
    assert model.pending() == [] and not model.agents["a"].needs_input
    _, conversation = conversation_text(model, "a")
    assert '{"action": "accept", "content": {"name": "Ann"}}' in conversation
    fr = canvas_text(QuestionDialog(Strings("fr"), [question], 0, {}, print, print, print), *size)
    assert "Question de a" in fr and "demande 1 sur 1" in fr and "Refuser (Ctrl-D)" in fr


def test_question_dialog_converts_answers_by_type():
    schema = {
        "type": "object",
        "required": ["age", "color"],
        "properties": {
            "age": {"type": "integer", "title": "Age", "description": "in years"},
            "ratio": {"type": "number"},
            "ok": {"type": "boolean", "default": True},
            "color": {"type": "string", "enum": ["red", "blue"]},
            "note": {"type": "string"},
        },
    }
    question = QuestionRequested("question-9", "a", "msg-1", "A few things", schema).payload()
    answers: list = []
    dialog = QuestionDialog(Strings("en"), [question, {"id": "p", "agent": "b"}], 0, {}, lambda *a: answers.append(a),
                            lambda: None, lambda step: answers.append(("moved", step)))  # fmt: skip
    size = (90, 40)
    text = canvas_text(dialog, *size)
    assert "request 1 of 2" in text and "A few things" in text
    assert "Age *  (a whole number)" in text and "in years" in text and "ratio  (a number)" in text
    assert "ok  (yes or no)" in text and "› yes" in text and "color *  (one of: red, blue)" in text and "* required" in text
    dialog.keypress(size, "tab")
    assert answers == [("moved", 1)]
    answers.clear()
    dialog.keypress(size, "ctrl s")
    assert answers == [] and "Age is required" in canvas_text(dialog, *size)
    type_keys(dialog, size, "4x")
    dialog.keypress(size, "enter")  # Enter on a field that is not the last: the next field
    type_keys(dialog, size, "0.5")
    dialog.keypress(size, "ctrl s")
    assert answers == [] and "Age: a whole number is expected" in canvas_text(dialog, *size)
    dialog.keypress(size, "backspace")  # the focus went back to Age
    dialog.keypress(size, "enter")
    dialog.keypress(size, "enter")
    for _ in "yes":
        dialog.keypress(size, "backspace")
    type_keys(dialog, size, "maybe")
    dialog.keypress(size, "ctrl s")
    assert answers == [] and "ok: answer yes or no" in canvas_text(dialog, *size)
    for _ in "maybe":
        dialog.keypress(size, "backspace")
    type_keys(dialog, size, "non")
    dialog.keypress(size, "enter")
    type_keys(dialog, size, "green")
    dialog.keypress(size, "ctrl s")
    assert answers == [] and "color: answer one of red, blue" in canvas_text(dialog, *size)
    for _ in "green":
        dialog.keypress(size, "backspace")
    type_keys(dialog, size, "red")
    dialog.keypress(size, "enter")  # to the last field, left empty: optional, so left out
    assert answers == []
    dialog.keypress(size, "enter")
    assert answers == [("question-9", {"age": 4, "ratio": 0.5, "ok": False, "color": "red"})]
    assert "is expected" not in canvas_text(dialog, *size)
    fr = QuestionDialog(Strings("fr"), [question], 0, {}, lambda *a: answers.append(a), print, print)
    fr.keypress(size, "ctrl s")
    text = canvas_text(fr, *size)
    assert "Age est obligatoire" in text and "(un nombre entier)" in text and "› oui" in text and "* obligatoire" in text


async def test_app_keeps_a_question_typed_answer_while_other_asks_come_and_go(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    app = await console(deck)
    size = (120, 40)
    try:
        deck.chat.send("a", "question")
        await rec.wait_event("question:requested", agent="a")
        app.refresh()
        assert app.dialog_kind == "ask" and "Question from a" in canvas_text(app.root, *size)  # a is selected: at once
        type_keys(app.root, size, "An")
        deck.chat.send("b", "perm")  # another agent's request does not take over
        await rec.wait_event("permission:requested", agent="b")
        app.refresh()
        screen = canvas_text(app.root, *size)
        assert "Question from a" in screen and "request 1 of 2" in screen and "› An" in screen
        app.root.keypress(size, "tab")
        assert "Permission requested by b" in canvas_text(app.root, *size)
        app.root.keypress(size, "esc")
        screen = canvas_text(app.root, *size)
        assert app.dialog_kind == "" and "1 permission request and 1 question waiting · F4 answer" in screen
        app.root.keypress(size, "f4")  # the oldest ask: a's question, as it was left
        screen = canvas_text(app.root, *size)
        assert "Question from a" in screen and "request 1 of 2" in screen and "› An" in screen
        type_keys(app.root, size, "n")
        app.root.keypress(size, "enter")
        await rec.wait_event("question:resolved", agent="a")
        await rec.wait_event("turn:changed", agent="a", busy=False)
        app.refresh()
        screen = canvas_text(app.root, *size)
        assert "Permission requested by b" in screen  # the next ask
        assert "1 permission request waiting · F4 answer" in screen
        app.root.keypress(size, "1")
        await rec.wait_event("permission:resolved", agent="b")
        app.refresh()
        screen = canvas_text(app.root, *size)
        assert app.dialog_kind == "" and "waiting" not in screen
        assert '{"action": "accept", "content": {"name": "Ann"}}' in screen
    finally:
        app.detach()


# -- notices said on an agent, and another agent talking to it ----------------------------------------


def test_notices_beside_the_agent_and_the_overlay_while_another_agent_talks_to_it():
    """An announcement is the announcements plugin's notice on its requester (`b → a: text`), kept
    beside the requester's conversation as any plugin's notice on an agent is; the overlay on the
    target comes from `ask:changed` by its name, whether the event is the plugin's class (a deck in
    this process) or an `UnknownEvent` (a server's plugin this console does not have)."""
    model = roster("lead", "helper")
    feed(model, [AgentStateChanged("helper", "busy", False), AskChanged("lead", "helper", "t1", True)])
    _, target = conversation_text(model, "helper", size=(120, 10))
    assert "an agent is talking to it (lead)" in target.split("\n")[0]  # from the ask's start, before any announcement
    feed(model, [Notice("announcements", "info", f"helper → lead: step {i}", "lead") for i in range(25)])
    feed(model, [Notice("notify", "warning", "finished its turn", "lead", bell=True)])  # an alert: rung, not kept
    view, text = conversation_text(model, "lead", size=(120, 40))
    assert "Notices" in text and "announcements" in text and "helper → lead: step 24" in text
    assert "step 4\n" not in text + "\n" and len(model.agents["lead"].said) == 20 and "finished" not in text
    _, target = conversation_text(model, "helper", size=(120, 10))
    assert "an agent is talking to it (lead)" in target.split("\n")[0] and "Notices" not in target
    feed(model, [from_wire({"event": "ask:changed", "requester": "lead", "target": "helper", "ticketId": "t2", "active": True})])
    feed(model, [AskChanged("lead", "helper", "t1", False)])  # its final answer is out; the second ask goes on
    _, target = conversation_text(model, "helper", size=(120, 10))
    assert "an agent is talking to it (lead)" in target.split("\n")[0]
    feed(model, [UnknownEvent("ask:changed", {"requester": "lead", "target": "helper", "ticketId": "t2", "active": False})])
    _, target = conversation_text(model, "helper", size=(120, 10))
    assert "talking" not in target
    _, fr = conversation_text(model, "lead", "fr", size=(120, 40))
    assert "Avis" in fr


# -- the app, without a terminal -------------------------------------------------------------------


async def test_app_coalesces_redraws_and_handles_keys(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    app = await console(deck)
    try:
        await check_app_coalesces_redraws_and_handles_keys(app, deck, rec)
    finally:
        app.detach()
    assert not app._tasks or all(t.cancelled() or t.done() for t in app._tasks)
    assert app._frame_handle is None and app._spin_handle is None
    frames, messages = app.frames, len(app.model.agents["a"].messages)
    count = len(rec.named("turn:changed", "a"))
    deck.chat.send("a", "hello")  # the app no longer follows events nor draws
    await rec.wait(lambda r: any(not p["busy"] for p in r.named("turn:changed", "a")[count:]))
    await asyncio.sleep(2 / FPS)
    assert app.frames == frames and len(app.model.agents["a"].messages) == messages
    assert "a" not in app.model.changes.messages


async def check_app_coalesces_redraws_and_handles_keys(app, deck, rec) -> None:
    size = (120, 40)
    assert "1 A a" in canvas_text(app.root, *size) and "2 B b" in canvas_text(app.root, *size)
    for ch in "stream 3000":
        app.root.keypress(size, ch)
    app.root.keypress(size, "enter")
    started = asyncio.get_running_loop().time()
    await rec.wait_event("turn:changed", agent="a", busy=False)
    await asyncio.sleep(0.1)
    elapsed = asyncio.get_running_loop().time() - started
    deltas = len(rec.named("message:delta", "a"))
    assert deltas >= 3000
    assert app.frames <= FPS * elapsed + 3, (app.frames, elapsed)
    screen = canvas_text(app.root, *size)
    assert "c2999" in screen and app.edit.edit_text == ""
    app.root.keypress(size, "tab")
    assert app.selected == "b" and "Message to b" in canvas_text(app.root, *size)
    app.root.keypress(size, "meta 1")
    assert app.selected == "a"
    app.root.keypress(size, "ctrl c")
    assert "Ctrl-C does not quit deck" in canvas_text(app.root, *size)
    assert deck.exit_code is None
    # Quitting asks while an agent works.
    deck.chat.send("b", "slow")
    await rec.wait_event("turn:changed", agent="b", busy=True)
    app.root.keypress(size, "ctrl q")
    assert "Quit deck?" in canvas_text(app.root, *size) and "B" in canvas_text(app.root, *size)
    app.root.keypress(size, "n")
    assert app.dialog_kind == "" and not app._done
    app.root.keypress(size, "esc")  # cancels the selected agent's turn: a is idle
    assert "a is not answering" in canvas_text(app.root, *size)
    app.root.keypress(size, "tab")
    app.root.keypress(size, "esc")
    await rec.wait_event("turn:changed", agent="b", busy=False)


async def test_opening_the_same_config_again_starts_the_console_afresh(make_deck):
    deck, rec = make_deck(agent_block("a"))
    app = await console(deck)
    try:
        deck.chat.send("a", "hello")
        await rec.wait_event("turn:changed", agent="a", busy=False)
        await rec.wait(lambda r: app.model.agents["a"].messages)
        app.open_config(str(deck.config_path))  # Open forgets every conversation, even for the same file
        await rec.wait(lambda r: not deck.chat.conversations and r.named("config:changed"), timeout=10)
        for _ in range(50):
            if not app.model.agents["a"].messages:
                break
            await asyncio.sleep(0.02)
        assert app.model.agents["a"].messages == []
    finally:
        app.detach()


def test_the_light_theme_darkens_what_would_vanish_on_a_light_background():
    from deck.frontends.urwid.common import PALETTE, palette

    assert palette("dark")[: len(PALETTE)] == PALETTE
    light = {entry[0]: entry for entry in palette("light")}
    assert light["heading"][1:3] == ("bold,dark cyan", "default")
    assert light["state ready"][1] == "dark green" and light["system"][1] == "bold,brown"
    assert light["selected"][1:3] == ("default", "light gray")  # the terminal's text on a light highlight
    assert light["field focus"][1:3] == ("white", "dark blue")  # a colour pair of its own stays
    assert light["state ready on selected"][1:3] == ("dark green", "light gray")  # the twins follow the theme
    assert len(light) == len(palette("dark")) and len({entry[0] for entry in palette("dark")}) == len(light)
    for theme in ("dark", "light"):
        for _name, fg, bg, *rest in palette(theme):  # every entry is a palette urwid accepts
            urwid.AttrSpec(fg, bg, 16)
            if rest[1:]:
                urwid.AttrSpec(rest[1], rest[2], 256)


async def test_the_console_takes_the_configs_theme(make_deck):
    from deck.frontends.urwid.common import palette

    deck, rec = make_deck('theme = "light"\n' + agent_block("a"))
    client = LocalClient(deck)
    assert ConsoleApp(client, await client.call("ConfigService.Current")).palette == palette("light")


# -- untrusted text --------------------------------------------------------------------------------


async def test_controls_from_an_agent_are_shown_in_every_widget_never_sent_raw(make_deck):
    from tests.agents.escapes_agent import RAW, SHOWN
    from tests.core.runtime.test_terminal_safety import escapes_block

    deck, rec = make_deck(escapes_block("h", title="T\x1b[2J"))
    app = await console(deck)
    try:
        deck.chat.send("h", "hostile")
        await rec.wait_event("turn:changed", agent="h", busy=False)
        app.refresh()
        app.conversation.toggle_all("diffs")
        chat = app.root.render((200, 60))
        app.show_view("logs")
        await asyncio.gather(*app._tasks)  # the Logs call it makes
        app.refresh()
        logs = app.root.render((200, 60))
    finally:
        app.detach()
    for canvas in (chat, logs):
        drawn = b"".join(segment for row in canvas.content() for _attr, _cs, segment in row).decode()
        assert "\x1b" not in drawn and not any(raw in drawn for raw in RAW), drawn
    chat_text = "\n".join(line.decode() for line in chat.text)
    assert "T␛[2J" in chat_text  # the title: panel, header, input box
    assert f"thought {SHOWN}" in chat_text and f"tool {SHOWN}" in chat_text and f"some bold text {SHOWN}" in chat_text
    assert "windows line" in chat_text and "windows line␍" not in chat_text  # CR LF is a newline
    assert f"stderr {SHOWN}" in "\n".join(line.decode() for line in logs.text)


# -- what the user typed -----------------------------------------------------------------------------


async def test_user_messages_are_shown_as_typed(make_deck):
    """Markdown is the agent's: the user's text keeps every character, its line breaks and indents."""
    typed = '***CALL_TOOL read {"path": "/x"} and **bold** `code`'
    block = "first line\n    # not a heading\n- not a list\n\n> not a quote _x_"
    deck, model, _ = await run_prompts(make_deck, [typed, block])
    _, text = conversation_text(model, "a")
    assert "\n  " + typed + "\n" in text
    assert "\n  first line\n      # not a heading\n  - not a list\n\n  > not a quote _x_\n" in text
    assert "You said: first line" in text and "  • not a list" in text  # the agent's echo is Markdown


# -- the config, broken while the console runs -----------------------------------------------------


async def test_a_broken_config_shows_its_first_problem_until_it_is_fixed(make_deck, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where deck.toml is: the banner names it relative to here
    deck, rec = make_deck(agent_block("a"))
    app = await console(deck)
    size = (100, 30)
    try:
        assert "deck.toml:" not in canvas_text(app.root, *size)
        deck.config_path.write_text(agent_block("a") + "[limits]\nmaxRunningAgents = 'many'\nfoo = [\n")
        await deck.config_service.live.reload()
        app.refresh()
        screen = canvas_text(app.root, *size)
        banner = next(line for line in screen.split("\n") if "deck.toml:" in line)
        problem = rec.named("config:changed")[-1]["problems"][0]
        assert banner.lstrip().startswith(f"deck.toml:{problem['line']}:{problem['column']}: {problem['message'][:20]}")
        assert "last valid config" in banner
        assert screen.index(banner) < screen.index("Message to a")  # just above the input
        late = await console(deck)  # a console that starts with the file broken knows it too
        late.detach()
        assert banner in canvas_text(late.root, *size)
        deck.config_path.write_text(agent_block("a"))
        await deck.config_service.live.reload()
        app.refresh()
        assert "deck.toml:" not in canvas_text(app.root, *size)
    finally:
        app.detach()


def test_the_config_banner_names_the_file_as_given_and_counts_the_other_problems(tmp_path, monkeypatch):
    from deck.frontends.urwid.app import config_problem

    monkeypatch.chdir(tmp_path)
    problems = [{"line": 1, "column": 2, "message": "unknown key x", "warning": True},
                {"line": 17, "column": 6, "message": "expected an integer", "warning": False},
                {"line": 20, "column": 1, "message": "bad", "warning": False}]  # fmt: skip
    strings = Strings("en")
    assert config_problem(str(tmp_path / "deck.toml"), problems, strings).startswith(
        "deck.toml:17:6: expected an integer (+1 more)")  # fmt: skip
    assert config_problem("/elsewhere/deck.toml", problems[:2], strings).startswith("/elsewhere/deck.toml:17:6: ")
    # A warning only (a typo): said too, as a warning, until it is fixed.
    assert config_problem("deck.toml", problems[:1], strings) == "deck.toml:1:2: warning: unknown key x · F3 shows the config"
    assert "dernière configuration valide" in config_problem("deck.toml", problems, Strings("fr"))


# -- system messages -----------------------------------------------------------------------------------


async def test_a_restart_note_is_shown_once(make_deck):
    deck, model, _ = await run_prompts(make_deck, ["hello"])
    await deck.agent_service.restart("a")
    await asyncio.sleep(0)
    assert [m.code for m in model.agents["a"].messages if m.role == "system"] == ["agent-restarted"]
    _, text = conversation_text(model, "a")
    # In English the core's note is shown as it is: it says why (the fake agent cannot resume).
    words = " ".join(text.split())
    assert words.count("does not remember what came before") == 1
    assert "The agent cannot resume sessions" in words
    _, fr = conversation_text(model, "a", "fr")
    assert fr.count("redémarré dans une nouvelle session") == 1 and "restarted" not in fr


# -- backgrounds -----------------------------------------------------------------------------------


def _cells(canvas: urwid.Canvas, theme: str = "dark") -> list[tuple[str, str, str]]:
    """(foreground, background, text) of every run of `canvas`, as the palette of `theme` draws them."""
    from deck.frontends.urwid.common import palette

    entries = {entry[0]: entry for entry in palette(theme)}
    out = []
    for row in canvas.content():
        for attr, _cs, text in row:
            attr = getattr(attr, "layers", (attr,))[0]  # urwid ≥ 5 stacks the enclosing maps: the innermost shows
            entry = entries.get(attr) if attr is not None else None
            out.append((entry[1], entry[2], text.decode()) if entry else ("default", "default", text.decode()))
    return out


@pytest.mark.parametrize("theme", ["dark", "light"])
def test_a_selected_row_and_a_dialog_keep_their_background(theme):
    from deck.frontends.urwid.agents import AgentRow
    from deck.frontends.urwid.common import palette

    backgrounds = {entry[0]: entry[2] for entry in palette(theme)}
    model = roster("alpha")
    feed(model, [AgentStateChanged("alpha", "error", True, "start failed: exit 3"), TurnChanged("alpha", True, 0),
                 UsageChanged("alpha", {"used": 50, "size": 100})])  # fmt: skip
    model.apply(PermissionRequested("perm-1", "alpha", "", {}, [], 0))
    row = AgentRow("alpha", lambda name: None)
    row.update(model.agents["alpha"], 1, Strings("en"), True, 0)
    cells = _cells(row.render((30,)), theme)
    assert {bg for _fg, bg, text in cells if text.strip() and "!" not in text} == {backgrounds["selected"]}, cells
    assert all(bg != "default" for _fg, bg, _text in cells), cells  # spaces too: no patch of the terminal's own
    request = {"id": "p", "agent": "alpha", "options": [{"optionId": "y", "name": "Allow", "kind": "allow_once"}],
               "toolCall": {"kind": "edit", "title": "Edit", "status": "pending", "input": {"path": "/x"},
                            "diffs": [{"path": "/x", "oldText": "a", "newText": "b"}]}}  # fmt: skip
    dialog = PermissionDialog(Strings("en"), [request], 0, {}, print, print, print)
    cells = _cells(dialog.render((60, 20)), theme)
    assert all(bg != "default" for _fg, bg, _text in cells), cells
    assert all(fg.split(",")[-1] != bg for fg, bg, text in cells if text.strip()), cells  # nothing drawn in its background
    assert {bg for _fg, bg, text in cells if "a/x" in text or "{" in text} == {backgrounds["dialog"]}


# -- the agents panel's layout -----------------------------------------------------------------------


def test_long_state_and_error_lines_stay_under_the_name():
    model = roster("alpha")
    error = "start failed: the agent program could not be found on the PATH nor in the folder given\nsecond line"
    feed(model, [AgentStateChanged("alpha", "error", True, error)])
    text = panel_text(model, width=24)
    rows = [line[1:-1] for line in text.split("\n")[1:7]]
    assert rows[0] == "1 A Alpha".ljust(22)
    assert rows[1].rstrip() == "   error"
    assert rows[2].rstrip() == "   ⟳ restart to apply" and rows[3].rstrip() == "   changes"  # wrapped, not cut
    assert rows[4].startswith("   start failed: the") and rows[5].startswith("   ") and rows[5].rstrip().endswith("…")
    assert rows[5][3] != " " and "second line" not in text
    assert all(not line[1:2].strip() or line[1:2].isdigit() or line[1:2] in "─ " for line in text.split("\n")[1:-1])


@pytest.mark.parametrize(("cols", "panel"), [(60, 18), (80, 18), (120, 26), (160, 35), (250, 40)])
async def test_the_panel_takes_a_share_of_the_width_and_the_hints_one_line(make_deck, cols, panel):
    deck, rec = make_deck(agent_block("a"))
    app = await console(deck)
    try:
        rows = canvas_text(app.root, cols, 24).split("\n")
        assert rows[0].index("┐") == panel - 1 and rows[1][:panel].endswith("│") and rows[1][panel:panel + 1] in ("", " ")
        assert rows[-2].startswith("└") and rows[-2].endswith("┘")  # the input box, then one line of hints
        assert rows[-1].startswith("F1 help  Enter send") and len(rows[-1]) <= cols and "Ctrl-Q quit" in rows[-1]
        assert ("PgUp PgDn" in rows[-1]) == ("F2 logs" in rows[-1]) == (cols >= 80)  # 80: the narrowest it is made for
        assert ("F3 config" in rows[-1]) == (cols >= 120)
        assert ("Ctrl-N new" in rows[-1]) == (cols >= 120)  # a new conversation
        assert ("Alt-Enter newline" in rows[-1]) == (cols >= 160)
    finally:
        app.detach()


def test_the_hints_keep_the_most_important_keys_as_the_width_shrinks():
    from deck.frontends.urwid.common import HintBar

    for language in ("en", "fr"):
        strings = Strings(language)
        bar = HintBar([(strings(key), rank) for key, rank in HINTS])
        shown = {width: canvas_text(bar, width) for width in range(20, 140)}
        assert all(len(text) <= width and "\n" not in text for width, text in shown.items())
        for width in range(21, 140):  # what a narrower bar shows, a wider one shows too
            assert all(hint in shown[width] for hint in shown[width - 1].split("  ") if hint)
        assert "PgUp PgDn" in shown[80] and "Ctrl-Q" in shown[80] and shown[80].startswith("F1 ")  # the help


# -- the permission dialog's place --------------------------------------------------------------------


async def test_the_permission_dialog_leaves_the_panel_and_the_request_in_view(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    app = await console(deck)
    try:
        deck.chat.send("a", "perm")
        await rec.wait_event("permission:requested", agent="a")
        await rec.wait(lambda r: any((p.get("part") or {}).get("status") == "pending" for p in r.named("message:delta", "a")))
        app.refresh()
        assert app.dialog_kind == "ask"
        rows = canvas_text(app.root, 80, 24).split("\n")
        top = next(i for i, row in enumerate(rows) if "Permission requested by a" in row)
        bottom = next(i for i, row in enumerate(rows) if i > top and row[18:19] == "└")
        assert top == 0 and rows[top][18] == "┌"  # over the conversation, from its top
        assert rows[1].startswith("│1 A a") and rows[5].startswith("│2 B b")  # the agents panel stays in view
        assert "1 Allow" in "\n".join(rows[top:bottom]) and "2 Reject" in "\n".join(rows[top:bottom])
        below = "\n".join(row[18:] for row in rows[bottom + 1 :])
        assert "⚙ edit Edit file · pending" in below  # the tool call that asks
        assert "Message to a" in rows[-5] and "1 permission request waiting" in rows[-2]
        assert bottom - top + 1 <= 14
    finally:
        app.detach()


#: The options of Claude Code's adapter, in the order it sends them.
CLAUDE_OPTIONS = [{"optionId": "allow_always", "name": "Always Allow", "kind": "allow_always"},
                  {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                  {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]  # fmt: skip


def test_enter_allows_once_and_always_is_given_only_when_picked():
    tool = {"kind": "edit", "title": "Edit", "status": "pending"}
    request = PermissionRequested("perm-1", "a", "msg-1", tool, CLAUDE_OPTIONS, 0).payload()
    answers: list[Any] = []
    dialog = PermissionDialog(Strings("en"), [request], 0, {}, lambda *a: answers.append(a), print, print)
    size = (80, 12)
    text = canvas_text(dialog, *size)
    assert text.index("1 Always Allow") < text.index("2 Allow") < text.index("3 Reject")  # as the agent sent them
    assert "1-9 choose · a always · Tab next request" in text
    dialog.keypress(size, "enter")
    dialog.keypress(size, "a")
    dialog.keypress(size, "1")
    assert answers == [("perm-1", "allow"), ("perm-1", "allow_always"), ("perm-1", "allow_always")]
    # With no option that allows once, Enter still gives no standing permission.
    answers.clear()
    no_once = {**request, "options": [CLAUDE_OPTIONS[0], CLAUDE_OPTIONS[2]]}
    PermissionDialog(Strings("en"), [no_once], 0, {}, lambda *a: answers.append(a), print, print).keypress(size, "enter")
    assert answers == [("perm-1", "reject")]
    once = {**request, "options": CLAUDE_OPTIONS[1:]}
    plain = canvas_text(PermissionDialog(Strings("fr"), [once], 0, {}, print, print, print), *size)
    assert "1 Allow" in plain and "a toujours" not in plain  # no "always" offered: no key for it


def test_the_yes_no_questions_put_yes_first_and_enter_says_no():
    from deck.frontends.urwid.dialogs import ChoiceDialog, ConfirmDialog

    answers: list[Any] = []
    size = (60, 6)
    quit_dialog = ConfirmDialog(Strings("en"), "Quit deck?", "Quit and stop it?", answers.append)
    remove = ConfirmDialog(Strings("fr"), "Supprimer ?", "Son dossier part.", answers.append, "remove_yes")
    for dialog, yes, no in ((quit_dialog, "y  yes, quit", "n  no"), (remove, "o  oui, supprimer", "n  non")):
        text = canvas_text(dialog, *size)
        assert text.index(yes) < text.index(no) and dialog.rows((60,)) == 6  # as tall as its content
        dialog.keypress(size, "enter")
    remove.keypress(size, "o")
    assert answers == [False, False, True]
    leave = ChoiceDialog("Leave deck?", "Attached.", [("d", "d  detach", "detach"), ("s", "s  stop", "shutdown")],
                         answers.append, "detach")  # fmt: skip
    leave.keypress(size, "enter")
    assert answers[-1] == "detach"


@pytest.mark.parametrize("theme", ["dark", "light"])
def test_the_selected_rows_labels_read_on_the_selection_bar_as_its_name_does(theme):
    from deck.frontends.urwid.agents import AgentRow

    model = roster("alpha")
    feed(model, [AgentStateChanged("alpha", "ready", False), UsageChanged("alpha", {"used": 50, "size": 100})])
    model.agents["alpha"].changed_files = 1
    row = AgentRow("alpha", lambda name: None)
    row.update(model.agents["alpha"], 1, Strings("en"), True, 0)
    cells = _cells(row.render((30,)), theme)
    colour = {text.strip(): (fg, bg) for fg, bg, text in cells if text.strip()}
    assert colour["ctx"] == colour["±1 file"] == colour["Alpha"], cells
    row.update(model.agents["alpha"], 1, Strings("en"), False, 0)  # off the bar: dimmed, as before
    assert {fg for fg, _bg, text in _cells(row.render((30,)), theme) if text.strip() == "ctx"} == {"dark gray"}


async def test_a_crash_mid_turn_points_to_the_agents_log(make_deck):
    deck, rec = make_deck(agent_block("a", title="Alpha"))
    app = await console(deck)
    size = (100, 30)
    try:
        deck.chat.send("a", "crash")
        await rec.wait_event("agent:state", agent="a", state="error")
        app.refresh()
        assert "Alpha crashed — F2 shows its log" in canvas_text(app.root, *size).split("\n")[-2]
        app.root.keypress(size, "f2")
        while app._tasks:
            await asyncio.gather(*list(app._tasks))
        app.refresh()
        assert "the agent exited on its own with code 7" in canvas_text(app.root, *size)
    finally:
        app.detach()


async def test_a_refused_remove_offers_the_forced_one_in_the_worktree_view(make_deck, tmp_path):
    from tests.plugins.worktrees.test_worktrees import make_repo, turn, worktree_agent

    repo = make_repo(tmp_path / "repo")
    deck, rec = make_deck(worktree_agent("a", repo))
    app = await console(deck)
    size = (120, 30)

    async def screen() -> str:
        while app._tasks:  # the service calls the console made
            await asyncio.gather(*list(app._tasks))
        app.refresh()
        return canvas_text(app.root, *size)

    try:
        await turn(deck, rec, "a", "write notes.txt not merged")
        await deck.call("AgentService.Stop", {"name": "a"})
        app.root.keypress(size, "f9")
        shown = await screen()
        assert "+not merged" in shown and "m merge · x remove · F9 or Esc" in shown and "X force" not in shown
        app.root.keypress(size, "X")  # not offered yet: nothing asked
        assert app.dialog_kind == ""
        app.root.keypress(size, "x")
        shown = await screen()
        assert "Remove a's worktree?" in shown and shown.index("y  yes, remove") < shown.index("n  no")  # yes first
        app.root.keypress(size, "y")
        shown = await screen()
        assert "a's worktree has uncommitted work" in shown and "X force remove" in shown  # the refusal, then X
        app.root.keypress(size, "X")
        shown = await screen()
        assert "Remove a's worktree with its work?" in shown and "that work is lost" in shown
        app.root.keypress(size, "enter")  # no, the default
        assert app.dialog_kind == "" and Path(deck.agents["a"].cwd, "notes.txt").exists()
        app.root.keypress(size, "X")
        app.root.keypress(size, "y")
        shown = await screen()
        assert "a's worktree removed" in shown and not Path(deck.agents["a"].cwd, "notes.txt").exists()
        assert "a has no worktree" in shown and "m merge" not in shown and "±1 file" not in shown
    finally:
        app.detach()


# -- the file picker ---------------------------------------------------------------------------------


def test_the_file_picker_path_takes_typing_at_once(tmp_path):
    from deck.frontends.urwid.dialogs import FilePicker

    (tmp_path / "deck.toml").write_text("")
    (tmp_path / "sub").mkdir()
    chosen: list[str] = []
    picker = FilePicker(Strings("en"), tmp_path, chosen.append)
    size = (60, 15)
    picker.keypress(size, "down")  # browsing the list
    type_keys(picker, size, "other.toml")
    assert picker.edit.edit_text == f"{tmp_path}/other.toml" and "other.toml" in canvas_text(picker, *size)
    picker.keypress(size, "enter")
    assert chosen == [str(tmp_path / "other.toml")]
    picker = FilePicker(Strings("en"), tmp_path, chosen.append)
    picker.keypress(size, "down")
    picker.keypress(size, " ")  # space still opens the entry under the cursor
    assert picker.directory == (tmp_path / "sub").resolve() or chosen[-1] == str(tmp_path / "deck.toml")


# -- first start ---------------------------------------------------------------------------------------


def test_an_empty_conversation_says_how_to_start():
    model = roster("a")
    view, text = conversation_text(model, "a", size=(60, 10))
    assert "Type a message and press Enter · Tab: next agent" in text
    assert "Tapez un message" in conversation_text(model, "a", "fr", size=(60, 10))[1]
    feed(model, [MessageUpdated("a", {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}], "done": True})])
    view.rebuild(model.take_changes().messages["a"])
    text = canvas_text(view, 60, 10)
    assert "Type a message" not in text and "▸ you\n  hi" in text


# -- French ------------------------------------------------------------------------------------------


def test_tool_kinds_and_statuses_in_french():
    from deck.acp.updates import TOOL_KINDS, TOOL_STATUSES
    from deck.frontends.urwid.conversation import tool_widgets

    def header(part: dict, language: str) -> str:
        return canvas_text(tool_widgets(part, Strings(language), False, None)[0], 80)

    words = {}
    for kind in sorted(TOOL_KINDS):
        for status in sorted(TOOL_STATUSES):
            en = header({"kind": kind, "status": status, "title": "T"}, "en")
            assert en == f"  ⚙ {kind.replace('_', ' ')} T · {status.replace('_', ' ')}"
            words[kind, status] = header({"kind": kind, "status": status, "title": "T"}, "fr")
    assert words["edit", "pending"] == "  ⚙ modification T · en attente"
    assert words["execute", "in_progress"] == "  ⚙ exécution T · en cours"
    assert words["read", "completed"] == "  ⚙ lecture T · terminé"
    assert words["other", "failed"] == "  ⚙ autre T · échoué"
    assert words["switch_mode", "pending"] == "  ⚙ changement de mode T · en attente"
    assert len({w.split(" T ")[0] for w in words.values()}) == len(TOOL_KINDS)
    assert header({"kind": "weird", "status": "odd", "title": "T"}, "fr") == "  ⚙ weird T · odd"  # unknown: as sent


# -- usage ---------------------------------------------------------------------------------------------


def test_usage_percentages_round_like_the_line_frontend():
    from deck.frontends.urwid.common import gauge, percent

    assert percent(0, 1000) == "0%" and percent(1, 1000) == "<1%" and percent(5, 1000) == "<1%"
    assert percent(6, 1000) == "1%" and percent(125, 1000) == "12%" and percent(995, 1000) == "100%"
    assert percent(1500, 1000) == "150%" and percent(10, 0) == ""
    for used in range(0, 2001, 7):
        expected = round(100 * used / 2000)
        assert percent(used, 2000) == ("<1%" if used and not expected else f"{expected}%")
    assert gauge(50000, 200000) == "██░░░░░░░░ 25%" and gauge(1, 200000).endswith(" <1%") and gauge(1500, 0) == "1.5k"
    model = roster("alpha")
    feed(model, [UsageChanged("alpha", {"used": 100, "size": 200000})])
    assert "ctx ░░░░░░░░░░ <1%" in panel_text(model)
    assert "ctx <1%" in panel_text(model, width=14)  # too narrow for the bar: the number stays


@pytest.mark.parametrize("language", ["en", "fr"])
def test_counts_read_as_words_never_as_one_lines_or_s_in_parentheses(language):
    from deck.frontends.urwid.i18n import EN, Strings

    strings = Strings(language)
    for key, text in EN.items():
        if isinstance(text, tuple):
            one, many = strings(key, n=1, names="a"), strings(key, n=2, names="a, b")
            assert "1 " in one and "2 " in many and one != many, key
    for key in EN:
        assert "(s)" not in str(strings.table.get(key, "")), key
    assert strings("thought_hidden", n=1).split("(")[1].startswith(("1 line,", "1 ligne,"))
    both = strings("hints_asks", perms=strings("n_perms", n=1), questions=strings("n_questions", n=3))
    assert "1 " in both and "3 questions" in both


async def test_a_new_conversation_from_another_client_empties_the_console(make_deck):
    deck, rec = make_deck(agent_block("a"))
    app = await console(deck)
    try:
        deck.chat.send("a", "hello")
        await rec.wait(lambda r: any(not p["busy"] for p in r.named("turn:changed", "a")))
        assert app.model.agents["a"].messages
        await deck.call("ChatService.NewConversation", {"agent": "a"})
        await rec.wait_event("conversation:reset", agent="a")
        for _ in range(50):  # the console takes a fresh snapshot in a task of its own
            if not app.model.agents["a"].messages:
                break
            await asyncio.sleep(0.02)
        assert app.model.agents["a"].messages == []
    finally:
        app.detach()


def test_a_tools_output_is_shown_without_the_adapters_fence_and_notes_for_the_model():
    from deck.frontends.urwid.conversation import tool_output, tool_widgets

    raw = "```\nline one\nline two\n```\n<system-reminder>\nWhenever you read a file, consider malware.\n</system-reminder>\n"
    assert tool_output(raw) == "line one\nline two"
    assert tool_output("plain ``` inside\ntext") == "plain ``` inside\ntext"
    assert tool_output("<system-reminder>never closed") == ""
    part = {"type": "tool", "id": "t", "title": "Read a.py", "kind": "read", "status": "completed",
            "input": "", "output": raw, "locations": [], "diffs": []}  # fmt: skip
    texts = [t for w in tool_widgets(part, Strings("en"), False, None) for t in _texts(w)]
    assert any("line one" in t for t in texts)
    assert not any("```" in t or "system-reminder" in t or "malware" in t for t in texts)


def _texts(widget):
    """Every text a widget shows, rendered at 80 columns."""
    return [row.decode() for row in widget.render((80,)).text]


def test_command_output_is_not_drawn_in_the_colour_of_diff_additions():
    from deck.frontends.urwid.conversation import terminal_widgets

    (box,) = terminal_widgets({"terminalId": "t", "output": "plain output\n", "exitStatus": None}, Strings("en"), False, None)
    attrs = {attr for row in box.render((80,)).content() for attr, _cs, _text in row}
    assert "diff add" not in attrs and "code" not in attrs and "output" in attrs


# -- the keys (F1) ------------------------------------------------------------------------------------


def help_text(app: ConsoleApp) -> str:
    """The whole help the console shows, its wrapped lines joined again."""
    return " ".join(canvas_text(app.shown_dialog, 62, 400).replace("│", " ").split())


@pytest.mark.parametrize("language", ["en", "fr"])
async def test_f1_lists_every_key_of_the_tables_the_keys_are_handled_with(make_deck, language):
    deck, _rec = make_deck(f'language = "{language}"\n' + agent_block("a"))
    app = await console(deck)
    size = (80, 24)
    try:
        s = app.strings
        app.root.keypress(size, "f1")
        assert app.dialog_kind == "help"
        text = help_text(app)
        assert text.startswith(f"┌ {s('help_title')}")
        at = 0
        for heading, table in (("help_console", KEYS), ("help_permission", PERMISSION_KEYS), ("help_question", QUESTION_KEYS)):
            at = text.index(s(heading), at)
            for binding in table:  # each, in the table's order
                at = text.index(f"{binding.shown or keys_label(binding.keys, s.key_names)} {s(binding.does)}", at)
        at = text.index(s("help_worktree"), at)
        for key, what in WORKTREE_ACTIONS.items():
            at = text.index(f"{key} {s(f'key_worktree_{what}')}", at)
        assert f"{s('cost_unknown_short')} {s('legend_cost')}" in text  # what the panel says short, in full
        app.root.keypress(size, "ctrl c")  # acts in a dialog too
        assert app.notice == s("ctrl_c") and app.dialog_kind == "help"
        app.root.keypress(size, "esc")
        assert app.dialog_kind == "" and s("help_title") not in canvas_text(app.root, *size)
        assert (f"F1 {s('hint_help').partition('|')[2]}") in canvas_text(app.root, *size).split("\n")[-1]
    finally:
        app.detach()


async def test_a_key_added_to_the_table_is_handled_and_listed(make_deck, monkeypatch):
    pressed: list[str] = []
    extra: Binding[ConsoleApp] = Binding(("f12", "meta f12"), "key_logs", lambda app, key: pressed.append(key))
    monkeypatch.setattr(console_app, "KEYS", [*KEYS, extra])
    deck, _rec = make_deck(agent_block("a"))
    app = await console(deck)
    size = (80, 24)
    try:
        app.root.keypress(size, "meta f12")
        assert pressed == ["meta f12"]
        app.root.keypress(size, "f1")
        assert "Ctrl-C never quits deck: Ctrl-Q does F12, Alt-F12 the agent's logs A permission request" in help_text(app)
        app.root.keypress(size, "f12")  # the help has every key but Ctrl-C
        assert pressed == ["meta f12"] and app.dialog_kind == "help"
    finally:
        app.detach()


# -- paths beneath an agent's folder ------------------------------------------------------------------


async def until(check: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        await asyncio.sleep(0.02)


async def turn(deck, rec, agent: str, text: str) -> None:
    count = len(rec.named("turn:changed", agent))
    deck.chat.send(agent, text)
    await rec.wait(lambda r: any(not p["busy"] for p in r.named("turn:changed", agent)[count:]))


async def test_tool_calls_show_the_paths_beneath_the_agents_folder_relative_to_it(make_deck, tmp_path):
    from tests.plugins.worktrees.test_worktrees import make_repo

    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    repo = make_repo(tmp_path / "repo")
    writer = agent_table("a", [sys.executable, str(AGENTS / "read_before_write.py"), "--like", "qwen-code"], cwd=str(project))
    worker = agent_table("b", [sys.executable, str(AGENTS / "worktree_agent.py")], cwd=str(repo / "src"), worktree=True)
    deck, rec = make_deck(writer + worker)
    app = await console(deck)
    try:
        await until(lambda: app.model.agents["a"].folder == os.path.realpath(project))
        await turn(deck, rec, "a", f"write_file {project}/src/notes.md hello")
        app.refresh()
        screen = canvas_text(app.root, 80, 24)
        assert "⚙ edit Writing to notes.md · completed" in screen
        assert "@ src/notes.md" in screen and f"@ {project}" not in screen
        await turn(deck, rec, "b", "where")  # its cwd: the folder of its cwd's in its worktree
        where = next(m for m in reversed(rec.named("message:updated", "b")) if m["message"]["role"] == "agent")
        said = "".join(p.get("text", "") for p in where["message"]["parts"])
        cwd = said[: said.rindex("/src") + len("/src")]
        assert cwd.endswith("/src") and not cwd.startswith(str(repo))
        await until(lambda: app.model.agents["b"].folder == os.path.realpath(cwd))
    finally:
        app.detach()


# -- the agents panel at 80 columns -------------------------------------------------------------------


@pytest.mark.parametrize("language", ["en", "fr"])
def test_the_panel_says_each_line_shorter_or_wraps_it_at_80_columns(language):
    model = roster("alpha", "beta")
    model.agents["alpha"].title = "Claude Code (worktree)"
    feed(model, [
        AgentStateChanged("alpha", "busy", True),
        UsageChanged("alpha", {"used": 50000, "size": 200000}),
        UsageChanged("beta", {"used": 10, "size": 100, "cost": {"amount": 1234.5, "currency": "EUR"}}),
        AskChanged("beta", "alpha", "t1", True),
        WorktreeChanged("alpha", 12, 0, True),
        WorktreeOverlap("a.py", ["alpha", "beta"], ["a.py", "b.py"], 2),
    ])  # fmt: skip
    model.apply(PermissionRequested("perm-1", "alpha", "", {}, [], 0))
    s = Strings(language)
    text = panel_text(model, language, width=panel_width(80), height=30)
    rows = [line[1:-1].rstrip() for line in text.split("\n")[1:]]
    assert "…" not in text
    assert rows[:2] == ["1 A Claude Code", "    (worktree)"]  # under the title, not the number
    assert f"   {s('changed_files', n=12)}" in rows and f"   {s('overlap', n=2)}" in rows
    assert f"   {s('cost_unknown_mid')}" in rows and "   1234.50 EUR" in rows  # said shorter where it does not fit
    wide = panel_text(model, language, width=40, height=30)
    assert s("cost_unknown") in wide and s("cost", amount="1234.50 EUR") in wide and "…" not in wide
    assert f"{s('changed_files', n=12)} {s('overlap', n=2)}" in wide and "Claude Code (worktree)" in wide
