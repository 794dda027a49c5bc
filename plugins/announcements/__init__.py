"""announcements: one agent asks another (SPEC §9, seed 002).

Every agent gets an MCP server named `deck` in its `session/new` (`server.py`), with the
tools `ask_agent {agent, question}` and `list_agents {}`. The server reaches this deck
over a private Unix socket (`bridge.py`); the ask itself runs here (`asks.py`): the
target answers in an ACP session of its own, its intermediate messages become
`agent:announcement` events and only its final message goes back to the requester.

Refused, with the tool's error as the reason: asking oneself, an unknown agent, a
target that cannot start (limits), and a cycle — an agent asking one that is itself
waiting, directly or through others, for the asker's answer (it would wait forever).
"""

from __future__ import annotations

from typing import Any

from deck import hookimpl

from .asks import CONVERSATION, Asks
from .bridge import Bridge

#: One ask registry and one socket per running deck.
_decks: dict[int, tuple[Asks, Bridge]] = {}


def _for(deck: Any) -> tuple[Asks, Bridge]:
    pair = _decks.get(id(deck))
    if pair is None or pair[0].deck is not deck:
        asks = Asks(deck)
        pair = _decks[id(deck)] = (asks, Bridge(asks))
    return pair


@hookimpl
async def deck_startup(deck: Any) -> None:
    await _for(deck)[1].start()


@hookimpl
def deck_session_mcp_servers(deck: Any, agent: Any) -> Any:
    # Decks driven without `startup()` (tests, `deck send`) open the socket on first use.
    asks, bridge = _for(deck)
    return [bridge.mcp_server(agent.name, asks.opening.get(agent.name, CONVERSATION))]


@hookimpl
def deck_event(deck: Any, event: Any) -> None:
    if event.name == "turn:changed" and not event.busy:
        pair = _decks.get(id(deck))
        if pair is not None:
            pair[0].turn_ended(event.agent)


@hookimpl
async def deck_shutdown(deck: Any) -> None:
    pair = _decks.pop(id(deck), None)
    if pair is not None:
        pair[0].cancel_all()
        await pair[1].close()
