"""announcements: one agent asks another.

Every agent gets an MCP server named `deck` in each `session/new` (`announcements_mcp.py`), with the
tools `ask_agent {agent, question}` and `list_agents {}`. The server reaches this deck
over a private Unix socket (`bridge.py`); the ask itself runs here (`asks.py`): the
target answers in an ACP session of its own (`Agent.open_session`), its intermediate
messages become `agent:announcement` events and only its final message goes back to the
requester. The server's entry names the session it was given to (`Session.origin`), so an
ask knows which turn or ask of the requester it serves, and ends with it.

Refused, with the tool's error as the reason: asking oneself, an unknown agent, a
target that cannot start (limits), a cycle — an agent asking one that is itself
waiting, directly or through others, for the asker's answer (it would wait forever) —
and an ask past MAX_ASKS_FROM in progress for its requester or MAX_ASKS_TO for its target.
What the socket takes of each agent (connections, line sizes, bytes held) is bounded too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deck import hookimpl, listens
from deck.events import Event, TurnChanged

from .asks import Asks
from .bridge import Bridge
from .events import EVENTS

if TYPE_CHECKING:
    from deck import Agent, Deck, Session
    from deck.events import Event

#: The name this deck's `Announcements` is registered under in its plugin manager.
PER_DECK = "announcements.deck"


class Announcements:
    """One deck's asks and socket: a plugin of its own, registered with that deck's plugin manager."""

    def __init__(self, deck: Deck) -> None:
        self.deck = deck
        self.asks = Asks(deck)
        self.bridge = Bridge(self.asks)

    @hookimpl
    @listens(TurnChanged)
    def deck_event(self, event: Event) -> None:
        if type(event) is TurnChanged and not event.busy:
            self.asks.turn_ended(event.agent)

    @hookimpl
    async def deck_shutdown(self) -> None:
        self.deck.pm.unregister(self)
        self.asks.cancel_all()
        await self.bridge.close()


def of(deck: Deck) -> Announcements:
    """`deck`'s announcements, made on first use: a deck driven without `startup()` (tests, `deck send`)
    opens its socket as its first session is opened."""
    plugin = deck.pm.get_plugin(PER_DECK)
    if plugin is None:
        plugin = Announcements(deck)
        deck.pm.register(plugin, name=PER_DECK)
    return plugin  # type: ignore[no-any-return]


@hookimpl
def deck_register_events() -> list[type[Event]]:
    return list(EVENTS)


@hookimpl
async def deck_startup(deck: Deck) -> None:
    await of(deck).bridge.start()


@hookimpl
def deck_session_mcp_servers(deck: Deck, agent: Agent, session: Session) -> Any:
    return [of(deck).bridge.mcp_server(agent.name, session.origin)]
