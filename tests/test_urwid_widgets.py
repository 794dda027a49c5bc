"""The console's widgets rendered to text (urwid canvases, no terminal), fed with real event payloads.

Most payloads come from a real deck driving the fake agent; the rest are built with the
core's own event classes, so a change of wire format breaks these tests too.
"""

from __future__ import annotations

import asyncio

import pytest
import urwid

from deck.agent import LOG_LINES
from deck.events import (
    AgentAnnouncement,
    AgentLog,
    AgentStateChanged,
    AskChanged,
    MessageDelta,
    MessageUpdated,
    QuestionRequested,
    TurnChanged,
    UsageChanged,
)
from deck.frontends.urwid import markdown
from deck.frontends.urwid.agents import AgentsPanel
from deck.frontends.urwid.app import FPS, ConsoleApp
from deck.frontends.urwid.common import canvas_text
from deck.frontends.urwid.conversation import ConversationView
from deck.frontends.urwid.dialogs import PermissionDialog, QuestionDialog
from deck.frontends.urwid.i18n import Strings
from deck.frontends.urwid.model import Model
from deck.frontends.urwid.views import LogsView

from .conftest import agent_block

pytestmark = pytest.mark.anyio


def feed(model: Model, events: list) -> None:
    for event in events:
        model.apply(event.name, event.payload())


def roster(*names: str) -> Model:
    model = Model()
    model.set_roster([{"name": n, "title": n.title(), "icon": n[0].upper(), "state": "stopped"} for n in names])
    model.take_changes()
    return model


def panel_text(model: Model, language: str = "en", frame: int = 0, width: int = 34) -> str:
    panel = AgentsPanel(Strings(language), lambda name: None, lambda action: None)
    panel.set_roster(list(model.agents))
    for number, agent in enumerate(model.agents.values(), 1):
        panel.update(agent, number, number == 1, frame)
    return canvas_text(panel, width, 20)


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
    model.apply("permission:requested", {"id": "perm-1", "agent": "beta", "toolCall": {}, "options": []})
    text = panel_text(model, frame=0)
    assert "1 A Alpha" in text and "⠋ starting…" in text
    assert "│   busy ⠋" in text and "│   ! needs input" in text
    assert "⟳ restart to apply changes" in text
    assert "ctx ██░░░░░░░░ 25%" in text
    assert "error" in text and "start failed: exit 3" in text and "missing API key" not in text
    assert "⠙ starting…" in panel_text(model, frame=1)  # the spinner turns


def test_agents_panel_in_french():
    model = roster("alpha", "beta")
    feed(model, [AgentStateChanged("alpha", "ready", True), AgentStateChanged("beta", "stopped", False),
                 UsageChanged("alpha", {"used": 1500, "size": 0})])  # fmt: skip
    model.apply("permission:requested", {"id": "perm-1", "agent": "alpha", "toolCall": {}, "options": []})
    text = panel_text(model, "fr")
    assert "prêt" in text and "arrêté" in text and "à redémarrer" in text and "attend une réponse" in text
    assert "ctx 1.5k" in text
    assert "▶ démarrer" in text and "■ arrêter" in text and "↻ redémarrer" in text


# -- conversation, from a real deck --------------------------------------------------------------


async def run_prompts(make_deck, prompts: list[str], flags: tuple[str, ...] = ()) -> tuple[object, Model, list]:
    deck, rec = make_deck(agent_block("a", *flags))
    model = roster("a")
    deck.subscribe(lambda e: model.apply(e.name, e.payload()))
    for prompt in prompts:
        deck.chat.send("a", prompt)
        count = len(rec.named("turn:changed", "a"))
        if prompt == "perm":
            request = await rec.wait_event("permission:requested", agent="a")
            await deck.chat.AnswerPermission(request["id"], "yes")
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
    assert "∴ thought (1 lines, Ctrl-T to show)" in text and "thinking" not in text.replace("thinking (", "")


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
    deck.subscribe(lambda e: model.apply(e.name, e.payload()))
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
    assert len(model.agents["a"].logs) == LOG_LINES == 200
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
    deck.subscribe(lambda e: model.apply(e.name, e.payload()))
    deck.chat.send("a", "perm")
    deck.chat.send("b", "perm")
    await rec.wait(lambda r: len(r.named("permission:requested")) == 2)
    assert [kind for kind, _ in model.pending()] == ["permission", "permission"]
    requests = [p for _, p in model.pending()]
    answers, moves = [], []
    dialog = PermissionDialog(Strings("en"), requests, 1, {"a": "Alpha", "b": "Beta"}, lambda *a: answers.append(a),
                              lambda: moves.append("closed"), moves.append)  # fmt: skip
    text = canvas_text(dialog, 80, 30)
    assert "Permission requested by Beta" in text and "request 2 of 2" in text
    assert "⚙ edit Edit file · pending" in text and "-a" in text and "+b" in text
    assert "1 Allow" in text and "2 Reject" in text
    dialog.keypress((80, 30), "tab")
    dialog.keypress((80, 30), "esc")
    assert moves == [1, "closed"]
    dialog.keypress((80, 30), "2")
    assert answers == [(requests[1]["id"], "no")]
    await deck.chat.AnswerPermission(*answers[0])
    await deck.chat.AnswerPermission(requests[0]["id"], "yes")
    await rec.wait(lambda r: len(r.named("permission:resolved")) == 2)
    assert model.pending() == []
    fr = canvas_text(PermissionDialog(Strings("fr"), requests, 0, {}, print, print, print), 80, 30)
    assert "Autorisation demandée par a" in fr and "demande 1 sur 2" in fr


