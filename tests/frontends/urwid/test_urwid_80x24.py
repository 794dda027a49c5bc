"""The console end to end at the sizes people run it: 80×24, the smallest it is made for, and 160×45.

deck runs in tmux (`tests/frontends/urwid/test_urwid_e2e.py`) with the demo agent or the fake one; what the screen
shows is read row by row: what must stay in view, where each box starts and ends.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest
from deck.frontends.urwid.app import panel_width
from deck.testing import demo_agent

from tests.conftest import FAKE_AGENT, agent_block
from tests.core.remote.test_attach_frontends import AttachedConsole, server  # noqa: F401  (a fixture)
from tests.frontends.urwid.test_urwid_e2e import TMUX, Console, console  # noqa: F401  (a fixture)
from tests.plugins.worktrees.test_worktrees import make_repo

pytestmark = [
    pytest.mark.skipif(not Path(TMUX).exists(), reason="tmux is not installed"),
    pytest.mark.timeout(90),
]

SIZES = [(80, 24), (160, 45)]
TOOL = "⚙ edit Add type hints to greet.py · pending"


def box(rows: list[str], title: str) -> tuple[int, int, int]:
    """The box whose top border holds `title`: its first row, its last row, its first column."""
    top = next(i for i, row in enumerate(rows) if title in row)
    left = rows[top].index("┌", max(0, rows[top].index(title) - 3))
    bottom = next(i for i in range(top + 1, len(rows)) if rows[i][left : left + 1] == "└")
    return top, bottom, left


def asking_demo(console, cols: int, rows: int) -> Console:
    """The demo agent's console of `cols`×`rows`, its permission dialog open."""
    c = console(demo_agent("demo", title="Demo") + agent_block("b"), cols=cols, rows=rows)
    c.wait("Message to Demo")
    c.type("hello")
    c.keys("Enter")
    c.wait(lambda s: "Permission requested by Demo" in s and "request 1 of 1" in s)
    return c


@pytest.mark.parametrize(("cols", "rows"), SIZES)
def test_the_permission_dialog_shows_the_request_and_its_options_and_scrolls_the_diff(console, cols, rows):
    c = asking_demo(console, cols, rows)
    screen = c.wait(TOOL)
    lines = screen.split("\n")
    top, bottom, left = box(lines, "Permission requested by Demo")
    inside = [line[left:] for line in lines[top : bottom + 1]]
    assert top == 0 and left == panel_width(cols) and TOOL in inside[1]  # the request's title, first
    assert any("1 Allow" in line for line in inside) and any("2 Reject" in line for line in inside)
    assert "request 1 of 1" in inside[-2]
    if cols == 80:  # the diff takes the rows left, and scrolls
        assert "+    print(f'hello {name}')" not in "\n".join(inside)
        assert any("lines 1–" in line and "PgUp PgDn scroll" in line for line in inside)
        c.keys("PageDown")
        screen = c.wait(lambda s: "+    print(f'hello {name}')" in "\n".join(s.split("\n")[top:bottom]))
        assert TOOL in screen.split("\n")[1]  # the title stays
    else:  # all of it fits: the dialog is as tall as it, borders, title, input and place, diff, options
        assert "+    print(f'hello {name}')" in "\n".join(inside) and "PgUp PgDn scroll" not in screen
        assert bottom - top + 1 == 2 + 3 + 7 + 1 + 2 + 1
    c.keys("Enter")  # allows once: the default
    c.wait(lambda s: "The edit was applied" in s and "ready" in s.split("\n")[2])
    c.keys("C-q")
    c.wait("DECK-EXITED-0")


