"""The config: problems with line and column, plugin sections, JSON Schema, the `deck config` commands,
and ConfigService (Validate, Save, Open, Choose, Recent) against real files and real fake agents."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import threading
import tomllib
from pathlib import Path

import jsonschema
import pytest
from deck.cli.commands import app
from deck.config.check import Problem
from deck.config.check import parse as parse_alone
from deck.config.models import DeckConfig, joined
from deck.config.output import effective, json_schema, to_toml
from deck.config.registry_url import effective_url
from deck.errors import ServiceError
from deck.frontend import Frontend
from deck.hookspecs import hookimpl
from deck.plugins.budget import AgentBudget, BudgetSettings
from deck.plugins.history import HistorySettings
from deck.plugins.idle_stop import IdleStopLimits
from deck.plugins.notify import NotifySettings
from deck.plugins.worktrees.config import AgentWorktree
from deck.plugins.worktrees.land import LandSettings
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from tests.conftest import ROOT, agent_block, alive
from tests.deck_process import DECK

pytestmark = pytest.mark.anyio

README = ROOT / "README.md"
CONFIG_GUIDE = ROOT / "docs" / "guide" / "config.md"  # the user's guide's Config page: every key, its default


def config_example(path: Path) -> str:
    """The TOML example of the README's "Config" section, or of the guide's Config page."""
    return re.search(r"(?m)^#{1,2} Config\n.*?```toml\n(.*?)```", path.read_text(), re.S).group(1)


#: The sections deck's built-in plugins add to the config (and to its schema): idle_stop's keys of [limits] too.
BUILT_IN_SECTIONS = {
    "history": HistorySettings, "limits": IdleStopLimits, "notify": NotifySettings, "budget": BudgetSettings,
    "agents": joined("agents", [AgentBudget, AgentWorktree]), "land": LandSettings,
}  # fmt: skip


def parse(text: str, sections: dict | None = None):
    """`text` checked as deck checks a file: with its built-in plugins' sections, unless told others."""
    return parse_alone(text, BUILT_IN_SECTIONS if sections is None else sections)


def problems(text: str, **kwargs) -> list[tuple[int, int, str, bool]]:
    return [(p.line, p.column, p.message, p.warning) for p in parse(text, **kwargs).problems]


# -- problems, each kind with its line and column -----------------------------------------------

BAD = """\
language = "de"
theme = 5

[limits]
maxRunningAgents = "4"
stopIdleAgentsAfter = "ten minutes"
colour = "red"

[agents.a]
command = []

[agents.b]
title = "B"

[agents.c]
  command = "  "
  env = { HOME = "/h", DEBUG = 1 }
"""


def test_every_problem_kind_points_at_its_line_and_column():
    assert problems(BAD) == [
        (1, 12, 'language: unknown value "de": use "en" or "fr"', False),
        (2, 9, "theme: unknown value 5: use \"dark\" or \"light\"", False),
        (5, 20, 'limits.maxRunningAgents: expected an integer, got a string ("4")', False),
        (
            6,
            23,
            'limits.stopIdleAgentsAfter: bad duration "ten minutes": '
            'use a number of seconds or a string like "30s", "10m", "1h"',
            False,
        ),
        (7, 1, "unknown key limits.colour", True),
        (10, 11, "agents.a.command: command must not be empty", False),
        (12, 1, "agents.b.command: required key is missing", False),  # the table that lacks it
        (16, 13, "agents.c.command: command must not be empty", False),
        (17, 32, "agents.c.env.DEBUG: expected a string, got an integer (1)", False),
    ]
    assert parse(BAD).config is None


def test_syntax_errors_have_line_and_column():
    assert problems('[agents.a]\ntitle = "A" "B"\n') == [
        (2, 13, "TOML syntax: Expected newline or end of document after a statement", False)
    ]
    # tomllib says "at end of document" for these; the problem points at the end of the file.
    assert problems('[agents.a]\ncommand = ["x",\n  "y"\n') == [
        (3, 6, "TOML syntax: Unclosed array (at end of file)", False)
    ]
    # A key written twice: tomllib does not say where; the second one is found.
    assert problems('theme = "a"\n\ntheme = "b"') == [(3, 1, "TOML syntax: Cannot overwrite a value", False)]


def test_unknown_keys_are_warnings_and_the_config_stays_valid():
    text = 'tema = "x"\n[agents.a]\ncommand = ["x"]\ncolour = "red"\n[limits]\nmax_running_agents = 2\n'
    loaded = parse(text)
    assert loaded.config is not None and loaded.errors == []
    assert [(p.line, p.column, p.message) for p in loaded.warnings] == [
        (1, 1, "unknown key tema"),
        (4, 1, "unknown key agents.a.colour"),
        (6, 1, "unknown key limits.max_running_agents"),  # only the documented spelling counts
    ]
    assert loaded.sections["limits"].max_running_agents == 4


