"""The hooks facade: every hook documented and called by deck itself, plugin order, wrappers
refused, slow plugins cut off without stalling the bus, and the command line's plugin commands."""

from __future__ import annotations

import asyncio
import importlib.metadata
import sys
from pathlib import Path
from typing import Any, Optional

import deck
import pluggy
import pytest
import typer
from deck import errors as deck_errors
from deck import frontend as deck_frontend
from deck import hookimpl, hookspecs
from deck.cli import commands as cli
from deck.cli import common as cli_common
from deck.runtime import plugins as pluginmanager
from deck.testing import Recorder

from tests.conftest import ROOT, agent_block

pytestmark = pytest.mark.anyio


def hook_names() -> list[str]:
    """Every hookspec of deck."""
    return sorted(n for n in dir(hookspecs) if hasattr(getattr(hookspecs, n), "deck_spec"))


class EntryPoint:
    """An installed plugin as `importlib.metadata` lists it: its name, and what loading it gives."""

    def __init__(self, name: str, plugin: object) -> None:
        self.name, self.value, self.dist, self._plugin = name, f"tests:{name}", None, plugin

    def load(self) -> object:
        return self._plugin


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch):
    """`installed(name=plugin, …)`: plugins deck finds in the "deck" entry-point group, in that order,
    exactly as third-party ones installed with pip (for every manager deck makes meanwhile)."""
    plugins: dict[str, object] = {}
    real = importlib.metadata.entry_points

    def entry_points(**params: Any) -> Any:
        if params.get("group") != pluginmanager.ENTRY_POINT_GROUP:
            return real(**params)
        return [EntryPoint(name, plugin) for name, plugin in plugins.items()]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(pluginmanager, "SOURCES", {})
    monkeypatch.delenv(pluginmanager.AUTOLOAD_ENV, raising=False)
    return plugins.update


def run_main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """`deck ARGS…` in this process, through `cli.main` (plugin loading included); its exit code.
    The commands plugins add are dropped after, as they go with the process of a real `deck`."""
    monkeypatch.setattr(sys, "argv", ["deck", *args])
    commands = list(cli.app.registered_commands)
    try:
        with pytest.raises(SystemExit) as info:
            cli.main()
    finally:
        cli.app.registered_commands[:] = commands
    return int(info.value.code or 0)


# -- every hook: documented, and called by deck ---------------------------------------------------


def test_every_hook_is_documented():
    docs = (ROOT / "docs" / "plugins.md").read_text()
    for name in hook_names():
        assert f"### `{name}(" in docs, f"{name} is not documented in docs/plugins.md"
    documented = {line.split("`")[1].split("(")[0] for line in docs.splitlines() if line.startswith("### `deck_")}
    assert documented == set(hook_names()), "docs/plugins.md documents a hook deck does not have"