@pytest.mark.parametrize(("cols", "rows"), SIZES)
def test_a_question_dialog_is_as_tall_as_its_content_in_the_conversations_place(console, cols, rows):
    c = asking_demo(console, cols, rows)
    c.keys("Escape")
    c.wait(lambda s: "Permission requested" not in s)
    c.keys("C-q")  # the demo agent is busy: quitting asks
    screen = c.wait(lambda s: "Quit deck?" in s and "n  no" in s)  # the whole dialog drawn
    lines = screen.split("\n")
    top, bottom, left = box(lines, "Quit deck?")
    inside = "\n".join(line[left:] for line in lines[top : bottom + 1])
    panel = panel_width(cols)
    assert left >= panel and all(line[panel - 1] == "│" for line in lines[top : bottom + 1])  # the panel stays whole
    assert inside.index("y  yes, quit") < inside.index("n  no")  # yes first, as every question of the console
    assert "1 agent still working: Demo. Quit and stop it?" in inside
    assert bottom - top + 1 == 6  # its borders, its text, a blank line, two answers: no more
    c.keys("Enter")  # no, the default
    c.wait(lambda s: "Quit deck?" not in s)
    c.keys("C-q")
    c.wait("Quit deck?")
    c.keys("y")
    c.wait("DECK-EXITED-0")


@pytest.mark.parametrize(("cols", "rows"), SIZES)
def test_the_history_takes_the_conversations_place_and_the_panel_stays_whole(console, cols, rows):
    c = console(agent_block("a", title="Alpha") + agent_block("b"), cols=cols, rows=rows)
    c.wait("Message to Alpha")
    c.type("pineapple notes")
    c.keys("Enter")
    c.wait("You said: pineapple notes")
    before = c.screen().split("\n")
    c.keys("F8")
    screen = c.wait(lambda s: "History of Alpha" in s and "pineapple notes" in s.split("History of")[1])
    lines = screen.split("\n")
    top, bottom, left = box(lines, "History of Alpha")
    panel = panel_width(cols)
    assert (top, left) == (0, panel) and "Esc close" in lines[0]
    assert lines[bottom + 1].startswith("┌ Message to Alpha")  # down to the input, which stays
    assert [line[:panel] for line in lines[: bottom + 1]] == [line[:panel] for line in before[: bottom + 1]]
    assert all(line[panel] == "│" and line.rstrip().endswith("│") for line in lines[top + 1 : bottom])
    c.keys("Escape")
    c.wait(lambda s: "History of" not in s)
    c.keys("C-q")
    c.wait("DECK-EXITED-0")


def test_f4_says_when_nothing_waits_and_opens_the_oldest_request(console):
    c = console(agent_block("a", title="Alpha") + agent_block("b", title="Beta"), cols=80, rows=24)
    c.wait("Message to Alpha")
    c.keys("F4")
    c.wait("nothing waits for an answer")
    c.type("perm")
    c.keys("Enter")
    c.wait(lambda s: "Permission requested by Alpha" in s and "request 1 of 1" in s)
    c.keys("Escape")
    c.wait(lambda s: "Permission requested" not in s)  # else Esc and Tab come as one key, Alt-Tab
    c.keys("Tab")
    c.wait("Message to Beta")
    c.type("perm")
    c.keys("Enter")
    c.wait(lambda s: "Permission requested by Beta" in s and "request 2 of 2" in s)  # Beta's own, at once
    c.keys("Escape")
    c.wait(lambda s: "Permission requested" not in s and "2 permission requests waiting" in s)
    c.keys("F4")
    c.wait(lambda s: "Permission requested by Alpha" in s and "request 1 of 2" in s)  # the one waiting longest
    c.keys("Enter")  # allowed once
    c.wait(lambda s: "Permission requested by Beta" in s and "request 1 of 1" in s)
    c.keys("2")
    c.wait(lambda s: "permission: no" in s and "waiting" not in s)
    c.keys("F9")
    # The whole dialog, not a capture taken while tmux was still drawing it (its title alone):
    screen = c.wait(lambda s: "Beta has no worktree" in s and "F9 or Esc to go back" in s)
    assert "m merge" not in screen and "x remove" not in screen
    c.keys("x", "F9")  # nothing to remove: no question asked, F9 goes back at once
    screen = c.wait(lambda s: "Beta has no worktree" not in s and "Message to Beta" in s)
    assert "Remove" not in screen
    c.keys("C-q")
    c.wait("DECK-EXITED-0")


