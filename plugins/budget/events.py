"""The budget plugin's event, registered through `deck_register_events`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from deck.events import Event


@dataclass(frozen=True, slots=True)
class BudgetReached(Event):
    """A budget is reached: `agent`'s own, or the total when `agent` is None; `budget` names it
    ("5 USD per day"), `spent` is what was spent in its period (`{amount, currency}`)."""

    name: ClassVar[str] = "budget:reached"
    _optional: ClassVar[frozenset[str]] = frozenset({"agent"})
    budget: str
    spent: dict[str, Any]
    period: str
    agent: str | None = None


EVENTS = (BudgetReached,)