class Recording:
    """An installed plugin implementing every hook, noting which ones deck calls; its frontend
    drives a deck run (a turn, a config change), its command says it ran."""

    def __init__(self) -> None:
        self.called: set[str] = set()
        self.ran: list[str] = []
        self.deck: deck.Deck | None = None

    @hookimpl
    def deck_register_frontends(self):
        self.called.add("deck_register_frontends")
        return {"recording": make_frontend(self)}

    @hookimpl
    def deck_register_commands(self, app):
        self.called.add("deck_register_commands")

        @app.command("recorded")
        def recorded(config: Optional[Path] = typer.Option(None, "--config", "-c")) -> None:
            self.ran.append("recorded")

    @hookimpl
    def deck_config_sections(self):
        self.called.add("deck_config_sections")
        return {}

    @hookimpl
    def deck_register_services(self, deck):
        self.called.add("deck_register_services")
        return {"RecordingService": RecordingService()}

    @hookimpl
    def deck_startup(self, deck):
        self.called.add("deck_startup")
        self.deck = deck
        deck.trace_acp = True  # else deck_acp_message is never called (it is hot)

    @hookimpl
    def deck_shutdown(self, deck):
        self.called.add("deck_shutdown")

    @hookimpl
    def deck_event(self, deck, event):
        self.called.add("deck_event")

    @hookimpl
    def deck_before_start(self, deck, agent):
        self.called.add("deck_before_start")

    @hookimpl
    def deck_before_prompt(self, deck, agent, text):
        self.called.add("deck_before_prompt")

    @hookimpl
    def deck_check_agent(self, deck, agent):
        self.called.add("deck_check_agent")

    @hookimpl
    def deck_session_mcp_servers(self, deck, agent):
        self.called.add("deck_session_mcp_servers")
        return []

    @hookimpl
    def deck_acp_message(self, deck, agent, direction, message):
        self.called.add("deck_acp_message")

    @hookimpl
    def deck_register_events(self):
        self.called.add("deck_register_events")
        return []

    @hookimpl(tryfirst=True)
    def deck_history_provider(self, deck):
        self.called.add("deck_history_provider")  # None: the history plugin's answers

    @hookimpl
    def deck_register_actions(self, deck):
        self.called.add("deck_register_actions")
        return [{"name": "echo-it", "help": "say it again", "method": "RecordingService.Echo", "shows": "text",
                 "params": [{"name": "text", "help": "what to say", "required": True, "rest": True}]}]  # fmt: skip


class RecordingService:
    """A plugin's service: callable by its wire name like the core's."""

    @deck.rpc_method("RecordingService.Echo")
    def echo(self, text: str) -> str:
        return text


def make_frontend(plugin: Recording) -> type[deck.Frontend]:
    class Scenario(deck.Frontend):
        """Start an agent by a prompt, wait for the answer, change the config, then end the run."""

        async def run(self) -> int:
            running = plugin.deck  # as deck_startup gave it
            assert running is not None
            events = Recorder()
            running.subscribe(events)
            assert await running.call("RecordingService.Echo", {"text": "hi"}) == "hi"
            offered = {a["name"]: a for a in await running.call("DeckService.Actions", {})}
            assert offered["echo-it"]["source"] == "recording" and offered["echo-it"]["method"] == "RecordingService.Echo"
            assert await running.call("ChatService.History", {}) == []  # the history plugin's provider
            await running.call("ChatService.Send", {"agent": "a", "text": "hi"})
            await events.wait_event("turn:changed", agent="a", busy=False)
            saved = await running.call("ConfigService.Save", {"text": agent_block("a") + agent_block("b")})
            assert saved["saved"], saved
            await events.wait_event("config:changed", valid=True)
            plugin.ran.append("scenario")
            return 0

    return Scenario


