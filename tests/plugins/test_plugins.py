"""The plugin system and the built-in feature plugins idle_stop and logs, with real agents."""

from __future__ import annotations

import asyncio
import json
import re

import deck.plugins.idle_stop as idle_stop
import pytest
from deck import hookimpl
from deck.errors import ServiceError, UsageError
from deck.runtime.plugins import describe

from tests.conftest import agent_block

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- idle_stop ------------------------------------------------------------------------------


async def test_idle_ready_agent_is_stopped_after_the_limit(make_deck):
    deck, rec = make_deck('[limits]\nstopIdleAgentsAfter = "10m"\n' + agent_block("a") + agent_block("b"))
    deck.clock = clock = Clock()
    await deck.agent_service.start("a")
    clock.now += 300
    await deck.agent_service.start("b")
    clock.now += 301  # a: 601 s idle, b: 301 s
    assert idle_stop.stop_idle(deck) == ["a"]
    await rec.wait_event("agent:state", agent="a", state="stopped")
    assert deck.agents["b"].state.value == "ready"


async def test_the_periodic_check_stops_idle_agents_by_itself(make_deck, monkeypatch):
    monkeypatch.setattr(idle_stop, "CHECK_INTERVAL", 0.05)
    deck, rec = make_deck('[limits]\nstopIdleAgentsAfter = "10m"\n' + agent_block("a"))
    deck.clock = clock = Clock()
    await deck.startup()
    await deck.agent_service.start("a")
    await asyncio.sleep(0.3)  # several checks, none past the limit
    assert deck.agents["a"].state.value == "ready"
    clock.now += 600
    await rec.wait_event("agent:state", agent="a", state="stopped", timeout=5)
    assert any("unused for 600s" in line for line in deck.agents["a"].logs)


async def test_an_agent_used_before_its_idle_stop_runs_is_left_alone(make_deck):
    deck, rec = make_deck('[limits]\nstopIdleAgentsAfter = "1m"\n' + agent_block("a"))
    deck.clock = clock = Clock()
    await deck.agent_service.start("a")
    clock.now += 61
    assert idle_stop.stop_idle(deck) == ["a"]  # the stop is scheduled…
    deck.chat.send("a", "slow")  # …but a message makes it busy before the stop task runs
    await rec.wait_event("message:delta", agent="a")
    assert deck.agents["a"].state.value == "busy" and "stopped" not in rec.states("a")
    deck.chat.cancel("a")


async def test_busy_agent_is_never_stopped_for_idleness(make_deck):
    deck, rec = make_deck('[limits]\nstopIdleAgentsAfter = "1s"\n' + agent_block("a"))
    deck.clock = clock = Clock()
    deck.chat.send("a", "slow")
    await rec.wait_event("agent:state", agent="a", state="busy")
    clock.now += 100
    assert idle_stop.stop_idle(deck) == []
    deck.chat.cancel("a")


async def test_least_recently_used_ready_agent_makes_room(make_deck):
    deck, rec = make_deck("[limits]\nmaxRunningAgents = 2\n" + "".join(agent_block(n) for n in "abc"))
    deck.clock = clock = Clock()
    await deck.agent_service.start("a")
    clock.now += 1
    await deck.agent_service.start("b")
    clock.now += 1
    deck.agents["a"].touch()  # a used more recently than b
    clock.now += 1
    await deck.agent_service.start("c")
    assert {n: a.state.value for n, a in deck.agents.items()} == {"a": "ready", "b": "stopped", "c": "ready"}
    assert any("least recently used" in line for line in deck.agents["b"].logs)


async def test_start_refused_when_all_running_agents_are_busy(make_deck):
    deck, rec = make_deck("[limits]\nmaxRunningAgents = 2\n" + "".join(agent_block(n) for n in "abc"))
    for name in "ab":
        deck.chat.send(name, "slow")
        await rec.wait_event("agent:state", agent=name, state="busy")
    with pytest.raises(ServiceError) as info:
        await deck.agent_service.start("c")
    assert str(info.value) == "too many agents running: 2 agent(s) busy (a, b), the limit is 2"
    # Through Send the refusal lands in the conversation as agent-unavailable.
    deck.chat.send("c", "hello")
    message = await rec.wait(
        lambda r: next((m for m in deck.chat.conversation("c").messages if m.code == "agent-unavailable"), None)
    )
    assert "too many agents running: 2 agent(s) busy (a, b), the limit is 2" in message.error
    for name in "ab":
        deck.chat.cancel(name)


