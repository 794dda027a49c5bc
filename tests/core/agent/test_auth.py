"""ACP authentication: -32000 "Authentication required" explained, `authMethod` in the config,
and AgentService.Authenticate — against the fake agent's --require-auth."""

from __future__ import annotations

import json
from typing import Any

import pytest
from deck import hookimpl
from deck.errors import AcpError, ServiceError

from tests.conftest import agent_block, descendants_of_self
from tests.deck_process import run_deck  # noqa: F401  (fixture)
from tests.turns import ask

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

KEY_VAR = "DECK_TEST_FAKE_KEY"
#: One method of each kind agents send: ACP's `agent` (no type) and `terminal`, and codex-acp's `env_var`.
METHODS = [
    {"id": "key", "name": "API key"},
    {"type": "env_var", "id": "env-key", "name": f"Use {KEY_VAR}", "vars": [{"name": KEY_VAR}]},
    {"type": "terminal", "id": "login", "name": "Log in", "args": ["--login"], "env": {"LOGIN_MODE": "1"}},
]


def needs_auth(name: str = "a", env: dict[str, str] | None = None, **keys: Any) -> str:
    table = agent_block(name, "--require-auth", "--auth-methods", json.dumps(METHODS), **keys)
    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in (env or {}).items())
    return table + (f"env = {{ {pairs} }}\n" if env else "")


