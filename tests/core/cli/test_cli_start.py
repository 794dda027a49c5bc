"""What `deck run`, `send` and `serve` say and do as they start: a server already running the config,
an interrupted `deck serve --detach`, typos in the config. Real deck processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from deck.remote.serverdir import socket_path

from tests.conftest import agent_block
from tests.core.remote.test_server import cli, clients, runtime, serve  # noqa: F401 - fixtures
from tests.deck_process import DECK

pytestmark = pytest.mark.timeout(60)


def run(*args: str, stdin: str = "", timeout: float = 30, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DECK, *args], input=stdin, capture_output=True, text=True, timeout=timeout, env=env)


def test_deck_run_beside_a_server_of_its_config_attaches_to_it_and_says_so(serve, tmp_path) -> None:  # noqa: F811
    server = serve(agent_block("a"))
    config = tmp_path / "t.toml"
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "DeckService.Clients"}) + "\n"
    done = run("run", "--config", str(config), "--frontend", "jsonl", stdin=request)
    assert done.returncode == 0, done.stderr
    assert f"the deck server t runs {config}: attaching to it" in done.stderr
    answer = next(json.loads(line) for line in done.stdout.splitlines() if '"id":1' in line)
    assert len(answer["result"]) == 1  # the server answered: it has this client
    assert [p.name() for p in psutil.Process(server.pid).children() if "fake_agent" in " ".join(p.cmdline())] == []


def test_deck_run_new_runs_apart_and_options_only_a_deck_of_its_own_has_are_refused(serve, clients, tmp_path) -> None:  # noqa: F811
    server = serve(agent_block("a"))
    config = tmp_path / "t.toml"
    refused = run("run", "--config", str(config), "--frontend", "jsonl", "--approve", "read")
    assert refused.returncode == 2
    assert "the deck server t runs" in refused.stderr and "--new" in refused.stderr
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "AgentService.Start", "params": {"name": "a"}}) + "\n"
    apart = run("run", "--new", "--config", str(config), "--frontend", "jsonl", stdin=request)
    assert apart.returncode == 0 and "attaching" not in apart.stderr
    answer = next(json.loads(line) for line in apart.stdout.splitlines() if '"id":1' in line)
    assert answer["result"]["state"] == "ready"  # its own agent, started and stopped with it
    assert clients(server.path).call("AgentService.List")[0]["state"] == "stopped"  # the server's never ran


def test_ctrl_c_during_serve_detach_start_leaves_no_server_behind(tmp_path, runtime) -> None:  # noqa: F811
    (tmp_path / "deck.toml").write_text(agent_block("a"))
    slow = tmp_path / "slow"
    slow.mkdir()  # the server's process starts slowly: the interrupt comes while deck waits for it
    (slow / "sitecustomize.py").write_text("import sys, time\nif '--ready-fd' in sys.argv: time.sleep(3)\n")
    env = {**os.environ, "PYTHONPATH": str(slow)}
    starter = subprocess.Popen([sys.executable, "-m", "deck", "serve", "--config", str(tmp_path / "deck.toml"),
                                "--name", "ic", "--detach"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    deadline = time.monotonic() + 20
    child = None
    while child is None and time.monotonic() < deadline:
        child = next((p for p in psutil.Process(starter.pid).children() if "--ready-fd" in p.cmdline()), None)
        time.sleep(0.05)
    assert child is not None
    starter.send_signal(signal.SIGINT)
    out, err = starter.communicate(timeout=30)
    assert starter.returncode == 130
    assert "interrupted: the deck server ic was stopped" in err
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert not socket_path("ic").exists()


def test_a_typo_in_the_config_is_said_with_its_place_and_the_key_meant_when_deck_starts(tmp_path) -> None:
    config = tmp_path / "deck.toml"
    config.write_text(agent_block("a") + 'permisions = "allow"\n')
    done = run("send", "--config", str(config), "a", "hello")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "You said: hello\n"
    line = next(line for line in done.stderr.splitlines() if "unknown key" in line)
    assert line == f"deck: {config}:3:1: warning: unknown key agents.a.permisions (did you mean permissions?)"
    jsonl = run("run", "--config", str(config), "--frontend", "jsonl")
    assert "(did you mean permissions?)" in jsonl.stderr


def test_a_line_frontend_that_attaches_while_a_request_waits_shows_it_and_the_outcome(serve, clients) -> None:  # noqa: F811
    from tests.core.remote.test_server import Attached

    server = serve(agent_block("a"))
    watcher = clients(server.path)
    watcher.request("ChatService.Send", {"agent": "a", "text": "perm"})
    watcher.event("permission:requested", agent="a", timeout=20)
    line = Attached("t", "--frontend", "line", json_lines=False)

    def shown(needle: bytes) -> bool:
        return line.wait_for(lambda _lines: needle in line.out or line.done, timeout=20) and needle in line.out

    try:
        assert shown(b"[a] permission? Edit file") and shown(b"/allow (once)")
        line.send("/agents")
        assert shown(b"waits for your answer: a permission request (1)")
        line.send("/allow")
        watcher.event("message:delta", agent="a", text="permission: yes", timeout=20)
        assert shown(b"[a] permission: Allow") and b"cancelled" not in line.out
    finally:
        line.popen.kill()
        line.popen.wait(5)


def test_an_agent_that_cannot_resume_says_it_forgot_only_when_something_was_said(tmp_path) -> None:
    """Started, stopped, then spoken to, an agent that cannot resume sessions forgets nothing: no
    note. Stopped after an exchange, its next start says it does not remember."""
    from tests.deck_process import DeckProcess, write_config

    config = write_config(tmp_path / "deck.toml", agent_block("a"))
    deck = DeckProcess("--config", str(config), cwd=tmp_path)
    try:

        def codes() -> list[str | None]:
            return [m.get("code") for m in deck.call("ChatService.Conversation", {"agent": "a"})["messages"]]

        def say(text: str, count: int) -> None:
            deck.call("ChatService.Send", {"agent": "a", "text": text})
            deck.wait_line(lambda e: e.get("event") == "turn:changed" and e.get("agent") == "a" and not e.get("busy"),
                           timeout=30, count=count)  # fmt: skip

        deck.call("AgentService.Start", {"name": "a"})  # a session opened, nothing said in it
        deck.call("AgentService.Stop", {"name": "a"})
        say("echo one", 1)
        assert "agent-restarted" not in codes()
        deck.call("AgentService.Stop", {"name": "a"})
        say("echo two", 2)
        assert codes().count("agent-restarted") == 1  # "echo one" is forgotten: said so
        deck.close_stdin()
        assert deck.wait(30) == 0
    finally:
        deck.kill_everything()
