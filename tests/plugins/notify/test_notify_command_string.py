"""`[notify] command` takes one string as an agent's `command` does, split the same way (quotes kept
together, no shell): a real `deck run` process runs it with the moment, and a string that cannot be
split is a config error with its line."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from tests.conftest import agent_block
from tests.deck_process import DECK, DeckProcess, write_config
from tests.plugins.notify.test_notify import RECORD, got, wait_until

pytestmark = pytest.mark.timeout(60)


def test_a_command_given_as_one_string_runs_split_like_an_agents(tmp_path) -> None:
    script, out = tmp_path / "record it.py", tmp_path / "got it.jsonl"  # spaces: the quotes keep each together
    script.write_text(RECORD)
    command = " ".join(shlex.quote(word) for word in (sys.executable, str(script), str(out)))
    config = write_config(tmp_path / "deck.toml", f'[notify]\non = ["done"]\ncommand = {json.dumps(command)}\n'
                          + agent_block("a"))  # fmt: skip
    shown = subprocess.run([*DECK, "config", "show", "--json", "--config", str(config)], capture_output=True, text=True,
                           timeout=30)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["notify"]["command"] == [sys.executable, str(script), str(out)]

    deck = DeckProcess("--config", str(config), cwd=tmp_path)
    try:
        deck.call("ChatService.Send", {"agent": "a", "text": "hello"})
        deck.event("notify:sent", agent="a", what="done", timeout=20)
        (record,) = wait_until(lambda: got(out))
        assert record["stdin"]["what"] == "done" and record["env"]["DECK_AGENT"] == "a"
        deck.close_stdin()
        assert deck.wait(30) == 0
    finally:
        deck.kill_everything()


def test_a_command_string_that_cannot_be_split_is_a_config_error(tmp_path) -> None:
    config = write_config(tmp_path / "deck.toml", "[notify]\ncommand = \"notify-me 'unclosed\"\n" + agent_block("a"))
    done = subprocess.run([*DECK, "config", "validate", str(config)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "deck.toml:2:" in done.stdout + done.stderr and "No closing quotation" in done.stdout + done.stderr
