"""`deck agents search|add|update|remove` and the listing, as a user runs them: a real deck process,
a real HTTP server serving the registry and archives, real files; the binaries installed are scripts
that run the fake agent, started for a real ACP handshake."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from tests.deck_process import DECK

from tests.registry_server import (
    HERE,
    RegistryServer,
    agent_tar,
    binary_agent,
    sha256,
    tar_bytes,
    tar_special,
    zip_bytes,
)

GEMINI = {"id": "gemini", "name": "Gemini CLI", "version": "0.37.0", "description": "Google's official CLI for Gemini",
          "distribution": {"npx": {"package": "@google/gemini-cli@0.37.1", "args": ["--acp"]}}}  # fmt: skip
FAST = {"id": "fast-agent", "name": "fast-agent", "version": "0.10.1", "description": "multi-provider agents",
        "distribution": {"uvx": {"package": "fast-agent-acp==0.10.1", "args": ["-x"],
                                 "env": {"FAST_AGENT_MODEL": "codexplan"}}}}  # fmt: skip
CONFIG = """\
# My agents. Keep this comment.
language = "en"   # and this one

[agents.mine]      # hand-written
command = ["my-agent", "--acp"]

# A note between entries.
[agents.other]
command = ["other"]
"""


def deck(*args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    extra = ["--config", str(config)] if config else []
    return subprocess.run([*DECK, "agents", *args, *extra], capture_output=True, text=True, timeout=120)


def config_file(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "deck.toml"
    path.write_text(text)
    return path


def test_search_lists_the_registry_and_its_json_says_how_each_installs(
    registry: RegistryServer, tmp_path: Path
) -> None:
    registry.serve_registry([GEMINI, FAST])
    listed = deck("search")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:3] for line in listed.stdout.splitlines()] == [
        ["gemini", "0.37.0", "npx"],
        ["fast-agent", "0.10.1", "uvx"],
    ]
    found = json.loads(deck("search", "google", "--json").stdout)
    assert [a["id"] for a in found["agents"]] == ["gemini"] and found["agents"][0]["install"] == ["npx"]
    assert found["registry"]["how"] == "cached"  # the copy the first search fetched
    none = deck("search", "nothing-like-it")
    assert (
        none.returncode == 0
        and none.stdout == ""
        and "no agent of the registry matches 'nothing-like-it'" in none.stderr
    )


def test_add_writes_a_pinned_entry_and_keeps_every_comment_and_entry(registry: RegistryServer, tmp_path: Path) -> None:
    registry.serve_registry([GEMINI, FAST])
    config = config_file(tmp_path)
    added = deck("add", "gemini", config=config)
    assert added.returncode == 0, added.stderr
    assert added.stdout == f"added gemini: gemini 0.37.0 (npx) to {config}\n"
    added = deck("add", "fast-agent", "--as", "fast", config=config)
    assert added.returncode == 0, added.stderr
    text = config.read_text()
    assert text.startswith(CONFIG)  # everything before kept byte for byte
    assert (
        text[len(CONFIG) :]
        == """
[agents.gemini]
# From the ACP registry (npx): `deck agents update gemini` moves it on
title = "Gemini CLI"
description = "Google's official CLI for Gemini"
command = ["npx", "-y", "@google/gemini-cli@0.37.1", "--acp"]
registry = "gemini@0.37.0"