def test_unknown_keys_are_reported_beside_errors():
    assert problems('tema = "x"\n[agents.a]\ntitle = 1\n') == [
        (1, 1, "unknown key tema", True),
        (2, 1, "agents.a.command: required key is missing", False),
        (3, 9, "agents.a.title: expected a string, got an integer (1)", False),
    ]


def test_dotted_and_quoted_keys_are_located():
    text = 'limits.maxRunningAgents = 0\n[agents."my agent"]\ncommand = "run me"\npermissions = "sometimes"\n'
    assert problems(text) == [
        (1, 27, "limits.maxRunningAgents: must be at least 1, got 0", False),
        (4, 15, 'agents."my agent".permissions: unknown value "sometimes": use "ask", "allow-reads" or "allow"', False),
    ]


def test_a_key_beyond_ascii_is_named_as_written_and_one_with_a_control_by_its_escape():
    text = '[agents."é a"]\ncommand = "x"\npermissions = "no"\n[agents."b\u202ec"]\ncommand = "x"\npermissions = "no"\n'
    assert [message.split(":")[0] for _line, _column, message, _warning in problems(text)] == [
        'agents."é a".permissions', 'agents."b\\u202ec".permissions'
    ]


def test_values_and_defaults():
    loaded = parse('[limits]\nstopIdleAgentsAfter = 90\nhandshakeTimeout = "250ms"\n[agents.a]\ncommand = "npx -y \'an agent\'"\n')
    config, limits = loaded.config, loaded.sections["limits"]
    assert config is not None
    assert limits.stop_idle_agents_after == 90.0 and config.limits.handshake_timeout == 0.25
    assert config.agents["a"].command == ["npx", "-y", "an agent"]
    assert (config.language, config.theme, config.frontend, limits.max_running_agents) == ("en", "dark", None, 4)
    assert config.agents["a"].permissions == "ask" and config.agents["a"].auth_method is None
    assert IdleStopLimits().stop_idle_agents_after == 600.0 and DeckConfig().limits.handshake_timeout == 30.0


def test_config_examples_are_valid_and_the_guide_documents_the_defaults():
    for path in (README, CONFIG_GUIDE):
        loaded = parse(config_example(path))
        assert loaded.problems == [] and loaded.config is not None, path
    text = CONFIG_GUIDE.read_text()
    section = text[text.index("# Config") :]
    section = section[: section.index("\n## ")]
    for spelled in (f"default {IdleStopLimits().max_running_agents}", "default 10m", "default 30s", 'default "dark"', 'default "en"'):
        assert spelled in section, spelled


# -- plugin sections ----------------------------------------------------------------------------------


class NotifySection(BaseModel):
    model_config = ConfigDict(extra="allow")
    sound: bool = True
    volume: int = Field(5, ge=0, le=10)


class NotifyPlugin:
    @hookimpl
    def deck_config_sections(self):
        return {"chime": NotifySection}


def test_plugin_sections_are_checked_by_their_own_model():
    sections = {"chime": NotifySection}
    assert problems("[chime]\nvolume = 11\nvolum = 3\n", sections=sections) == [
        (2, 10, "chime.volume: must be at most 10, got 11", False),
        (3, 1, "unknown key chime.volum (did you mean volume?)", True),
    ]
    loaded = parse("[chime]\nsound = false\n", sections=sections)
    assert loaded.problems == [] and loaded.sections["chime"] == NotifySection(sound=False)
    assert parse("", sections=sections).sections["chime"] == NotifySection()  # absent: its defaults
    # Without the plugin the section is just an unknown key.
    assert problems("[chime]\nsound = false\n") == [(1, 1, "unknown key chime", True)]
    schema = json_schema(sections)
    assert schema["properties"]["chime"]["properties"]["volume"]["maximum"] == 10


async def test_services_see_plugin_sections(make_deck):
    deck, rec = make_deck("[chime]\nvolume = 2\n" + agent_block("a"))
    deck.pm.register(NotifyPlugin(), name="chime")
    assert deck.config_service.section("chime") == NotifySection(volume=2)
    result = await deck.config_service.validate("[chime]\nvolume = -1\n")
    assert result["problems"] == [
        {"line": 2, "column": 10, "message": "chime.volume: must be at least 0, got -1", "warning": False}
    ]
    assert "chime" in (await deck.config_service.schema())["properties"]
    saved = await deck.config_service.save("[chime]\nvolume = 7\n" + agent_block("a"))
    assert saved["saved"] and saved["warnings"] == []
    assert deck.config_service.section("chime") == NotifySection(volume=7)


# -- JSON Schema -----------------------------------------------------------------------------------


