"""notify: tell the user when an agent needs them, wherever deck runs its agents.

A moment is an agent asking (a permission request or a question: "input"), an agent in `error`
("error"), a budget reached ("budget", from the budget plugin's `budget:reached`) or, if asked
for, a turn ended ("done"). For each moment named in `[notify] on` that is still true `after`
its delay (a request still unanswered, the agent still in error), the plugin

- emits `notify:sent`: the terminal frontends attached ring the bell (`bell`) and show a
  terminal notification, OSC 777 and OSC 9 (`desktop`);
- runs the desktop's notifier where there is one (`desktop`);
- runs the user's `command`, the moment as JSON on its stdin and in `DECK_AGENT`, `DECK_WHAT`,
  `DECK_TITLE` (`senders.py`: one at a time per agent, cut off after 10 s, a failure logged).

Requests are told of per agent in one go: those an agent makes while one of its notifications was
just sent (within COALESCE seconds) make one more moment saying how many wait, never one each, so a
flood of requests costs one inbox reading per notification, not one per request.

It runs in the process that runs the agents, so a `deck serve` with no client notifies too.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Literal

from deck import CommandLine, Duration, hookimpl, listens, now_iso
from deck.events import AgentStateChanged, PermissionRequested, QuestionRequested, TurnChanged
from deck.states import AgentState
from deck.tty import one_line
from pydantic import BaseModel, ConfigDict, Field

from .events import EVENTS, NotifySent
from .senders import TITLE_MAX, Moment, Senders, desktop_notifier

if TYPE_CHECKING:
    from deck import Deck
    from deck.events import Event

What = Literal["input", "error", "budget", "done"]


class NotifySettings(BaseModel):
    """The `[notify]` section of the config file."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    on: list[What] = Field(
        ["input", "error", "budget"], description='The moments to tell of: "input", "error", "budget", "done".'
    )
    after: Duration = Field(0.0, description='Only when still true this long after ("30s"; 0 = at once).')
    bell: bool = Field(True, description="Attached terminal frontends ring the bell.")
    desktop: bool = Field(
        False, description="A terminal notification (OSC 777/9) through attached terminals, and the desktop's notifier."
    )
    command: CommandLine = Field(
        [],
        description="Run for each moment (a list, or one string split like a shell): the moment as JSON on stdin, "
        "DECK_AGENT, DECK_WHAT, DECK_TITLE set.",
    )


def settings(deck: Deck) -> NotifySettings:
    found = deck.config_service.section("notify")
    return found if isinstance(found, NotifySettings) else NotifySettings.model_validate({})


#: How long after telling of an agent's requests the next ones it makes are gathered into one moment, in seconds.
COALESCE = 2.0
#: How much earlier than `after` a timer may wake (the clock's resolution).
_EARLY = 0.05

#: The name this deck's `Notify` is registered under in its plugin manager.
PER_DECK = "notify.deck"


