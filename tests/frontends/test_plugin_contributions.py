"""What a plugin gives the user reaches every frontend as data, with no code of the plugin's in any of
them: its notices (`deck:notice`) and its actions (`DeckService.Actions`, in the snapshot).

The third-party plugin is the example of contrib/deck-stopwatch, installed as any plugin is (a
package on the path with a "deck" entry point): it says a slow turn with a notice and offers
`/turns [AGENT]`, a table. Line mode, the console (in a real terminal, tmux, and on canvases) and the
web page (a real Chromium) each show the notice and run the action, against real decks and real
agents; the console shows each kind of result where it reads (a diff in its diff view, stored
conversations and messages in its history's list), and rings an alert in a real terminal. And no
frontend imports a plugin.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pexpect
import pytest
from deck.frontends.urwid.app import ConsoleApp
from deck.frontends.urwid.common import canvas_text

from tests.browser import browser, page  # noqa: F401 (fixtures)
from tests.conftest import ROOT, agent_block
from tests.core.remote.test_server import runtime  # noqa: F401 (a fixture)
from tests.frontends.test_line import DECK, plain_env
from tests.frontends.test_line import line_deck  # noqa: F401 (a fixture)
from tests.frontends.urwid.test_urwid_e2e import TMUX
from tests.frontends.urwid.test_urwid_e2e import console as terminal_console  # noqa: F401 (a fixture)
from tests.frontends.urwid.test_urwid_widgets import console, until
from tests.frontends.web.test_web_newcomer import opened, say, serve  # noqa: F401 (serve: a fixture)
from tests.plugins.worktrees.test_worktrees import repo, turn, worktree_agent  # noqa: F401 (repo: a fixture)

pytestmark = pytest.mark.timeout(120)

FRONTENDS = ROOT / "frontends"
EXAMPLE = ROOT / "contrib" / "deck-stopwatch"
#: The example's config: every turn is slow, so every turn is said.
STOPWATCH = "[stopwatch]\nslow = 0\n"
SIZE = (120, 40)


# -- no frontend imports a plugin ---------------------------------------------------------------------


def plugin_imports(source: str) -> list[str]:
    """The imports of `source` that reach a plugin (`deck.plugins…`), as written."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name == "deck.plugins" or alias.name.startswith("deck.plugins.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if node.module == "deck.plugins" or node.module.startswith("deck.plugins."):
                found.append(node.module)
            elif node.module == "deck":
                found += [f"deck.{alias.name}" for alias in node.names if alias.name == "plugins"]
    return found


def test_no_frontend_imports_a_plugin() -> None:
    """A frontend shows what plugins give as data (notices, actions, events by their wire names): it
    imports none of them, not even for a type (a frontend attached to a server may lack the plugin)."""
    assert plugin_imports("from deck.plugins.notify.events import NotifySent") == ["deck.plugins.notify.events"]
    assert plugin_imports("if TYPE_CHECKING:\n    import deck.plugins.worktrees.events as w") == ["deck.plugins.worktrees.events"]
    assert plugin_imports("from deck import plugins, events") == ["deck.plugins"]
    assert plugin_imports("from .model import Model\nfrom deck.events import Notice") == []
    files = sorted(FRONTENDS.rglob("*.py"))
    assert FRONTENDS / "urwid" / "app.py" in files and FRONTENDS / "line.py" in files
    found = {str(path.relative_to(ROOT)): plugin_imports(path.read_text()) for path in files}
    assert {path: names for path, names in found.items() if names} == {}


# -- the example plugin, installed ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding deck-stopwatch as an installed package: its module and its distribution's
    metadata with the "deck" entry point, as pip leaves them."""
    folder = tmp_path_factory.mktemp("site")
    shutil.copytree(EXAMPLE / "deck_stopwatch", folder / "deck_stopwatch", ignore=shutil.ignore_patterns("__pycache__"))
    info = folder / "deck_stopwatch-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: deck-stopwatch\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[deck]\nstopwatch = deck_stopwatch\n")
    return folder


@pytest.fixture
def installed(site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """deck-stopwatch installed for this test: on the path of the decks it starts (and of this
    process), entry-point plugins loaded."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("DECK_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.syspath_prepend(str(site))
    return site


# -- line mode ----------------------------------------------------------------------------------------


