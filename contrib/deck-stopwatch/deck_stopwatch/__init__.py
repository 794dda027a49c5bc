"""deck-stopwatch: how long each agent's turns take.

An example of a plugin that speaks to the user through data only, which every frontend shows
with no code of the plugin's:

- a notice (`deck.notice`) when a turn took longer than `[stopwatch] slow`: line mode prints it
  under its agent, the console says it in its status line and keeps it beside the agent's
  conversation, the web page shows it as a toast;
- an action, `/turns [AGENT]` (`deck_register_actions`): the turns timed so far, as a table, which
  line mode runs as a command, the console offers in its actions menu (Ctrl-P) and the web page
  under its Actions button. The action calls the plugin's own service method,
  `StopwatchService.Turns`, which any client may call too.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field

from deck import Duration, hookimpl, listens, rpc_method
from deck.errors import UnknownAgent
from deck.events import Event, TurnChanged

#: The turns remembered, of all agents: the oldest are let go first.
KEPT = 500


class StopwatchSettings(BaseModel):
    #: A turn that takes longer than this is said (a notice on its agent); 0 says every turn.
    slow: Duration = Field(default=60.0, ge=0)


ACTIONS = [
    {"name": "turns", "help": "how long each turn took, the oldest first", "method": "StopwatchService.Turns",
     "shows": "table", "empty": "no turn timed yet",
     "params": [{"name": "agent", "help": "only this agent's turns", "agent": True}]},
]  # fmt: skip


class Stopwatch:
    """One deck's stopwatch: its `deck_event` hook, and its service (`StopwatchService`)."""

    def __init__(self, deck: Any) -> None:
        self.deck = deck
        #: When each busy agent's turn began (time.monotonic()).
        self.began: dict[str, float] = {}
        #: Each agent's turns counted so far.
        self.counted: dict[str, int] = {}
        #: The turns timed, the oldest first: `{agent, turn, seconds}`.
        self.turns: list[dict[str, Any]] = []

    @hookimpl
    @listens(TurnChanged)
    def deck_event(self, deck: Any, event: Event) -> None:
        if deck is not self.deck or not isinstance(event, TurnChanged):
            return
        if event.busy:
            self.began.setdefault(event.agent, time.monotonic())  # said again as its queue changes
            return
        began = self.began.pop(event.agent, None)
        if began is None:
            return
        seconds = time.monotonic() - began
        number = self.counted[event.agent] = self.counted.get(event.agent, 0) + 1
        self.turns.append({"agent": event.agent, "turn": number, "seconds": round(seconds, 2)})
        del self.turns[:-KEPT]
        config = deck.config_service.section("stopwatch") or StopwatchSettings()
        if seconds >= config.slow:
            deck.notice("stopwatch", f"turn {number} took {seconds:.1f} s", agent=event.agent, level="warning")

    @hookimpl
    def deck_shutdown(self, deck: Any) -> None:
        if deck is self.deck:
            deck.pm.unregister(self)

    @rpc_method("StopwatchService.Turns")
    async def list_turns(self, agent: str | None = None) -> list[dict[str, Any]]:
        """The turns timed so far, the oldest first; `agent`'s only when one is named."""
        if agent is not None and agent not in self.deck.agents:
            raise UnknownAgent(agent, self.deck.agents)
        return [dict(turn) for turn in self.turns if agent is None or turn["agent"] == agent]


@hookimpl
def deck_config_sections() -> dict[str, type[BaseModel]]:
    return {"stopwatch": StopwatchSettings}


@hookimpl
def deck_register_services(deck: Any) -> dict[str, object]:
    stopwatch = Stopwatch(deck)
    deck.pm.register(stopwatch, name="stopwatch.deck")  # its deck_event: for this deck only
    return {"StopwatchService": stopwatch}


@hookimpl
def deck_register_actions() -> list[dict[str, Any]]:
    return ACTIONS