class Trace:
    """The ACP methods deck sends, in order."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    @hookimpl
    def deck_acp_message(self, agent, direction, message):
        if direction == "out" and "method" in message:
            self.sent.append(message["method"])


def traced(deck) -> Trace:
    trace = Trace()
    deck.pm.register(trace)
    deck.trace_acp = True
    return trace


@pytest.fixture(autouse=True)
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_VAR, raising=False)


def test_only_an_auth_minus_32000_counts_as_authentication_required():
    assert AcpError(-32000, "Authentication required").auth_required
    assert not AcpError(-32000, "Failed", "disk full").auth_required  # JSON-RPC leaves -32000 open
    assert not AcpError(-32603, "Authentication required").auth_required


async def test_session_new_refused_fails_the_start_with_every_method_explained(make_deck):
    deck, rec = make_deck(needs_auth())
    trace = traced(deck)
    with pytest.raises(ServiceError, match="Authentication required") as raised:
        await deck.agent_service.start("a")
    agent = deck.agents["a"]
    assert rec.states("a") == ["starting", "error"] and agent.process is None
    assert trace.sent == ["initialize", "session/new"]  # no method configured: no authenticate
    error = agent.error
    assert error is not None and error in str(raised.value)
    lines = error.splitlines()
    assert lines[0] == "session/new: Authentication required (-32000)"
    assert lines[1] == "a offers these authentication methods:"
    assert lines[2] == """- 'key' (API key): authMethod = "key" in [agents.a], or AgentService.Authenticate("a", "key")"""
    assert lines[3].startswith(f"""- 'env-key' (Use {KEY_VAR}): set env = {{ {KEY_VAR} = "…" }} in [agents.a]""")
    assert lines[3].endswith("""then authMethod = "env-key" in [agents.a], or AgentService.Authenticate("a", "env-key")""")
    assert lines[4].startswith("- 'login' (Log in): run `LOGIN_MODE=1 ") and "fake_agent.py --require-auth" in lines[4]
    assert "--login` once in a terminal, then restart a" in lines[4]
    assert (await deck.agent_service.list_agents())[0]["error"] == error
    await agent.stop()  # its process, stopped in the background since the failure, is waited for
    assert not descendants_of_self() and rec.states("a") == ["starting", "error"]


async def test_env_var_already_set_only_needs_the_method(make_deck):
    deck, _ = make_deck(needs_auth(env={KEY_VAR: "sk-fake"}))
    with pytest.raises(ServiceError):
        await deck.agent_service.start("a")
    (line,) = [x for x in deck.agents["a"].error.splitlines() if "'env-key'" in x]
    assert line == f"""- 'env-key' (Use {KEY_VAR}): authMethod = "env-key" in [agents.a], or AgentService.Authenticate("a", "env-key")"""


async def test_config_auth_method_authenticates_on_every_start(make_deck):
    deck, rec = make_deck(needs_auth(authMethod="key"))
    trace = traced(deck)
    assert (await deck.agent_service.start("a"))["state"] == "ready"
    assert (await deck.agent_service.restart("a"))["state"] == "ready"
    assert trace.sent == ["initialize", "authenticate", "session/new"] * 2
    assert rec.states("a") == ["starting", "ready", "stopped", "starting", "ready"]
    assert (await ask(deck, rec, "hi")).text == "You said: hi"


async def test_env_var_method_with_the_key_in_env(make_deck):
    deck, _ = make_deck(needs_auth(authMethod="env-key", env={KEY_VAR: "sk-fake"}))
    assert (await deck.agent_service.start("a"))["state"] == "ready"
    assert "authenticated with env-key" in await deck.agent_service.logs("a")


async def test_env_var_method_without_the_key_says_which_variable(make_deck):
    deck, _ = make_deck(needs_auth(authMethod="env-key"))
    with pytest.raises(ServiceError):
        await deck.agent_service.start("a")
    lines = deck.agents["a"].error.splitlines()
    assert lines[0] == f"authenticate with 'env-key' failed: Internal error (-32603): {KEY_VAR} is not set"
    assert lines[1] == "To authenticate:"
    assert lines[2].startswith(f"- 'env-key' (Use {KEY_VAR}): set env = {{ {KEY_VAR} = ")
    assert len([x for x in lines if x.startswith("- ")]) == 1


async def test_config_auth_method_the_agent_does_not_offer(make_deck):
    deck, rec = make_deck(needs_auth(authMethod="nope"))
    trace = traced(deck)
    with pytest.raises(ServiceError, match="unknown authentication method 'nope' for a: it offers 'key', 'env-key', 'login'"):
        await deck.agent_service.start("a")
    assert trace.sent == ["initialize"] and rec.states("a") == ["starting", "error"]


async def test_a_terminal_method_is_never_passed_to_authenticate(make_deck):
    deck, _ = make_deck(needs_auth(authMethod="login"))
    trace = traced(deck)
    with pytest.raises(ServiceError, match="'login' is a terminal login, not for authenticate: .*run `LOGIN_MODE=1 "):
        await deck.agent_service.start("a")
    assert "authenticate" not in trace.sent


async def test_authenticate_service_starts_once_with_the_method(make_deck):
    deck, rec = make_deck(needs_auth())
    trace = traced(deck)
    with pytest.raises(ServiceError):
        await deck.agent_service.start("a")
    info = await deck.agent_service.authenticate("a", "key")
    assert info["state"] == "ready" and info["error"] is None
    assert trace.sent == ["initialize", "session/new", "initialize", "authenticate", "session/new"]
    assert (await ask(deck, rec, "hi")).text == "You said: hi"
    # Once: the next start has no method again, and the agent refuses it.
    with pytest.raises(ServiceError, match="Authentication required"):
        await deck.agent_service.restart("a")
    assert trace.sent[-2:] == ["initialize", "session/new"]


async def test_authenticate_restarts_a_running_agent(make_deck):
    deck, rec = make_deck(agent_block("a"))  # needs no authentication, accepts it anyway
    trace = traced(deck)
    await deck.agent_service.start("a")
    assert (await deck.agent_service.authenticate("a", "key"))["state"] == "ready"
    assert rec.states("a") == ["starting", "ready", "stopped", "starting", "ready"]
    assert trace.sent == ["initialize", "session/new", "initialize", "authenticate", "session/new"]


async def test_authenticate_with_an_unknown_method_is_a_clear_error(make_deck):
    deck, rec = make_deck(needs_auth())
    trace = traced(deck)
    # Never started: the agent's methods are learnt from initialize, then the start fails.
    with pytest.raises(ServiceError, match="unknown authentication method 'nope' for a: it offers 'key', 'env-key', 'login'"):
        await deck.agent_service.authenticate("a", "nope")
    assert trace.sent == ["initialize"] and rec.states("a") == ["starting", "error"]
    # Now they are known: refused at once, without a restart.
    with pytest.raises(ServiceError, match="unknown authentication method 'other' for a"):
        await deck.agent_service.authenticate("a", "other")
    with pytest.raises(ServiceError, match="empty methodId"):
        await deck.agent_service.authenticate("a", " ")
    assert trace.sent == ["initialize"] and rec.states("a") == ["starting", "error"]
    await deck.agents["a"].stop()  # its process, stopped in the background since the failure, is waited for
    assert not descendants_of_self()


async def test_a_prompt_answered_authentication_required_carries_the_guidance(make_deck):
    deck, rec = make_deck(agent_block("a"))
    reply = await ask(deck, rec, "error")  # the fake agent answers this prompt with -32000
    assert reply.stop_reason is None
    assert reply.error.splitlines() == [
        "Authentication required",
        "a offers these authentication methods:",
        """- 'key' (API key): authMethod = "key" in [agents.a], or AgentService.Authenticate("a", "key")""",
    ]
    final = rec.named("message:updated", "a")[-1]["message"]
    assert final["id"] == reply.id and final["error"] == reply.error
    assert deck.agents["a"].state.value == "ready"  # only the turn failed


async def test_a_send_to_an_agent_that_needs_auth_explains_it_in_the_conversation(make_deck):
    deck, rec = make_deck(needs_auth())
    deck.chat.send("a", "hello")
    await rec.wait_event("turn:changed", agent="a", busy=False)
    system = deck.chat.conversation("a").messages[-1].to_dict()
    assert system["code"] == "agent-unavailable"
    assert "Authentication required" in system["error"] and 'authMethod = "key"' in system["error"]


def test_authenticate_over_the_jsonl_bridge(run_deck):
    deck = run_deck(needs_auth())
    first = deck.response(deck.request("AgentService.Start", {"name": "a"}))
    assert "Authentication required" in first["error"]["message"]
    assert deck.call("AgentService.Authenticate", {"name": "a", "methodId": "key"})["state"] == "ready"
    refused = deck.response(deck.request("AgentService.Authenticate", {"name": "a", "methodId": "nope"}))
    assert "unknown authentication method 'nope'" in refused["error"]["message"]
    deck.close_stdin()
    assert deck.wait(15) == 0