def test_line_mode_says_the_plugins_notice_and_runs_its_action(installed: Path, line_deck: Any) -> None:  # noqa: F811
    deck = line_deck(STOPWATCH + agent_block("a", title="Alpha") + agent_block("b"))
    deck.expect(r"\[deck\] talking to a; /help lists the commands")
    deck.send("/help")
    deck.expect(r"\[deck\] the plugins' commands:")
    deck.expect(r"\[deck\] /turns \[AGENT\] +how long each turn took, the oldest first")
    deck.send("@a hello")
    deck.expect(r"\[a\] turn 1 took \d+\.\d s")  # the plugin's words, under its agent
    deck.send("/turns")
    deck.expect(r"\[deck\] agent: a · turn: 1 · seconds: \d+(\.\d+)?")
    deck.send("/turns b")
    deck.expect(r"\[b\] no turn timed yet")
    assert deck.close() == 0


# -- the console --------------------------------------------------------------------------------------


def number_of(screen: str, usage: str) -> str:
    """The number the actions menu gives the action typed `usage`."""
    found = re.search(rf"(\d)\s+{re.escape(usage)}", screen)
    assert found, screen
    return found.group(1)


@pytest.mark.skipif(not Path(TMUX).exists(), reason="tmux is not installed")
def test_the_console_says_the_plugins_notice_and_offers_its_action_in_its_menu(installed: Path, terminal_console: Any) -> None:  # noqa: F811
    c = terminal_console(STOPWATCH + agent_block("a", title="Alpha") + agent_block("b", title="Beta"), cols=120, rows=40)
    c.wait("Message to Alpha")
    c.type("hello")
    c.keys("Enter")
    screen = c.wait(lambda s: re.search(r"Alpha: turn 1 took \d+\.\d s", s) is not None)  # in the status line
    assert "Notices" in screen and "stopwatch" in screen  # kept beside Alpha's conversation too
    c.keys("C-p")
    screen = c.wait("/turns [AGENT]")
    assert "Actions · 1-9 or Enter pick · Esc close" in screen and "how long each turn took, the oldest first · stopwatch" in screen
    c.keys(number_of(screen, "/turns [AGENT]"))
    screen = c.wait("only this agent's turns")
    assert "› a" in screen  # the selected agent, at first
    c.keys("Enter")
    screen = c.wait(lambda s: "/turns a" in s and "Esc to go back" in s)
    assert re.search(r"agent\s+turn\s+seconds", screen) and re.search(r"\ba\s+1\s+\d+(\.\d+)?\b", screen), screen
    c.keys("Escape")
    c.wait(lambda s: "/turns a" not in s and "Message to Alpha" in s)
    c.keys("C-q")
    c.wait("DECK-EXITED-0")


def test_the_console_rings_an_alert_and_shows_the_terminals_notification(tmp_path: Path) -> None:
    """The notify plugin's alert is a notice with `bell` and `desktop`: the console, in a real terminal,
    rings the bell and writes the terminal's notification (OSC 777 and OSC 9)."""
    config = tmp_path / "deck.toml"
    config.write_text("[notify]\nbell = true\ndesktop = true\n" + agent_block("a"))
    child = pexpect.spawn(
        DECK[0], [*DECK[1:], "run", "--frontend=urwid", "--config", str(config)],
        env=plain_env(TERM="xterm-256color"), dimensions=(30, 100), echo=False, encoding="utf-8", timeout=30,
    )  # fmt: skip
    try:
        child.expect("Message to a")
        child.send("perm")
        child.send("\r")
        # The bell, then the notification (OSC 777, then OSC 9), written together as the request comes.
        child.expect(r"\x07\x1b\]777;notify;deck: a;permission: [^\x07]*\x07\x1b\]9;deck: a: permission: [^\x07]*\x07")
        child.expect("Permission requested by a")
        child.send("1")  # allow
        child.send("\x11")  # Ctrl-Q
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


async def settled(app: ConsoleApp) -> str:
    """The screen once the service calls the console made are answered."""
    while app._tasks:
        await asyncio.gather(*list(app._tasks))
    app.refresh()
    return canvas_text(app.root, *SIZE)


def press(app: ConsoleApp, *keys: str) -> None:
    for key in keys:
        app.root.keypress(SIZE, key)


def pick(app: ConsoleApp, name: str) -> None:
    """Ctrl-P, then the number of the action `name` in the menu."""
    press(app, "ctrl p")
    assert app.dialog_kind == "actions"
    number = [action["name"] for action in app.actions.actions].index(name) + 1
    assert number < 10
    press(app, str(number))