def test_json_schema_accepts_good_configs_and_rejects_bad_ones():
    schema = json_schema(BUILT_IN_SECTIONS)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in (README, CONFIG_GUIDE):
        assert list(validator.iter_errors(tomllib.loads(config_example(path)))) == [], path
    good = {"limits": {"stopIdleAgentsAfter": 600, "handshakeTimeout": "30s"}, "agents": {"a": {"command": "run it"}}}
    assert list(validator.iter_errors(good)) == []
    for bad in (
        {"language": "de"},
        {"limits": {"maxRunningAgents": "4"}},
        {"limits": {"handshakeTimeout": "soon"}},
        {"agents": {"a": {"title": "no command"}}},
        {"agents": {"a": {"command": []}}},
    ):
        assert list(validator.iter_errors(bad)), bad


# -- effective config ----------------------------------------------------------------------------------


def test_effective_config_round_trips_through_toml():
    text = '[limits]\nstopIdleAgentsAfter = 90\n[agents.b]\ncommand = "b --x"\nenv = { K = "v" }\n[agents.a]\ncommand = ["a"]\n'
    loaded = parse(text)
    config = loaded.config
    shown = to_toml(effective(config, loaded.sections))
    again = parse(shown)
    assert again.problems == []
    # The folder each agent runs in is spelled out ("" means the folder deck runs in).
    assert {a.cwd for a in again.config.agents.values()} == {os.getcwd()}
    # The registry's URL too ("" means its CDN, unless $DECK_REGISTRY_URL says another).
    assert again.config.registry.url == effective_url() and config.registry.url == ""
    assert again.config.model_dump(exclude={"agents", "registry"}) == config.model_dump(exclude={"agents", "registry"})
    assert [a.model_dump(exclude={"cwd"}) for a in again.config.agents.values()] == [
        a.model_dump(exclude={"cwd"}) for a in config.agents.values()
    ]
    assert list(again.config.agents) == ["b", "a"]
    assert 'stopIdleAgentsAfter = "90s"' in shown and 'handshakeTimeout = "30s"' in shown


# -- the `deck config` commands ----------------------------------------------------------------------


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DECK_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args), catch_exceptions=False)


def test_config_validate_prints_problems_and_exits_1_on_an_error(cli, tmp_path):
    (tmp_path / "bad.toml").write_text(BAD)
    result = cli("config", "validate", "bad.toml")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == 'bad.toml:1:12: language: unknown value "de": use "en" or "fr"'
    assert lines[4] == "bad.toml:7:1: warning: unknown key limits.colour"
    assert len(lines) == 9

    (tmp_path / "warn.toml").write_text('tema = "x"\n' + agent_block("a"))
    result = cli("config", "validate", "warn.toml")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["warn.toml:1:1: warning: unknown key tema", "warn.toml: valid (1 warning)"]
    assert cli("config", "validate", "--config", "warn.toml").stdout == result.stdout  # as the other commands take it
    both = cli("config", "validate", "-c", "warn.toml", "bad.toml")
    assert both.exit_code == 2 and "give the file to check once: PATH or --config" in both.stderr

    (tmp_path / "deck.toml").write_text(agent_block("a"))
    result = cli("config", "validate")  # the config in use: ./deck.toml
    assert result.exit_code == 0 and result.stdout == f"{tmp_path / 'deck.toml'}: valid\n"

    result = cli("config", "validate", "missing.toml")
    assert result.exit_code == 2 and "config file not found: missing.toml" in result.stderr


def test_config_path_says_how_the_file_was_found(cli, tmp_path, monkeypatch):
    assert cli("config", "path").stdout == "built-in default (no config file found)\n"
    xdg = tmp_path / "xdg" / "deck" / "deck.toml"
    xdg.parent.mkdir(parents=True)
    xdg.write_text("")
    assert cli("config", "path").stdout == f"{xdg} (from $XDG_CONFIG_HOME/deck/deck.toml)\n"
    (tmp_path / "deck.toml").write_text("")
    assert cli("config", "path").stdout == f"{tmp_path / 'deck.toml'} (from ./deck.toml)\n"
    monkeypatch.setenv("DECK_CONFIG", str(xdg))
    assert cli("config", "path").stdout == f"{xdg} (from $DECK_CONFIG)\n"
    assert cli("config", "path", "-c", "deck.toml").stdout == "deck.toml (from --config)\n"
    result = cli("config", "path", "-c", "nope.toml")
    assert result.exit_code == 2 and result.stdout == "nope.toml (from --config; file not found)\n"
    # Without $XDG_CONFIG_HOME, the folder deck looks in is named as it is.
    monkeypatch.delenv("DECK_CONFIG")
    (tmp_path / "deck.toml").unlink()
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    home = tmp_path / "home" / ".config" / "deck" / "deck.toml"
    home.parent.mkdir(parents=True)
    home.write_text("")
    assert cli("config", "path").stdout == f"{home} (from ~/.config/deck/deck.toml)\n"


