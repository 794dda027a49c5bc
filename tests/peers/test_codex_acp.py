"""deck against codex-acp (npm @zed-industries/codex-acp 0.16.0): ACP authentication, offline.

codex-acp refuses `session/new` with -32000 "Authentication required" until it was sent
`authenticate`; its `openai-api-key` method (an `env_var` method) needs OPENAI_API_KEY in
its environment. A fake key is enough for the handshake: no network is used before a prompt.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deck.errors import ServiceError

from .conftest import agent_toml, codex_command

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

FAKE_KEY = "sk-deck-test-not-a-real-key"


def codex(cwd: Path, env: dict[str, str] | None = None, **keys: str) -> str:
    return agent_toml("codex", codex_command(), cwd, env=env, **keys)


async def test_without_a_key_the_start_fails_listing_the_methods(peer_deck, workdir):
    pd = peer_deck(codex(workdir))
    with pytest.raises(ServiceError, match="Authentication required"):
        await pd.deck.agent_service.start("codex")
    agent = pd.deck.agents["codex"]
    assert agent.init_result["agentInfo"]["name"] == "codex-acp" and agent.init_result["agentInfo"]["version"] == "0.16.0"
    assert pd.rec.states("codex") == ["starting", "error"] and agent.process is None
    lines = agent.error.splitlines()
    assert lines[:2] == ["session/new: Authentication required (-32000)", "codex offers these authentication methods:"]
    methods = {line.split("'")[1]: line for line in lines[2:5]}
    assert set(methods) == {"chatgpt", "codex-api-key", "openai-api-key"}
    assert methods["openai-api-key"].startswith(
        """- 'openai-api-key' (Use OPENAI_API_KEY): set env = { OPENAI_API_KEY = "…" } in [agents.codex]"""
    )
    assert 'authMethod = "openai-api-key"' in methods["openai-api-key"]
    assert 'set env = { CODEX_API_KEY = "…" }' in methods["codex-api-key"]
    assert 'AgentService.Authenticate("codex", "chatgpt")' in methods["chatgpt"]
    assert [m["method"] for m in pd.schema.sent() if "method" in m] == ["initialize", "session/new"]
    # Authenticating with the method but no key: codex-acp refuses it, and deck says what is missing.
    with pytest.raises(ServiceError, match="OPENAI_API_KEY is not set"):
        await pd.deck.agent_service.authenticate("codex", "openai-api-key")
    lines = agent.error.splitlines()
    assert lines[0] == "authenticate with 'openai-api-key' failed: Internal error (-32603): OPENAI_API_KEY is not set"
    assert lines[2].startswith("- 'openai-api-key' (Use OPENAI_API_KEY): set env = { OPENAI_API_KEY = ")
    await pd.close()


async def test_auth_method_in_the_config_with_a_key_opens_the_session(peer_deck, workdir):
    pd = peer_deck(codex(workdir, env={"OPENAI_API_KEY": FAKE_KEY}, authMethod="openai-api-key"))
    info = await pd.deck.agent_service.start("codex")
    assert info["state"] == "ready" and info["error"] is None
    (auth,) = pd.schema.sent("authenticate")
    assert auth["params"] == {"methodId": "openai-api-key"}
    (new,) = pd.schema.sent("session/new")
    reply = next(m for _, d, m in pd.schema.messages if d == "in" and m.get("id") == new["id"])
    assert reply["result"]["sessionId"] == pd.deck.agents["codex"].session_id
    snapshot = await pd.deck.chat.conversation_snapshot("codex")
    assert snapshot["modes"]["currentModeId"] and snapshot["modes"]["availableModes"]
    # On every start.
    assert (await pd.deck.agent_service.restart("codex"))["state"] == "ready"
    assert len(pd.schema.sent("authenticate")) == 2
    await pd.close()


async def test_authenticate_service_with_the_key_in_env(peer_deck, workdir):
    pd = peer_deck(codex(workdir, env={"OPENAI_API_KEY": FAKE_KEY}))
    with pytest.raises(ServiceError, match="Authentication required"):
        await pd.deck.agent_service.start("codex")  # a key alone is not enough: it needs authenticate
    error = pd.deck.agents["codex"].error
    openai = next(line for line in error.splitlines() if "'openai-api-key'" in line)
    assert "set env" not in openai  # the key is there already: only the method is missing
    info = await pd.deck.agent_service.authenticate("codex", "openai-api-key")
    assert info["state"] == "ready" and info["error"] is None
    assert [m["params"] for m in pd.schema.sent("authenticate")] == [{"methodId": "openai-api-key"}]
    with pytest.raises(ServiceError, match="unknown authentication method 'api-key' for codex: it offers 'chatgpt', "):
        await pd.deck.agent_service.authenticate("codex", "api-key")
    assert pd.deck.agents["codex"].state.value == "ready"  # refused without a restart
    assert pd.rec.states("codex") == ["starting", "error", "starting", "ready"]
    await pd.close()