def status_line(app: ConsoleApp) -> str:
    app.refresh()
    return canvas_text(app.root, *SIZE).split("\n")[-2].strip()


@pytest.mark.anyio
async def test_the_console_menu_offers_an_installed_plugins_action_asks_its_parameters_and_shows_its_table(
    installed: Path, make_deck: Any
) -> None:
    deck, rec = make_deck(STOPWATCH + agent_block("a", title="Alpha") + agent_block("b", title="Beta"))
    assert deck.pm.has_plugin("stopwatch")  # from its entry point, as any third-party plugin
    app = await console(deck)
    try:
        deck.chat.send("a", "hello")
        said = await rec.wait_event("deck:notice", source="stopwatch")
        assert said["agent"] == "a" and status_line(app) == f"Alpha: {said['text']}"
        press(app, "ctrl p")
        menu = canvas_text(app.shown_dialog, 100, 30)
        number = number_of(menu, "/turns [AGENT]")
        assert "how long each turn took, the oldest first · stopwatch" in menu
        assert "/history [AGENT]" in menu and "/diff AGENT" in menu  # the built-in plugins' own, alike
        press(app, number)
        assert app.dialog_kind == "action"
        form = canvas_text(app.shown_dialog, 70, 12)
        assert "/turns [AGENT]" in form.split("\n")[0] and "agent  only this agent's turns" in form and "› a" in form
        press(app, "enter")  # the last field: runs it
        screen = await settled(app)
        assert app.view == "result" and "/turns a" in screen
        rows = [line for line in screen.split("\n") if re.search(r"agent\s+turn\s+seconds|\ba\s+1\s+\d", line)]
        one = re.search(r"\b1\b", rows[1]) if len(rows) == 2 else None
        assert one is not None and rows[0].index("turn") == one.start(), rows  # the row under its headings
        press(app, "esc")
        assert app.view == "chat"

        pick(app, "turns")
        press(app, "backspace", "b", "enter")  # another agent's: none yet, in the plugin's words
        await settled(app)
        assert app.view == "chat" and status_line(app) == "/turns b: no turn timed yet"
        pick(app, "turns")
        press(app, "backspace", "z", "enter")  # refused by the plugin's service: said
        await settled(app)
        assert "unknown agent 'z' (agents: a, b)" in status_line(app)
        pick(app, "turns")
        press(app, "esc")  # back to the menu, then out
        assert app.dialog_kind == "actions"
        press(app, "esc")
        assert app.dialog_kind == ""

        press(app, "f1")  # the help lists the menu's key, and its own
        help_text = " ".join(canvas_text(app.shown_dialog, 100, 200).replace("│", " ").split())
        assert "Ctrl-P what the plugins offer to do: pick one, give its parameters, see its result" in help_text
        assert "The actions (Ctrl-P), and an action's parameters 1…9 pick the action of that number" in help_text
        press(app, "esc")

        deck.notice("notify", "finished its turn", agent="a", level="info", bell=True)  # an alert: rung, not said
        assert "finished its turn" not in status_line(app)
        assert all("finished" not in n["text"] for n in app.model.agents["a"].said)
    finally:
        app.detach()


@pytest.mark.anyio
async def test_the_console_shows_each_kind_of_result_where_it_reads(make_deck: Any, repo: Path) -> None:  # noqa: F811
    """The built-in plugins' actions through the same menu: a diff in the diff view (with none of the
    worktree view's keys), stored conversations and messages in the history's list (Enter reopens
    one), a conversation made current by showing its agent."""
    deck, rec = make_deck(worktree_agent("a", repo) + agent_block("b", title="Beta"))
    await deck.startup()  # the history records
    app = await console(deck)
    try:
        await turn(deck, rec, "a", "write notes.txt pineapple")
        pick(app, "diff")
        press(app, "enter")
        screen = await settled(app)
        assert app.view == "result" and "/diff a" in screen and "+++ b/notes.txt" in screen and "+pineapple" in screen
        assert "m merge" not in screen and "Esc to go back" in screen
        press(app, "m")  # no merge here: it is the worktree view's (F9)
        assert app.dialog_kind == "" and (repo / "notes.txt").exists() is False
        press(app, "esc")

        pick(app, "history")
        press(app, "enter")
        await settled(app)
        assert app.dialog_kind == "history"
        listed = canvas_text(app.shown_dialog, 100, 20)
        assert "/history a · Enter reopen · Esc close" in listed and "a · write notes.txt pineapple" in listed
        press(app, "enter")  # reopens the one focused
        await settled(app)
        assert app.dialog_kind == "" and app.notice == "reopened a conversation of a"

        pick(app, "search")
        press(app, "enter")  # WORDS is required: said, nothing runs
        assert app.dialog_kind == "action" and "WORDS is required" in canvas_text(app.shown_dialog, 70, 12)
        press(app, *"pineapple", "enter")
        await settled(app)
        listed = canvas_text(app.shown_dialog, 100, 20)
        assert app.dialog_kind == "history" and "/search pineapple" in listed and "pineapple" in listed.split("\n", 1)[1]
        press(app, "esc")

        app.select("b")
        [stored] = await deck.call("ChatService.History", {"agent": "a"})
        pick(app, "open")
        press(app, *stored["id"], "enter")
        await settled(app)
        assert app.selected == "a" and app.notice == "reopened a conversation of a"  # its agent shown
    finally:
        app.detach()


