"""The Deck: config, agents, the event bus, plugin calls, services and the run loop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import logging
import signal
import time
from collections import deque
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pluggy
from deck.agent import sandbox
from deck.agent.agent import Agent
from deck.agent.session import Session
from deck.chat.book import Conversations
from deck.chat.conversation import Caps, Conversation
from deck.chat.pending import PendingRequests
from deck.chat.spending import Spending
from deck.config import check as config_check
from deck.config import files as config_files
from deck.config import models as config_models
from deck.config.models import DeckConfig
from deck.errors import ServiceError, UnknownAgent, UnknownMethod, UsageError
from deck.events import ConfigChanged, Event, Notice, PluginError, set_seq
from deck.frontend import Frontend
from deck.proc.supervisor import StopTimings, kill_all_now
from deck.proc.tasks import TaskGroup
from deck.runtime.deck_service import DeckService
from deck.runtime.hooks import Hooks
from deck.runtime.local import LocalClient
from deck.runtime.plugins import make_manager, plugin_names, sections_off
from deck.runtime.rpc import check_params, methods
from deck.runtime.services import AgentService, ChatService, ConfigService

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: How much a notice matters, as `deck:notice` says it.
NOTICE_LEVELS = ("info", "warning", "error")


class Deck:
    """One running deck. Create it, then `await deck.run(FrontendClass)`."""

    def __init__(
        self,
        config_path: Path | None = None,
        source: str = "embedded",
        *,
        pm: pluggy.PluginManager | None = None,
        timings: StopTimings | None = None,
        disabled: tuple[str, ...] = (),
    ) -> None:
        self.timings = timings or StopTimings()
        #: The clock of idle tracking; tests inject their own.
        self.clock: Callable[[], float] = time.monotonic
        self.config_path = config_path
        self.config_source = source
        self.config_created = False
        self.frontend: Frontend | None = None
        self._listeners: list[Any] = []
        self._notices: dict[tuple[str, str | None], dict[str, str]] = {}  # sticky ones, by (source, agent)
        #: The `seq` of the last event emitted; events are numbered from 1, in the one order they go out.
        self.seq = 0
        self._emitting = False
        self._pending_events: deque[Event] = deque()
        # The plugins `[plugins] disabled` leaves on are loaded first: the keys they add to deck's own
        # tables (idle_stop's `limits.*`, budget's per-agent `budget`) decide whether the config is
        # valid; their own sections only give warnings here, and are read for use on first use.
        self.text, unreadable = self._read_config(config_path)
        self.disabled = (*config_check.disabled_plugins(self.text), *disabled)
        self.pm = pm or make_manager(self.disabled)
        #: The sections of the plugins that are off (set in an agent's table, theirs refuse its start)
        #: and every plugin's name: what a check of the config says of them.
        by_option = frozenset(disabled) - set(config_check.disabled_plugins(self.text))
        self.plugins_known = config_check.Plugins(sections_off(self.disabled), plugin_names(self.pm), by_option)
        self.hooks = Hooks(self, self.pm)
        #: The root of every task the deck runs (`spawn`): each agent connection has a group inside it.
        self.tasks = TaskGroup("deck")
        in_tables = {
            k: v for k, v in self.config_sections().items() if k in config_models.CORE_TABLES or k == config_models.AGENT_KEYS
        }
        loaded = config_check.Loaded(None, [unreadable]) if unreadable else config_check.parse(self.text, in_tables, plugins=self.plugins_known)
        if loaded.config is None:
            where = str(config_path) if config_path else "<embedded>"
            lines = [f"{where}:{p.line}:{p.column}: {p.message}" for p in loaded.errors]
            raise UsageError("invalid config", lines)
        self.config: DeckConfig = loaded.config
        # Checked again with every plugin's section: what they hold is theirs to judge (a plugin
        # whose section is invalid goes without it), but their keys are known, not "unknown keys".
        full = self.check_config(self.text) if not unreadable else loaded
        self.problems = full.problems if full.config is not None else [_as_warning(p) for p in full.problems]
        #: Plugins' sections of the config in force (`section`), read again on first use (plugins a
        #: deck's owner registers after it is made bring theirs).
        self._sections: dict[str, Any] | None = None
        self.agents: dict[str, Agent] = {name: Agent(self, name, cfg) for name, cfg in self.config.agents.items()}
        self.agent_service = AgentService(self)
        self.chat = ChatService(self)
        self.config_service = ConfigService(self)
        self.services: dict[str, Any] = {
            "AgentService": self.agent_service,
            "ChatService": self.chat,
            "ConfigService": self.config_service,
            "DeckService": DeckService(self),
        }
        self.services.update(self.hooks.register_services(set(self.services)))
        #: What the plugins offer the user to do (`deck_register_actions`): `DeckService.Actions()`.
        self.actions: list[dict[str, Any]] = self.hooks.register_actions()
        #: Set by a plugin (logs, for `--trace`) before agents start: every ACP line goes to `deck_acp_message`.
        self.trace_acp = False
        self.trace_path: Path | None = None
        #: Folders deck keeps for itself besides its state folder (a plugin's socket folder): agents' fs/* stay out.
        self.private_folders: list[Path] = []
        #: Folders of deck's own that a sandboxed agent still reaches, bound into its sandbox (the asks
        #: bridge's socket); every other folder of deck's is hidden from it (`sandbox_hidden`).
        self.reachable_folders: list[Path] = []
        self._methods: dict[str, Callable[..., Any]] | None = None
        self._closing: asyncio.Future[None] | None = None
        self.exit_code: int | None = None

    def _read_config(self, path: Path | None) -> tuple[str, config_check.Problem | None]:
        if path is None:
            return config_files.embedded_default(), None
        return config_check.read_file(path, pipe=True)  # `--config <(…)` too, read once

    def config_sections(self) -> dict[str, Any]:
        """Config sections contributed by plugins: `{name: pydantic model}`."""
        return self.hooks.config_sections()

    # -- lookups ----------------------------------------------------------------------------

    def agent(self, name: str) -> Agent:
        agent = self.agents.get(name)
        if agent is None:
            raise UnknownAgent(name, self.agents)
        return agent

    # -- events and plugins -------------------------------------------------------------------

    # -- for a plugin that keeps conversations (docs/plugins.md: the history provider) ---------

    def restore_conversation(self, agent: str, stored: dict[str, Any]) -> None:
        """Make a conversation kept from an earlier run `agent`'s, before the agent runs (`stored`:
        `messages` as wire dicts, `sessionId`, `title`, `cut`); its next start continues that session."""
        self.chat.conversations.restore(agent, stored)

    def conversation_count(self) -> int:
        """How many agents have a conversation in this deck (0 once another config file was opened)."""
        return len(self.chat.conversations)

    @property
    def spending(self) -> Spending:
        """What the agents spent since the deck started and per day (`since_start(agent)`, `on(day,
        agent)`: currency → amount); a history provider `seed`s the days before."""
        return self.chat.spending

    def conversation_caps(self) -> Caps:
        """What a conversation keeps (`message`, `conversation`: sizes in bytes), from `[limits]`."""
        return self.chat.conversations.caps()

    # -- what its agents ask of it (deck.agent.host.Host) --------------------------------------

    def conversation_of(self, agent: str) -> Conversation:
        """The conversation of the agent named `agent` (for plugins)."""
        return self.chat.conversations.of(agent)

    @property
    def conversations(self) -> Conversations:
        return self.chat.conversations

    @property
    def asks(self) -> PendingRequests:
        return self.chat.pending

    def sandbox_hidden(self) -> list[Path]:
        """What a sandboxed agent never sees of deck's: its config file and folders, its state (history,
        logs, worktrees), its runtime folders (servers' sockets and tokens, ssh's) and private folders."""
        return [*sandbox.deck_folders(self.config_path), *self.private_folders]

    def before_prompt(self, agent: Agent, text: str) -> None:
        self.hooks.before_prompt(agent, text)

    def before_session_prompt(self, session: Session, text: str) -> None:
        self.hooks.before_prompt(session.agent, text)

    def subscribe(self, listener: Any) -> None:
        """Call `listener(event)` for every event (frontends use this)."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: Any) -> None:
        self._listeners.remove(listener)

    def emit(self, event: Event) -> None:
        """Send `event` to the listeners and the `deck_event` hook.

        Every listener and plugin sees events in one order: an event emitted while
        another is being delivered waits until that delivery is over. Each event gets its
        `seq` here, when the change it reports is already made: a snapshot taken at `self.seq`
        holds the changes of every event up to it, whether delivered yet or not.
        """
        seq = self.seq = self.seq + 1
        set_seq(event, seq)  # events are frozen: stamped once, as they go out
        if self._emitting:
            self._pending_events.append(event)
            return
        self._emitting = True
        try:
            self._deliver(event)
            while self._pending_events:
                self._deliver(self._pending_events.popleft())
        finally:
            self._emitting = False

    def _deliver(self, event: Event) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception as exc:
                log.exception("event listener failed")
                if not isinstance(event, PluginError):
                    self.emit(PluginError(getattr(listener, "__qualname__", "frontend"), "event", repr(exc)))
        self.hooks.event(event)

    def notice(
        self, source: str, text: str, *, agent: str | None = None, level: str = "info", sticky: bool = False,
        bell: bool = False, desktop: bool = False,
    ) -> None:
        """Tell the user `text` (`deck:notice`), as plugin `source` words it; `level` is info, warning or
        error. A `sticky` notice stays on `agent` (on the deck: None) until `source` says "" for it.
        `bell`, `desktop`: an alert, rung and shown as the terminal's notification, not as a line."""
        if level not in NOTICE_LEVELS:
            raise ValueError(f"unknown notice level {level!r}: {', '.join(NOTICE_LEVELS)}")
        if sticky:
            if text:
                kept = {"source": source, "level": level, "text": text}
                if self._notices.get((source, agent)) == kept:
                    return  # on it already: said again at each report, it is told once
                self._notices[(source, agent)] = kept
            elif self._notices.pop((source, agent), None) is None:
                return  # nothing to take back
        self.emit(Notice(source, level, text, agent, sticky, bell or None, desktop or None))

    def notices_of(self, agent: str | None) -> list[dict[str, str]]:
        """The sticky notices on `agent` (on the deck: None), in the order given."""
        return [notice for (_source, name), notice in self._notices.items() if name == agent]

    def plugin_failed(self, plugin: str, hook: str, error: str) -> None:
        """Report a plugin that raised: a `plugin:error` event (to the listeners only when deck_event failed)."""
        event = PluginError(plugin, hook, error)
        if hook != "deck_event":
            self.emit(event)
            return
        self.seq += 1
        set_seq(event, self.seq)
        for listener in self._listeners:  # not through the hook that just failed
            try:
                listener(event)
            except Exception:
                log.exception("event listener failed")

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, *, log_errors: bool = True) -> asyncio.Task[Any]:
        """Run `coro` as a task of the deck's: cancelled at shutdown; an error it ends with is logged,
        unless `log_errors` is off (whoever awaits the task handles it)."""
        return self.tasks.spawn(coro, name, log_errors=log_errors)

    # -- services ---------------------------------------------------------------------------

    async def call(self, method: str, params: Any) -> Any:
        """Call a service method by its wire name, e.g. "ChatService.Send", with `params` by name."""
        if self._methods is None:
            self._methods = methods(self.services.values())
        target = self._methods.get(method)
        if target is None:
            raise UnknownMethod(f"unknown method: {method}")
        result = target(**check_params(target, params))
        return await result if inspect.isawaitable(result) else result

    # -- running ------------------------------------------------------------------------------

    async def run(self, frontend_cls: type[Frontend], **options: Any) -> int:
        """Run the frontend until it returns or a signal arrives; stop every agent after."""
        loop = asyncio.get_running_loop()
        self._closing = loop.create_future()
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            await self.startup(watch=frontend_cls.follows_config)
            # What start-up made (modules, classes, the config) lives as long as the process: out of
            # the garbage collector's full passes, which would otherwise walk it all again and again
            # over a day of streaming (a pause of tens of ms each).
            gc.freeze()
            self.frontend = frontend_cls(LocalClient(self), **options)
            front = self.tasks.spawn(self.frontend.run(), "frontend", log_errors=False)
            ends: set[asyncio.Future[Any]] = {front, self._closing}
            await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
            if front.done():
                code = front.result()  # an exception in the frontend propagates after cleanup
            else:
                front.cancel()
                await asyncio.gather(front, return_exceptions=True)
                code = self.exit_code if self.exit_code is not None else 0
            return code if self.exit_code is None else self.exit_code
        finally:
            await asyncio.shield(self.shutdown())
            for sig in SIGNALS:
                loop.remove_signal_handler(sig)

    async def startup(self, watch: bool = True) -> None:
        """Run the `deck_startup` hooks (plugins start their tasks), then follow the config file
        (unless not `watch`); `run` calls it first."""
        await self.hooks.startup()
        if watch:
            self.config_service.start_watching()

    def request_exit(self, code: int = 0) -> None:
        """Ask the run loop to end (signals, a closed stdout)."""
        if self.exit_code is None:
            self.exit_code = code
        if self._closing is not None and not self._closing.done():
            self._closing.set_result(None)

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("signal %s: closing", sig.name)
        self.request_exit(128 + sig)

    async def shutdown(self) -> None:
        """Stop every agent in parallel; end the deck's tasks. Safe to call twice."""
        try:
            self.chat.end_of_input()
            await self.stop_all()
            await self.hooks.shutdown()
        finally:
            kill_all_now()  # whatever survived an error above
            await self.tasks.close()

    async def stop_all(self) -> None:
        await asyncio.gather(*(agent.stop() for agent in self.agents.values()), return_exceptions=True)

    # -- the config in force (the file is followed by `watch.py`, which calls these) -------------

    async def apply_config(self, text: str, loaded: config_check.Loaded) -> None:
        """`text`, checked as `loaded`, is the config file now: applied if valid, reported either way.

        Agents removed from it stop and go (their queued messages are abandoned first, so none
        starts them again), new ones appear in file order, and each one kept takes its new
        definition (`Agent.redefine`). An invalid config only changes the problems reported."""
        self.text, self.problems = text, loaded.problems
        new = loaded.config
        if new is not None:
            removed = [agent for name, agent in self.agents.items() if name not in new.agents]
            for agent in removed:
                if agent.name in self.chat.conversations:
                    with contextlib.suppress(ServiceError):
                        self.chat.cancel(agent.name)
                agent.retire()
            self.agents = {name: agent for name, agent in self.agents.items() if name in new.agents}
            await asyncio.gather(*(_closed_then_stopped(agent) for agent in removed), return_exceptions=True)
            self.config = new
            kept, self.agents = self.agents, {}
            for name, definition in new.agents.items():
                known = kept.get(name)
                if known is None:
                    self.agents[name] = Agent(self, name, definition)
                    self.agents[name].emit_state()
                else:
                    known.redefine(definition)
                    self.agents[name] = known
            self._sections = loaded.sections
        self._config_changed()

    async def switch_config(self, path: Path, text: str, loaded: config_check.Loaded, *, created: bool) -> None:
        """Another config file (`ConfigService.Open`): every agent stops, the conversations and what
        agents asked go, and the new file's agents take their place."""
        assert loaded.config is not None
        self.chat.pending.cancel_all()
        old = list(self.agents.values())
        for agent in old:
            agent.retire()
        self.agents = {}
        await asyncio.gather(*(agent.stop() for agent in old), return_exceptions=True)
        self.chat.forget()
        self.set_config_file(path, "open", created)
        self.config, self.text, self.problems = loaded.config, text, loaded.problems
        self._sections = loaded.sections
        self.agents = {name: Agent(self, name, cfg) for name, cfg in loaded.config.agents.items()}
        self._config_changed()

    def relied_on(self, agent: str) -> dict[str, str]:
        """The plugins agent `agent` relies on, as it sets keys they add to agent tables (to other than
        their defaults): plugin → the first such key. A plugin that is off ([plugins] disabled) counts."""
        found: dict[str, str] = {}
        keys = (self.section(config_models.AGENT_KEYS) or {}).get(agent)
        if keys is not None:
            owners = self.hooks.agent_keys()
            for key in config_models.keys_set(keys):
                found.setdefault(owners.get(key, "?"), key)
        cfg = self.config.agents.get(agent)
        table = (cfg.model_extra or {}) if cfg is not None else {}
        for plugin, sections in self.plugins_known.off.items():
            if (off := sections.get(config_models.AGENT_KEYS)) is not None:
                for key in config_models.keys_of_off(off, table)[:1]:
                    found.setdefault(plugin, key)
        return found

    def plugin_off(self, plugin: str) -> str | None:
        """How `plugin` was switched off ("[plugins] disabled", "-p no:NAME"), None when it was not."""
        if plugin not in self.disabled:
            return None
        return f"-p no:{plugin}" if plugin in self.plugins_known.by_option else "[plugins] disabled"

    def check_config(self, text: str) -> config_check.Loaded:
        """Config text `text` checked with every plugin's section (and what the plugins off would read)."""
        return config_check.parse(text, self.config_sections(), plugins=self.plugins_known)

    def section(self, name: str) -> Any:
        """Plugin section `name` of the config in force, validated by the plugin's model (None when
        absent and without defaults, or invalid)."""
        if self._sections is None:  # read on first use: plugins load after the config
            self._sections = self.check_config(self.text).sections
        return self._sections.get(name)

    def sections_checked(self, loaded: config_check.Loaded) -> None:
        """The config text in force was checked again (`loaded`): its plugin sections need no parse of their own."""
        if self._sections is None and loaded.config is not None:
            self._sections = loaded.sections

    def set_config_file(self, path: Path, source: str, created: bool) -> None:
        """The config file in use from now on, how it was found, and whether deck created it."""
        self.config_path, self.config_source, self.config_created = path, source, created

    def _config_changed(self) -> None:
        valid = not any(not p.warning for p in self.problems)
        path = str(self.config_path) if self.config_path else ""
        self.emit(ConfigChanged(path, valid, [p.to_dict() for p in self.problems]))


async def _closed_then_stopped(agent: Agent) -> None:
    """An agent removed from the config: its session closed (`session/close`, where it lists it), then stopped."""
    await agent.close_session()
    await agent.stop()


def _as_warning(problem: config_check.Problem) -> config_check.Problem:
    """A plugin section's error, in a config deck runs with all the same: the plugin goes without its
    section (at its defaults), which is said, as a warning."""
    if problem.warning:
        return problem
    return config_check.Problem(problem.line, problem.column, f"{problem.message} (its plugin does without it)", warning=True)
