"""Every command that takes an agent name says an unknown one in the same words, lists the config's
agents and exits 2; `deck agents` takes NAME or `logout NAME`, and says which is missing. The real
`deck` command line, real fake agents."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import agent_block
from tests.deck_process import DECK, DeckProcess, write_config

pytestmark = pytest.mark.timeout(90)


def deck(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run(
        [*DECK, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, cwd=cwd, env=env
    )


UNKNOWN = "deck: unknown agent 'nobody' (agents: a, b)\n"


@pytest.mark.parametrize(
    "command",
    [
        ("send", "nobody", "hi"),
        ("agents", "nobody"),
        ("agents", "logout", "nobody"),
        ("agents", "--check", "nobody"),
        ("diff", "nobody"),
        ("merge", "nobody"),
        ("worktree", "remove", "nobody"),
        ("history", "nobody"),
        ("history", "nobody", "--json"),
        ("history", "nobody", "--all"),
        ("search", "hello", "--agent", "nobody"),
    ],
    ids=" ".join,
)
def test_an_unknown_agent_is_named_with_the_agents_and_exits_2(tmp_path, command):
    config = write_config(tmp_path / "deck.toml", agent_block("a") + agent_block("b"))
    done = deck(*command, "--config", str(config), cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", UNKNOWN)


def test_the_history_of_an_agent_gone_from_the_config_is_still_listed(tmp_path):
    config = write_config(tmp_path / "deck.toml", agent_block("a") + agent_block("old"))
    run = DeckProcess("--config", str(config), cwd=tmp_path)
    try:
        run.call("ChatService.Send", {"agent": "old", "text": "hello there"})
        run.event("turn:changed", agent="old", busy=False, timeout=30)
        run.close_stdin()
        assert run.wait(30) == 0
    finally:
        run.kill_everything()
    write_config(config, agent_block("a") + agent_block("b"))
    listed = deck("history", "old", "--config", str(config), "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [row["agent"] for row in json.loads(listed.stdout)] == ["old"]
    found = deck("search", "hello", "--agent", "old", "--config", str(config), cwd=tmp_path)
    assert found.returncode == 0 and "hello there" in found.stdout, found.stderr
    nothing = deck("search", "absent", "--agent", "old", "--config", str(config), cwd=tmp_path)
    assert (nothing.returncode, nothing.stderr) == (0, "") and nothing.stdout.startswith("nothing found for old")
    empty = deck("history", "b", "--config", str(config), cwd=tmp_path)  # in the config, nothing kept yet
    assert (empty.returncode, empty.stderr) == (0, "")


def test_agents_logout_without_a_name_says_so_and_lists_the_agents(tmp_path):
    config = write_config(tmp_path / "deck.toml", agent_block("a") + agent_block("b"))
    done = deck("agents", "logout", "--config", str(config))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "deck: deck agents logout NAME: name the agent to log out; agents: a, b\n"
    wrong = deck("agents", "logoff", "a", "--config", str(config))
    assert wrong.returncode == 2 and "unknown action 'logoff'" in wrong.stderr
    assert "deck agents logout NAME" in wrong.stderr


def test_agents_name_shows_that_agent_alone(tmp_path):
    config = write_config(tmp_path / "deck.toml", agent_block("a") + agent_block("b", title="Bee"))
    shown = deck("agents", "b", "--json", "--config", str(config))
    assert shown.returncode == 0, shown.stderr
    assert [(row["name"], row["title"]) for row in json.loads(shown.stdout)] == [("b", "Bee")]
    checked = deck("agents", "--check", "b", "--json", "--config", str(config))
    assert checked.returncode == 0, checked.stderr
    assert [row["name"] for row in json.loads(checked.stdout)] == ["b"]


def test_agents_help_reads_as_its_forms():
    shown = deck("agents", "--help")
    assert shown.returncode == 0
    usage = " ".join(shown.stdout.split("\n\n")[0].split())  # the usage, however it wraps
    assert usage.endswith(" agents [OPTIONS] [NAME | logout NAME | search [WORDS] | add ID | update [NAME] | remove NAME]")
    assert "deck agents logout NAME" in shown.stdout and "LOGOUT" not in shown.stdout and "[[" not in shown.stdout