def test_deck_calls_every_hook_itself(tmp_path, monkeypatch, installed):
    """A real `deck run` and a plugin command, in this process: each hook is called by deck, none by the test."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli_common, "setup_logging", lambda: None)  # the test process keeps its own logging
    config = tmp_path / "deck.toml"
    config.write_text(agent_block("a"))
    plugin = Recording()
    installed(recording=plugin)

    assert run_main(monkeypatch, "run", "--frontend", "recording", "--config", str(config)) == 0
    assert plugin.ran == ["scenario"]
    assert run_main(monkeypatch, "recorded", "--config", str(config)) == 0
    assert plugin.ran == ["scenario", "recorded"]
    assert run_main(monkeypatch, "agents", "--check", "--config", str(config)) == 0
    missing = sorted(set(hook_names()) - plugin.called)
    assert not missing, f"deck never called {missing} (or the recording plugin does not implement them)"


# -- order and wrappers ----------------------------------------------------------------------------


async def test_tryfirst_and_trylast_order_the_implementations(make_deck):
    order: list[str] = []

    def plugin(name: str, **opts: bool) -> object:
        class Plugin:
            @hookimpl(**opts)
            def deck_event(self, event):
                if event.name == "agent:state":
                    order.append(name)

        return Plugin()

    deck, rec = make_deck(agent_block("a"))
    deck.pm.register(plugin("first registered"), name="first")
    deck.pm.register(plugin("trylast", trylast=True), name="late")
    deck.pm.register(plugin("tryfirst", tryfirst=True), name="early")
    deck.pm.register(plugin("last registered"), name="last")
    await deck.call("AgentService.Start", {"name": "a"})
    assert order[:4] == ["tryfirst", "last registered", "first registered", "trylast"]


async def test_listens_lets_only_the_named_events_reach_an_implementation(make_deck):
    from deck import listens
    from deck.events import AgentStateChanged, TurnChanged

    class Listening:
        def __init__(self) -> None:
            self.seen: list[str] = []

        @hookimpl
        @listens(TurnChanged, "agent:state")
        def deck_event(self, event):
            self.seen.append(event.name)

    class Everything:
        def __init__(self) -> None:
            self.seen: list[str] = []

        @hookimpl
        def deck_event(self, event):
            self.seen.append(event.name)

    deck, rec = make_deck(agent_block("a"))
    listening, everything = Listening(), Everything()
    deck.pm.register(listening, name="listening")
    deck.pm.register(everything, name="everything")
    deck.chat.send("a", "hello")
    await rec.wait(lambda r: [p for p in r.named("turn:changed") if not p["busy"]])
    assert set(listening.seen) == {TurnChanged.name, AgentStateChanged.name}
    assert "message:delta" in everything.seen and everything.seen.count("turn:changed") == listening.seen.count(
        "turn:changed"
    )
    deck.pm.unregister(listening)  # a new generation of plugins: what listens is found again
    deck.chat.send("a", "again")
    await rec.wait(lambda r: len([p for p in r.named("turn:changed") if not p["busy"]]) >= 2)
    assert listening.seen.count("turn:changed") < everything.seen.count("turn:changed")


class Wrapping:
    def __init__(self) -> None:
        self.calls = 0

    @hookimpl(wrapper=True)
    def deck_event(self, deck, event):
        self.calls += 1
        return (yield)

    @hookimpl
    def deck_before_start(self, deck, agent):
        self.calls += 1


class OldStyleWrapping:
    @hookimpl(hookwrapper=True)
    def deck_register_frontends(self):
        yield


async def test_a_hook_wrapper_is_refused_at_registration(make_deck):
    deck, rec = make_deck(agent_block("a"))
    for plugin in (Wrapping(), OldStyleWrapping()):
        with pytest.raises(pluggy.PluginValidationError, match="hook wrappers .* are not supported"):
            deck.pm.register(plugin, name="wrapping")
        assert not deck.pm.has_plugin("wrapping") and not deck.pm.get_hookcallers(plugin)
    await deck.call("AgentService.Start", {"name": "a"})  # the deck goes on without it


async def test_an_installed_plugin_with_a_wrapper_is_reported_and_not_loaded(make_deck, installed, caplog):
    installed(wrapping=Wrapping(), plain=Recording())
    deck, rec = make_deck(agent_block("a"))
    assert deck.pm.has_plugin("plain") and not deck.pm.has_plugin("wrapping")
    assert any("cannot load plugin wrapping" in r.getMessage() and "wrapper" in r.getMessage() for r in caplog.records)


async def test_a_wrapper_from_another_plugin_manager_is_reported_never_called(make_deck):
    pm = pluggy.PluginManager("deck")
    pm.add_hookspecs(hookspecs)
    wrapping = Wrapping()
    pm.register(wrapping, name="wrapping")  # a plain pluggy manager lets it in
    deck, rec = make_deck(agent_block("a"), pm=pm)
    await deck.call("AgentService.Start", {"name": "a"})
    errors = [e for e in rec.named("plugin:error") if e["plugin"] == "wrapping"]
    assert [e["hook"] for e in errors] == ["deck_event"] and "hook wrappers" in errors[0]["error"]
    assert wrapping.calls == 1  # deck_before_start, its plain implementation; the wrapper never ran


# -- slow plugins ----------------------------------------------------------------------------------


async def test_a_slow_plugin_is_cut_off_at_the_timeout_without_stalling_the_bus(make_deck):
    deck, rec = make_deck(agent_block("a"))
    deck.hooks.timeout = 1.0
    hung, ended = asyncio.Event(), asyncio.Event()
    seen_while_hung: list[str] = []

    class Hanging:
        @hookimpl
        def deck_event(self, event):
            if event.name == "turn:changed" and event.busy and not hung.is_set():

                async def forever() -> None:
                    hung.set()
                    try:
                        await asyncio.Future()
                    finally:
                        ended.set()

                return forever()

    class Witness:
        @hookimpl
        def deck_event(self, event):
            if hung.is_set() and not ended.is_set():
                seen_while_hung.append(event.name)

    deck.pm.register(Witness(), name="witness")
    deck.pm.register(Hanging(), name="hanging")
    await deck.call("ChatService.Send", {"agent": "a", "text": "hi"})
    await rec.wait_event("turn:changed", agent="a", busy=False)
    # The whole answer went by, to the listeners and the other plugin, while the hanging task ran.
    assert hung.is_set() and not ended.is_set() and not rec.named("plugin:error")
    assert "message:delta" in seen_while_hung and "turn:changed" in seen_while_hung
    error = await rec.wait_event("plugin:error", plugin="hanging", timeout=5)
    assert error == {"plugin": "hanging", "hook": "deck_event", "error": "TimeoutError: did not finish within 1s"}
    assert ended.is_set()  # cancelled, not left running
    await deck.call("ChatService.Send", {"agent": "a", "text": "again"})  # and the bus still flows
    await rec.wait(lambda r: len(r.named("turn:changed", "a")) >= 4)


async def test_a_startup_hook_that_never_finishes_is_cut_off_and_deck_starts(make_deck):
    deck, rec = make_deck(agent_block("a"))
    deck.hooks.timeout = 0.2
    started: list[str] = []

    class Stuck:
        @hookimpl
        def deck_startup(self):
            return asyncio.get_running_loop().create_future()

    class Next:
        @hookimpl
        def deck_startup(self):
            started.append("next")

    deck.pm.register(Next(), name="next")
    deck.pm.register(Stuck(), name="stuck")  # called first: the last registered
    await deck.startup()
    assert started == ["next"]
    assert {"plugin": "stuck", "hook": "deck_startup", "error": "TimeoutError: did not finish within 0.2s"} in rec.named(
        "plugin:error"
    )


async def test_what_start_up_made_is_left_out_of_the_collectors_full_passes(make_deck):
    """Once started, a deck's modules, classes and config are frozen: a full collection during the
    run walks only what came since."""
    import gc

    deck, _rec = make_deck(agent_block("a"))
    gc.unfreeze()

    class Frozen(deck_frontend.Frontend):
        async def run(self) -> int:
            self.frozen = gc.get_freeze_count()
            return 0

    try:
        assert await deck.run(Frozen) == 0
        assert deck.frontend.frozen > 10_000
    finally:
        gc.unfreeze()


async def test_a_plugin_service_is_called_by_name_and_cannot_take_the_name_of_another(make_deck):
    class Services:
        @hookimpl
        def deck_register_services(self, deck):
            return {"RecordingService": RecordingService(), "ChatService": RecordingService()}

    pm = pluginmanager.make_manager()
    pm.register(Services(), name="services")
    deck, rec = make_deck(agent_block("a"), pm=pm)
    assert await deck.call("RecordingService.Echo", {"text": "hi"}) == "hi"
    with pytest.raises(deck_errors.InvalidParams, match="missing parameter: text"):
        await deck.call("RecordingService.Echo", {})
    assert type(deck.services["ChatService"]).__name__ == "ChatService"  # the core's stays
    with pytest.raises(deck_errors.UnknownMethod):
        await deck.call("ChatService.Echo", {"text": "hi"})


# -- the command line's plugin commands ------------------------------------------------------------


def commander(name: str, ran: list[str]) -> object:
    """A plugin that adds command `name` (taking --config and -p, like deck's own)."""

    class Commands:
        @hookimpl
        def deck_register_commands(self, app):
            @app.command(name)
            def command(
                config: Optional[Path] = typer.Option(None, "--config", "-c"),
                plugin: list[str] = typer.Option([], "--plugin", "-p"),
            ) -> None:
                ran.append(name)

    return Commands()


def test_plugin_commands_leave_out_the_plugins_the_config_and_the_command_line_disable(
    tmp_path, monkeypatch, installed, capsys
):
    monkeypatch.chdir(tmp_path)
    ran: list[str] = []
    installed(alpha=commander("alpha", ran), beta=commander("beta", ran))
    config = tmp_path / "other.toml"
    config.write_text('[plugins]\ndisabled = ["alpha"]\n' + agent_block("a"))

    assert run_main(monkeypatch, "alpha", "--config", str(config)) == 2  # no such command
    assert run_main(monkeypatch, "alpha", f"--config={config}") == 2
    assert run_main(monkeypatch, "beta", "-p", "no:beta") == 2
    assert run_main(monkeypatch, "beta", "-pno:beta", "-c", str(config)) == 2
    assert ran == []
    assert run_main(monkeypatch, "beta", "-c", str(config)) == 0
    (tmp_path / "deck.toml").write_text('[plugins]\ndisabled = ["beta"]\n')  # the config in use, found in ./
    assert run_main(monkeypatch, "alpha") == 0
    assert run_main(monkeypatch, "beta") == 2
    assert ran == ["beta", "alpha"]
    assert "No such command 'alpha'" in capsys.readouterr().err


def test_a_plugin_failing_to_add_its_commands_is_one_line_and_the_others_still_add_theirs(
    tmp_path, monkeypatch, installed, capsys
):
    class Broken:
        @hookimpl
        def deck_register_commands(self, app):
            raise RuntimeError("boom")

    monkeypatch.chdir(tmp_path)
    ran: list[str] = []
    installed(beta=commander("beta", ran), broken=Broken())  # broken is called first: the last registered
    assert run_main(monkeypatch, "beta") == 0
    assert ran == ["beta"]
    assert capsys.readouterr().err == "deck: plugin broken failed in deck_register_commands: RuntimeError('boom')\n"


def test_built_in_commands_and_the_version_load_no_plugin(monkeypatch, installed, capsys):
    loaded: list[str] = []

    class Loud:
        @hookimpl
        def deck_register_commands(self, app):
            loaded.append("commands")

    installed(loud=Loud())
    assert run_main(monkeypatch, "--version") == 0
    assert run_main(monkeypatch, "config", "path") == 0
    assert loaded == []
    assert run_main(monkeypatch, "--help") == 0
    assert loaded == ["commands"]


async def test_before_prompt_refuses_a_message_with_a_service_error_and_a_broken_one_is_reported(make_deck):
    class Guard:
        @hookimpl
        def deck_before_prompt(self, agent, text):
            if "secret" in text:
                raise deck_errors.ServiceError(f"{agent.name} may not be told secrets")

    class Broken:
        @hookimpl
        def deck_before_prompt(self, text):
            raise RuntimeError("oops")

    made, rec = make_deck(agent_block("a"))
    made.pm.register(Guard(), name="guard")
    made.pm.register(Broken(), name="broken")
    with pytest.raises(deck_errors.ServiceError, match="a may not be told secrets"):
        made.chat.send("a", "the secret is 42")
    assert made.conversation_of("a").messages == []  # nothing added
    made.chat.send("a", "hello")
    await rec.wait(lambda r: [p for p in r.named("turn:changed", "a") if not p["busy"]])
    failed = rec.named("plugin:error")  # once per message, the refused one too: it ran first
    assert [(f["plugin"], f["hook"]) for f in failed] == [("broken", "deck_before_prompt")] * 2
    assert "oops" in failed[0]["error"]