# -- questions ---------------------------------------------------------------------------------------


def type_keys(widget, size, text: str) -> None:
    for ch in text:
        widget.keypress(size, ch)


async def test_question_dialog_from_a_real_question(make_deck):
    deck, rec = make_deck(agent_block("a"))
    model = roster("a")
    deck.subscribe(lambda e: model.apply(e.name, e.payload()))
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
    await deck.chat.AnswerQuestion(*answers[1])
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
    app = ConsoleApp(deck)
    app.attach(asyncio.get_running_loop())
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
        assert app.dialog_kind == "" and "1 permission request(s) and 1 question(s) waiting · F4 answer" in screen
        app.root.keypress(size, "f4")
        app.root.keypress(size, "shift tab")
        assert "› An" in canvas_text(app.root, *size)
        type_keys(app.root, size, "n")
        app.root.keypress(size, "enter")
        await rec.wait_event("question:resolved", agent="a")
        await rec.wait_event("turn:changed", agent="a", busy=False)
        app.refresh()
        screen = canvas_text(app.root, *size)
        assert "Permission requested by b" in screen  # the next ask
        assert "1 permission request(s) waiting · F4 answer" in screen
        app.root.keypress(size, "1")
        await rec.wait_event("permission:resolved", agent="b")
        app.refresh()
        screen = canvas_text(app.root, *size)
        assert app.dialog_kind == "" and "waiting" not in screen
        assert '{"action": "accept", "content": {"name": "Ann"}}' in screen
    finally:
        app.detach()


# -- announcements ---------------------------------------------------------------------------------


def test_announcements_beside_the_requester_and_overlay_on_the_target():
    model = roster("lead", "helper")
    feed(model, [AgentStateChanged("helper", "busy", False), AskChanged("lead", "helper", "t1", True)])
    _, target = conversation_text(model, "helper", size=(120, 10))
    assert "an agent is talking to it (lead)" in target.split("\n")[0]  # from the ask's start, before any announcement
    feed(model, [AgentAnnouncement("lead", "helper", "t1", f"step {i}", "2026-01-01T10:00:0{i % 10}.000Z") for i in range(25)])
    view, text = conversation_text(model, "lead", size=(120, 40))
    assert "Announcements" in text and "→ helper" in text and "step 24" in text
    assert "step 4\n" not in text + "\n" and len(model.agents["lead"].announcements) == 20
    _, target = conversation_text(model, "helper", size=(120, 10))
    assert "an agent is talking to it (lead)" in target.split("\n")[0]
    feed(model, [AskChanged("lead", "helper", "t1", False)])  # its final answer is out
    _, target = conversation_text(model, "helper", size=(120, 10))
    assert "talking" not in target
    _, fr = conversation_text(model, "lead", "fr", size=(120, 40))
    assert "Annonces" in fr


# -- the app, without a terminal -------------------------------------------------------------------


async def test_app_coalesces_redraws_and_handles_keys(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    app = ConsoleApp(deck)
    app.attach(asyncio.get_running_loop())
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
    app = ConsoleApp(deck)
    app.attach(asyncio.get_running_loop())
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

    assert palette("dark") is PALETTE
    light = {entry[0]: entry for entry in palette("light")}
    assert light["heading"][1:3] == ("bold,dark cyan", "default")
    assert light["state ready"][1] == "dark green" and light["system"][1] == "bold,brown"
    assert light["selected"][1:3] == ("default", "light gray")  # the terminal's text on a light highlight
    assert light["field focus"][1:3] == ("white", "dark blue")  # a colour pair of its own stays
    assert len(light) == len(PALETTE)
    for _name, fg, bg, *_ in palette("light"):  # every entry is a palette urwid accepts
        urwid.AttrSpec(fg, bg, 16)


async def test_the_console_takes_the_configs_theme(make_deck):
    from deck.frontends.urwid.common import palette

    deck, rec = make_deck('theme = "light"\n' + agent_block("a"))
    assert ConsoleApp(deck).palette == palette("light")
