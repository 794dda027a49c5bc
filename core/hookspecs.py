"""Every deck hook, typed, one docstring each. Plugins implement them with `@deck.hookimpl`.

Hooks are synchronous. A notification hook that must do async work returns an
awaitable; the core runs it in its own task under a timeout, so a slow plugin
cannot stall the event bus. Implementations may be ordered with tryfirst/trylast;
hook wrappers are refused (see `hooks`). docs/plugins.md documents each one with an example.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

if TYPE_CHECKING:
    import typer
    from deck.agent.agent import Agent
    from deck.agent.session import Session
    from deck.events import Event
    from deck.frontend import Frontend
    from deck.runtime.deck import Deck
    from deck.runtime.services import HistoryProvider

hookspec = pluggy.HookspecMarker("deck")
hookimpl = pluggy.HookimplMarker("deck")

_F = TypeVar("_F", bound=Callable[..., Any])


def listens(*events: type[Event] | str) -> Callable[[_F], _F]:
    """Only these events (classes, or their names: "permission:requested") reach the `deck_event`
    implementation it decorates; the others cost it nothing, not even a call:

        @hookimpl
        @listens(PermissionRequested, "budget:reached")
        def deck_event(deck, event): ...
    """
    names = frozenset(e if isinstance(e, str) else e.name for e in events)

    def mark(function: _F) -> _F:
        function.deck_events = names  # type: ignore[attr-defined]  # read by the hook facade
        return function

    return mark


@hookspec
def deck_register_frontends() -> dict[str, type[Frontend]] | None:
    """Contribute frontends by name (`deck run --frontend=NAME`)."""


@hookspec(historic=True)
def deck_register_events() -> list[type[Event]] | None:
    """Contribute event classes (a plugin's own, `Event` dataclasses with a `name`): known to
    `deck.events.from_wire` from the moment the plugin is registered, so a client reading them off
    the wire gets these classes and `@handles` them. Their names are theirs alone (`plugin:what`)."""


@hookspec
def deck_register_commands(app: typer.Typer) -> None:
    """Add sub-commands to the `deck` command line."""


@hookspec
def deck_config_sections() -> dict[str, Any] | None:
    """Contribute top-level config sections: `{section name: pydantic model class}`."""


@hookspec
def deck_register_services(deck: Deck) -> dict[str, object] | None:
    """Contribute services by name for `deck`: objects whose `@deck.rpc_method("Name.Method")` methods
    `deck.call` (and every frontend, the jsonl bridge) can call. Called once, as the deck is made."""


@hookspec
def deck_register_actions(deck: Deck) -> list[dict[str, Any]] | None:
    """Actions a plugin offers the user, as data every frontend shows alike (line mode as `/NAME`, the
    console in its menu, the web page in its own): each `{name, help, method, params, shows}`, where
    `method` is a service method, `params` its parameters in the order typed (`[{name, help, metavar?,
    required?, agent?, rest?}]`: `agent`, an agent's name, the current one when it is required and not
    given; `rest`, the rest
    of the line), `shows` how its result reads (`deck.runtime.actions.SHOWS`), `empty` what to say of an
    empty result. Called once, as the deck is made; `DeckService.Actions()` and the snapshot list them."""


@hookspec(firstresult=True)
def deck_history_provider(deck: Deck) -> HistoryProvider | None:
    """Where `deck`'s conversations are kept beyond one run: the provider `ChatService.History`,
    `Search` and `OpenConversation` delegate to (the first plugin that answers one; None: history is off)."""


@hookspec
def deck_startup(deck: Deck) -> Awaitable[None] | None:
    """deck has loaded its config and is about to run its frontend."""


@hookspec
def deck_shutdown(deck: Deck) -> Awaitable[None] | None:
    """deck has stopped every agent and is about to exit: flush and close what the plugin holds."""


@hookspec
def deck_event(deck: Deck, event: Event) -> Awaitable[None] | None:
    """Every event deck emits (`agent:state`, `message:delta`…), in order, as it happens.
    Called on the event loop: be quick."""


@hookspec
def deck_before_start(deck: Deck, agent: Agent) -> Awaitable[None] | None:
    """An agent is about to start. Raise `deck.ServiceError` to refuse the start;
    the awaitable, if any, is awaited before the start goes on (e.g. to stop another agent)."""


@hookspec
def deck_check_agent(deck: Deck, agent: Agent) -> Awaitable[str | None] | str | None:
    """`deck agents --check` looks at `agent` without starting it: what in the plugin's part of its
    setup would stop its start (one line, or None when nothing would). An awaitable is waited for
    (as long as a `deck_before_start` of the agent may take)."""


@hookspec
def deck_before_prompt(deck: Deck, agent: Agent, text: str) -> None:
    """The user's `text` is about to be sent to `agent` (`ChatService.Send`). Raise
    `deck.ServiceError` to refuse it: the sender gets the message, nothing is added to the
    conversation. Called on the event loop, once per message: be quick."""


@hookspec
def deck_session_mcp_servers(deck: Deck, agent: Agent, session: Session) -> list[dict[str, Any]] | None:
    """MCP servers (ACP `McpServer` dicts) to pass in the `session/new` of `session`: the agent's
    conversation (`session.origin` is "conversation") or one a plugin opens (the origin it gave)."""


@hookspec
def deck_acp_message(deck: Deck, agent: Agent, direction: str, message: dict[str, Any]) -> None:
    """Every ACP message exchanged with an agent; `direction` is "in" or "out".
    Called only while a plugin asks for tracing (`Deck.trace_acp`), since it is hot."""
