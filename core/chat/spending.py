"""What the agents spent: each cost an agent reports, counted once, per agent and currency,
since the deck started and per day.

An agent reports its session's cost so far (`usage_update`'s `cost`), so what a report adds is
the difference with the one before it in the same session (`Bill`); in a new session, in
another currency, or lower than before (the agent's count began again: a resumed session in a
new agent process), all of it is new. Days are the local
calendar's; the days before this deck started are the history's (`Spending.seed`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import date
from typing import Any

Money = dict[str, Any]  # {"amount": float ≥ 0, "currency": "USD"}
Totals = dict[str, float]  # currency → amount

#: The largest amount taken for a cost: beyond it a report is not one (and sums stay finite).
COST_MAX = 1e12


def money(cost: Any) -> Money | None:
    """An agent's `{amount, currency}` when it is one (an amount from 0 to COST_MAX, a currency of 1
    to 8 letters), else None: what an agent reports is never trusted to be a cost."""
    if not isinstance(cost, dict):
        return None
    amount, currency = cost.get("amount"), cost.get("currency")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount):
        return None
    if not 0 <= amount <= COST_MAX:
        return None
    if not isinstance(currency, str) or not (1 <= len(currency) <= 8 and currency.isalpha()):
        return None
    return {"amount": float(amount), "currency": currency.upper()}


def today() -> str:
    return date.today().isoformat()


class Bill:
    """One conversation's running cost, as its session last reported it."""

    def __init__(self, last: Money | None = None) -> None:
        self.last = last

    def spent(self, cost: Money) -> Money | None:
        """What `cost` (the session's cost so far) adds to the last report; None when nothing."""
        last, self.last = self.last, cost
        if last is not None and last["currency"] == cost["currency"] and cost["amount"] >= last["amount"]:
            amount = cost["amount"] - last["amount"]
        else:  # the session's first report, another currency, or lower: the agent counts again from 0
            amount = cost["amount"]
        return {"amount": amount, "currency": cost["currency"]} if amount > 0 else None


class Spending:
    """The deck's ledger: what each agent spent since the deck started, and on each day."""

    def __init__(self, clock: Callable[[], str] = today) -> None:
        self.clock = clock
        self.server: dict[str, Totals] = {}  # agent → currency → amount
        self.days: dict[str, dict[str, Totals]] = {}  # day → agent → currency → amount

    def add(self, agent: str, spent: Money) -> None:
        _add(self.server.setdefault(agent, {}), spent["currency"], spent["amount"])
        _add(self.days.setdefault(self.clock(), {}).setdefault(agent, {}), spent["currency"], spent["amount"])

    def seed(self, day: str, agent: str, currency: str, amount: float) -> None:
        """Spent before this deck started (read from the history): counts for its day only."""
        _add(self.days.setdefault(day, {}).setdefault(agent, {}), currency, amount)

    def since_start(self, agent: str | None = None) -> Totals:
        return _sum(self.server, agent)

    def on(self, day: str | None = None, agent: str | None = None) -> Totals:
        """What was spent on `day` (today by default), by `agent` or by all."""
        return _sum(self.days.get(day or self.clock(), {}), agent)


def _add(totals: Totals, currency: str, amount: float) -> None:
    totals[currency] = totals.get(currency, 0.0) + amount


def _sum(by_agent: dict[str, Totals], agent: str | None) -> Totals:
    found: Totals = {}
    for name, totals in by_agent.items():
        if agent is None or name == agent:
            for currency, amount in totals.items():
                _add(found, currency, amount)
    return found