async def test_idle_stop_disabled_allows_any_number(make_deck):
    text = '[limits]\nmaxRunningAgents = 1\n[plugins]\ndisabled = ["idle_stop"]\n' + agent_block("a") + agent_block("b")
    deck, rec = make_deck(text)
    assert not deck.pm.has_plugin("idle_stop")
    await deck.agent_service.start("a")
    await deck.agent_service.start("b")
    assert [a["state"] for a in await deck.agent_service.list_agents()] == ["ready", "ready"]


async def test_idle_stop_owns_its_limits_and_deck_checks_them_with_its_own(make_deck):
    from deck.config.models import Limits
    from deck.config.output import json_schema

    core_limits = {"handshake_timeout", "message_size", "conversation_size"}
    assert set(Limits.model_fields) == core_limits  # the core's limits: the rest is idle_stop's
    deck, rec = make_deck('[limits]\nmaxRunningAgents = 3\nstopIdleAgentsAfter = "1m"\n' + agent_block("a"))
    assert deck.problems == []
    assert idle_stop.limits(deck) == idle_stop.IdleStopLimits(maxRunningAgents=3, stopIdleAgentsAfter=60)
    schema = await deck.config_service.schema()
    assert list(schema["$defs"]["Limits"]["properties"]) == [
        "maxRunningAgents", "stopIdleAgentsAfter", "handshakeTimeout", "messageSize", "conversationSize",
    ]  # fmt: skip
    assert "maxRunningAgents" not in json_schema()["$defs"]["Limits"]["properties"]
    # A wrong value refuses the start, as any of deck's own keys.
    with pytest.raises(UsageError, match="invalid config"):
        make_deck('[limits]\nmaxRunningAgents = "4"\n' + agent_block("a"))
    # Without the plugin, its keys mean nothing, and are said to be its.
    deck, rec = make_deck('[limits]\nmaxRunningAgents = 1\n[plugins]\ndisabled = ["idle_stop"]\n' + agent_block("a"))
    off = "a key of the idle_stop plugin, which is off ([plugins] disabled): it does nothing"
    assert [p.message for p in deck.problems] == [f"limits.maxRunningAgents: {off}"]


# -- logs -----------------------------------------------------------------------------------