class Notify:
    """One deck's notifications: registered with that deck's plugin manager at start."""

    def __init__(self, deck: Deck) -> None:
        self.deck = deck
        self.senders = Senders(deck, self._commands)
        #: Per agent, the requests not told of yet (id → when asked), in the order asked.
        self._asked: dict[str, dict[str, float]] = {}

    @hookimpl
    @listens(PermissionRequested, QuestionRequested, AgentStateChanged, TurnChanged, "budget:reached")
    def deck_event(self, event: Event) -> None:
        moment = _moment(event)
        if moment is None or moment.what not in settings(self.deck).on:
            return
        if moment.what == "input" and moment.id is not None:
            asked = self._asked.get(moment.agent)
            if asked is None:  # nothing of this agent's is being told: tell of this one
                asked = self._asked[moment.agent] = {}
                self.deck.spawn(self._tell_requests(moment.agent), f"notify {moment.agent} input")
            asked[moment.id] = time.monotonic()
            return
        self.deck.spawn(self._tell(moment), f"notify {moment.agent} {moment.what}")

    @hookimpl
    def deck_shutdown(self) -> None:
        self.deck.pm.unregister(self)

    async def _tell(self, moment: Moment) -> None:
        config = settings(self.deck)
        if config.after > 0:
            await asyncio.sleep(config.after)
        now = await self._still(moment)
        if now is None:
            return
        config = settings(self.deck)  # the config in force now
        self._alert(now.agent, now.what, now.title)
        self.senders.send(now)

    async def _tell_requests(self, agent: str) -> None:
        """Tell of `agent`'s requests, those still waiting `after` they were asked: at once for the first,
        then, while more come, one moment per COALESCE seconds for all that came meanwhile."""
        try:
            while asked := self._asked.get(agent):
                after = settings(self.deck).after
                wait = after - (time.monotonic() - next(iter(asked.values())))
                if wait > 0:
                    await asyncio.sleep(wait)
                ripe = time.monotonic() - after + _EARLY
                self._asked[agent] = {i: t for i, t in asked.items() if t > ripe}  # told of once `after` old
                moment = await self._waiting_of(agent, {i: t for i, t in asked.items() if t <= ripe})
                if moment is not None:
                    config = settings(self.deck)
                    self._alert(agent, "input", moment.title)
                    self.senders.send(moment)
                await asyncio.sleep(COALESCE)
        finally:
            self._asked.pop(agent, None)

    async def _waiting_of(self, agent: str, asked: dict[str, float]) -> Moment | None:
        """One moment for the requests in `asked` still waiting: the oldest's title, and how many wait."""
        rows = [row for row in await self.deck.call("DeckService.Inbox", None) if row["id"] in asked]
        if not rows:
            return None
        first = rows[0]
        title = first["title"] if len(rows) == 1 else f"{len(rows)} requests wait, the first: {first['title']}"
        return Moment(agent, "input", title, first["since"], first["id"])

    async def _still(self, moment: Moment) -> Moment | None:
        """The moment as it is now, or None when it passed (the agent out of error, a new turn started)."""
        agent = self.deck.agents.get(moment.agent)
        if moment.what == "error" and (agent is None or agent.state is not AgentState.ERROR):
            return None
        if moment.what == "done":
            if agent is None or agent.state in (AgentState.BUSY, AgentState.ERROR):
                return None  # a new turn started (the user is there), or the error is the moment
            return Moment(moment.agent, moment.what, _how_the_turn_ended(self.deck, moment.agent), moment.since)
        return moment

    def _alert(self, agent: str, what: str, title: str) -> None:
        """`notify:sent` for programs, and the alert every frontend rings (a `deck:notice`)."""
        config = settings(self.deck)
        title = one_line(title, TITLE_MAX)
        self.deck.emit(NotifySent(agent, what, title, config.bell, config.desktop))
        if config.bell or config.desktop:
            level = "error" if what == "error" else "warning" if what in ("input", "budget") else "info"
            self.deck.notice("notify", title, agent=agent or None, level=level, bell=config.bell, desktop=config.desktop)

    def _commands(self, moment: Moment) -> list[list[str]]:
        config = settings(self.deck)
        commands = []
        if config.desktop:
            notifier = desktop_notifier(f"deck: {one_line(moment.agent, 60)}", one_line(moment.title, TITLE_MAX))
            if notifier is not None:
                commands.append(notifier)
        if config.command:
            commands.append(list(config.command))
        return commands


def _how_the_turn_ended(deck: Deck, agent: str) -> str:
    """The title of a "done" moment: how the agent's last answer ended."""
    last = next((m for m in reversed(deck.conversation_of(agent).messages) if m.role == "agent"), None)
    if last is None or (last.error is None and last.stop_reason in (None, "end_turn")):
        return "finished its turn"
    if last.error is not None:
        return f"its turn ended with an error: {str(last.error).splitlines()[0] if last.error else ''}"
    return "its turn was cancelled" if last.stop_reason == "cancelled" else f"its turn stopped: {last.stop_reason}"


def _moment(event: Event) -> Moment | None:
    since = now_iso()
    if isinstance(event, (PermissionRequested, QuestionRequested)):
        return Moment(event.agent, "input", "", since, event.id)
    if isinstance(event, AgentStateChanged):
        if event.state != "error":
            return None
        return Moment(event.agent, "error", (event.error or "stopped with an error").splitlines()[0], since)
    if isinstance(event, TurnChanged):
        return None if event.busy else Moment(event.agent, "done", "finished its turn", since)
    payload = event.payload()  # budget:reached
    agent, budget = payload.get("agent"), payload.get("budget")
    period = "per day" if payload.get("period") == "day" else "since the server started"
    return Moment(agent if isinstance(agent, str) else "", "budget", f"budget reached: {budget} {period}", since)


@hookimpl
def deck_config_sections() -> dict[str, Any]:
    return {"notify": NotifySettings}


@hookimpl
def deck_register_events() -> list[type[Event]]:
    return list(EVENTS)


@hookimpl
def deck_startup(deck: Deck) -> None:
    deck.pm.register(Notify(deck), name=PER_DECK)
