"""`deck send` refused by deck itself (a budget reached) exits 5, as a refusal, never 2 as the
command's own mistake: alone and through a deck server. Real `deck` processes, real fake agents."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import agent_block
from tests.core.remote.test_server import clients, runtime, serve  # noqa: F401  (the deck server fixtures)
from tests.deck_process import DECK, write_config

pytestmark = pytest.mark.timeout(90)


def send(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DECK, "send", *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          stdin=subprocess.DEVNULL)  # fmt: skip


def test_a_send_refused_by_a_budget_exits_5_and_says_why(tmp_path) -> None:
    config = write_config(tmp_path / "deck.toml", agent_block("a", budget="1 USD") + agent_block("b"))
    spent = send("--config", str(config), "a", "spend 2", cwd=tmp_path)  # over the day's budget: the turn is stopped
    assert spent.returncode in (0, 6), spent.stderr
    refused = send("--config", str(config), "a", "hello", cwd=tmp_path)  # the day's spending is in the history
    assert (refused.returncode, refused.stdout) == (5, ""), refused.stderr
    assert "the budget of a (1 USD per day) is reached" in refused.stderr
    other = send("--config", str(config), "b", "hello", cwd=tmp_path)  # b has no budget
    assert (other.returncode, other.stdout) == (0, "You said: hello\n"), other.stderr
    wrong = send("--config", str(config), "nobody", "hello", cwd=tmp_path)  # the command's mistake stays 2
    assert wrong.returncode == 2 and "unknown agent 'nobody'" in wrong.stderr
    empty = send("--config", str(config), "b", "  ", cwd=tmp_path)
    assert empty.returncode == 2 and "empty message" in empty.stderr


def test_a_send_refused_by_a_servers_budget_exits_5(serve, clients) -> None:  # noqa: F811
    server = serve('[budget]\nperiod = "server"\n' + agent_block("a", budget="1 USD"))
    watcher = clients(server.path)
    watcher.request("ChatService.Send", {"agent": "a", "text": "spend 2"})
    watcher.event("budget:reached", agent="a", timeout=20)
    watcher.event("turn:changed", agent="a", busy=False, timeout=20)
    refused = send("--attach", server.name, "a", "hello")
    assert (refused.returncode, refused.stdout) == (5, ""), refused.stderr
    assert "the budget of a (1 USD since the server started) is reached" in refused.stderr
    wrong = send("--attach", server.name, "nobody", "hello")
    assert wrong.returncode == 2 and "unknown agent 'nobody' (agents: a)" in wrong.stderr