async def test_log_files_and_trace(make_deck, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    deck, rec = make_deck(agent_block("a", "--fail-start") + agent_block("b"))
    deck.trace_path = tmp_path / "trace.jsonl"
    await deck.startup()
    with pytest.raises(ServiceError):
        await deck.agent_service.start("a")
    deck.chat.send("b", "hello")
    await rec.wait_event("turn:changed", agent="b", busy=False)
    await deck.shutdown()
    log_text = (tmp_path / "state" / "deck" / "logs" / "a.log").read_text()
    assert "fatal: missing API key" in log_text
    records = [json.loads(line) for line in deck.trace_path.read_text().splitlines()]
    assert {r["direction"] for r in records} == {"in", "out"}
    methods = [(r["agent"], r["direction"], r["message"].get("method")) for r in records]
    assert ("b", "out", "session/prompt") in methods and ("b", "in", "session/update") in methods
    assert all(re.match(r"\d{4}-\d\d-\d\dT", r["at"]) for r in records)


async def test_each_deck_writes_its_own_trace_through_its_own_logs_plugin(make_deck, tmp_path):
    traced, rec_traced = make_deck(agent_block("a"))
    traced.trace_path = tmp_path / "trace.jsonl"
    plain, rec_plain = make_deck(agent_block("a"))
    await traced.startup()
    await plain.startup()
    ours, theirs = traced.pm.get_plugin("logs.deck"), plain.pm.get_plugin("logs.deck")
    assert ours.deck is traced and theirs.deck is plain and theirs.trace is None
    await traced.shutdown()
    assert traced.pm.get_plugin("logs.deck") is None and ours.trace.file.closed
    await plain.agent_service.start("a")  # the other deck goes on logging
    assert "logs.deck" in {name for name, _ in plain.pm.list_name_plugin()} and not plain.trace_acp


def test_log_files_rotate_at_their_size_bound(tmp_path, monkeypatch):
    from deck.plugins import logs

    monkeypatch.setattr(logs, "MAX_BYTES", 10_000)
    files = logs.AgentLogs(tmp_path)
    for i in range(2000):
        files.write("a", f"line {i:05d} " + "x" * 40)
    files.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["a.log", "a.log.1", "a.log.2", "a.log.3"]
    assert all(p.stat().st_size <= 10_000 for p in tmp_path.iterdir())
    assert "line 01999" in (tmp_path / "a.log").read_text()


# -- the plugin system ---------------------------------------------------------------------------


class Raising:
    @hookimpl
    def deck_event(self, deck, event):
        raise RuntimeError("boom")

    @hookimpl
    def deck_before_start(self, deck, agent):
        raise KeyError("also boom")


async def test_a_raising_plugin_is_reported_and_isolated(make_deck):
    deck, rec = make_deck(agent_block("a"))
    deck.pm.register(Raising(), name="raising")
    deck.chat.send("a", "hi")
    await rec.wait_event("turn:changed", agent="a", busy=False)
    assert deck.chat.conversation("a").messages[-1].text == "You said: hi"
    errors = rec.named("plugin:error")
    assert {"plugin": "raising", "hook": "deck_event", "error": "RuntimeError: boom"} in errors
    assert any(e["hook"] == "deck_before_start" and "also boom" in e["error"] for e in errors)


async def test_async_hook_work_runs_under_the_deck(make_deck):
    done = asyncio.Event()

    class Slow:
        @hookimpl
        def deck_event(self, deck, event):
            if event.name == "agent:state":
                async def later():
                    done.set()
                return later()

    deck, rec = make_deck(agent_block("a"))
    deck.pm.register(Slow(), name="slow")
    await deck.agent_service.start("a")
    await asyncio.wait_for(done.wait(), 5)


def test_disabled_from_environment_and_command_line(tmp_path, monkeypatch):
    from deck.runtime.plugins import make_manager

    pm = make_manager(["logs"])
    assert not pm.has_plugin("logs") and pm.has_plugin("idle_stop")
    monkeypatch.setenv("DECK_DISABLE_PLUGIN_AUTOLOAD", "1")
    rows = describe(make_manager([]))
    assert all(r["source"] == "built-in" for r in rows)
    assert {"idle_stop", "logs", "jsonl"} <= {r["name"] for r in rows}


def test_deck_plugins_command_lists_plugins_and_disabled(tmp_path):
    import subprocess
    import sys

    config = tmp_path / "deck.toml"
    config.write_text(agent_block("a"))
    out = subprocess.run(
        [sys.executable, "-m", "deck", "plugins", "--config", str(config), "-p", "no:logs", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    by_name = {row["name"]: row for row in data["plugins"]}
    assert "deck_before_start" in by_name["idle_stop"]["hooks"]
    assert "logs" not in by_name and data["disabled"] == ["logs"]
    # The part of a plugin that serves one deck is listed as the plugin's own hooks, never as a row.
    assert not [name for name in by_name if "." in name]
    assert {"deck_register_services", "deck_before_start", "deck_event"} <= set(by_name["worktrees"]["hooks"])


def test_a_log_file_that_cannot_be_written_goes_quiet(tmp_path, capfd):
    from deck.plugins import logs

    (tmp_path / "a.log").symlink_to("/dev/full")  # every write fails: no space left
    files = logs.AgentLogs(tmp_path)
    for i in range(3):
        files.write("a", f"line {i}")
    files.close()
    assert files.handlers == {} and capfd.readouterr().err == ""  # no traceback on the screen
