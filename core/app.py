"""The Deck: config, agents, the event bus, plugin calls, services and the run loop."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections import deque
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pluggy

from . import config as configmod
from .agent import Agent
from .config import DeckConfig
from .errors import ServiceError, UnknownMethod, UsageError
from .events import Event, PluginError
from .frontend import Frontend
from .hooks import Hooks
from .pluginmanager import make_manager
from .services import AgentService, ChatService, ConfigService, check_params
from .supervisor import StopTimings, kill_all_now

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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
        self.text, loaded = self._read_config(config_path)
        if loaded.config is None:
            where = str(config_path) if config_path else "<embedded>"
            lines = [f"{where}:{p.line}:{p.column}: {p.message}" for p in loaded.errors]
            raise UsageError("invalid config:\n" + "\n".join(lines))
        self.config: DeckConfig = loaded.config
        self.problems = loaded.problems
        self.disabled = (*self.config.plugins.disabled, *disabled)
        self.pm = pm or make_manager(self.disabled)
        self.hooks = Hooks(self, self.pm)
        self.agents: dict[str, Agent] = {name: Agent(self, name, cfg) for name, cfg in self.config.agents.items()}
        self.agent_service = AgentService(self)
        self.chat = ChatService(self)
        self.config_service = ConfigService(self)
        self.services: dict[str, Any] = {
            "AgentService": self.agent_service,
            "ChatService": self.chat,
            "ConfigService": self.config_service,
        }
        #: Set by a plugin (logs, for `--trace`) before agents start: every ACP line goes to `deck_acp_message`.
        self.trace_acp = False
        self.trace_path: Path | None = None
        #: Folders deck keeps for itself besides its state folder (a plugin's socket folder): agents' fs/* stay out.
        self.private_folders: list[Path] = []
        self.frontend: Frontend | None = None
        self._listeners: list[Any] = []
        self._emitting = False
        self._pending_events: deque[Event] = deque()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing: asyncio.Event | None = None
        self.exit_code: int | None = None

    def _read_config(self, path: Path | None) -> tuple[str, configmod.Loaded]:
        if path is None:
            text = configmod.embedded_default()
            return text, configmod.parse(text)
        return configmod.load_file(path, pipe=True)  # `--config <(…)` too, read once

    def config_sections(self) -> dict[str, Any]:
        """Config sections contributed by plugins: `{name: pydantic model}`."""
        return self.hooks.config_sections()

    # -- lookups ----------------------------------------------------------------------------

    def agent(self, name: str) -> Agent:
        agent = self.agents.get(name)
        if agent is None:
            known = ", ".join(self.agents) or "none"
            raise ServiceError(f"unknown agent {name!r} (agents: {known})")
        return agent

    # -- events and plugins -------------------------------------------------------------------

    def subscribe(self, listener: Any) -> None:
        """Call `listener(event)` for every event (frontends use this)."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: Any) -> None:
        self._listeners.remove(listener)

    def emit(self, event: Event) -> None:
        """Send `event` to the listeners and the `deck_event` hook.

        Every listener and plugin sees events in one order: an event emitted while
        another is being delivered waits until that delivery is over.
        """
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

    def plugin_failed(self, plugin: str, hook: str, error: str) -> None:
        """Report a plugin that raised: a `plugin:error` event (to the listeners only when deck_event failed)."""
        event = PluginError(plugin, hook, error)
        if hook != "deck_event":
            self.emit(event)
            return
        for listener in self._listeners:  # not through the hook that just failed
            try:
                listener(event)
            except Exception:
                log.exception("event listener failed")

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run `coro` as a task owned by the deck: cancelled at shutdown, errors logged."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())

    # -- services ---------------------------------------------------------------------------

    async def call(self, method: str, params: Any) -> Any:
        """Call a service method by its wire name, e.g. "ChatService.Send"."""
        service_name, _, method_name = method.partition(".")
        service = self.services.get(service_name)
        target = getattr(service, method_name, None) if service and not method_name.startswith("_") else None
        if target is None or not hasattr(target, "rpc_params"):
            raise UnknownMethod(f"unknown method: {method}")
        return await target(**check_params(target, params))

    # -- running ------------------------------------------------------------------------------

    async def run(self, frontend_cls: type[Frontend], **options: Any) -> int:
        """Run the frontend until it returns or a signal arrives; stop every agent after."""
        loop = asyncio.get_running_loop()
        self._closing = asyncio.Event()
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            await self.startup()
            self.frontend = frontend_cls(self, **options)
            front = loop.create_task(self.frontend.run(), name="frontend")
            closing = loop.create_task(self._closing.wait(), name="closing")
            await asyncio.wait({front, closing}, return_when=asyncio.FIRST_COMPLETED)
            if front.done():
                closing.cancel()
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

    async def startup(self) -> None:
        """Run the `deck_startup` hooks (plugins start their tasks), then follow the config file; `run` calls it first."""
        await self.hooks.startup()
        self.config_service.start_watching()

    def request_exit(self, code: int = 0) -> None:
        """Ask the run loop to end (signals, a closed stdout)."""
        if self.exit_code is None:
            self.exit_code = code
        if self._closing is not None:
            self._closing.set()

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
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def stop_all(self) -> None:
        await asyncio.gather(*(agent.stop() for agent in self.agents.values()), return_exceptions=True)
