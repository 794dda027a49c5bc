"""Sandboxed agents (`sandbox = true`, bubblewrap): a hostile agent (tests/agents/sandbox_probe.py, a real
subprocess) tries every way out — the user's secrets, writes outside its folder, deck's history, the
server's socket and web token, another agent's worktree, deck's process and environment, the network
when it is off, remounting what hides a secret, deck's terminals — and each is refused, while its own
folder, its `write` paths and the asks bridge stay its. A sandbox that cannot be made is never dropped."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import agent_table
from tests.deck_process import DECK, DeckProcess, run_deck, write_config  # noqa: F401 (run_deck: a fixture)
from tests.web_server import WebServe

pytestmark = [pytest.mark.timeout(120)]

PROBE = Path(__file__).parents[2] / "agents" / "sandbox_probe.py"
SECRET = "the user's private key"


@pytest.fixture
def place(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home, deck's folders and a repository outside /tmp (each sandbox has a /tmp of its own, where
    nothing of the machine's would show anyway): what a sandbox must hide is really there to hide."""
    if shutil.which("bwrap") is None:
        pytest.fail("no bwrap here: install it with `bash scripts/install-sandbox.sh`")
    base = Path(tempfile.mkdtemp(prefix="deck-sandbox-", dir="/var/tmp"))
    home = base / "home"
    for secret in (".ssh/id_rsa", ".aws/credentials", ".netrc"):
        (home / secret).parent.mkdir(parents=True, exist_ok=True)
        (home / secret).write_text(SECRET)
    (base / "run").mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(base / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base / "run"))
    monkeypatch.setenv("DECK_SECRET_TEST", "deck's own environment")
    repo = base / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README").write_text("the repository\n")
    subprocess.run(["git", "-C", str(repo), "add", "README"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"], check=True)
    yield base
    subprocess.run(["chmod", "-R", "u+w", str(base)], check=False)
    shutil.rmtree(base, ignore_errors=True)


def probe_table(name: str, cwd: Path, sandbox: bool | dict[str, Any] | None = None, **keys: Any) -> str:
    """The probe as agent `name`; `sandbox` as a TOML value: true, false, or an inline table."""
    table = agent_table(name, [sys.executable, str(PROBE)], cwd=str(cwd), **keys)
    if isinstance(sandbox, dict):
        return table + "sandbox = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in sandbox.items()) + " }\n"
    return table if sandbox is None else table + f"sandbox = {json.dumps(sandbox)}\n"


def probe(deck: Any, agent: str, wanted: dict[str, Any], turns: int = 1) -> dict[str, str]:
    deck.call("ChatService.Send", {"agent": agent, "text": "probe " + json.dumps(wanted)})
    deck.wait_line(lambda e: e.get("event") == "turn:changed" and e["agent"] == agent and not e["busy"], count=turns, timeout=60)
    messages = deck.call("ChatService.Conversation", {"agent": agent})["messages"]
    return json.loads(messages[-1]["parts"][0]["text"])


def refused(found: dict[str, str]) -> dict[str, str]:
    """The attempts that got through."""
    return {what: got for what, got in found.items() if got.startswith("GOT") and what not in ("pid", "sid")}


def test_a_sandboxed_agent_gets_nothing_of_the_users_nor_of_decks(place: Path, run_deck) -> None:
    home, state, repo = place / "home", place / "state", place / "repo"
    config = write_config(place / "deck.toml", "[sandbox]\ndefault = true\n"
                          + probe_table("a", repo, worktree=True, sandbox={"write": ["~/.probe-state"]})
                          + probe_table("b", repo, worktree=True))  # fmt: skip
    server = WebServe(config, "sbx")
    try:
        from tests.core.remote.test_server import Raw

        client = Raw(Path(os.environ["XDG_RUNTIME_DIR"]) / "deck" / "sbx.sock")
        client.call("AgentService.Start", {"name": "b"}, timeout=60)
        listed = {a["name"]: a for a in client.call("AgentService.List")}
        worktrees = sorted((state / "deck" / "worktrees").glob("repo-*/b"))
        assert worktrees, list((state / "deck").rglob("*"))
        (worktrees[0] / "b-secret.txt").write_text("b's work")
        found = probe(client, "a", {
            "read": [str(home / ".ssh/id_rsa"), str(home / ".aws/credentials"), str(home / ".netrc"),
                     str(state / "deck" / "history.db"), str(place / "run" / "deck" / "sbx.token"),
                     str(place / "deck.toml"), str(worktrees[0] / "b-secret.txt")],
            "write": [str(home / "planted"), str(repo / "planted"), str(place / "planted")],
            "connect": [str(place / "run" / "deck" / "sbx.sock")],
            "signal": [server.popen.pid, os.getpid()],
            "env": ["DECK_SECRET_TEST", "DECK_AGENT_TOKEN"],
            "terminal": f"cat {home}/.ssh/id_rsa; touch {home}/from-terminal; echo done",
            "mount": True,
        })
        assert refused(found) == {"terminal": "GOT: " + found["terminal"][5:]} and SECRET not in found["terminal"]
        assert "done" in found["terminal"] and not (home / "from-terminal").exists()
        assert not any((p / "planted").exists() for p in (home, repo, place))
        listed = {a["name"]: a for a in client.call("AgentService.List")}  # a runs: its worktree is known
        mine = probe(client, "a", {
            "write": [str(Path(listed["a"]["sandbox"]["write"][0]) / "mine.txt"), str(home / ".probe-state" / "state.txt")],
            "bridge": True,
        }, turns=2)  # fmt: skip
        assert refused(mine) == {k: "GOT: written" for k in mine if k.startswith("write")} | {"bridge": "GOT: connected"}
        assert listed["a"]["sandbox"]["enabled"] is True and listed["a"]["sandbox"]["network"] is True
        assert str(home / ".probe-state") in listed["a"]["sandbox"]["write"]
        client.close()
    finally:
        server.stop()
    assert b"Traceback" not in server.stderr


def test_no_network_when_it_is_off(place: Path, run_deck) -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        deck = run_deck(probe_table("off", place, sandbox={"network": False}) + probe_table("on", place, sandbox=True))
        assert probe(deck, "off", {"tcp": [address]})[f"tcp {address}"].startswith("refused")
        assert probe(deck, "on", {"tcp": [address]})[f"tcp {address}"] == "GOT: connected"


def test_without_bwrap_the_agent_does_not_start_and_says_why(place: Path, tmp_path: Path) -> None:
    config = write_config(place / "deck.toml", probe_table("a", place, sandbox=True))
    env = {**os.environ, "PATH": str(tmp_path)}  # no bwrap on it
    deck = DeckProcess("--config", str(config), env=env)
    try:
        reply = deck.response(deck.request("AgentService.Start", {"name": "a"}), timeout=30)
        message = reply["error"]["message"]
        assert "sandbox: bwrap is not installed: install bubblewrap" in message and "sandbox = false" in message
        assert deck.states("a")[-1] == "error"
        checked = subprocess.run([*DECK, "agents", "--check", "--config", str(config)], capture_output=True, text=True,
                                 env=env, timeout=60)  # fmt: skip
        assert "sandbox: bwrap is not installed" in checked.stdout + checked.stderr
    finally:
        deck.kill_everything()


def test_the_check_says_each_agents_sandbox_works(place: Path) -> None:
    config = write_config(place / "deck.toml", probe_table("a", place, sandbox=True) + probe_table("b", place))
    checked = subprocess.run([*DECK, "agents", "--check", "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert any(line.startswith("✓ a ") and "sandbox: works (bubblewrap)" in line for line in lines), lines
    assert not any(line.startswith("✓ b ") and "sandbox" in line for line in lines), lines


def test_the_sandbox_ends_with_deck_even_killed(place: Path) -> None:
    import signal

    from tests.deck_process import wait_dead

    config = write_config(place / "deck.toml", probe_table("a", place, sandbox=True))
    deck = DeckProcess("--config", str(config))
    try:
        deck.call("AgentService.Start", {"name": "a"}, timeout=60)
        inside = deck.descendants()
        assert len(inside) >= 2  # bwrap, and the agent in its namespace
        deck.signal(signal.SIGKILL)
        deck.popen.wait(10)
        assert wait_dead(inside, timeout=10) == []
    finally:
        deck.kill_everything()


def test_a_write_path_above_its_folder_keeps_decks_hidden_and_a_missing_file_is_refused(
    place: Path, run_deck, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = place / "home"
    state = home / ".local" / "state"  # deck's state, and the agent's worktree in it, in the home it may write
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    deck = run_deck(probe_table("a", place / "repo", worktree=True, sandbox={"write": ["~"]})
                    + probe_table("b", place, sandbox={"write": ["~/.agent-settings.json"]}))  # fmt: skip
    (state / "deck").mkdir(parents=True, exist_ok=True)
    (state / "deck" / "secret.txt").write_text("deck's")
    found = probe(deck, "a", {"write": [str(home / "planted")], "read": [str(state / "deck" / "secret.txt")]})
    assert found[f"write {home / 'planted'}"] == "GOT: written"  # its home is its to write
    assert found[f"read {state / 'deck' / 'secret.txt'}"].startswith("refused")  # deck's state stays hidden in it
    reply = deck.response(deck.request("AgentService.Start", {"name": "b"}), timeout=30)
    assert "does not exist: create it" in reply["error"]["message"] and ".agent-settings.json" in reply["error"]["message"]
