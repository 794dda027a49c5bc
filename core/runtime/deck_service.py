"""DeckService: the deck as a whole, for a client that (re)joins it: one consistent snapshot.

A client subscribes first, then asks for `DeckService.Snapshot()`, then applies only the
events whose `seq` is greater than the snapshot's: it ends up exactly where the deck is,
whatever happened in between, in this process or at the other end of a socket.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from deck.chat.spending import TOKENS, add_to, money
from deck.errors import ServiceError
from deck.events import now_iso
from deck.runtime.rpc import rpc

if TYPE_CHECKING:
    from deck.runtime.deck import Deck

#: How many times a snapshot is taken again when the deck changed while it was being read.
SNAPSHOT_TRIES = 8


class DeckService:
    """The deck as one thing: its snapshot (a server adds the clients attached to it)."""

    def __init__(self, deck: Deck) -> None:
        self.deck = deck
        self.since = now_iso()
        #: Set by a server (`deck.server`): the clients attached to it, as `Clients()` lists them.
        #: None: the deck's own frontend is its one client.
        self.attached: Callable[[], list[dict[str, Any]]] | None = None

    @rpc("DeckService.Clients")
    def clients(self) -> list[dict[str, Any]]:
        """The clients of the deck: `[{id, pid, uid, frontend, since}]`, in the order they came."""
        if self.attached is not None:
            return self.attached()
        frontend = getattr(self.deck.frontend, "name", "") or ""
        return [{"id": 1, "pid": os.getpid(), "uid": os.getuid(), "frontend": frontend, "since": self.since}]

    @rpc("DeckService.Actions")
    def actions(self) -> list[dict[str, Any]]:
        """What the plugins offer the user to do: `[{name, help, method, params, shows, source, empty?}]`
        (`deck_register_actions`), in the order the plugins gave them."""
        return list(self.deck.actions)

    @rpc("DeckService.Inbox")
    def inbox(self) -> list[dict[str, Any]]:
        """The permission requests and questions waiting in every agent, oldest first:
        `[{id, agent, kind, title, since, options}]` (`options`: a permission's, `{optionId, name,
        kind}` each; a question's are none); answered with `ChatService.AnswerPermission` /
        `AnswerQuestion`."""
        return self.deck.chat.pending.inbox()

    @rpc("DeckService.Usage")
    async def usage(self, by: str = "agent") -> dict[str, Any]:
        """Context used and cost of each agent's current conversation, and what the agents spent:

        `{agents: {name: {used, size, cost, spent, today, tokens}}, total, sinceStart, today, tokens,
        notCounted}`: `cost` is the conversation's (`{amount, currency}`, null when the agent reports
        none: its cost is unknown, never 0, and it is in `notCounted`); `spent` since the deck
        started and `today` are currency → amount; `total` sums the conversations' costs. `tokens`
        counts what the prompt responses' `usage` reported: `{conversation, sinceStart, today}` per
        agent, `{sinceStart, today}` in all. `by="day"` adds `days: [{day, total, agents: {name:
        {currency: amount}}, tokens}]`, oldest first, from the history when it is on (every day it
        kept), else from this deck's run."""
        if by not in ("agent", "day"):
            raise ServiceError(f"unknown grouping {by!r}: use agent or day")
        spending = self.deck.spending
        agents: dict[str, Any] = {}
        total: dict[str, float] = {}
        unknown = []
        for name in self.deck.agents:
            usage = self.deck.conversation_of(name).usage
            cost = money(usage.get("cost"))
            tokens = {
                "conversation": usage.get("tokens", 0), "sinceStart": spending.tokens(name, since_start=True),
                "today": spending.tokens(name),
            }  # fmt: skip
            agents[name] = {
                "used": usage.get("used", 0), "size": usage.get("size", 0), "cost": cost,
                "spent": spending.since_start(name), "today": spending.on(agent=name), "tokens": tokens,
            }  # fmt: skip
            if cost is None and not agents[name]["spent"]:
                unknown.append(name)
            elif cost is not None:
                add_to(total, cost["currency"], cost["amount"])
        found: dict[str, Any] = {
            "agents": agents, "total": total, "sinceStart": spending.since_start(), "today": spending.on(),
            "tokens": {"sinceStart": spending.tokens(since_start=True), "today": spending.tokens()},
            "notCounted": unknown,
        }  # fmt: skip
        if by == "day":
            found["days"] = await self._days()
        return found

    async def _days(self) -> list[dict[str, Any]]:
        history = self.deck.chat.history
        rows: list[dict[str, Any]] | None = None
        if history is not None:
            try:
                rows = await history.spending()
            except ServiceError:
                rows = None  # history is off after all: this run's days
        if rows is None:
            spending = self.deck.spending
            rows = [
                {"day": day, "agent": agent, "currency": currency, "amount": amount}
                for day, by_agent in sorted(spending.days.items())
                for agent, totals in by_agent.items()
                for currency, amount in totals.items()
            ]
            rows += [
                {"day": day, "agent": agent, "currency": TOKENS, "amount": tokens}
                for day, by_agent in sorted(spending.token_days.items())
                for agent, tokens in by_agent.items()
            ]
        days: dict[str, dict[str, Any]] = {}
        for row in rows:
            day = days.setdefault(row["day"], {"day": row["day"], "total": {}, "agents": {}, "tokens": 0})
            currency, amount = row["currency"], row["amount"]
            if currency == TOKENS:
                day["tokens"] += int(amount)
                continue
            add_to(day["total"], currency, amount)
            add_to(day["agents"].setdefault(row["agent"], {}), currency, amount)
        return [days[day] for day in sorted(days)]

    @rpc("DeckService.Shutdown")
    def shutdown(self) -> None:
        """End the deck as a signal would: every agent stops, then the process exits 0."""
        self.deck.request_exit(0)

    @rpc("DeckService.Snapshot")
    async def snapshot(self) -> dict[str, Any]:
        """`{seq, agents, conversations: {agent: Conversation}, pending, config, actions}`, consistent at `seq`.

        Read with the services' own methods, so each piece is exactly what a call of it returns:
        `agents` is `AgentService.List()`, `conversations` holds `ChatService.Conversation(agent)`
        of each of those agents (an empty one for an agent that has none yet), `pending` is
        `ChatService.Pending()`, `config` is `ConfigService.Current()`. Should one of them wait
        while events go out, the snapshot is read again, so it never mixes two moments.
        """
        deck = self.deck
        for _ in range(SNAPSHOT_TRIES):
            seq = deck.seq
            agents = await deck.call("AgentService.List", None)
            conversations = {name: await deck.call("ChatService.Conversation", {"agent": name}) for name in deck.agents}
            pending = await deck.call("ChatService.Pending", None)
            config = await deck.call("ConfigService.Current", None)
            if deck.seq == seq:
                return {
                    "seq": seq, "agents": agents, "conversations": conversations, "pending": pending, "config": config,
                    "actions": list(deck.actions),
                }  # fmt: skip
        raise ServiceError(f"the deck kept changing while its snapshot was read ({SNAPSHOT_TRIES} tries)")
