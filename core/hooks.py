"""The typed facade through which the core calls plugins: one method per hook.

Each implementation is called on its own: one that raises is reported (a log line
and a `plugin:error` event) and skipped, and the others still run. An awaitable
returned by a notification hook runs in a deck task under PLUGIN_TIMEOUT, so a slow
plugin cannot stall the event bus.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .errors import ServiceError

if TYPE_CHECKING:
    import pluggy
    import typer

    from .agent import Agent
    from .app import Deck
    from .events import Event
    from .frontend import Frontend

log = logging.getLogger(__name__)

#: How long an awaitable returned by a plugin's hook may run.
PLUGIN_TIMEOUT = 10.0

Impl = tuple[Callable[..., Any], tuple[str, ...], str]


class Hooks:
    def __init__(self, deck: Deck, pm: pluggy.PluginManager) -> None:
        self.deck = deck
        self.pm = pm
        self._cache: dict[str, tuple[int | None, list[Impl]]] = {}

    # -- the hooks ------------------------------------------------------------------------------

    def register_frontends(self) -> dict[str, type[Frontend]]:
        found: dict[str, type[Frontend]] = {}
        for result in self._call("deck_register_frontends"):
            found.update(result)
        return found

    def register_commands(self, app: typer.Typer) -> None:
        self._call("deck_register_commands", app=app)

    def config_sections(self) -> dict[str, Any]:
        sections: dict[str, Any] = {}
        for result in self._call("deck_config_sections"):
            sections.update(result)
        return sections

    async def startup(self) -> None:
        await self._call_and_wait("deck_startup")

    async def shutdown(self) -> None:
        await self._call_and_wait("deck_shutdown")

    def event(self, event: Event) -> None:
        """`deck_event`: the hot path, one call per streamed chunk, hence no generic argument matching."""
        for function, argnames, plugin in self._impls("deck_event"):
            try:
                if argnames == _DECK_EVENT:
                    result = function(self.deck, event)
                else:
                    result = function(*[event if arg == "event" else self.deck for arg in argnames])
            except Exception as exc:
                self.failed(plugin, "deck_event", exc)
                continue
            if result is not None and inspect.isawaitable(result):
                self._later(plugin, "deck_event", result)

    async def before_start(self, agent: Agent) -> None:
        """`deck_before_start`: a ServiceError refuses the start; an awaitable is waited for."""
        await self._call_and_wait("deck_before_start", refuse=ServiceError, agent=agent)

    def session_mcp_servers(self, agent: Agent) -> list[dict[str, Any]]:
        return [server for result in self._call("deck_session_mcp_servers", agent=agent) for server in result]

    def acp_message(self, agent: Agent, direction: str, message: dict[str, Any]) -> None:
        self._call("deck_acp_message", agent=agent, direction=direction, message=message)

    def agent_used(self, agent: Agent) -> None:
        self._call("deck_agent_used", agent=agent)

    # -- machinery ------------------------------------------------------------------------------

    def _impls(self, name: str) -> list[Impl]:
        """The implementations of hook `name`, last registered first; cached while the plugins stay the same."""
        generation = getattr(self.pm, "generation", None)
        cached = self._cache.get(name)
        if cached is not None and generation is not None and cached[0] == generation:
            return cached[1]
        impls = [
            (impl.function, tuple(impl.argnames), impl.plugin_name)
            for impl in reversed(getattr(self.pm.hook, name).get_hookimpls())
        ]
        self._cache[name] = (generation, impls)
        return impls

    def _call(self, name: str, **kwargs: Any) -> list[Any]:
        """Every implementation's result that is not None; awaitables run later in a deck task."""
        kwargs["deck"] = self.deck
        results = []
        for function, argnames, plugin in self._impls(name):
            try:
                result = function(*[kwargs[arg] for arg in argnames])
            except Exception as exc:
                self.failed(plugin, name, exc)
                continue
            if result is None:
                continue
            if inspect.isawaitable(result):
                self._later(plugin, name, result)
            else:
                results.append(result)
        return results

    async def _call_and_wait(self, name: str, refuse: type[Exception] | None = None, **kwargs: Any) -> None:
        """Call each implementation in turn and wait for what it returns; `refuse` propagates."""
        kwargs["deck"] = self.deck
        for function, argnames, plugin in self._impls(name):
            try:
                result = function(*[kwargs[arg] for arg in argnames])
                if inspect.isawaitable(result):
                    async with asyncio.timeout(PLUGIN_TIMEOUT):
                        await result
            except Exception as exc:
                if refuse is not None and isinstance(exc, refuse):
                    raise
                self.failed(plugin, name, exc)

    def _later(self, plugin: str, hook: str, awaitable: Awaitable[Any]) -> None:
        async def guarded() -> None:
            try:
                async with asyncio.timeout(PLUGIN_TIMEOUT):
                    await awaitable
            except Exception as exc:
                self.failed(plugin, hook, exc)

        self.deck.spawn(guarded(), f"{plugin}.{hook}")

    def failed(self, plugin: str, hook: str, exc: BaseException) -> None:
        log.error("plugin %s failed in %s: %r", plugin, hook, exc)
        self.deck.plugin_failed(plugin, hook, f"{type(exc).__name__}: {exc}")


_DECK_EVENT = ("deck", "event")