def test_a_duration_of_nothing_is_written_0s():
    from deck.config.models import format_duration

    assert [format_duration(s) for s in (0, 0.25, 30, 600, 90 * 86400)] == ["0s", "250ms", "30s", "10m", "90d"]


def test_config_schema_prints_the_json_schema(cli):
    result = cli("config", "schema")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == json_schema(BUILT_IN_SECTIONS)


def test_config_show_prints_the_effective_config(cli, tmp_path):
    (tmp_path / "deck.toml").write_text('language = "fr"\n[agents.a]\ncommand = "a b"\n')
    result = cli("config", "show")
    assert result.exit_code == 0
    shown = tomllib.loads(result.stdout)
    assert shown["language"] == "fr"
    assert shown["limits"] == {
        "maxRunningAgents": 4, "stopIdleAgentsAfter": "10m", "handshakeTimeout": "30s",
        "messageSize": "8 MiB", "conversationSize": "32 MiB",
    }  # fmt: skip
    assert shown["agents"]["a"]["command"] == ["a", "b"] and shown["agents"]["a"]["permissions"] == "ask"
    as_json = json.loads(cli("config", "show", "--json").stdout)
    assert as_json == shown
    # The built-in default when there is no file.
    (tmp_path / "deck.toml").unlink()
    assert list(tomllib.loads(cli("config", "show").stdout)["agents"]) == ["demo"]
    (tmp_path / "deck.toml").write_text(BAD)
    result = cli("config", "show")
    assert result.exit_code == 1 and result.stdout == "" and "deck.toml:1:12:" in result.stderr


# -- ConfigService ----------------------------------------------------------------------------------


async def test_current_content_validate_and_schema(make_deck):
    deck, rec = make_deck('tema = "x"\n' + agent_block("a"))
    current = await deck.call("ConfigService.Current", {})
    assert current == {
        "path": str(deck.config_path),
        "source": "flag",
        "created": False,
        "valid": True,
        "problems": [],
        "warnings": [{"line": 1, "column": 1, "message": "unknown key tema", "warning": True}],
        "theme": "dark",
        "language": "en",
        "baseHash": hashlib.sha256(deck.config_path.read_bytes()).hexdigest(),
    }
    assert await deck.call("ConfigService.Content", {}) == deck.config_path.read_text()
    checked = await deck.call("ConfigService.Validate", {"text": "[agents.x]\ncommand = []\n"})
    assert checked == {
        "valid": False,
        "problems": [{"line": 2, "column": 11, "message": "agents.x.command: command must not be empty", "warning": False}],
        "warnings": [],
    }
    assert await deck.call("ConfigService.Schema", {}) == json_schema(BUILT_IN_SECTIONS)


async def test_save_of_invalid_text_leaves_the_file_byte_identical(make_deck):
    original = "# my config\r\n" + agent_block("a").replace("\n", "\r\n")
    deck, rec = make_deck("")
    deck.config_path.write_bytes(original.encode())
    before = deck.config_path.stat()
    result = await deck.config_service.save('[agents.a]\ncommand = ""\n')
    assert result["saved"] is False and result["valid"] is False
    assert result["problems"][0]["message"] == "agents.a.command: command must not be empty"
    assert deck.config_path.read_bytes() == original.encode()
    after = deck.config_path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(p.name for p in deck.config_path.parent.iterdir()) == ["deck.toml"]
    assert rec.named("config:changed") == []


async def test_save_writes_atomically_and_applies(make_deck):
    deck, rec = make_deck(agent_block("a"))
    os.chmod(deck.config_path, 0o640)
    before = deck.config_path.stat()
    text = agent_block("b") + agent_block("a", title="Agent A")
    result = await deck.config_service.save(text)
    assert result == {"saved": True, "path": str(deck.config_path), "valid": True, "problems": [], "warnings": []}
    after = deck.config_path.stat()
    assert deck.config_path.read_text() == text
    assert after.st_ino != before.st_ino  # a new file renamed over the old one: never half-written
    assert after.st_mode & 0o777 == 0o640  # with the old file's permissions
    assert sorted(p.name for p in deck.config_path.parent.iterdir()) == ["deck.toml"]  # no temp file left
    assert [a["name"] for a in await deck.agent_service.list_agents()] == ["b", "a"]
    assert deck.agents["a"].title == "Agent A"
    assert rec.named("config:changed") == [{"path": str(deck.config_path), "valid": True, "problems": []}]
    assert await deck.config_service.content() == text


async def test_save_through_a_symlink_keeps_the_link(make_deck, tmp_path):
    deck, rec = make_deck(agent_block("a"))
    real = tmp_path / "dotfiles" / "deck.toml"
    real.parent.mkdir()
    real.write_text(agent_block("a"))
    deck.config_path.unlink()
    deck.config_path.symlink_to(real)
    await deck.config_service.save(agent_block("z"))
    assert deck.config_path.is_symlink() and real.read_text() == agent_block("z")


