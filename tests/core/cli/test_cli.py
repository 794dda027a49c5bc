"""The `deck` command line, run as a subprocess: --version, --help everywhere, agents, and run with no config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from deck._version import __version__
from deck.cli.commands import app

from tests.conftest import agent_block
from tests.deck_process import DECK, DeckProcess, write_config

pytestmark = pytest.mark.timeout(60)


def deck(*args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DECK, *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, **kwargs)


def _command_paths(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for name, command in (getattr(group, "commands", None) or {}).items():
        paths += _command_paths(command, (*prefix, name))
    return paths


COMMANDS = _command_paths(typer.main.get_command(app))


def test_version():
    result = deck("--version")
    assert result.returncode == 0
    assert result.stdout == f"deck {__version__}\n"
    from importlib.metadata import version

    assert version("acp-deck") == __version__


def test_version_does_not_import_the_heavy_modules():
    code = (
        "import sys\n"
        "sys.argv = ['deck', '--version']\n"
        "from deck.cli.commands import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('urwid', 'rich', 'pydantic', 'psutil', 'pluggy', 'watchfiles') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert result.stdout.splitlines() == [f"deck {__version__}", "[]"], result.stderr


def test_every_command_is_known():
    names = {" ".join(path) for path in COMMANDS}
    assert {"", "run", "agents", "plugins", "config", "config path"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "deck")
def test_help_everywhere(path):
    result = deck(*path, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: ")
    assert f" {' '.join((*path, '[OPTIONS]'))}" in result.stdout.splitlines()[0]
    assert "--help" in result.stdout
    assert result.stderr == ""


def test_agents_lists_the_config_in_order(tmp_path):
    config = write_config(
        tmp_path / "deck.toml",
        agent_block("zeta", title="Zeta agent", icon="Z") + agent_block("alpha", title="Alpha agent", icon="A"),
    )
    result = deck("agents", "--config", str(config))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].split()[:2] == ["Z", "zeta"] and "Zeta agent" in lines[0]
    assert lines[1].split()[:2] == ["A", "alpha"] and "Alpha agent" in lines[1]
    rows = json.loads(deck("agents", "--config", str(config), "--json").stdout)
    assert [(r["name"], r["title"], r["icon"]) for r in rows] == [("zeta", "Zeta agent", "Z"), ("alpha", "Alpha agent", "A")]
    assert rows[0]["command"][0] == sys.executable


def test_agents_with_a_missing_config_is_one_line_exit_2(tmp_path):
    result = deck("agents", "--config", str(tmp_path / "nowhere.toml"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"deck: config file not found: {tmp_path / 'nowhere.toml'}"]


def test_agents_from_deck_config_env(tmp_path):
    config = write_config(tmp_path / "elsewhere.toml", agent_block("fromenv"))
    env = {**_no_config_env(tmp_path), "DECK_CONFIG": str(config)}
    result = deck("agents", env=env, cwd=tmp_path / "work")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[1] == "fromenv"


def _no_config_env(tmp_path: Path) -> dict[str, str]:
    """An environment where deck finds no config: empty HOME and XDG dirs, no DECK_CONFIG."""
    for name in ("home", "xdg", "work"):
        (tmp_path / name).mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "DECK_CONFIG"}
    env.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    return env


def test_agents_with_no_config_anywhere_is_the_demo(tmp_path):
    result = deck("agents", env=_no_config_env(tmp_path), cwd=tmp_path / "work")
    assert result.returncode == 0, result.stderr
    assert [line.split()[1] for line in result.stdout.splitlines()] == ["demo"]


def test_run_with_no_config_anywhere_runs_the_demo_agent(tmp_path):
    proc = DeckProcess(env=_no_config_env(tmp_path), cwd=tmp_path / "work")
    try:
        assert [a["name"] for a in proc.call("AgentService.List")] == ["demo"]
        current = proc.call("ConfigService.Current")
        assert current["source"] == "embedded" and current["path"] == ""
        proc.call("ChatService.Send", {"agent": "demo", "text": "echo hi"})
        proc.event("turn:changed", agent="demo", busy=False, queued=0, timeout=20)
        answer = [e["message"] for e in proc.events("message:updated", agent="demo") if e["message"]["role"] == "agent"][-1]
        assert answer["done"] and answer["stopReason"] == "end_turn"
        assert answer["parts"] == [{"type": "text", "text": "hi"}]
        proc.close_stdin()
        assert proc.wait(15) == 0
        assert proc.states("demo") == ["starting", "ready", "busy", "ready", "stopped"]
        # Nothing was written where a config would be looked for.
        assert not any((tmp_path / "xdg").iterdir()) and not any((tmp_path / "work").iterdir())
    finally:
        proc.kill_everything()


def test_the_demo_agent_runs_in_a_folder_that_holds_a_deck_package_of_its_own(tmp_path, shadowing_folder):
    proc = DeckProcess(env=_no_config_env(tmp_path), cwd=shadowing_folder)
    try:
        proc.call("ChatService.Send", {"agent": "demo", "text": "echo hi"})
        proc.event("turn:changed", agent="demo", busy=False, queued=0, timeout=20)
        answer = [e["message"] for e in proc.events("message:updated", agent="demo") if e["message"]["role"] == "agent"][-1]
        assert answer["parts"] == [{"type": "text", "text": "hi"}]
        assert "error" not in proc.states("demo")
        proc.close_stdin()
        assert proc.wait(15) == 0
    finally:
        proc.kill_everything()


def test_unknown_frontend_is_one_line_exit_2(tmp_path):
    config = write_config(tmp_path / "deck.toml", agent_block("a"))
    result = deck("run", "--config", str(config), "--frontend", "nope")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("deck: unknown frontend 'nope'") and "jsonl" in lines[0]


def test_an_unknown_frontend_in_the_config_is_refused_and_validate_warns_of_it(tmp_path):
    config = write_config(tmp_path / "deck.toml", 'frontend = "gtk"\n' + agent_block("a"))
    result = deck("run", "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"deck: unknown frontend 'gtk' in {config} (available: jsonl, line, urwid)"
    ]  # never another frontend in its place
    checked = deck("config", "validate", str(config))
    assert checked.returncode == 0
    assert f"{config}:1:12: warning: frontend: unknown frontend 'gtk' (available: jsonl, line, urwid)" in checked.stdout
    # --frontend still chooses, and a frontend deck has is no warning.
    assert deck("run", "--config", str(config), "-f", "jsonl").returncode == 0
    write_config(config, 'frontend = "line"\n' + agent_block("a"))
    assert "warning" not in deck("config", "validate", str(config)).stdout
    write_config(config, 'frontend = ""\n' + agent_block("a"))  # empty is no frontend either
    assert deck("run", "--config", str(config)).returncode == 2 and "warning" in deck("config", "validate", str(config)).stdout


def test_no_command_prints_help():
    result = deck()
    assert result.returncode == 0
    assert "Commands:" in result.stdout and "run" in result.stdout


def test_config_show_gives_each_agent_the_title_and_icon_it_is_shown_with(tmp_path):
    config = write_config(tmp_path / "deck.toml", agent_block("alpha") + agent_block("zeta", title="Zeta agent", icon="Z"))
    shown = json.loads(deck("config", "show", "--json", "--config", str(config)).stdout)["agents"]
    listed = json.loads(deck("agents", "--json", "--config", str(config)).stdout)
    assert [(name, a["title"], a["icon"]) for name, a in shown.items()] == [(r["name"], r["title"], r["icon"]) for r in listed]
    assert (shown["alpha"]["title"], shown["alpha"]["icon"]) == ("alpha", "A")  # unset: the name, its first letter
    toml = deck("config", "show", "--config", str(config)).stdout
    assert '[agents.alpha]\ntitle = "alpha"\nicon = "A"\n' in toml and 'icon = ""' not in toml


def test_config_show_gives_the_registry_url_deck_reads(tmp_path):
    """Unset, `[registry] url` is the registry's CDN, as the docs and `deck config init` say, not
    "": `deck config show` says the URL `deck agents add` would read, $DECK_REGISTRY_URL first."""
    from deck.config.registry_url import DEFAULT_URL

    config = write_config(tmp_path / "deck.toml", agent_block("a"))
    env = {k: v for k, v in os.environ.items() if k != "DECK_REGISTRY_URL"}
    shown = deck("config", "show", "--config", str(config), env=env).stdout
    assert f'[registry]\nurl = "{DEFAULT_URL}"\n' in shown and 'url = ""' not in shown
    assert DEFAULT_URL.startswith("https://cdn.agentclientprotocol.com/")
    as_json = json.loads(deck("config", "show", "--json", "--config", str(config), env=env).stdout)
    assert as_json["registry"] == {"url": DEFAULT_URL}
    mirror = write_config(tmp_path / "mirror.toml", '[registry]\nurl = "file:///srv/r.json"\n' + agent_block("a"))

    def registry() -> dict[str, str]:
        return json.loads(deck("config", "show", "--json", "--config", str(mirror), env=env).stdout)["registry"]

    assert registry() == {"url": "file:///srv/r.json"}
    env["DECK_REGISTRY_URL"] = "https://mirror.example/r.json"
    assert registry() == {"url": "https://mirror.example/r.json"}  # the environment wins, as it does for the registry


def test_a_config_with_no_agent_is_said_so(tmp_path):
    """An empty config: `deck agents` and `deck run` say there is no agent and how to get one,
    rather than print nothing; `deck run` runs all the same (agents added to the file start),
    as line mode answers input then: `[deck] there is no agent in the config`."""
    config = write_config(tmp_path / "empty.toml", "")
    said = f"no agent in the config ({config}): `deck config init` writes one"
    listed = deck("agents", "--config", str(config))
    assert (listed.returncode, listed.stdout, listed.stderr) == (0, said + "\n", "")
    assert deck("agents", "--check", "--config", str(config)).stdout == said + "\n"
    assert json.loads(deck("agents", "--json", "--config", str(config)).stdout) == []
    for frontend in ("line", "jsonl"):
        ran = deck("run", "--frontend", frontend, "--config", str(config))
        assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", f"deck: {said}\n"), frontend
    typed = subprocess.run([*DECK, "run", "--config", str(config)], input="hi\n", capture_output=True, text=True,
                           timeout=30)  # fmt: skip
    assert typed.returncode == 0 and typed.stderr == f"deck: {said}\n"
    assert "[deck] there is no agent in the config" in typed.stdout


@pytest.mark.parametrize(("args", "meant"), [
    (["check"], "Did you mean `deck agents --check` (can each agent start?) or `deck config validate`"
                " (is the config valid?)?"),
    (["config", "check"], "Did you mean `deck config validate`?"),
    (["agent"], "Did you mean `deck agents`?"),
    (["config", "shw"], "Did you mean `deck config show`?"),
    (["config", "chek"], "Did you mean `deck config validate`?"),
    (["chek"], "Did you mean `deck agents --check` (can each agent start?) or `deck config validate`"
               " (is the config valid?)?"),
    (["lnd", "-p", "no:worktrees"], "`deck land` is a command of the worktrees plugin, which is off ([plugins] disabled,"
                                    " or -p no:worktrees)."),
])  # fmt: skip
def test_an_unknown_command_names_the_one_meant(args, meant):
    done = deck(*args)
    assert (done.returncode, done.stdout) == (2, "")
    typed = args[1] if args[0] == "config" else args[0]
    assert done.stderr.splitlines()[-1] == f"Error: No such command {typed!r}. {meant}"


def test_a_command_of_a_plugin_that_is_off_says_so(tmp_path):
    config = write_config(tmp_path / "deck.toml", '[plugins]\ndisabled = ["worktrees"]\n' + agent_block("a"))
    done = deck("land", "--config", str(config), cwd=tmp_path)
    off = "It is a command of the worktrees plugin, which is off ([plugins] disabled, or -p no:worktrees)."
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == f"Error: No such command 'land'. {off}"
    done = deck("history", "-p", "no:history")
    assert done.stderr.splitlines()[-1].endswith("a command of the history plugin, which is off ([plugins] disabled, or -p no:history).")


def test_an_unknown_command_like_none_is_said_alone():
    done = deck("zzzz")
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == "Error: No such command 'zzzz'."


def test_diff_of_an_agent_the_config_does_not_have_names_it_and_the_agents(tmp_path):
    config = write_config(tmp_path / "deck.toml", agent_block("a") + agent_block("b"))
    done = deck("diff", "zzz", "--config", str(config), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "deck: unknown agent 'zzz' (agents: a, b)\n"


# -- the history's commands ---------------------------------------------------------------------


def _conversations(*rows: tuple[str, str, str, int]) -> list[str]:
    """Stored conversations (config path, agent, title, how many messages): their ids."""
    from deck.plugins.history.store import HistoryStore, default_path

    ids = []
    with HistoryStore(default_path()) as store:
        for config, agent, title, count in rows:
            cid = store.new_conversation(config, agent, title=title)
            store.put_messages(cid, [_message(f"m{i}", agent) for i in range(count)])
            ids.append(cid)
    return ids


def _message(mid: str, agent: str) -> dict[str, Any]:
    return {"id": mid, "agent": agent, "createdAt": "2025-03-01T10:00:00.000Z", "role": "user",
            "parts": [{"type": "text", "text": "hi"}], "done": True, "queued": False}  # fmt: skip


def test_export_takes_a_unique_start_of_an_id_and_lists_the_ids_an_ambiguous_one_starts():
    ids = _conversations(*((f"/c{i}.toml", "a", f"title {i}", 1) for i in range(17)))  # two share a first digit
    first = sorted(ids, key=lambda i: i[0])
    shared = next(i[0] for i, j in zip(first, first[1:]) if i[0] == j[0])
    target = ids[0]
    start = next(target[:n] for n in range(1, 37) if sum(i.startswith(target[:n]) for i in ids) == 1)
    found = deck("export", start, "--format", "json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["id"] == target
    ambiguous = deck("export", shared)
    assert (ambiguous.returncode, ambiguous.stdout) == (2, "")
    lines = ambiguous.stderr.splitlines()
    assert lines[0] == f"deck: {shared!r} is the start of several conversation ids: give more of it"
    assert lines[1:] == [f"  {i}" for i in sorted(i for i in ids if i.startswith(shared))]
    missing = deck("export", "zz")
    assert missing.returncode == 1 and missing.stderr == "deck: no conversation 'zz' in the history\n"


def test_export_format_md_is_markdown_and_an_unknown_format_lists_them():
    [cid] = _conversations(("/c.toml", "a", "the title", 1))
    markdown = deck("export", cid, "--format", "md")
    assert markdown.returncode == 0 and markdown.stdout.startswith("# the title\n"), markdown.stderr
    unknown = deck("export", cid, "--format", "xml")
    assert (unknown.returncode, unknown.stdout) == (2, "")
    assert unknown.stderr == "deck: unknown --format 'xml': use markdown (or md) or json\n"


def _cells(text: str) -> int:
    """The columns `text` takes on a terminal: two for each wide character."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def test_history_all_is_a_table_whose_columns_line_up(tmp_path):
    rows = [
        (str(tmp_path / "設定" / "deck.toml"), "日本語", "wide 名前 title", 12),
        ("/x.toml", "a", "short", 1),
        ("", "bb", "built-in", 3),
    ]
    _conversations(*rows)
    done = deck("history", "--all")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    starts: dict[str, set[int]] = {"time": set(), "config": set(), "title": set(), "count ends": set()}
    for config, agent, title, count in rows:
        [line] = [line for line in lines if line.endswith(f"  {title}")]
        after_id = line[36:]
        assert after_id.startswith(f"  {agent} "), line
        counted = f"{count} message{'' if count == 1 else 's'}"
        starts["time"].add(_cells(line[: line.index(" 20")]))  # the first column after the agent's
        starts["config"].add(_cells(line[: line.index(config or "(built-in config)")]))
        starts["title"].add(_cells(line[: line.rindex(title)]))
        starts["count ends"].add(_cells(line[: line.index(f" {counted}") + 1 + len(counted)]))
    assert all(len(columns) == 1 for columns in starts.values()), (starts, lines)
