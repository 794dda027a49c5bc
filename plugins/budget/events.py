"""The budget plugin's event, registered through `deck_register_events`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from deck.events import Event


@dataclass(frozen=True, slots=True)
class BudgetReached(Event):
    """A budget is reached: `agent`'s own, or the total when `agent` is None; `budget` is its amount
    as the config gives it ("5 USD"), `period` "day" or "server", `spent` is what was spent in its period (`{amount, currency}`)."""

    name: ClassVar[str] = "budget:reached"
    _optional: ClassVar[frozenset[str]] = frozenset({"agent"})
    budget: str
    spent: dict[str, Any]
    period: str
    agent: str | None = None


EVENTS = (BudgetReached,)
