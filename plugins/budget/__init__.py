"""budget: stop agents that spend too much.

`[budget] total = "20 USD"` caps what the agents spend together, `period = "day"` (the local
calendar's, from the history across restarts) or `"server"` (since the deck started); `budget =
"5 USD"` in an agent's table caps that agent alone, over the same period. A budget counts the
costs in its own currency, as the agents report them (`deck.spending`).

When a cost report takes an agent to one of its budgets, its running turn is cancelled with a
note in its conversation, `budget:reached {agent?, budget, spent, period}` goes out (no agent for
the total: every agent that reports a cost is stopped), and each new message to it is refused
with an error naming the budget, until the period turns or the config raises the budget (read
at each message, and every agent checked again when the file changes: a change applies at once). An agent that reports no cost is never stopped.
Meanwhile the agent carries a sticky notice saying so (`AgentService.List()`'s `notices`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from deck import hookimpl, listens
from deck.errors import ServiceError
from deck.events import ConfigChanged, Event, TurnChanged, UsageChanged
from deck.states import AgentState
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema

from .events import EVENTS, BudgetReached

if TYPE_CHECKING:
    from deck import Agent, Deck

_AMOUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]{1,8})\s*$")
_HINT = 'a budget is an amount and a currency, like "20 USD"'
_NUMBER = re.compile(r"^\s*\d+(?:\.\d+)?\s*$")
#: The largest budget (and cost) there is.
COST_MAX = 1e12
#: Sums of reported costs are floats: a budget spent to within this is spent.
EPSILON = 1e-9


def parse_amount(value: Any) -> tuple[float, str]:
    if isinstance(value, tuple):
        return value
    if isinstance(value, str) and (m := _AMOUNT.match(value)):
        amount = float(m.group(1))
        if not 0 < amount <= COST_MAX:
            raise ValueError(f"bad budget {value!r}: more than 0 and at most {COST_MAX:g}")
        return amount, m.group(2).upper()
    if isinstance(value, (int, float)) and not isinstance(value, bool) or (isinstance(value, str) and _NUMBER.match(value)):
        raise ValueError(f'bad budget {value!r}: {_HINT} (did you mean "{value} USD"?)')
    if isinstance(value, str) and value.strip().startswith("-"):
        raise ValueError(f"bad budget {value!r}: a budget is more than 0")
    raise ValueError(f"bad budget {value!r}: {_HINT}")


def format_amount(value: tuple[float, str]) -> str:
    """(20.0, "USD") → "20 USD", (0.000001, "USD") → "0.000001 USD"."""
    return f"{f'{value[0]:.10f}'.rstrip('0').rstrip('.')} {value[1]}"


#: (amount, currency) in Python; "20 USD" in the file and in `deck config show`.
Amount = Annotated[
    tuple[float, str],
    BeforeValidator(parse_amount),
    PlainSerializer(format_amount, return_type=str),
    WithJsonSchema({"type": "string", "pattern": _AMOUNT.pattern}),
]


class BudgetSettings(BaseModel):
    """The `[budget]` section of the config file."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    total: Amount | None = Field(None, description='What all the agents may spend together per period ("20 USD").')
    period: Literal["day", "server"] = Field(
        "day", description='"day" (the calendar day, across restarts) or "server" (since the deck started).'
    )