async def test_save_of_the_built_in_config_creates_the_users_file(tmp_path, monkeypatch):
    from deck.runtime.deck import Deck

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    deck = Deck(None, "embedded")
    try:
        result = await deck.config_service.save(agent_block("mine"))
        target = tmp_path / "xdg" / "deck" / "deck.toml"
        assert result["saved"] and result["path"] == str(target) and target.read_text() == agent_block("mine")
        current = await deck.config_service.current()
        assert (current["path"], current["source"], current["created"]) == (str(target), "xdg", True)
        assert list(deck.agents) == ["mine"]
    finally:
        await deck.shutdown()


@pytest.fixture
def state_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


async def test_open_stops_agents_forgets_conversations_and_follows_the_new_file(make_deck, tmp_path, state_home):
    deck, rec = make_deck(agent_block("a"))
    deck.config_service.start_watching()
    await asyncio.wait_for(deck.config_service.live.ready.wait(), 10)
    deck.chat.send("a", "hello")
    await rec.wait_event("turn:changed", agent="a", busy=False)
    pid = deck.agents["a"].process.pid
    other = tmp_path / "other" / "deck.toml"
    other.parent.mkdir()
    other.write_text(agent_block("x") + agent_block("y"))

    current = await deck.call("ConfigService.Open", {"path": str(other)})
    assert current["path"] == str(other) and current["source"] == "open" and current["valid"]
    assert not alive(pid) and rec.states("a")[-1] == "stopped"
    assert deck.chat.conversations == {}
    assert [a["name"] for a in await deck.agent_service.list_agents()] == ["x", "y"]
    assert await deck.config_service.content() == other.read_text()
    started_with = str(tmp_path / "deck.toml")  # the file deck was started with is listed too
    assert await deck.config_service.recent() == [str(other), started_with]
    assert json.loads((state_home / "deck" / "recent.json").read_text()) == [str(other), started_with]
    assert rec.named("config:changed")[-1] == {"path": str(other), "valid": True, "problems": []}

    # The new file is watched, the old one no longer.
    await asyncio.wait_for(deck.config_service.live.ready.wait(), 10)
    (tmp_path / "deck.toml").write_text(agent_block("old"))
    other.write_text(agent_block("x") + agent_block("y") + agent_block("z"))
    await rec.wait(lambda r: "z" in deck.agents)
    assert list(deck.agents) == ["x", "y", "z"]


async def test_open_refuses_an_invalid_file_and_changes_nothing(make_deck, tmp_path, state_home):
    deck, rec = make_deck(agent_block("a"))
    await deck.agent_service.start("a")
    bad = tmp_path / "bad.toml"
    bad.write_text("[agents.b]\ncommand = []\n")
    with pytest.raises(ServiceError, match=r"not a valid config: .*bad.toml:2:11: agents.b.command") as caught:
        await deck.config_service.open(str(bad))
    assert caught.value.data["problems"][0]["line"] == 2
    assert deck.agents["a"].state.value == "ready" and deck.config_path == tmp_path / "deck.toml"
    assert await deck.config_service.recent() == []


async def test_open_of_a_missing_file_creates_it(make_deck, tmp_path, state_home):
    deck, rec = make_deck(agent_block("a"))
    new = tmp_path / "new.toml"
    current = await deck.config_service.open(str(new))
    assert current["created"] is True and new.is_file()
    assert list(deck.agents) == ["demo"]
    with pytest.raises(ServiceError, match="no such directory"):
        await deck.config_service.open(str(tmp_path / "no" / "dir" / "deck.toml"))


async def test_recent_keeps_the_8_latest_most_recent_first_across_decks(make_deck, tmp_path, state_home):
    deck, rec = make_deck(agent_block("a"))
    files = []
    for n in range(10):
        path = tmp_path / f"c{n}.toml"
        path.write_text(agent_block(f"a{n}"))
        files.append(str(path))
        await deck.config_service.open(str(path))
    await deck.config_service.open(files[5])  # opened again: moves to the front, once
    expected = [files[5], files[9], files[8], files[7], files[6], files[4], files[3], files[2]]
    assert await deck.config_service.recent() == expected
    other, _ = make_deck(agent_block("b"))
    assert await other.config_service.recent() == expected


class Picker(Frontend):
    """A frontend with a file picker that answers `answer`, then calls Choose as a user would."""

    name = "picker"
    answer = ""

    async def choose_file(self) -> str:
        await asyncio.sleep(0)
        return self.answer

    async def run(self) -> int:
        self.result = await self.client.call("ConfigService.Choose", {})
        return 0