[agents.fast]
# From the ACP registry (uvx): `deck agents update fast` moves it on
title = "fast-agent"
description = "multi-provider agents"
command = ["uvx", "fast-agent-acp==0.10.1", "-x"]
env = {FAST_AGENT_MODEL = "codexplan"}
registry = "fast-agent@0.10.1"
"""
    )
    valid = subprocess.run([*DECK, "config", "validate", str(config)], capture_output=True, text=True)
    assert valid.returncode == 0, valid.stdout + valid.stderr


def test_add_from_a_cached_registry_costs_no_network_call_even_with_the_server_stopped(
    registry: RegistryServer, tmp_path: Path
) -> None:
    registry.serve_registry([GEMINI, FAST])
    config = config_file(tmp_path)
    assert deck("search", config=config).returncode == 0 and registry.registry_hits() == 1
    assert deck("add", "gemini", config=config).returncode == 0
    assert registry.registry_hits() == 1  # the cached copy, no request
    registry.stop()
    added = deck("add", "fast-agent", config=config)
    assert added.returncode == 0 and "registry" not in added.stderr, added.stderr  # no "cannot be reached"
    assert "[agents.fast-agent]" in config.read_text()


def test_offline_with_an_old_copy_says_its_age_and_without_one_fails_in_one_line(
    registry: RegistryServer, tmp_path: Path
) -> None:
    registry.serve_registry([GEMINI])
    config = config_file(tmp_path)
    assert deck("search", config=config).returncode == 0
    for meta in (tmp_path / "cache" / "deck" / "registry").glob("*.meta.json"):
        info = json.loads(meta.read_text())
        meta.write_text(json.dumps({**info, "fetched": info["fetched"] - 3 * 86400}))
    registry.stop()
    listed = deck("search", config=config)
    assert listed.returncode == 0 and listed.stdout.startswith("gemini")
    assert (
        "deck: the registry cannot be reached (" in listed.stderr and "using the copy cached 3 d ago" in listed.stderr
    )
    for folder in (tmp_path / "cache").rglob("*.json"):
        folder.unlink()
    failed = deck("add", "gemini", config=config)
    assert failed.returncode == 1
    assert failed.stderr.startswith("deck: cannot reach the registry (") and failed.stderr.endswith(
        "and there is no cached copy of it\n"
    )
    assert failed.stderr.count("\n") == 1 and config.read_text() == CONFIG


def test_each_error_is_one_line_with_its_exit_code_and_the_config_untouched(
    registry: RegistryServer, tmp_path: Path
) -> None:
    goose = binary_agent("goose", "1.5.0", registry.url("/goose.tar.bz2"), platform="windows-aarch64")
    registry.serve_registry([GEMINI, FAST, goose])
    config = config_file(tmp_path)
    cases = [
        (("add", "gemni"), 2, "deck: unknown registry agent 'gemni'; did you mean gemini?\n"),
        (
            ("add", "gemini", "--as", "mine"),
            2,
            "deck: the config already has an agent 'mine': pick another name with --as, or `deck agents update mine`\n",
        ),
        (
            ("add", "gemini", "--as", "search"),
            2,
            "deck: 'search' is one of `deck agents`' action words: give the agent another name with --as\n",
        ),
        (("add", "goose"), 1, f"deck: goose 1.5.0 has no build for this platform, {HERE} (builds: windows-aarch64)\n"),
        (("add", "gemini", "--via", "uvx"), 1, "deck: gemini 0.37.0 has no uvx distribution (it has npx)\n"),
        (("add", "gemini", "--via", "binary"), 1, "deck: gemini 0.37.0 has no binary distribution (it has npx)\n"),
        (
            ("add", "gemini", "--host", "box"),
            2,
            "deck: an agent on box needs --cwd, an absolute folder there (its sessions open in it)\n",
        ),
        (("add",), 2, "deck: deck agents add takes one ID\n"),
        (("remove", "nope"), 2, f"deck: unknown agent 'nope' in {config} (agents: mine, other)\n"),
        (("update", "mine"), 2, "deck: mine is not from the ACP registry (no registry key): nothing to update\n"),
    ]
    for args, code, line in cases:
        result = deck(*args, config=config)
        assert (result.returncode, result.stderr) == (code, line), args
    registry.serve("/registry.json", b"{not json")
    registry.routes["/registry.json"].etag = False
    for meta in (tmp_path / "cache").rglob("*.json"):
        meta.unlink()
    broken = deck("add", "gemini", config=config)
    assert (
        broken.returncode == 1
        and broken.stderr.startswith("deck: the registry at http://")
        and "is not valid JSON: " in broken.stderr
    )
    assert broken.stderr.count("\n") == 1
    assert config.read_text() == CONFIG


def test_a_binary_is_installed_for_this_platform_and_answers_initialize(
    registry: RegistryServer, tmp_path: Path
) -> None:
    archive = agent_tar()
    entry = binary_agent("tiny", "1.0.0", registry.serve("/tiny-1.0.0.tar.gz", archive), digest=sha256(archive))
    registry.serve_registry([entry])
    config = config_file(tmp_path)
    added = deck("add", "tiny", config=config)
    assert added.returncode == 0, added.stderr
    folder = tmp_path / "data" / "deck" / "agents" / "tiny" / "1.0.0"
    assert added.stdout == f"added tiny: tiny 1.0.0 (binary {HERE}) to {config}\n"
    assert f'command = ["{folder}/bin/agent", "acp"]' in config.read_text()
    assert sorted(p.name for p in (tmp_path / "data" / "deck" / "agents" / "tiny").iterdir()) == [
        "1.0.0"
    ]  # no temp folder left
    checked = subprocess.run(
        [*DECK, "agents", "tiny", "--check", "--handshake", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0 and "handshake ok" in checked.stdout, checked.stdout + checked.stderr


def test_a_failed_install_leaves_nothing_behind(registry: RegistryServer, tmp_path: Path) -> None:
    archive = agent_tar()
    hostile = tar_bytes([("bin/agent", b"#!/bin/sh\n"), tar_special("bin/evil", b"2", "/etc/passwd")])
    registry.serve_registry([
        binary_agent("digest", "1", registry.serve("/d.tar.gz", archive), digest="0" * 64),
        binary_agent("hostile", "1", registry.serve("/h.tar.gz", hostile)),
        binary_agent("nocmd", "1", registry.serve("/n.zip", zip_bytes([("other", b"x")]))),
        binary_agent("gone", "1", registry.url("/missing.tar.gz")),
    ])  # fmt: skip
    config = config_file(tmp_path)
    expected = {
        "digest": "the registry says 0000",
        "hostile": "archive member 'bin/evil' links to an absolute path '/etc/passwd': not installed",
        "nocmd": "the archive has no file 'bin/agent' (the registry's cmd): not installed",
        "gone": "answered HTTP 404",
    }
    for ident, words in expected.items():
        result = deck("add", ident, config=config)
        assert result.returncode == 1 and words in result.stderr and result.stderr.count("\n") == 1, result.stderr
    agents = tmp_path / "data" / "deck" / "agents"
    assert not agents.exists() or list(agents.iterdir()) == []
    assert config.read_text() == CONFIG


def test_a_zip_whose_link_climbs_out_through_a_link_to_dot_is_refused_and_leaves_nothing(
    registry: RegistryServer, tmp_path: Path
) -> None:
    # `c` -> `.`, then `b` -> `c/c/…/../…/ESCAPED` (inside on paper, outside on disk), then a folder under `b`.
    escaped = tmp_path / "ESCAPED"
    escaped.mkdir()
    up = "c/" * 12 + "../" * 12 + str(escaped).lstrip("/")
    chain = zip_bytes([("c", b".", 0o120777), ("b", up.encode(), 0o120777), ("b/made_by_zip/", b"", 0o040755),
                       ("agent", b"#!/bin/sh\nexit 0\n")])  # fmt: skip
    registry.serve_registry([binary_agent("chain", "1.0", registry.serve("/chain.zip", chain), cmd="./agent")])
    config = config_file(tmp_path)
    result = deck("add", "chain", config=config)
    assert result.returncode == 1 and "not installed" in result.stderr and result.stderr.count("\n") == 1, result
    assert list(escaped.iterdir()) == []
    agents = tmp_path / "data" / "deck" / "agents"
    assert not agents.exists() or list(agents.iterdir()) == []
    assert config.read_text() == CONFIG


def test_update_moves_to_the_new_version_and_removes_the_old_binary_and_the_listing_says_so(
    registry: RegistryServer, tmp_path: Path
) -> None:
    v1, v2 = agent_tar(), agent_tar() + b""
    registry.serve_registry([binary_agent("tiny", "1.0.0", registry.serve("/t1.tar.gz", v1)), GEMINI])
    config = config_file(tmp_path)
    assert deck("add", "tiny", config=config).returncode == 0
    assert deck("add", "gemini", config=config).returncode == 0
    current = deck("update", config=config)
    assert (
        current.returncode == 0
        and current.stdout == "tiny is up to date: tiny 1.0.0\ngemini is up to date: gemini 0.37.0\n"
    )
    newer_gemini = {
        **GEMINI,
        "version": "0.38.0",
        "distribution": {"npx": {"package": "@google/gemini-cli@0.38.0", "args": ["--acp"]}},
    }
    registry.serve_registry([binary_agent("tiny", "2.0.0", registry.serve("/t2.tar.gz", v2)), newer_gemini])
    assert deck("search", config=config).returncode == 0  # the cache is fresh: still the old copy
    refreshed = deck("update", "gemini", config=config)  # update always asks the registry
    assert refreshed.returncode == 0 and refreshed.stdout == "updated gemini: gemini 0.37.0 → 0.38.0 (npx)\n"
    registry.stop()  # the listing reads the cache only
    listed = deck(config=config)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[1]: line for line in listed.stdout.splitlines()}
    assert rows["tiny"].endswith("[registry tiny 1.0.0 (2.0.0 available: deck agents update)]")
    assert rows["gemini"].endswith("[registry gemini 0.38.0]") and rows["mine"].endswith("[hand-written]")
    origin = {r["name"]: r["origin"] for r in json.loads(deck("--json", config=config).stdout)}
    assert origin["tiny"] == {"kind": "registry", "id": "tiny", "version": "1.0.0", "latest": "2.0.0"}
    registry.start()
    registry.serve_registry([binary_agent("tiny", "2.0.0", registry.serve("/t2.tar.gz", v2)), newer_gemini])
    import os

    os.environ["DECK_REGISTRY_URL"] = registry.url("/registry.json")  # the server's new port
    for meta in (tmp_path / "cache").rglob("*.json"):
        meta.unlink()
    moved = deck("update", "tiny", config=config)
    assert moved.returncode == 0 and moved.stdout == f"updated tiny: tiny 1.0.0 → 2.0.0 (binary {HERE})\n", moved.stderr
    agents = tmp_path / "data" / "deck" / "agents" / "tiny"
    assert sorted(p.name for p in agents.iterdir()) == ["2.0.0"]
    assert f"{agents}/2.0.0/bin/agent" in config.read_text() and "tiny@2.0.0" in config.read_text()
    assert config.read_text().startswith(CONFIG)


def test_remove_keeps_a_binary_another_entry_uses_and_removes_it_with_the_last(
    registry: RegistryServer, tmp_path: Path
) -> None:
    registry.serve_registry([binary_agent("tiny", "1.0.0", registry.serve("/t1.tar.gz", agent_tar()))])
    config = config_file(tmp_path)
    assert deck("add", "tiny", config=config).returncode == 0
    assert deck("add", "tiny", "--as", "tiny2", config=config).returncode == 0
    folder = tmp_path / "data" / "deck" / "agents" / "tiny" / "1.0.0"
    first = deck("remove", "tiny", config=config)
    assert (
        first.returncode == 0
        and first.stdout == f"removed tiny from {config}; its binary {folder} stays: another entry uses it\n"
    )
    assert folder.is_dir()
    last = deck("remove", "tiny2", config=config)
    assert last.returncode == 0 and last.stdout == f"removed tiny2 from {config}, and its binary {folder}\n"
    assert not folder.parent.exists()
    assert config.read_text() == CONFIG  # the entries gone, the rest as it was


def test_remove_refuses_a_hand_written_agent_of_deck_config_init_and_its_commented_presets_stay(
    registry: RegistryServer, tmp_path: Path
) -> None:
    config = tmp_path / "deck.toml"
    made = subprocess.run([*DECK, "config", "init", str(config)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    init = config.read_text()
    refused = deck("remove", "demo", config=config)
    assert (refused.returncode, refused.stderr) == (
        2,
        "deck: demo was not added from the registry: remove its [agents.demo] table by hand, or --force\n",
    )
    assert config.read_text() == init
    forced = deck("remove", "demo", "--force", config=config)
    assert forced.returncode == 0 and forced.stdout == f"removed demo from {config}\n", forced.stderr
    text = config.read_text()
    assert "[agents.demo]" not in text and "deck.demo" not in text and "# The demo agent" not in text
    below = init[init.index("# -- Real agents") :]  # every commented preset, with its notes
    assert text.endswith(below) and text == init[: init.index("# The demo agent")] + below
    assert deck("remove", "demo", "--force", config=config).returncode == 2  # gone: an unknown agent
    wrong = deck("update", "--force", config=config)
    assert (wrong.returncode, wrong.stderr) == (2, "deck: --force is an option of `deck agents remove NAME`\n")


def test_add_then_remove_on_a_deck_config_init_config_gives_it_back_to_the_byte(
    registry: RegistryServer, tmp_path: Path
) -> None:
    registry.serve_registry([GEMINI, FAST])
    config = tmp_path / "deck.toml"
    assert subprocess.run([*DECK, "config", "init", str(config)], capture_output=True).returncode == 0
    init = config.read_text()
    assert deck("add", "gemini", config=config).returncode == 0
    assert deck("add", "fast-agent", "--as", "fast", config=config).returncode == 0
    assert init in config.read_text()
    removed = deck("remove", "gemini", config=config)
    assert removed.returncode == 0, removed.stderr
    assert "\n[agents.gemini]\n" not in config.read_text() and "\n[agents.fast]\n" in config.read_text()
    assert deck("remove", "fast", config=config).returncode == 0
    assert config.read_text() == init


def test_concurrent_installs_of_one_agent_do_not_corrupt_each_other(registry: RegistryServer, tmp_path: Path) -> None:
    archive = agent_tar()
    # The archive is sent to none of the four until all four asked for it: they race for sure.
    url = registry.serve("/t.tar.gz", archive, together=threading.Barrier(4))
    registry.serve_registry([binary_agent("tiny", "1.0.0", url, digest=sha256(archive))])
    assert deck("search").returncode == 0  # the registry cached: the four then race for the archive only
    configs = []
    for i in range(4):
        (tmp_path / f"c{i}").mkdir()
        configs.append(config_file(tmp_path / f"c{i}"))
    add = [*DECK, "agents", "add", "tiny", "--config"]
    running = [
        subprocess.Popen([*add, str(c)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in configs
    ]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in running]  # type: ignore[union-attr]
    assert [code for code, _ in results] == [0, 0, 0, 0], results
    assert sum(1 for path, _ in registry.hits if path == "/t.tar.gz") == 4
    agents = tmp_path / "data" / "deck" / "agents" / "tiny"
    assert sorted(p.name for p in agents.iterdir()) == ["1.0.0"]  # no temp folder of the losers left
    assert sorted(p.name for p in (agents / "1.0.0").iterdir()) == ["LICENSE", "bin"]
    assert (agents / "1.0.0" / "bin" / "agent").read_bytes() == tarfile_member(archive, "bin/agent")
    assert all(f"{agents}/1.0.0/bin/agent" in c.read_text() for c in configs)


def test_deck_config_init_names_the_registry_ids_of_its_presets(tmp_path: Path) -> None:
    target = tmp_path / "new.toml"
    made = subprocess.run([*DECK, "config", "init", str(target)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    text = target.read_text()
    for ident in ("claude-acp", "codex-acp", "gemini", "fast-agent", "goose", "opencode"):
        assert f'# registry = "{ident}"' in text
    assert "`deck agents add ID`" in text


def test_the_listing_names_presets_and_never_calls_the_network(registry: RegistryServer, tmp_path: Path) -> None:
    registry.serve_registry([GEMINI])
    config = config_file(tmp_path, '[agents.claude]\ncommand = ["npx", "-y", "@zed-industries/claude-agent-acp"]\n'
                                   'registry = "claude-acp"\n'
                                   '[agents.me]\ncommand = ["me"]\n')  # fmt: skip
    listed = json.loads(deck("--json", config=config).stdout)
    assert [r["origin"] for r in listed] == [
        {"kind": "preset", "preset": "claude-agent-acp", "id": "claude-acp"},
        {"kind": "hand-written"},
    ]
    assert registry.hits == []


def test_a_download_shows_its_progress_on_a_terminal(registry: RegistryServer, tmp_path: Path) -> None:
    import pexpect

    archive = agent_tar()
    registry.serve_registry([binary_agent("tiny", "1.0.0", registry.serve("/t.tar.gz", archive))])
    config = config_file(tmp_path)
    child = pexpect.spawn(
        DECK[0], [*DECK[1:], "agents", "add", "tiny", "--config", str(config)], encoding="utf-8", timeout=60
    )
    child.expect(r"deck: downloading tiny 1\.0\.0: 100% of 0\.0 MiB")
    child.expect("added tiny: ")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    quiet = deck("add", "tiny", "--as", "again", config=config)  # not a terminal: no progress
    assert quiet.returncode == 0 and "downloading" not in quiet.stderr


def test_the_configs_registry_url_is_used_and_a_missing_config_is_made_where_deck_looks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DECK_REGISTRY_URL", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    catalogue = tmp_path / "mirror.json"
    catalogue.write_text(json.dumps({"version": "1", "agents": [GEMINI]}))
    config = config_file(tmp_path, f'[registry]\nurl = "{catalogue.as_uri()}"\n')
    added = deck("add", "gemini", config=config)
    assert added.returncode == 0, added.stderr
    assert "gemini@0.37.0" in config.read_text() and config.read_text().startswith("[registry]\n")
    monkeypatch.setenv("DECK_REGISTRY_URL", catalogue.as_uri())
    elsewhere = tmp_path / "elsewhere"  # no ./deck.toml there, and none in XDG's place yet
    elsewhere.mkdir()
    made = subprocess.run([*DECK, "agents", "add", "gemini"], capture_output=True, text=True, timeout=60, cwd=elsewhere)
    xdg = Path(os.environ["XDG_CONFIG_HOME"]) / "deck" / "deck.toml"
    assert made.returncode == 0 and made.stdout == f"added gemini: gemini 0.37.0 (npx) to {xdg}\n", made.stderr
    text = xdg.read_text()
    assert (
        text.startswith("# deck's config")
        and "[agents.demo]" in text
        and text.rstrip().endswith('registry = "gemini@0.37.0"')
    )


def test_the_registrys_text_reaches_the_terminal_with_its_controls_made_visible(registry: RegistryServer) -> None:
    hostile = {**GEMINI, "name": "Evil\x1b]0;pwned\x07", "description": "red \x1b[31mtext\u202e"}
    registry.serve_registry([hostile])
    listed = deck("search")
    assert (
        listed.returncode == 0
        and "\x1b" not in listed.stdout
        and "\u202e" not in listed.stdout
        and "\x07" not in listed.stdout
    )
    assert "Evil" in listed.stdout


def test_update_moves_a_preset_to_the_registrys_pinned_command_and_goes_on_past_an_entry_it_cannot_update(
    registry: RegistryServer, tmp_path: Path
) -> None:
    registry.serve_registry([GEMINI])
    preset = ('[agents.gem]\ntitle = "Mine"\ncommand = ["npx", "-y", "@google/gemini-cli", "--experimental-acp"]\n'
              'registry = "gemini"\nenv = { KEY = "x" }   # my key\n\n'
              '[agents.gone]\ncommand = ["npx", "-y", "gone@1"]\nregistry = "gone@1"\n')  # fmt: skip
    config = config_file(tmp_path, preset)
    moved = deck("update", "gem", config=config)
    assert moved.returncode == 0 and moved.stdout == "updated gem: gemini (preset) → 0.37.0 (npx)\n", moved.stderr
    text = config.read_text()
    assert (
        '[agents.gem]\ntitle = "Mine"\ncommand = ["npx", "-y", "@google/gemini-cli@0.37.1", "--acp"]\n'
        'registry = "gemini@0.37.0"\nenv = { KEY = "x" }   # my key\n' in text
    )
    every = deck("update", config=config)
    assert every.returncode == 1 and every.stdout == "gem is up to date: gemini 0.37.0\n"
    assert every.stderr == "deck: gone: unknown registry agent 'gone'; `deck agents search` lists them\n"


def test_add_options_elsewhere_are_a_usage_error_and_search_says_the_entries_left_out(registry: RegistryServer) -> None:
    registry.serve_registry([GEMINI, {"id": "Bad/Id", "version": "1", "distribution": {"npx": {"package": "x"}}}])
    wrong = deck("search", "--as", "x")
    assert (wrong.returncode, wrong.stderr) == (
        2,
        "deck: --as, --host, --ssh, --cwd and --via are options of `deck agents add ID`\n",
    )
    listed = deck("search")
    assert listed.returncode == 0 and listed.stdout.startswith("gemini")
    assert "deck: registry: agent 'Bad/Id' left out: id 'Bad/Id' is not an id" in listed.stderr


def test_search_with_ten_bad_entries_says_five_and_how_many_more_and_json_lists_all_ten(
    registry: RegistryServer,
) -> None:
    bad = [{"id": f"Bad/{i}", "version": "1", "distribution": {"npx": {"package": "x"}}} for i in range(10)]
    registry.serve_registry([GEMINI, *bad])
    listed = deck("search")
    assert listed.returncode == 0 and listed.stdout.startswith("gemini"), listed.stderr
    said = [line for line in listed.stderr.splitlines() if line.startswith("deck: registry:")]
    why = "is not an id (a-z, 0-9, '.', '_', '-')"
    assert said[:5] == [f"deck: registry: agent 'Bad/{i}' left out: id 'Bad/{i}' {why}" for i in range(5)]
    assert said[5:] == [
        "deck: registry: … and 5 more left out (`deck agents search --json` lists them all, in left_out)"
    ]
    every = json.loads(deck("search", "--json").stdout)["left_out"]
    assert len(every) == 10 and every[9].startswith("agent 'Bad/9' left out: ")


def test_a_config_with_an_error_is_said_before_anything_is_downloaded(registry: RegistryServer, tmp_path: Path) -> None:
    registry.serve_registry([binary_agent("tiny", "1.0.0", registry.serve("/t.tar.gz", agent_tar()))])
    config = config_file(tmp_path, CONFIG + 'permissions = "bogus"\n')
    added = deck("add", "tiny", config=config)
    assert added.returncode == 2 and added.stderr.startswith(
        f"deck: the config has an error, fix it first: {config}:10:"
    )
    assert [path for path, _ in registry.hits] == [] and not (tmp_path / "data").exists()


def tarfile_member(archive: bytes, name: str) -> bytes:
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return tar.extractfile(name).read()  # type: ignore[union-attr]


def test_a_version_folder_already_there_is_reused_and_a_broken_one_is_named(
    registry: RegistryServer, tmp_path: Path
) -> None:
    registry.serve_registry([binary_agent("tiny", "1.0.0", registry.serve("/t.tar.gz", agent_tar()))])
    config = config_file(tmp_path)
    assert deck("add", "tiny", config=config).returncode == 0
    assert deck("add", "tiny", "--as", "twice", config=config).returncode == 0
    assert [path for path, _ in registry.hits].count("/t.tar.gz") == 1  # the second found it in place
    folder = tmp_path / "data" / "deck" / "agents" / "tiny" / "1.0.0"
    (folder / "bin" / "agent").unlink()
    broken = deck("add", "tiny", "--as", "third", config=config)
    assert broken.returncode == 1
    assert broken.stderr == f"deck: {folder} is there without bin/agent: remove that folder, then add the agent again\n"


def test_a_data_folder_deck_cannot_make_is_one_line(
    registry: RegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry.serve_registry([binary_agent("tiny", "1.0.0", registry.serve("/t.tar.gz", agent_tar()))])
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocker))
    config = config_file(tmp_path)
    added = deck("add", "tiny", config=config)
    assert (
        added.returncode == 1 and added.stderr.startswith("deck: Not a directory: ") and added.stderr.count("\n") == 1
    )
    assert config.read_text() == CONFIG