# -- the web page -------------------------------------------------------------------------------------


def test_the_page_shows_the_plugins_notice_and_runs_its_action_from_its_menu(installed: Path, page: Any, serve: Any) -> None:  # noqa: F811
    served = serve(STOPWATCH + agent_block("a", title="Alpha") + agent_block("b", title="Beta"))
    opened(page, served)
    say(page, "hello pineapple")
    toast = page.locator(".toast.warning", has_text="Alpha: turn 1 took")
    toast.wait_for()
    assert re.fullmatch(r"Alpha: turn 1 took \d+\.\d s", toast.inner_text())

    page.click("#actions-open")
    page.wait_for_selector("#actions[open]")
    item = page.locator("#actions-list button[data-action=turns]")
    assert item.inner_text().split() == "/turns [AGENT] how long each turn took, the oldest first · stopwatch".split()
    assert page.locator("#actions-list button[data-action=history]").count() == 1  # the built-in plugins' alike
    item.click()
    assert page.inner_text("#actions-title") == "/turns [AGENT]"
    field = page.locator("#actions-params select[name=agent]")
    assert field.input_value() == "a"  # the selected agent, at first
    assert page.eval_on_selector_all("#actions-params select[name=agent] option", "os => os.map(o => o.value)") == ["", "a", "b"]
    page.click("#actions-buttons button.primary")
    page.wait_for_selector("#actions-result table.result")
    cells = page.eval_on_selector_all("#actions-result table.result tr", "rows => rows.map(r => [...r.children].map(c => c.innerText))")
    assert cells[0] == ["agent", "turn", "seconds"] and cells[1][:2] == ["a", "1"] and len(cells) == 2
    assert page.inner_text("#actions-result .ran") == "/turns a"
    field.select_option("b")
    page.click("#actions-buttons button.primary")
    page.wait_for_selector("#actions-result .empty:text('no turn timed yet')")

    page.click("#actions-buttons button:text('Back')")
    page.click("#actions-list button[data-action=search]")
    page.click("#actions-buttons button.primary")  # WORDS is required: nothing runs
    page.wait_for_selector("#actions-error:text('WORDS is required. Nothing was run.')")
    page.fill("#actions-params input[name=query]", "pineapple")
    page.press("#actions-params input[name=query]", "Enter")
    hits = page.locator("#actions-result .list .item")
    hits.first.wait_for()
    assert set(page.eval_on_selector_all("#actions-result .list .item mark", "ms => ms.map(m => m.innerText)")) == {"pineapple"}
    assert any(text.startswith("Alpha · user · ") for text in hits.all_inner_texts())

    page.click("#actions-buttons button:text('Back')")
    page.click("#actions-list button[data-action=history]")
    page.locator("#actions-params select[name=agent]").select_option("")  # every agent's
    page.click("#actions-buttons button.primary")
    row = page.locator("#actions-result .list .item")
    row.wait_for()
    assert "hello pineapple" in row.inner_text() and row.inner_text().split("\n")[1].startswith("Alpha · ")

    page.click("#actions-buttons button:text('Back')")
    page.click("#actions-list button[data-action=diff]")
    page.click("#actions-buttons button.primary")  # a has no worktree: the plugin's refusal is said
    page.wait_for_selector("#actions-error:text('no worktree of')")
    page.click("#actions-buttons button:text('Close')")
    page.wait_for_selector("#actions", state="hidden")