class NoPicker(Frontend):
    name = "plain"

    async def run(self) -> int:
        try:
            await self.client.call("ConfigService.Choose", {})
        except ServiceError as exc:
            self.error = str(exc)
        return 0


async def test_choose_opens_the_picked_file(make_deck, tmp_path, state_home):
    deck, rec = make_deck(agent_block("a"))
    chosen = tmp_path / "chosen.toml"
    chosen.write_text(agent_block("c"))
    Picker.answer = str(chosen)
    assert await deck.run(Picker) == 0
    assert deck.frontend.result == str(chosen)
    assert deck.config_path == chosen
    assert await deck.config_service.recent() == [str(chosen), str(tmp_path / "deck.toml")]


async def test_choose_cancelled_changes_nothing(make_deck, state_home):
    deck, rec = make_deck(agent_block("a"))
    Picker.answer = ""
    assert await deck.run(Picker) == 0
    assert deck.frontend.result == "" and list(deck.agents) == ["a"]


async def test_choose_without_a_picker_is_an_error(make_deck):
    deck, rec = make_deck(agent_block("a"))
    assert await deck.run(NoPicker) == 0
    assert deck.frontend.error == "the plain frontend has no file picker: call ConfigService.Open with a path"


def test_problem_format():
    assert Problem(3, 7, "x", warning=True).format("f.toml") == "f.toml:3:7: warning: x"
    assert Problem(3, 7, "x").format("f.toml") == "f.toml:3:7: x"


def test_line_numbers_count_newlines_only():
    # U+2028 and U+0085 are allowed in TOML comments and strings; they do not end a line.
    text = '# note\u2028more\n[agents.a]\ncommand = ["x"]\ntitle = 5\ndescription = "a\u0085b"\nicon = 1\n'
    assert [(p.line, p.message.split(":")[0]) for p in parse(text).problems] == [
        (4, "agents.a.title"), (6, "agents.a.icon")]  # fmt: skip


def test_durations_must_be_finite():
    assert problems("[limits]\nstopIdleAgentsAfter = nan\n")[0][2].startswith("limits.stopIdleAgentsAfter: bad duration nan")
    assert problems("[limits]\nhandshakeTimeout = inf\n")[0][2].startswith("limits.handshakeTimeout: bad duration inf")
    assert problems("[limits]\nhandshakeTimeout = 0\n")[0][2] == "limits.handshakeTimeout: Input should be greater than 0"


def test_a_new_config_file_gets_the_usual_mode(tmp_path):
    from deck.config.files import write_atomic

    mask = os.umask(0)
    os.umask(mask)
    write_atomic(tmp_path / "new.toml", "language = 'en'\n")
    assert (tmp_path / "new.toml").stat().st_mode & 0o777 == 0o666 & ~mask
    (tmp_path / "new.toml").chmod(0o640)
    write_atomic(tmp_path / "new.toml", "language = 'fr'\n")  # an existing file keeps its own
    assert (tmp_path / "new.toml").stat().st_mode & 0o777 == 0o640


def test_a_bad_array_element_is_pointed_at_itself():
    text = (
        '[agents.a]\ncommand = [\n  "x",\n  5,\n]\n'
        '[agents.b]\ncommand = ["y", "z", 7]   # a comment, with ] and ,\n'
        '[agents.c]\ncommand = ["a,b]", [1]]\n'
    )
    assert [(p.line, p.column, p.message.split(":")[0]) for p in parse(text).problems] == [
        (4, 3, "agents.a.command.1"), (7, 22, "agents.b.command.2"), (9, 20, "agents.c.command.1")]  # fmt: skip


# -- sizes, nesting and the kinds of file read ------------------------------------------------------

DEEP_ARRAY = "x = " + "[" * 5000 + "]" * 5000 + "\n"


def missing_commands(count: int) -> str:
    """`count` agents, none with a command: one problem each."""
    return "".join(f'[agents.a{n}]\ntitle = "A{n}"\n' for n in range(count))


def test_nesting_deeper_than_the_limit_is_a_problem_not_a_crash():
    from deck.config.models import MAX_NESTING

    deep = f"nested more than {MAX_NESTING} levels deep"
    assert problems(DEEP_ARRAY) == [(1, 5 + MAX_NESTING, deep, False)]  # the first "[" too deep
    assert problems("[a.b]\n" + DEEP_ARRAY) == [(2, 3 + MAX_NESTING, deep, False)]  # x is a.b.x: level 3
    assert problems("x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n")[0][0::2] == (1, deep)
    assert problems("a." * 100_000 + "b = 1\n")[0][0::2] == (1, deep)  # dotted keys nest too
    assert problems("[" + "a." * 100_000 + "b]\n")[0][0::2] == (1, deep)  # and table headers
    assert problems('s = """\n' + "[" * 5000 + '\n"""\n' + "t = '[[[[' # [[[[\n") == [
        (1, 1, "unknown key s", True), (4, 1, "unknown key t", True)]  # fmt: skip  (brackets in strings and comments)
    at_the_limit = "x = " + "[" * MAX_NESTING + "]" * MAX_NESTING + "\n"
    assert problems(at_the_limit) == [(1, 1, "unknown key x", True)]


