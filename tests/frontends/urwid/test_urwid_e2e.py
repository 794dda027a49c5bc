"""The console end to end: `deck run --frontend=urwid` in a real pseudo-terminal (tmux), real fake agents.

Keys go in with `tmux send-keys`; what the screen shows comes back with `capture-pane`.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.conftest import FAKE_AGENT, agent_block

TMUX = "/usr/bin/tmux"


class Console:
    """deck's console running in a detached tmux session of `cols`×`rows`."""

    def __init__(self, tmp_path: Path, config: Path, cols: int = 120, rows: int = 40) -> None:
        self.socket = f"deck-test-{uuid.uuid4().hex[:8]}"
        state = tmp_path / "state"
        env = {
            "XDG_STATE_HOME": str(state),
            "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
            "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
            "TERM": "xterm-256color",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        }
        exported = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        deck = shlex.join([sys.executable, "-m", "deck", "run", "--frontend=urwid", "--config", str(config)])
        # The shell stays after deck exits, so the test can read the exit code and the restored screen.
        command = f"cd {shlex.quote(str(tmp_path))} && env {exported} {deck}; echo DECK-EXITED-$?; sleep 60"
        self.tmux("new-session", "-d", "-x", str(cols), "-y", str(rows), command)
        self.shell = psutil.Process(int(self.tmux("list-panes", "-F", "#{pane_pid}").strip()))
        self.deck = self._find_deck()

    def tmux(self, *args: str) -> str:
        return subprocess.run([TMUX, "-L", self.socket, "-f", "/dev/null", *args], check=True, capture_output=True,
                              text=True).stdout  # fmt: skip

    def _find_deck(self) -> psutil.Process:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            for child in self.shell.children(recursive=True):
                if "-m deck" in " ".join(child.cmdline()):  # deck.cli, or deck as the script runs it
                    return child
            time.sleep(0.05)
        raise AssertionError("deck did not start:\n" + self.screen())

    def agent_pids(self) -> set[int]:
        return {p.pid for p in self.deck.children(recursive=True)}

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", *keys)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-l", text)

    def wait(self, predicate: Callable[[str], bool] | str, timeout: float = 15.0) -> str:
        check = (lambda s: predicate in s) if isinstance(predicate, str) else predicate
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if check(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"not on screen within {timeout}s: {predicate!r}\n{screen}")
            time.sleep(0.05)

    def close(self) -> None:
        subprocess.run([TMUX, "-L", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def console(tmp_path: Path):
    made: list[Console] = []

    def start(config_text: str, **kwargs: int) -> Console:
        path = tmp_path / "deck.toml"
        path.write_text(config_text)
        made.append(Console(tmp_path, path, **kwargs))
        return made[-1]

    yield start
    for c in made:
        pids = c.agent_pids() if c.deck.is_running() else set()
        c.close()
        for pid in pids:  # never leave a stray agent behind a failed test
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass


def gone(pids: set[int], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]:
            return True
        time.sleep(0.05)
    return False


def logging_agent(name: str, line: str) -> str:
    """A fake agent that writes `line` to stderr as it starts."""
    script = f"echo {shlex.quote(line)} >&2; exec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_AGENT))}"
    return agent_block(name, command=["sh", "-c", script])


def test_console_in_english(console):
    c = console('language = "en"\n' + agent_block("alpha", title="Alpha") + logging_agent("beta", "beta says hello"))
    screen = c.wait("Message to Alpha")
    assert "1 A Alpha" in screen and "2 B beta" in screen and "stopped" in screen
    assert "Tab agent" in screen and "Ctrl-Q quit" in screen
    # Send a message: the agent starts and answers.
    c.type("hello there")
    c.keys("Enter")
    screen = c.wait("You said: hello there")
    assert "▸ you" in screen and "◆ Alpha" in screen
    c.wait(lambda s: "ready" in s.split("\n")[2])
    # A permission request: the dialog shows the tool call and its diff, answered from the keyboard.
    c.type("perm")
    c.keys("Enter")
    screen = c.wait("Permission requested by Alpha")
    assert "⚙ edit Edit file · pending" in screen and "+b" in screen and "1 Allow" in screen and "2 Reject" in screen
    assert "! needs input" in screen
    c.keys("1")
    screen = c.wait("permission: yes")
    assert "Edit file · completed" in screen and "Permission requested" not in screen
    # Switch agents with Tab; beta's request waits while we look at alpha, and stays reachable (F4).
    c.keys("Tab")
    c.wait("Message to beta")
    c.type("perm")
    c.keys("Enter")
    c.wait("Permission requested by beta")
    c.keys("Escape")
    c.wait(lambda s: "Permission requested" not in s and "1 permission request waiting · F4 answer" in s)
    c.keys("M-1")
    screen = c.wait("Message to Alpha")
    assert "You said: hello there" in screen
    c.keys("F4")
    screen = c.wait("Permission requested by beta")
    c.keys("2")
    c.wait(lambda s: "Permission requested" not in s and "waiting" not in s)
    c.keys("Tab")
    screen = c.wait("permission: no")
    assert "Edit file · failed" in screen
    # The logs view: Logs, then live lines as the agent restarts.
    c.keys("F2")
    screen = c.wait("Logs of beta")
    assert "beta says hello" in screen
    c.keys("F7")
    c.wait(lambda s: s.count("beta says hello") == 2)
    c.keys("Escape")
    c.wait(lambda s: "Logs of beta" not in s and "◆ beta" in s)
    # Ctrl-C never quits; Ctrl-Q quits at once when no agent is busy.
    pids = c.agent_pids()
    assert len(pids) == 2
    c.keys("C-c")
    c.wait("Ctrl-C does not quit deck")
    assert c.deck.is_running()
    c.keys("C-q")
    screen = c.wait("DECK-EXITED-0")
    assert gone(pids), "an agent outlived deck"
    assert "Agents" not in screen  # the terminal is back to the shell's screen


def test_console_in_french_quit_asks_while_busy(console, tmp_path: Path):
    c = console('language = "fr"\n' + agent_block("alpha") + agent_block("beta"))
    words = ("Message à alpha", "arrêté", "Tab agent", "Ctrl-Q quitter", "PgUp PgDn")
    c.wait(lambda s: all(w in s for w in words))  # the whole first frame, not one read as it is drawn
    c.type("bonjour")
    c.keys("Enter")
    screen = c.wait("You said: bonjour")
    assert "▸ vous" in screen
    c.wait("prêt")
    c.type("perm")
    c.keys("Enter")
    screen = c.wait(lambda s: "Autorisation demandée par alpha" in s and "Échap plus tard" in s)  # the whole dialog drawn
    assert "demande 1 sur 1" in screen and "attend une réponse" in screen
    c.keys("1")
    c.wait("permission: yes")
    c.keys("Tab")
    c.wait("Message à beta")
    c.type("slow")
    c.keys("Enter")
    c.wait("occupé")
    # A message sent while beta answers is queued.
    c.type("ensuite")
    c.keys("Enter")
    screen = c.wait("Message à beta · 1 en attente")
    assert "▸ vous (en attente)" in screen
    c.keys("C-c")
    c.wait("Ctrl-C ne quitte pas deck")
    pids = c.agent_pids()
    assert len(pids) == 2
    c.keys("C-q")
    screen = c.wait("Quitter deck ?")
    assert "1 agent encore au travail : beta" in screen
    c.keys("n")
    c.wait(lambda s: "Quitter deck ?" not in s)
    assert c.deck.is_running()
    c.keys("C-q")
    c.wait("Quitter deck ?")
    c.keys("o")
    c.wait("DECK-EXITED-0")
    assert gone(pids), "an agent outlived deck"


def test_console_resize_esc_cancel_and_config_view(console, tmp_path: Path):
    other = tmp_path / "other.toml"
    other.write_text(agent_block("gamma", title="Gamma"))
    c = console(agent_block("alpha"), cols=120, rows=40)
    c.wait("Message to alpha")
    c.type("slow")
    c.keys("Enter")
    c.wait("tick tick")
    c.keys("Escape")
    screen = c.wait("stopped: cancelled")
    assert "cancelled the turn of alpha" in screen
    # Resize: the layout follows the terminal.
    c.tmux("resize-window", "-x", "80", "-y", "24")
    # The input box is redrawn across the new width, at the new bottom.
    screen = c.wait(lambda s: any(line.startswith("└") and len(line) == 80 for line in s.split("\n")[-5:]))
    assert "Message to alpha" in screen and "stopped: cancelled" in screen
    c.tmux("resize-window", "-x", "120", "-y", "40")
    c.wait(lambda s: any(line.startswith("└") and len(line) == 120 for line in s.split("\n")))
    # The config view, then Choose: the file picker opens another config.
    c.keys("F3")
    screen = c.wait("Config · F3 or Esc to go back")
    assert f"File: {tmp_path / 'deck.toml'}" in screen and "Valid" in screen
    (tmp_path / "deck.toml").write_text(agent_block("alpha") + "[limits]\nmaxRunningAgents = 'many'\n")
    screen = c.wait("Invalid: the last valid config keeps running")
    assert "maxRunningAgents" in screen or "integer" in screen
    c.keys("c")
    c.wait("Choose a config file")
    c.type("other.toml")  # typed while browsing the list: it goes to the path
    c.wait(f"Path: {tmp_path}/other.toml")
    c.keys("Enter")
    screen = c.wait("1 G Gamma")
    assert "alpha" not in screen.split("Config")[0]
    c.wait(f"File: {other}")
    # Back to the first file (valid again) with Choose, then to the other one from Recent.
    (tmp_path / "deck.toml").write_text(agent_block("alpha"))
    c.keys("c")
    c.wait("Choose a config file")
    c.keys("Tab")
    c.type("deck.toml")
    c.keys("Enter")
    def deck_toml_first(screen: str) -> bool:  # the recent files, most recent first: once the view has them
        recent = screen.split("Recent config files")[-1]
        return "1 A alpha" in screen and -1 < recent.find(str(tmp_path / "deck.toml")) < recent.find(str(other))

    c.wait(deck_toml_first)
    c.keys("Down", "Down", "Enter")  # from Choose past the current file to the other one
    c.wait("1 G Gamma")
    c.keys("Escape")
    c.wait(lambda s: "Config ·" not in s and "Message to Gamma" in s)
    c.keys("C-q")
    c.wait("DECK-EXITED-0")


def test_console_answers_and_declines_questions(console):
    c = console(agent_block("alpha", title="Alpha") + agent_block("beta"))
    c.wait("Message to Alpha")
    c.type("question")
    c.keys("Enter")
    screen = c.wait("Question from Alpha")  # the selected agent's question opens at once
    assert "Your name?" in screen and "! needs input" in screen and "Esc later" in screen
    c.type("An")
    c.wait("› An")
    # Put off with Esc: it waits behind F4 with what was typed.
    c.keys("Escape")
    c.wait(lambda s: "Question from" not in s and "1 question waiting · F4 answer" in s)
    c.keys("F4")
    c.wait(lambda s: "Question from Alpha" in s and "› An" in s)
    c.type("n")
    c.keys("Enter")
    screen = c.wait('{"action": "accept", "content": {"name": "Ann"}}')
    assert "Question from" not in screen and "waiting" not in screen and "needs input" not in screen
    # Declined with Ctrl-D.
    c.type("question")
    c.keys("Enter")
    c.wait("Question from Alpha")
    c.keys("C-d")
    screen = c.wait('{"action": "decline"}')
    assert "Question from" not in screen and "needs input" not in screen
    # Another agent's question, put off, stays reachable from every agent with F4; Ctrl-S submits.
    c.keys("Tab")
    c.wait("Message to beta")
    c.type("question")
    c.keys("Enter")
    c.wait("Question from beta")
    c.keys("Escape")
    c.keys("M-1")
    screen = c.wait(lambda s: "Message to Alpha" in s and "1 question waiting · F4 answer" in s)
    assert "Question from" not in screen
    c.keys("F4")
    c.wait("Question from beta")
    c.type("Bo")
    c.keys("C-s")
    c.wait(lambda s: "Question from" not in s and "waiting" not in s)
    c.keys("Tab")
    c.wait('{"action": "accept", "content": {"name": "Bo"}}')
    c.keys("C-q")
    c.wait("DECK-EXITED-0")


def test_console_shows_a_broken_config_until_it_is_fixed(console, tmp_path: Path):
    from deck.config.check import parse

    c = console(agent_block("alpha"), cols=80, rows=24)
    c.wait("Message to alpha")
    broken = agent_block("alpha") + "[limits]\nhandshakeTimeout = 'many'\n"
    first = parse(broken).errors[0]
    (tmp_path / "deck.toml").write_text(broken)
    screen = c.wait("deck.toml:")  # on the conversation's screen, not only in the config view (F3)
    banner = next(line for line in screen.split("\n") if "deck.toml:" in line).strip()
    assert banner.startswith(f"deck.toml:{first.line}:{first.column}: {first.message}"[:70])
    assert "Config ·" not in screen
    (tmp_path / "deck.toml").write_text(agent_block("alpha", title="Alpha"))
    screen = c.wait(lambda s: "deck.toml:" not in s and "Message to Alpha" in s)
    c.keys("C-q")
    c.wait("DECK-EXITED-0")


def test_console_takes_back_a_queued_message_and_starts_a_new_conversation(console):
    """↑ on an empty input takes the last queued message back to edit it; Ctrl-N a new conversation."""
    c = console(agent_block("alpha"), cols=120, rows=40)
    c.wait("Ctrl-N new")  # in the hints
    c.type("sleep 2")
    c.keys("Enter")
    c.wait("busy")
    c.type("first draft")
    c.keys("Enter")
    c.wait("queued")
    c.keys("Up")
    c.wait(lambda s: "is back in the input" in s and "(removed from the queue: not sent)" in s)
    c.keys("BSpace", "BSpace", "BSpace", "BSpace", "BSpace")
    c.type("final")
    c.keys("Enter")
    screen = c.wait("You said: first final", timeout=20)
    assert "You said: first draft" not in screen
    c.keys("C-n")
    screen = c.wait("a new conversation with alpha")
    c.wait(lambda s: "You said: first final" not in s)


def test_console_completes_the_agents_slash_commands_with_tab(console):
    c = console(agent_block("alpha", "--commands", "review,refactor,test"), cols=120, rows=40)
    c.wait("Message to alpha")
    c.keys("F5")
    c.wait("ready")
    c.type("/re")
    c.keys("Tab")
    c.wait("/refactor /review")  # two begin so: both listed, the input at their common start
    c.type("v")
    c.keys("Tab")
    c.wait("/review: the agent's review")
    c.type("the diff")
    c.keys("Enter")
    c.wait("You said: /review the diff")
    c.type("/zz")
    c.keys("Tab")
    c.wait("has no slash command that begins so")


def test_console_settings_picker_sets_the_agents_model(console):
    """Ctrl-O: the agent's config options, one picked, then its value; the choice reaches the agent."""
    c = console(agent_block("alpha", "--mode-option", "--boolean-option"), cols=120, rows=40)
    c.wait("Message to alpha")
    c.keys("F5")
    c.wait("ready")
    c.keys("C-o")
    screen = c.wait("Settings of alpha")
    assert "Mode: default" in screen and "Model: M1" in screen and "Fast: off" in screen
    c.keys("2")
    c.wait("alpha · Model")
    c.keys("2")
    c.wait("alpha: Model is now M2")
    c.keys("C-o")
    c.wait("Model: M2")
    c.keys("3")
    c.wait("alpha · Fast")
    c.keys("1")
    c.wait("alpha: Fast is now on")
