"""A first config without guessing (`deck config init`), readable help, and shell completion."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from deck.config.check import parse

from tests.conftest import agent_block
from tests.core.cli.test_cli import COMMANDS
from tests.deck_process import DECK, write_config

pytestmark = pytest.mark.timeout(60)


def deck(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "COLUMNS": "80", **(env or {})}
    environment.pop("DECK_CONFIG", None)
    return subprocess.run(
        [*DECK, *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, env=environment, **kwargs
    )


def test_config_init_writes_a_valid_commented_config_and_never_overwrites(tmp_path):
    result = deck("config", "init", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    written = tmp_path / "deck.toml"
    assert "wrote deck.toml" in result.stdout and "`deck run`" in result.stdout
    text = written.read_text()
    loaded = parse(text)
    assert loaded.problems == [] and list(loaded.config.agents) == ["demo"]
    assert deck("config", "validate", cwd=tmp_path).returncode == 0
    # The demo agent runs as shipped; each preset is there, commented, and valid once uncommented.
    blocks = re.findall(r"(?m)^# \[agents\.(\w+)\]\n(?:^#.*\n?)*", text)
    assert set(blocks) == {"claude", "codex", "fast", "gemini", "goose", "opencode"}
    for name in blocks:
        block = re.search(rf"(?m)^# \[agents\.{name}\]\n(?:^#.*\n?)*", text).group(0)
        uncommented = re.sub(r"(?m)^# ", "", block)
        preset = parse(text + "\n" + uncommented)
        assert preset.problems == [], (name, preset.problems)
        assert set(preset.config.agents) == {"demo", name}
        assert preset.config.agents[name].permissions == "ask"
    # Every key of deck's own top-level tables is there, commented, with its default.
    from deck.config.models import Limits

    for info in Limits.model_fields.values():
        assert f"\n# {info.alias} = " in text, f"limits.{info.alias} is not in the config init writes"
    # A second init refuses, and leaves the file as it was.
    written.write_text(text + "# mine\n")
    again = deck("config", "init", cwd=tmp_path)
    assert again.returncode == 1
    assert again.stderr.strip() == "deck: deck.toml already exists: not overwritten (move it away, or give another PATH)"
    assert written.read_text() == text + "# mine\n"


def test_config_init_to_a_path_and_not_through_a_symlink(tmp_path):
    target = tmp_path / "sub" / "dir" / "mine.toml"
    result = deck("config", "init", str(target))
    assert result.returncode == 0, result.stderr
    assert f"deck run --config {target}" in result.stdout
    assert parse(target.read_text()).problems == []
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "link.toml").symlink_to(victim)
    assert deck("config", "init", str(tmp_path / "link.toml")).returncode == 1
    assert victim.read_text() == "keep\n"


def test_config_show_fills_in_the_working_directory(tmp_path):
    config = write_config(tmp_path / "deck.toml", agent_block("a"))
    shown = deck("config", "show", "--config", str(config), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert 'cwd = ""' not in shown.stdout
    assert f'cwd = "{tmp_path}"' in shown.stdout


def test_top_level_help_has_no_cut_descriptions():
    for path in [p for p in COMMANDS if len(p) < 2]:
        result = deck(*path, "--help")
        assert result.returncode == 0
        commands = result.stdout.split("Commands:")[1] if "Commands:" in result.stdout else ""
        assert "..." not in commands, result.stdout


def test_argument_names_read_plainly():
    result = deck("send", "--help")
    assert result.stdout.splitlines()[0].endswith(" send [OPTIONS] AGENT [TEXT]")
    assert "<str>" not in result.stdout and "{" not in result.stdout
    assert re.search(r"(?m)^  AGENT\s+The agent to ask\.", result.stdout)
    validate = deck("config", "validate", "--help")
    assert validate.stdout.splitlines()[0].endswith(" config validate [OPTIONS] [PATH]")


def complete(words: str, **kwargs) -> list[str]:
    """What bash completion offers for the last word of `words`, from the installed `deck` script."""
    env = {**os.environ, "_DECK_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split(" ")) - 1)}
    env.pop("DECK_CONFIG", None)
    script = str(Path(sys.executable).with_name("deck"))
    result = subprocess.run([script], capture_output=True, text=True, timeout=30, env=env, **kwargs)
    assert result.stderr == ""
    return result.stdout.split()


def test_shell_completion_of_agent_names_and_frontends(tmp_path):
    config = write_config(tmp_path / "deck.toml", agent_block("alpha") + agent_block("beta") + agent_block("alpine"))
    assert complete(f"deck send -c {config} al") == ["alpha", "alpine"]
    assert complete("deck send ", cwd=tmp_path) == ["alpha", "beta", "alpine"]
    assert complete("deck run --frontend ") == ["urwid", "line", "jsonl"]
    broken = tmp_path / "broken.toml"
    broken.write_text("[agents.x\n")
    assert complete(f"deck send -c {broken} ") == []
