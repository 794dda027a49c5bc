"""`deck run --frontend=NAME` checks NAME before anything runs or attaches, and names the frontend a
typo is likely of. Real `deck` processes, a real `deck serve` of the same config."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import agent_block
from tests.core.remote.test_server import clients, runtime, serve  # noqa: F401  (the deck server fixtures)
from tests.deck_process import DECK, write_config

pytestmark = pytest.mark.timeout(60)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DECK, "run", *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def test_a_mistyped_frontend_beside_a_server_is_refused_before_attaching(serve, clients) -> None:  # noqa: F811
    server = serve(agent_block("a"))
    config = server.popen.args[server.popen.args.index("--config") + 1]
    done = run("--frontend=urwd", "--config", config)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "deck: unknown frontend 'urwd': did you mean urwid? (available: jsonl, line, urwid)\n"
    watcher = clients(server.path)
    assert len(watcher.call("DeckService.Clients")) == 1  # nobody attached: the watcher alone


def test_a_frontend_switched_off_or_unknown_is_refused_at_once(tmp_path, runtime) -> None:  # noqa: F811
    config = write_config(tmp_path / "deck.toml", '[plugins]\ndisabled = ["line"]\n' + agent_block("a"))
    off = run("--frontend=line", "--config", str(config))
    assert off.returncode == 2 and off.stderr == "deck: unknown frontend 'line' (available: jsonl, urwid)\n"
    other = run("--frontend=nothing-like-it", "--config", str(config))
    assert other.returncode == 2 and other.stderr == "deck: unknown frontend 'nothing-like-it' (available: jsonl, urwid)\n"
