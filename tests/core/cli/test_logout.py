"""`deck agents logout NAME` (ACP `logout`): sent where the agent lists `agentCapabilities.auth.logout`, refused
with a clear error where it does not. A real deck process, real fake agents."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import agent_block
from tests.deck_process import DECK, write_config


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DECK, *args], capture_output=True, text=True, timeout=60)


def test_logout_is_sent_to_an_agent_that_offers_it_and_the_agent_stops(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    config = write_config(tmp_path / "deck.toml", agent_block("a", "--logout", "--requests", str(requests)))
    result = run("agents", "logout", "a", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "a logged out: its next start authenticates again\n"
    methods = [json.loads(line)["method"] for line in requests.read_text().splitlines()]
    assert methods[0] == "initialize" and methods.count("logout") == 1


def test_logout_is_refused_where_the_agent_does_not_offer_it_and_a_bad_name_is_named(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    config = write_config(tmp_path / "deck.toml", agent_block("a", "--requests", str(requests)))
    result = run("agents", "logout", "a", "--config", str(config))
    assert result.returncode == 1
    assert "a does not offer to log out (its initialize answer lists no agentCapabilities.auth.logout)" in result.stderr
    assert "logout" not in [json.loads(line)["method"] for line in requests.read_text().splitlines()]
    result = run("agents", "logout", "zz", "--config", str(config))
    assert result.returncode == 2 and result.stderr == "deck: unknown agent 'zz' (agents: a)\n"
    result = run("agents", "logoff", "a", "--config", str(config))
    assert result.returncode == 2 and "unknown action 'logoff'" in result.stderr
    listed = run("agents", "--config", str(config))
    assert listed.returncode == 0 and listed.stdout.split()[1] == "a"  # plain `deck agents` still lists
