"""The typed facade through which the core calls plugins: one method per hook.

Each implementation is called on its own, in pluggy's order (tryfirst ones first, then
the last registered first, trylast ones last): one that raises is reported (a log line
and a `plugin:error` event) and skipped, and the others still run. An awaitable returned
by a notification hook runs in a deck task, cut off after `Hooks.timeout` (PLUGIN_TIMEOUT; a start of
an agent on another host: `Hooks.host_timeout`, longer than ssh's connect timeout),
so a slow plugin cannot stall the event bus.

Hook wrappers (`hookwrapper=True`, `wrapper=True`) cannot wrap that: a wrapper's code after
its `yield` would run before the awaitables it wraps, and one failing implementation would
end the whole call. `DeckPluginManager` refuses them at registration; one that reaches the
facade through another manager is reported and never called.

`PluginHooks` is the part that needs no running deck: the command line uses it to let
plugins add commands and config sections.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from deck.config.models import AGENT_KEYS, config_keys, joined
from deck.errors import PromptRefused, ServiceError
from deck.runtime import actions

if TYPE_CHECKING:
    import pluggy
    import typer
    from deck.agent.agent import Agent
    from deck.agent.session import Session
    from deck.events import Event
    from deck.frontend import Frontend
    from deck.runtime.deck import Deck

log = logging.getLogger(__name__)

#: How long an awaitable returned by a plugin's hook may run, in seconds (`Hooks.timeout`).
PLUGIN_TIMEOUT = 10.0
#: The same for `deck_before_start` of an agent on another host (`Hooks.host_timeout`): a plugin may
#: work there through ssh (its worktree is made there), and ssh alone may wait its ConnectTimeout
#: (15 s) before it says that the host does not answer.
HOST_PLUGIN_TIMEOUT = 60.0

Impl = tuple[Callable[..., Any], tuple[str, ...], str]
#: Told of a plugin that failed: (plugin name, hook name, the exception).
Report = Callable[[str, str, BaseException], None]


def log_failure(plugin: str, hook: str, exc: BaseException) -> None:
    log.error("plugin %s failed in %s: %r", plugin, hook, exc, exc_info=exc)  # its traceback: for the log file


class PluginHooks:
    """The hooks called before any deck runs, and the machinery: implementations in order, each isolated."""

    def __init__(self, pm: pluggy.PluginManager, report: Report = log_failure) -> None:
        self.pm = pm
        self.report = report
        #: Arguments every implementation may name besides the hook's own (a Deck's `deck`).
        self.context: dict[str, Any] = {}
        self._cache: dict[str, tuple[int | None, list[Impl]]] = {}
        self._refused: set[tuple[str, str]] = set()
        self._sections_cache: tuple[int, tuple[dict[str, Any], dict[str, str]]] | None = None

    # -- the hooks ------------------------------------------------------------------------------

    def register_frontends(self) -> dict[str, type[Frontend]]:
        found: dict[str, type[Frontend]] = {}
        for result in self._call("deck_register_frontends"):
            found.update(result)
        return found

    def register_commands(self, app: typer.Typer) -> None:
        self._call("deck_register_commands", app=app)

    def config_sections(self) -> dict[str, Any]:
        """`{section name: model}`; the models of one name that several plugins give (each adding
        keys to every agent's table, `agents`) made one model holding all their keys."""
        return self._sections()[0]

    def agent_keys(self) -> dict[str, str]:
        """The keys plugins add to every agent's table (`agents` sections): key → plugin."""
        return self._sections()[1]

    def _sections(self) -> tuple[dict[str, Any], dict[str, str]]:
        generation = getattr(self.pm, "generation", None)
        if self._sections_cache is not None and generation is not None and self._sections_cache[0] == generation:
            return self._sections_cache[1]
        given: dict[str, list[type[Any]]] = {}
        owners: dict[str, str] = {}
        for function, argnames, plugin in reversed(self._impls("deck_config_sections")):  # the first registered first
            try:
                result = function(*[self.context[arg] for arg in argnames]) or {}
                for name, model in result.items():
                    if name == AGENT_KEYS:
                        owner = plugin.removesuffix(PER_DECK)
                        taken = [owners[key] for key in config_keys(model) if owners.get(key, owner) != owner]
                        if taken:  # one plugin's key each: the type and the owner never disagree
                            raise ValueError(f"its agent keys {sorted(config_keys(model))} take one of plugin {taken[0]}'s")
                        joined(name, [*given.get(name, []), model])  # bases that cannot be one model: refused now
                        owners.update(dict.fromkeys(config_keys(model), owner))
                    given.setdefault(name, []).append(model)
            except Exception as exc:
                self.failed(plugin, "deck_config_sections", exc)
        sections = {name: joined(name, models) for name, models in given.items()}
        if generation is not None:
            self._sections_cache = (generation, (sections, owners))
        return sections, owners

    # -- machinery ------------------------------------------------------------------------------

    def _impls(self, name: str) -> list[Impl]:
        """The implementations of hook `name` in call order; cached while the plugins stay the same."""
        generation = getattr(self.pm, "generation", None)
        cached = self._cache.get(name)
        if cached is not None and generation is not None and cached[0] == generation:
            return cached[1]
        impls: list[Impl] = []
        wrappers: list[str] = []
        for impl in reversed(getattr(self.pm.hook, name).get_hookimpls()):
            if impl.hookwrapper or impl.wrapper:
                wrappers.append(impl.plugin_name)
            else:
                impls.append((impl.function, tuple(impl.argnames), impl.plugin_name))
        self._cache[name] = (generation, impls)
        for plugin in wrappers:  # after caching: the report may call hooks itself
            if (plugin, name) not in self._refused:
                self._refused.add((plugin, name))
                self.failed(plugin, name, TypeError(WRAPPER_REFUSED))
        return impls

    def _call(self, name: str, refuse: type[Exception] | None = None, **kwargs: Any) -> list[Any]:
        """Every implementation's result that is not None; awaitables are handed to `_later`;
        `refuse` propagates (the others are reported)."""
        kwargs.update(self.context)
        results = []
        for function, argnames, plugin in self._impls(name):
            try:
                result = function(*[kwargs[arg] for arg in argnames])
            except Exception as exc:
                if refuse is not None and isinstance(exc, refuse):
                    raise
                self.failed(plugin, name, exc)
                continue
            if result is None:
                continue
            if inspect.isawaitable(result):
                self._later(plugin, name, result)
            else:
                results.append(result)
        return results

    def _later(self, plugin: str, hook: str, awaitable: Awaitable[Any]) -> None:
        """No deck runs to wait for an awaitable: it is closed unrun and reported."""
        close = getattr(awaitable, "close", None)
        if close is not None:
            close()
        self.failed(plugin, hook, TypeError("returned an awaitable, but no deck is running to wait for it"))

    def failed(self, plugin: str, hook: str, exc: BaseException) -> None:
        self.report(plugin, hook, exc)


class Hooks(PluginHooks):
    """Every hook, called for one Deck: failures become `plugin:error` events, awaitables deck tasks."""

    def __init__(self, deck: Deck, pm: pluggy.PluginManager) -> None:
        super().__init__(pm)
        self.deck = deck
        self.context = {"deck": deck}
        #: Event class → the `deck_event` implementations it reaches (`listens`), each a call of the
        #: event alone with its plugin's name, for one plugin generation.
        self._by_class: dict[type[Event], list[tuple[Callable[[Event], Any], str]]] = {}
        self._by_class_generation: int | None = None
        #: How long an awaitable returned by a hook may run before it is cancelled and reported.
        self.timeout = PLUGIN_TIMEOUT
        #: The same for `deck_before_start` of an agent with a `host`.
        self.host_timeout = HOST_PLUGIN_TIMEOUT

    # -- the hooks ------------------------------------------------------------------------------

    def register_actions(self) -> list[dict[str, Any]]:
        """The plugins' actions, each checked (`actions.checked`); a bad one, or a name taken, is refused."""
        found: dict[str, dict[str, Any]] = {}
        for function, argnames, plugin in self._impls("deck_register_actions"):
            try:
                offered = function(*[self.context[arg] for arg in argnames]) or []
                for action in offered:
                    action = actions.checked(action, plugin)
                    if action["name"] in found:
                        raise ValueError(f"action {action['name']!r} is another plugin's")
                    found[action["name"]] = action
            except Exception as exc:
                self.failed(plugin, "deck_register_actions", exc)
        return list(found.values())

    def register_services(self, taken: set[str]) -> dict[str, object]:
        """The plugins' services; a name already `taken` (the core's, another plugin's) is refused."""
        found: dict[str, object] = {}
        for result in self._call("deck_register_services"):
            for name, service in result.items():
                if name in taken or name in found:
                    log.error("plugin service %s refused: a service of that name exists", name)
                    continue
                found[name] = service
        return found

    async def startup(self) -> None:
        await self._call_and_wait("deck_startup")

    async def shutdown(self) -> None:
        await self._call_and_wait("deck_shutdown")

    def event(self, event: Event) -> None:
        """`deck_event`: the hot path, one call per streamed chunk, hence no argument matching per
        call, and only the implementations that listen to the event's class (`deck.listens`)."""
        calls = self._by_class.get(type(event))  # `_listening`'s cache, read here: a call less per event
        if calls is None or self._by_class_generation != getattr(self.pm, "generation", None):
            calls = self._listening(type(event))
        for call, plugin in calls:
            try:
                result = call(event)
            except Exception as exc:
                self.failed(plugin, "deck_event", exc)
                continue
            if result is not None and inspect.isawaitable(result):
                self._later(plugin, "deck_event", result)

    def _listening(self, cls: type[Event]) -> list[tuple[Callable[[Event], Any], str]]:
        generation = getattr(self.pm, "generation", None)
        if generation is None or generation != self._by_class_generation:
            self._by_class, self._by_class_generation = {}, generation
        found = self._by_class.get(cls)
        if found is None:
            impls = [impl for impl in self._impls("deck_event") if _listens_to(impl[0], cls)]
            found = [(self._event_call(function, argnames), plugin) for function, argnames, plugin in impls]
            if generation is not None:
                self._by_class[cls] = found
        return found

    def _event_call(self, function: Callable[..., Any], argnames: tuple[str, ...]) -> Callable[[Event], Any]:
        """`function` as a call of the event alone: its arguments matched once, not per event."""
        if argnames == ("event",):
            return function
        if argnames == ("deck", "event"):
            return functools.partial(function, self.deck)
        deck = self.deck
        return lambda event: function(*[event if arg == "event" else deck for arg in argnames])

    async def before_start(self, agent: Agent) -> dict[str, str]:
        """`deck_before_start`: a ServiceError refuses the start; an awaitable is waited for (longer
        for an agent on another host). What failed otherwise: plugin (the part serving one deck,
        `NAME.deck`, counted as NAME) → why; the agent does not start when it relies on one of them."""
        limit = self.host_timeout if agent.config.host else self.timeout
        failed = await self._call_and_wait("deck_before_start", refuse=ServiceError, limit=limit, agent=agent)
        return {plugin.removesuffix(PER_DECK): why for plugin, why in failed.items()}

    async def check_agent(self, agent: Agent) -> list[str]:
        """`deck_check_agent`: what each plugin finds in the way of the agent's start, a line each (a
        plugin that fails to look says so)."""
        limit = self.host_timeout if agent.config.host else self.timeout
        kwargs = {**self.context, "agent": agent}
        found = []
        for function, argnames, plugin in self._impls("deck_check_agent"):
            try:
                result = function(*[kwargs[arg] for arg in argnames])
                if inspect.isawaitable(result):
                    async with asyncio.timeout(limit):
                        result = await result
            except Exception as exc:
                self.failed(plugin, "deck_check_agent", exc)
                why = f"no answer within {limit:g}s" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
                found.append(f"the {plugin.removesuffix(PER_DECK)} plugin could not look: {why}")
                continue
            if result:
                found.append(str(result))
        return found

    def before_prompt(self, agent: Agent, text: str) -> None:
        """`deck_before_prompt`: a ServiceError refuses the message (raised as a `PromptRefused`, which
        the wire marks so); any other failure is reported."""
        try:
            self._call("deck_before_prompt", refuse=ServiceError, agent=agent, text=text)
        except PromptRefused:
            raise
        except ServiceError as exc:
            raise PromptRefused(str(exc), exc.data) from exc

    def session_mcp_servers(self, agent: Agent, session: Session) -> list[dict[str, Any]]:
        return [
            server for result in self._call("deck_session_mcp_servers", agent=agent, session=session) for server in result
        ]

    def acp_message(self, agent: Agent, direction: str, message: dict[str, Any]) -> None:
        self._call("deck_acp_message", agent=agent, direction=direction, message=message)

    # -- machinery ------------------------------------------------------------------------------

    async def _call_and_wait(
        self, name: str, refuse: type[Exception] | None = None, limit: float | None = None, **kwargs: Any
    ) -> dict[str, str]:
        """Call each implementation in turn and wait for what it returns (up to `limit` seconds, else
        `self.timeout`); `refuse` propagates. The failures reported: plugin → why."""
        kwargs.update(self.context)
        failures = {}
        for function, argnames, plugin in self._impls(name):
            try:
                result = function(*[kwargs[arg] for arg in argnames])
                if inspect.isawaitable(result):
                    await self._bounded(result, limit)
            except Exception as exc:
                if refuse is not None and isinstance(exc, refuse):
                    raise
                self.failed(plugin, name, exc)
                failures[plugin] = str(exc) or type(exc).__name__
        return failures

    def _later(self, plugin: str, hook: str, awaitable: Awaitable[Any]) -> None:
        async def guarded() -> None:
            try:
                await self._bounded(awaitable)
            except Exception as exc:
                self.failed(plugin, hook, exc)

        self.deck.spawn(guarded(), f"{plugin}.{hook}")

    async def _bounded(self, awaitable: Awaitable[Any], seconds: float | None = None) -> None:
        """Wait for `awaitable`, cancelling it after `seconds` (else `self.timeout`): a TimeoutError that says so."""
        seconds = self.timeout if seconds is None else seconds
        limit = asyncio.timeout(seconds)
        try:
            async with limit:
                await awaitable
        except TimeoutError:
            if limit.expired():
                raise TimeoutError(f"did not finish within {seconds:g}s") from None
            raise

    def failed(self, plugin: str, hook: str, exc: BaseException) -> None:
        log_failure(plugin, hook, exc)
        self.deck.plugin_failed(plugin, hook, f"{type(exc).__name__}: {exc}")


def _listens_to(function: Callable[..., Any], cls: type[Event]) -> bool:
    wanted = getattr(function, "deck_events", None)
    return wanted is None or cls.name in wanted

#: The end of the name a plugin registers the part of it that serves one deck under (`history.deck`).
PER_DECK = ".deck"

#: Why a hook wrapper is refused (at registration) or never called (by the facade).
WRAPPER_REFUSED = (
    "hook wrappers (hookwrapper=True, wrapper=True) are not supported: deck calls each implementation "
    "on its own and runs the awaitables they return in their own tasks; order implementations with "
    "tryfirst=True or trylast=True instead"
)
