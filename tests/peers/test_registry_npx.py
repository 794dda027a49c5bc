"""A registry-shaped `npx` entry for a pinned peer (claude-agent-acp 0.23.1, as scripts/install-peers.sh
pins it): `deck agents add` writes its pinned command, npx installs it from npm, and it answers
`initialize`. npm's cache is kept under the peers folder, so a second run does not download again.
It never skips: a failed install fails it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deck_process import DECK
from tests.registry_server import RegistryServer

from .conftest import PEERS_DIR

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]

VERSION = "0.23.1"
ENTRY = {
    "id": "claude-acp", "name": "Claude Agent", "version": VERSION, "description": "ACP wrapper for Anthropic's Claude",
    "distribution": {"npx": {"package": f"@zed-industries/claude-agent-acp@{VERSION}"}},
}  # fmt: skip
#: Keeps Claude Code off the network (telemetry, updates); as root it wants IS_SANDBOX.
QUIET = {"IS_SANDBOX": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}


@pytest.fixture
def served(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RegistryServer]:
    server = RegistryServer()
    server.start()
    server.serve("/registry.json", json.dumps({"version": "1.0.0", "agents": [ENTRY]}).encode())
    monkeypatch.setenv("DECK_REGISTRY_URL", server.url("/registry.json"))
    monkeypatch.setenv("npm_config_cache", str(PEERS_DIR / "npm-cache"))
    monkeypatch.setenv("npm_config_update_notifier", "false")
    for name, value in QUIET.items():
        monkeypatch.setenv(name, value)
    yield server
    server.stop()


async def test_an_npx_entry_of_the_registry_installs_from_npm_and_answers_initialize(
    served, peer_deck, workdir, tmp_path
):
    config = tmp_path / "deck.toml"
    config.write_text('[limits]\nhandshakeTimeout = "300s"   # the first run downloads the package\n')
    add = [*DECK, "agents", "add", "claude-acp", "--as", "claude", "--cwd", str(workdir), "--config", str(config)]
    added = subprocess.run(add, capture_output=True, text=True, timeout=120)
    assert added.returncode == 0, added.stderr
    text = config.read_text()
    assert f'command = ["npx", "-y", "@zed-industries/claude-agent-acp@{VERSION}"]' in text
    assert f'registry = "claude-acp@{VERSION}"' in text
    pd = peer_deck(text)
    info = await pd.deck.agent_service.start("claude")
    assert info["state"] == "ready", (info, await pd.deck.agent_service.logs("claude"))
    assert pd.deck.agents["claude"].init_result["agentInfo"]["name"] == "@zed-industries/claude-agent-acp"
    assert pd.deck.agents["claude"].init_result["agentInfo"]["version"] == VERSION
    await pd.deck.agent_service.stop("claude")
    await pd.close()
