"""core/presets (`deck.presets`): each snippet is a valid deck config on its own, and all of them together."""

from __future__ import annotations

import pytest
from deck.config.check import parse

from tests.conftest import ROOT

PRESETS = ROOT / "core" / "presets"
EXPECTED = {
    "claude-agent-acp": ("claude", ["npx", "-y", "@zed-industries/claude-agent-acp"]),
    "codex-acp": ("codex", ["npx", "-y", "@zed-industries/codex-acp"]),
    "gemini": ("gemini", ["npx", "-y", "@google/gemini-cli", "--experimental-acp"]),
    "fast-agent": ("fast", ["uvx", "--python", "3.13", "--from", "fast-agent-mcp", "fast-agent", "--no-update-check", "acp"]),
    "goose": ("goose", ["goose", "acp"]),
    "opencode": ("opencode", ["npx", "-y", "opencode-ai", "acp"]),
}

#: Each preset's id in the ACP registry (agentclientprotocol/registry).
REGISTRY_IDS = {"claude-agent-acp": "claude-acp", "codex-acp": "codex-acp", "gemini": "gemini",
                "fast-agent": "fast-agent", "goose": "goose", "opencode": "opencode"}  # fmt: skip


def test_the_six_presets_are_there():
    assert sorted(p.stem for p in PRESETS.glob("*.toml")) == sorted(EXPECTED)


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_preset_is_a_valid_config(preset):
    loaded = parse((PRESETS / f"{preset}.toml").read_text())
    assert loaded.config is not None and loaded.problems == [], loaded.problems
    name, command = EXPECTED[preset]
    (agent_name, agent), = loaded.config.agents.items()
    assert agent_name == name
    assert agent.command[: len(command)] == command
    assert agent.permissions == "ask"  # a preset never auto-approves tools
    assert agent.registry == REGISTRY_IDS[preset]  # the agent's id in the ACP registry, for `deck agents`


def test_presets_combine_into_one_config():
    text = "\n".join(p.read_text() for p in sorted(PRESETS.glob("*.toml")))
    loaded = parse(text)
    assert loaded.config is not None and loaded.problems == []
    assert len(loaded.config.agents) == len(EXPECTED)
    assert loaded.config.agents["codex"].auth_method == "openai-api-key"
    assert loaded.config.agents["goose"].env["GOOSE_PROVIDER"] == "anthropic"