def test_a_text_over_the_size_cap_is_a_problem():
    from deck.config.models import MAX_SIZE

    assert problems("#" * MAX_SIZE) == []
    too_big = f"{MAX_SIZE + 1} bytes: a config file has {MAX_SIZE} (1 MiB) at most"
    assert problems("#" * (MAX_SIZE + 1)) == [(1, 1, too_big, False)]
    assert problems("#" + "é" * (MAX_SIZE // 2))[0][2].startswith(f"{MAX_SIZE + 1} bytes")  # bytes, not characters


def test_a_lone_surrogate_is_a_problem_not_a_failed_save():
    assert problems('title = "ok"\n# \ud800\n') == [(2, 3, "not UTF-8 text: a lone surrogate (U+D800)", False)]


def deck_cli(*args: str, cwd: Path, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """`deck ARGS…` as a real process."""
    return subprocess.run([*DECK, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_validate_of_10k_agents_without_a_command_takes_linear_time(tmp_path):
    (tmp_path / "big.toml").write_text(missing_commands(10_000))
    result = deck_cli("config", "validate", "big.toml", cwd=tmp_path, timeout=10)  # quadratic: minutes
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 10_000 and all(line.endswith("command: required key is missing") for line in lines)
    assert lines[-1] == "big.toml:19999:1: agents.a9999.command: required key is missing"


def test_deck_config_validate_reports_deep_nesting_without_a_traceback(tmp_path):
    from deck.config.models import MAX_NESTING

    (tmp_path / "deep.toml").write_text(DEEP_ARRAY)
    result = deck_cli("config", "validate", "deep.toml", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (
        1, f"deep.toml:1:{5 + MAX_NESTING}: nested more than {MAX_NESTING} levels deep\n", "")  # fmt: skip


def test_what_is_not_a_regular_file_is_refused_at_start(tmp_path):
    result = deck_cli("run", "--frontend=jsonl", "--config", "/dev/zero", cwd=tmp_path, timeout=10)
    assert result.returncode == 2 and "/dev/zero: not a regular file (a character device)" in result.stderr
    result = deck_cli("config", "validate", "/dev/zero", cwd=tmp_path, timeout=10)
    assert result.returncode == 2 and "/dev/zero: not a regular file (a character device)" in result.stderr
    assert "Traceback" not in result.stderr
    (tmp_path / "huge.toml").write_bytes(b"#" * (2 << 20))
    result = deck_cli("config", "validate", "huge.toml", cwd=tmp_path, timeout=10)
    assert result.returncode == 2
    assert "cannot read huge.toml: 2097152 bytes: a config file has 1048576 (1 MiB) at most" in result.stderr


def feed(fifo: Path, text: str) -> threading.Thread:
    """Write `text` into `fifo` once a reader opens it, as `-c <(cat deck.toml)` does."""

    def write() -> None:
        with open(fifo, "w") as out:
            out.write(text)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_a_config_given_as_a_pipe_is_read_once_and_never_written(tmp_path):
    from tests.deck_process import DeckProcess

    fifo = tmp_path / "piped.toml"
    os.mkfifo(fifo)
    feed(fifo, agent_block("a") + '[agents.b]\ncommand = ""\n')
    result = deck_cli("config", "validate", str(fifo), cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == f"{fifo}:4:11: agents.b.command: command must not be empty\n"

    feed(fifo, agent_block("a"))
    proc = DeckProcess("--config", str(fifo), cwd=tmp_path)
    try:
        assert [a["name"] for a in proc.call("AgentService.List")] == ["a"]
        assert proc.call("ConfigService.Content") == agent_block("a")
        reply = proc.response(proc.request("ConfigService.Save", {"text": agent_block("a") + agent_block("b")}))
        assert "not a regular file (a FIFO or pipe)" in reply["error"]["message"]
        assert proc.call("ConfigService.Recent") == []  # a pipe is not a file to open again
        proc.close_stdin()
        assert proc.wait(15) == 0
        assert proc.events("config:changed") == []  # not watched: nothing reported it unreadable
    finally:
        proc.kill_everything()


async def test_open_reads_only_regular_files(make_deck, tmp_path, state_home):
    from deck.config.models import MAX_SIZE

    deck, rec = make_deck(agent_block("a"))
    await deck.agent_service.start("a")
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)  # nobody writes to it: reading it would wait forever
    huge = tmp_path / "huge.toml"
    with open(huge, "wb") as out:
        out.truncate(MAX_SIZE + 1)
    refused = {
        "/dev/zero": "not a regular file (a character device)",
        str(fifo): "not a regular file (a FIFO or pipe)",
        str(tmp_path): "not a regular file (a directory)",
        str(huge): f"{MAX_SIZE + 1} bytes: a config file has {MAX_SIZE} (1 MiB) at most",
    }
    for path, why in refused.items():
        with pytest.raises(ServiceError) as caught:
            await asyncio.wait_for(deck.config_service.open(path), 5)
        assert f"{path}:1:1: cannot read {path}: {why}" in str(caught.value)
    assert deck.agents["a"].state.value == "ready" and deck.config_path == tmp_path / "deck.toml"
    assert await deck.config_service.recent() == []


# -- Save against a base: no lost update ------------------------------------------------------------


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_the_base_hash_is_the_sha256_of_the_file_as_read(make_deck):
    deck, rec = make_deck("")
    crlf = ("# my config\r\n" + agent_block("a").replace("\n", "\r\n")).encode()
    deck.config_path.write_bytes(crlf)
    await deck.config_service.live.reload()
    assert (await deck.config_service.current())["baseHash"] == sha256(crlf)
    assert (await deck.config_service.content()).encode() == crlf  # exactly the file: its hash is the base hash


async def test_save_with_a_stale_base_hash_is_refused_and_writes_nothing(make_deck):
    deck, rec = make_deck(agent_block("a"))
    base = (await deck.config_service.current())["baseHash"]
    assert base == sha256(deck.config_path.read_bytes())
    theirs = agent_block("a") + agent_block("theirs")
    deck.config_path.write_text(theirs)  # an editor saves while a client edits its copy
    with pytest.raises(ServiceError, match=r"^the config file changed since it was read; reload it$"):
        await deck.config_service.save(agent_block("a") + agent_block("mine"), baseHash=base)
    assert deck.config_path.read_text() == theirs and list(deck.agents) == ["a"]
    assert sorted(p.name for p in deck.config_path.parent.iterdir()) == ["deck.toml"]  # no temp file left
    assert rec.named("config:changed") == []

    result = await deck.config_service.save(theirs + agent_block("mine"), baseHash=sha256(theirs.encode()))
    assert result["saved"] and list(deck.agents) == ["a", "theirs", "mine"]
    base = (await deck.config_service.current())["baseHash"]
    assert base == sha256(deck.config_path.read_bytes())
    deck.config_path.unlink()  # a deleted file changed too
    with pytest.raises(ServiceError, match="changed since it was read"):
        await deck.config_service.save(agent_block("z"), baseHash=base)
    assert (await deck.config_service.save(agent_block("z")))["saved"]  # without a base: written as before
    assert deck.config_path.read_text() == agent_block("z")


def test_save_with_a_stale_base_hash_is_refused_over_jsonl(tmp_path):
    from tests.deck_process import DeckProcess

    config = tmp_path / "deck.toml"
    config.write_text(agent_block("a"))
    proc = DeckProcess("--config", str(config), cwd=tmp_path)
    try:
        base = proc.call("ConfigService.Current")["baseHash"]
        config.write_text(agent_block("a") + agent_block("theirs"))
        reply = proc.response(proc.request("ConfigService.Save", {"text": agent_block("mine"), "baseHash": base}))
        assert reply["error"]["code"] == -32000
        assert reply["error"]["message"] == "the config file changed since it was read; reload it"
        assert config.read_text() == agent_block("a") + agent_block("theirs")
        proc.event("config:changed", valid=True)  # the watcher applied their edit
        base = proc.call("ConfigService.Current")["baseHash"]
        text = proc.call("ConfigService.Content") + agent_block("mine")
        assert proc.call("ConfigService.Save", {"text": text, "baseHash": base})["saved"] is True
        assert config.read_text() == text
        proc.close_stdin()
        assert proc.wait(15) == 0
    finally:
        proc.kill_everything()


# -- the event loop stays free while a config is checked ---------------------------------------------


@pytest.mark.parametrize("operation", ["validate", "save", "reload"])
async def test_checking_a_big_config_leaves_the_event_loop_free(make_deck, operation):
    deck, rec = make_deck(agent_block("a"))
    big = missing_commands(5_000)
    if operation == "reload":
        deck.config_path.write_text(big)
        work = deck.config_service.live.reload()
    else:
        work = getattr(deck.config_service, operation)(big)
    task = asyncio.ensure_future(work)
    ticks = 0
    while not task.done():  # on the loop, the check would run between two ticks: one tick in all
        await asyncio.sleep(0.001)
        ticks += 1
    await task
    assert ticks > 2
    if operation == "reload":
        assert rec.named("config:changed")[-1]["valid"] is False and list(deck.agents) == ["a"]