@pytest.mark.parametrize(("cols", "rows"), SIZES)
def test_an_attached_console_names_its_server_says_how_to_come_back_and_that_it_was_stopped(server, cols, rows):
    s = server(agent_block("a", title="Alpha"))
    c = AttachedConsole(s, cols, rows)
    server.consoles.append(c)
    screen = c.wait(lambda s: "Message to Alpha" in s and s.rstrip().endswith("detach"))  # the whole screen drawn
    title = "Agents · server t" if cols >= 160 else "server t"
    assert screen.startswith(f"┌ {title} ─")
    assert screen.rstrip().endswith("Ctrl-Q detach") and "Ctrl-Q quit" not in screen
    c.keys("C-q")
    c.wait("Leave deck?")
    c.keys("Enter")  # detach
    c.wait("DECK-EXITED-0")
    said = c.tmux("capture-pane", "-p", "-J")  # its lines as written, however the screen wrapped them
    assert "deck: detached from deck server t (it goes on; deck attach t to come back, deck stop t to end it)" in said
    c = AttachedConsole(s, cols, rows)
    server.consoles.append(c)
    c.wait("Message to Alpha")
    assert s.deck("stop", "t").returncode == 0
    screen = c.wait("DECK-EXITED-")
    assert "deck: the deck server t was stopped" in screen and "went away" not in screen


def dialog_rows(screen: str, title: str) -> list[str]:
    """The rows inside the box whose top border holds `title`, its borders left out."""
    lines = screen.split("\n")
    top, bottom, left = box(lines, title)
    right = lines[top].index("┐", left)
    return [line[left + 1 : right] for line in lines[top + 1 : bottom]]


def test_the_settings_picker_shows_the_number_of_each_setting_and_value(console):
    c = console(agent_block("alpha", "--mode-option", "--boolean-option"), cols=80, rows=24)
    c.wait("Message to alpha")
    c.keys("F5")
    c.wait(lambda s: "ready" in s.split("\n")[2])
    c.keys("C-o")
    screen = c.wait(lambda s: "Settings of alpha" in s and "Esc  stay" in s)
    rows = [row.strip() for row in dialog_rows(screen, "Settings of alpha")]
    assert "Pick one to change it (its number, or Enter):" in rows
    assert rows[rows.index("1  Mode: default") :] == ["1  Mode: default", "2  Model: M1", "3  Fast: off", "Esc  stay"]
    c.keys("2")
    screen = c.wait(lambda s: "alpha · Model" in s and "Esc  stay" in s)
    rows = [row.strip() for row in dialog_rows(screen, "alpha · Model")]
    assert rows[rows.index("1  M1") :] == ["1  M1", "2  M2", "Esc  stay"]
    c.keys("2")
    c.wait("alpha: Model is now M2")
    c.keys("C-q")
    c.wait("DECK-EXITED-0")


#: A form of three fields, taller than the rows a dialog gets at 80×24.
FORM = {
    "mode": "form",
    "message": "Before I open the pull request, a few details:",
    "requestedSchema": {"type": "object", "required": ["branch"], "properties": {
        "branch": {"type": "string", "title": "Branch name", "description": "where the work is pushed"},
        "reviewers": {"type": "array", "title": "Reviewers", "description": "who is asked to review it"},
        "draft": {"type": "boolean", "title": "Draft", "description": "open it as a draft", "default": True},
    }},
}  # fmt: skip


def test_a_question_opens_at_its_top_with_its_message_and_first_field_in_view(console):
    c = console(agent_block("alpha", title="Alpha"), cols=80, rows=24)
    c.wait("Message to Alpha")
    c.type("rpc elicitation/create " + json.dumps(FORM))
    c.keys("Enter")
    screen = c.wait(lambda s: "Question from Alpha" in s and "1 question waiting" in s)
    rows = dialog_rows(screen, "Question from Alpha")
    assert "lines" not in rows[-1] and "Decline" not in "\n".join(rows)  # it is taller than its place: it scrolls
    assert rows[0].startswith("request 1 of 1")
    assert rows[2].startswith("Before I open the pull request, a few details:")
    assert rows[4].startswith("Branch name *") and rows[5].startswith("where the work is pushed")
    assert rows[6].startswith("›")
    c.type("feature/x")  # the first field has the focus
    screen = c.wait("› feature/x")
    assert dialog_rows(screen, "Question from Alpha")[6].startswith("› feature/x")
    c.keys("C-s")
    c.wait(lambda s: '"action": "accept"' in s and '"feature/x", "draft": true}' in s)  # the answer, typed
    c.keys("C-q")
    c.wait("DECK-EXITED-0")