class AgentBudget(BaseModel):
    """The key budget adds to each `[agents.NAME]` table."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    budget: Amount | None = Field(None, description='What this agent may spend per period of [budget] ("5 USD").')


@dataclass(frozen=True)
class Reached:
    """A budget an agent is at: `agent` None for the total."""

    agent: str | None
    limit: tuple[float, str]
    spent: float
    period: str

    @property
    def label(self) -> str:
        return f"{format_amount(self.limit)} " + ("per day" if self.period == "day" else "since the server started")

    def describe(self) -> str:
        whose = f"the budget of {self.agent}" if self.agent is not None else "the total budget"
        return f"{whose} ({self.label}) is reached: {self.spent:.2f} {self.limit[1]} spent"


def settings(deck: Deck) -> BudgetSettings:
    found = deck.config_service.section("budget")
    return found if isinstance(found, BudgetSettings) else BudgetSettings.model_validate({})


def own_budget(deck: Deck, agent: str) -> tuple[float, str] | None:
    per_agent = deck.config_service.section("agents") or {}
    found = per_agent.get(agent)
    return found.budget if isinstance(found, AgentBudget) else None


def counted(deck: Deck, agent: str) -> bool:
    """Whether the agent reports what it costs (an agent that does not is never stopped by a budget)."""
    spending = deck.spending
    return bool(spending.since_start(agent) or spending.on(agent=agent) or deck.conversation_of(agent).usage.get("cost"))


def reached(deck: Deck, agent: str) -> Reached | None:
    """The budget `agent` is at, its own first; None while it may go on."""
    config = settings(deck)
    period = "day" if config.period == "day" else "server"

    def spent(name: str | None, currency: str) -> float:
        totals = deck.spending.on(agent=name) if period == "day" else deck.spending.since_start(name)
        return totals.get(currency, 0.0)

    if not counted(deck, agent):
        return None  # its cost is unknown: no cost budget stops it
    own = own_budget(deck, agent)
    if own is not None and (amount := spent(agent, own[1])) >= own[0] - EPSILON:
        return Reached(agent, own, amount, period)
    if config.total is not None and (amount := spent(None, config.total[1])) >= config.total[0] - EPSILON:
        return Reached(None, config.total, amount, period)
    return None


#: The name this deck's `Budgets` is registered under in its plugin manager.
PER_DECK = "budget.deck"


class Budgets:
    """One deck's budgets: the reports that reach one, and the messages refused meanwhile."""

    def __init__(self, deck: Deck) -> None:
        self.deck = deck
        self._told: set[tuple[Any, ...]] = set()  # the budgets already announced, in their period
        self._stopping: set[str] = set()  # agents whose turn is being stopped: one note each

    @hookimpl
    @listens(UsageChanged, TurnChanged, ConfigChanged)
    def deck_event(self, event: Event) -> None:
        if isinstance(event, UsageChanged) and event.spent is not None:
            self.check(event.agent)
        elif isinstance(event, ConfigChanged) and event.valid:
            for name in list(self.deck.agents):  # a budget lowered under what was spent applies at once
                self.check(name)
        elif isinstance(event, TurnChanged) and not event.busy:
            self._stopping.discard(event.agent)

    @hookimpl
    def deck_before_prompt(self, agent: Agent) -> None:
        found = reached(self.deck, agent.name)
        self._show(agent.name, found)
        if found is not None:
            until = "wait for the day to turn" if found.period == "day" else "start the server again"
            raise ServiceError(f"{found.describe()}: raise it in the config, or {until}")

    @hookimpl
    def deck_shutdown(self) -> None:
        self.deck.pm.unregister(self)

    def check(self, agent: str) -> None:
        found = reached(self.deck, agent)
        self._show(agent, found)
        if found is None:
            return
        key = (found.agent, found.limit, found.period, self.deck.spending.clock() if found.period == "day" else "")
        if key not in self._told:
            self._told.add(key)
            spent = {"amount": round(found.spent, 6), "currency": found.limit[1]}
            self.deck.emit(BudgetReached(format_amount(found.limit), spent, found.period, found.agent))
        stopped = [agent] if found.agent is not None else [name for name in self.deck.agents if counted(self.deck, name)]
        for name in stopped:
            self._show(name, found)
            self._stop_turn(name, found)

    def _show(self, agent: str, found: Reached | None) -> None:
        """The budget an agent is at, on the agent for every frontend (a sticky notice); none once it may go on."""
        text = f"budget reached: {found.label}, {found.spent:.2f} {found.limit[1]} spent; messages are refused" if found else ""
        self.deck.notice("budget", text, agent=agent, level="warning", sticky=True)

    def _stop_turn(self, name: str, found: Reached) -> None:
        agent = self.deck.agents.get(name)
        if agent is None or agent.state is not AgentState.BUSY or name in self._stopping:
            return
        self._stopping.add(name)
        note = f"Budget reached: {found.describe()}. The turn is stopped, and new messages are refused."
        self.deck.conversation_of(name).add_system("budget-reached", text=note)
        self.deck.spawn(self.deck.call("ChatService.Cancel", {"agent": name}), f"budget: cancel {name}")


@hookimpl
def deck_config_sections() -> dict[str, Any]:
    return {"budget": BudgetSettings, "agents": AgentBudget}


@hookimpl
def deck_register_events() -> list[type[Event]]:
    return list(EVENTS)


@hookimpl
def deck_startup(deck: Deck) -> None:
    deck.pm.register(Budgets(deck), name=PER_DECK)
