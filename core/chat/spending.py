"""What the agents spent: each cost an agent reports, counted once, per agent and currency,
since the deck started and per day; and the tokens their prompt responses report (`TOKENS`).

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
from typing import Any, ClassVar

Money = dict[str, Any]  # {"amount": float ≥ 0, "currency": "USD"}
Totals = dict[str, float]  # currency → amount

#: The largest amount taken for a cost: beyond it a report is not one (and sums stay finite).
COST_MAX = 1e12
#: The decimals sums and differences of costs are rounded to: 0.1 + 0.2 is 0.3, as the user reads it.
DIGITS = 10
#: The unit tokens are counted in, apart from every currency (a currency is upper case): what
#: `Spending.add` and `seed` are given in it goes to the token count, never to a cost.
TOKENS = "tokens"
#: The most tokens one prompt response is taken to report.
TOKENS_MAX = 10**12


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


def tokens_of(usage: Any) -> int:
    """The tokens a prompt response's `usage` reports (`totalTokens`, else input plus output); 0
    when it reports none that is a count (a whole number from 0 to TOKENS_MAX)."""
    if not isinstance(usage, dict):
        return 0

    def count(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= TOKENS_MAX:
            return 0
        return value

    total = usage.get("totalTokens")
    return count(total) if total is not None else min(count(usage.get("inputTokens")) + count(usage.get("outputTokens")), TOKENS_MAX)


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
            amount = round(cost["amount"] - last["amount"], DIGITS)
        else:  # the session's first report, another currency, or lower: the agent counts again from 0
            amount = cost["amount"]
        return {"amount": amount, "currency": cost["currency"]} if amount > 0 else None


class Spending:
    """The deck's ledger: what each agent spent since the deck started, and on each day."""

    #: The unit tokens are counted in (for a history provider that keeps them with the costs).
    TOKENS: ClassVar[str] = TOKENS

    def __init__(self, clock: Callable[[], str] = today) -> None:
        self.clock = clock
        self.server: dict[str, Totals] = {}  # agent → currency → amount
        self.days: dict[str, dict[str, Totals]] = {}  # day → agent → currency → amount
        self.token_count: dict[str, int] = {}  # agent → tokens since the deck started
        self.token_days: dict[str, dict[str, int]] = {}  # day → agent → tokens

    def add(self, agent: str, spent: Money) -> None:
        """`spent` (`{amount, currency}`; in TOKENS: tokens) counts since the start and for today."""
        if spent["currency"] == TOKENS:
            tokens = int(spent["amount"])
            self.token_count[agent] = self.token_count.get(agent, 0) + tokens
            day = self.token_days.setdefault(self.clock(), {})
            day[agent] = day.get(agent, 0) + tokens
            return
        add_to(self.server.setdefault(agent, {}), spent["currency"], spent["amount"])
        add_to(self.days.setdefault(self.clock(), {}).setdefault(agent, {}), spent["currency"], spent["amount"])

    def seed(self, day: str, agent: str, currency: str, amount: float) -> None:
        """Spent before this deck started (read from the history): counts for its day only."""
        if currency == TOKENS:
            days = self.token_days.setdefault(day, {})
            days[agent] = days.get(agent, 0) + int(amount)
            return
        add_to(self.days.setdefault(day, {}).setdefault(agent, {}), currency, amount)

    def tokens(self, agent: str | None = None, day: str | None = None, since_start: bool = False) -> int:
        """The tokens `agent` (or all) used since the deck started, or on `day` (today by default)."""
        counts = self.token_count if since_start else self.token_days.get(day or self.clock(), {})
        return sum(n for name, n in counts.items() if agent is None or name == agent)

    def since_start(self, agent: str | None = None) -> Totals:
        return _sum(self.server, agent)

    def on(self, day: str | None = None, agent: str | None = None) -> Totals:
        """What was spent on `day` (today by default), by `agent` or by all."""
        return _sum(self.days.get(day or self.clock(), {}), agent)


def add_to(totals: Totals, currency: str, amount: float) -> None:
    """`amount` of `currency` added to `totals`, rounded to DIGITS decimals."""
    totals[currency] = round(totals.get(currency, 0.0) + amount, DIGITS)


def _sum(by_agent: dict[str, Totals], agent: str | None) -> Totals:
    found: Totals = {}
    for name, totals in by_agent.items():
        if agent is None or name == agent:
            for currency, amount in totals.items():
                add_to(found, currency, amount)
    return found