def permission(path: str) -> dict:
    """A permission request to write `path`, as Claude Code's adapter asks it: the path in its title,
    its input, its location and its diff."""
    return {"toolCall": {"toolCallId": "w1", "title": f"Write {path}", "kind": "edit", "status": "pending",
                         "rawInput": {"file_path": path, "content": "notes\n"}, "locations": [{"path": path}],
                         "content": [{"type": "diff", "path": path, "oldText": None, "newText": "notes\n"}]},
            "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "no", "name": "Reject", "kind": "reject_once"}]}  # fmt: skip


def test_the_permission_dialog_shows_paths_in_the_agents_worktree_relative_to_it(console, tmp_path):
    repo = make_repo(tmp_path / "repo")
    told = tmp_path / "agent-folder"  # where the agent runs: its worktree, which only deck chooses
    script = f"pwd > {shlex.quote(str(told))}; exec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_AGENT))}"
    c = console(agent_block("alpha", title="Alpha", command=["sh", "-c", script], cwd=str(repo), worktree=True),
                cols=80, rows=24)  # fmt: skip
    c.wait("Message to Alpha")
    c.type("hello")
    c.keys("Enter")
    c.wait("You said: hello")
    worktree = told.read_text().strip()
    assert worktree != str(repo) and len(worktree) > 40
    c.type("rpc session/request_permission " + json.dumps(permission(f"{worktree}/src/notes.md")))
    c.keys("Enter")
    # Its paths are relative once the console knows the agent's folder (read as the agent becomes
    # ready; on a busy machine the request may come first and be drawn again then).
    screen = c.wait(lambda s: "Permission requested by Alpha" in s and "2 Reject" in s and "Write src/notes.md" in s)
    rows = dialog_rows(screen, "Permission requested by Alpha")
    text = "\n".join(rows)
    assert rows[0].strip().startswith("⚙ edit Write src/notes.md · pending")
    assert '{"file_path":"src/notes.md"' in text and "@ src/notes.md" in text and "+++ bsrc/notes.md" not in text
    assert "new file: src/notes.md" in text and "+++ b/src/notes.md" in text
    assert worktree not in "".join(row.strip() for row in rows) and "/src" not in text.replace("a/src", "").replace("b/src", "")
    c.keys("PageDown")
    screen = c.wait(lambda s: "+notes" in s)
    assert worktree not in "".join(row.strip() for row in dialog_rows(screen, "Permission requested by Alpha"))
    c.keys("1")
    c.wait(lambda s: '"optionId": "yes"' in s and "Permission requested" not in s and "waiting" not in s)
    c.keys("C-q")
    if "Quit deck?" in c.wait(lambda s: "DECK-EXITED-" in s or "Quit deck?" in s):  # the worktree is read after the turn
        c.keys("y")
    c.wait("DECK-EXITED-0")


def help_text(screen: str) -> str:
    return " ".join(" ".join(dialog_rows(screen, "Keys ·")).split())


def test_f1_opens_the_keys_and_esc_closes_them(console):
    c = console(agent_block("alpha", title="Alpha"), cols=80, rows=24)
    screen = c.wait("Message to Alpha")
    assert screen.rstrip().split("\n")[-1].startswith("F1 help  Enter send")
    c.keys("F1")
    screen = c.wait(lambda s: "Keys · PgUp PgDn scroll · Esc close" in s and "Ctrl-N" in s)
    lines = screen.split("\n")
    top, bottom, left = box(lines, "Keys ·")
    assert (top, left) == (0, panel_width(80)) and lines[bottom + 1].startswith("┌ Message to Alpha")
    first = help_text(screen)
    assert first.startswith("The console F1 this help")
    assert "Enter send to the selected agent (queued while it answers)" in first
    assert "Ctrl-N a new conversation with the agent" in first
    c.keys("PageDown")
    # Scrolled down to the keys below: waited for whole (a redraw may reach the screen in pieces).
    screen = c.wait(lambda s: "Keys ·" in s and "F9 the agent's worktree as a diff" in help_text(s))
    assert help_text(screen) != first
    assert "Ctrl-O the agent's settings: model, mode…" in first + help_text(screen)
    c.type("hello")  # the help has the keys: nothing reaches the input
    c.keys("Escape")
    screen = c.wait(lambda s: "Keys ·" not in s and "Message to Alpha" in s)
    assert "hello" not in screen
    c.keys("F2")  # a view: ? opens the help too
    c.wait("Logs of Alpha")
    c.type("?")
    c.wait("Keys · PgUp PgDn scroll")
    c.keys("F1")  # F1 closes it as well
    c.wait(lambda s: "Keys ·" not in s and "Logs of Alpha" in s)
    c.keys("Escape")
    c.wait(lambda s: "Logs of Alpha" not in s)
    c.type("?")  # in the input, ? is typed
    c.wait(lambda s: "│?" in s and "Keys ·" not in s)
    c.keys("C-q")
    c.wait("DECK-EXITED-0")


def test_the_agents_panel_says_everything_in_its_18_columns(console, tmp_path):
    title = "Claude Code (worktree)"
    config = agent_block("alpha", title=title) + agent_block("beta", title="Beta")
    c = console(config, cols=80, rows=24)
    c.wait("Message to Claude Code (worktree)")
    c.type("usage")  # the context, and no cost
    c.keys("Enter")
    c.wait(lambda s: "ctx" in s and "ready" in s)
    (tmp_path / "deck.toml").write_text(agent_block("alpha", "--modes", title=title) + agent_block("beta", title="Beta"))
    c.wait("⟳")  # the config changed under the running agent
    c.type("perm")
    c.keys("Enter")
    c.wait(lambda s: "Permission requested" in s and "needs" in s)
    time.sleep(0.3)  # the spinner turns: its row is drawn again, the same
    panel = [line[1 : panel_width(80) - 1] for line in c.screen().split("\n")[1:14]]
    assert "…" not in "".join(panel)
    assert panel[:2] == ["1 A Claude Code ", "    (worktree)  "]
    rows = [row.rstrip() for row in panel]
    assert "   ! needs input" in rows and "   cost unknown" in rows
    at = rows.index("   ⟳ restart to")
    assert rows[at + 1] == "   apply changes"
    c.keys("1")
    c.wait("permission: yes")
    c.keys("C-q")
    c.wait("DECK-EXITED-0")


def test_a_budget_reached_and_a_sandbox_read_whole_in_the_panels_18_columns(console, tmp_path):
    reached = "budget reached: 1 USD since the server started, 1.50 USD spent; messages are refused"
    config = ('[budget]\nperiod = "server"\n' + agent_block("alpha", title="Alpha", budget="1 USD")
              + agent_block("beta", title="Beta") + "sandbox = { network = false }\n")  # fmt: skip
    c = console(config, cols=80, rows=24)

    def panel(screen: str) -> list[str]:
        return [line[1 : panel_width(80) - 1].rstrip() for line in screen.split("\n")[1:15]]

    rows = panel(c.wait("Message to Alpha"))
    assert rows[:6] == ["1 A Alpha", "   stopped", "", "2 B Beta ▢", "   (no network)", "   stopped"]
    c.type("spend 1.5")
    c.keys("Enter")
    rows = panel(c.wait(lambda s: "refused" in s and "cost 1.50 USD" in s))  # the whole notice drawn
    assert rows[:2] == ["1 A Alpha", "   ready"] and "…" not in "".join(rows)
    assert reached in " ".join(" ".join(rows).split())  # on its agent, every word of it
    (tmp_path / "deck.toml").write_text(config.replace('budget = "1 USD"', 'budget = "5 USD"'))
    c.wait(lambda s: "budget" not in "".join(line[: panel_width(80)] for line in s.split("\n")))  # taken back
    c.keys("C-q")
    c.wait("DECK-EXITED-0")
