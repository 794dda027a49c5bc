"""The console's widgets rendered to text (urwid canvases, no terminal), fed with real event payloads.

Most payloads come from a real deck driving the fake agent; the rest are built with the
core's own event classes, so a change of wire format breaks these tests too.
"""

from __future__ import annotations

import asyncio

import pytest

from deck.events import (
    AgentAnnouncement,
    AgentStateChanged,
    AskChanged,
    MessageDelta,
    MessageUpdated,
    TurnChanged,
    UsageChanged,
)
from deck.frontends.urwid import markdown
from deck.frontends.urwid.agents import AgentsPanel
from deck.frontends.urwid.app import FPS, ConsoleApp
from deck.frontends.urwid.common import canvas_text
from deck.frontends.urwid.conversation import ConversationView
from deck.frontends.urwid.dialogs import PermissionDialog
from deck.frontends.urwid.i18n import Strings
from deck.frontends.urwid.model import Model

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


# -- permission dialog ---------------------------------------------------------------------------


async def test_permission_dialog_from_real_requests_of_two_agents(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    model = roster("a", "b")
    deck.subscribe(lambda e: model.apply(e.name, e.payload()))
    deck.chat.send("a", "perm")
    deck.chat.send("b", "perm")
    await rec.wait(lambda r: len(r.named("permission:requested")) == 2)
    requests = model.pending()
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


# -- announcements ---------------------------------------------------------------------------------


def test_announcements_beside_the_requester_and_overlay_on_the_target():
    model = roster("lead", "helper")
    feed(model, [AgentStateChanged("helper", "busy", False), AskChanged("lead", "helper", "t1", True)])
    _, target = conversation_text(model, "helper", size=(120, 10))
    assert "an agent is talking to it (lead)" in target.split("\n")[0]  # from the ask's start, before any announcement
    feed(model, [AgentAnnouncement("lead", "helper", f"t1", f"step {i}", "2026-01-01T10:00:0{i % 10}.000Z") for i in range(25)])
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
    app._loop = asyncio.get_running_loop()
    app.load()
    deck.subscribe(app.on_event)
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
