"""Usage and spending: each cost an agent reports counted once, per agent, since the deck started
and per day; kept in the history so that a day's spending outlives a restart, and a resumed
session's cost is not counted twice."""

from __future__ import annotations

from datetime import date

import pytest
from deck.chat.conversation import Conversation
from deck.chat.spending import TOKENS, Bill, Spending, tokens_of
from deck.errors import ServiceError

from tests.conftest import agent_block
from tests.deck_process import run_deck  # noqa: F401  (fixture)

pytestmark = pytest.mark.anyio


def usd(amount: float) -> dict:
    return {"amount": amount, "currency": "USD"}


def test_a_bill_counts_what_each_report_adds_to_the_sessions_cost() -> None:
    bill = Bill()
    assert bill.spent(usd(0.5)) == usd(0.5)  # the session's first report: all of it is new
    assert bill.spent(usd(0.75)) == usd(0.25)
    assert bill.spent(usd(0.75)) is None  # nothing more
    assert bill.spent(usd(0.25)) == usd(0.25)  # lower: the agent counts again from nothing
    assert bill.spent({"amount": 2.0, "currency": "EUR"}) == {"amount": 2.0, "currency": "EUR"}


def test_spending_sums_per_agent_since_start_and_per_day() -> None:
    day = ["2026-12-01"]
    spending = Spending(clock=lambda: day[0])
    spending.seed("2026-12-01", "a", "USD", 3.0)  # from before the deck started: that day only
    spending.add("a", usd(1.0))
    spending.add("b", usd(0.5))
    day[0] = "2026-12-02"
    spending.add("a", {"amount": 2.0, "currency": "EUR"})
    assert spending.since_start() == {"USD": 1.5, "EUR": 2.0}
    assert spending.since_start("a") == {"USD": 1.0, "EUR": 2.0}
    assert spending.on("2026-12-01") == {"USD": 4.5} and spending.on("2026-12-01", "a") == {"USD": 4.0}
    assert spending.on() == {"EUR": 2.0} and spending.on(agent="b") == {}


def test_sums_of_costs_read_as_the_user_adds_them() -> None:
    spending = Spending(clock=lambda: "2026-12-01")
    for amount in (0.1, 0.2, 0.6):
        spending.add("a", usd(amount))
    assert spending.since_start() == {"USD": 0.9}  # not 0.8999999999999999
    bill = Bill(usd(0.4))
    assert bill.spent(usd(0.6)) == usd(0.2)  # not 0.19999999999999996


def test_tokens_are_counted_apart_from_every_currency() -> None:
    day = ["2026-12-01"]
    spending = Spending(clock=lambda: day[0])
    spending.seed("2026-12-01", "a", TOKENS, 100)
    spending.add("a", {"amount": 30, "currency": TOKENS})
    day[0] = "2026-12-02"
    spending.add("b", {"amount": 5, "currency": TOKENS})
    assert spending.since_start() == {} and spending.on("2026-12-01") == {}  # no cost
    assert spending.tokens(since_start=True) == 35 and spending.tokens("a", since_start=True) == 30
    assert spending.tokens(day="2026-12-01") == 130 and spending.tokens() == 5 and spending.tokens("a") == 0
    assert tokens_of({"totalTokens": 30, "inputTokens": 10}) == 30
    assert tokens_of({"inputTokens": 10, "outputTokens": 20}) == 30  # no total: input plus output
    for bad in ({"totalTokens": -5}, {"totalTokens": 1.5}, {"totalTokens": True}, {"totalTokens": "30"}, None, [], {}):
        assert tokens_of(bad) == 0


def test_a_restored_conversation_counts_only_what_its_resumed_session_adds() -> None:
    spent: list[dict] = []
    conv = Conversation("a", lambda event: None, spend=spent.append)
    conv.restore([], "s-1", None, usage={"used": 5, "size": 10, "cost": usd(2.0)})
    assert conv.usage == {"used": 5, "size": 10, "cost": usd(2.0)}
    conv.session_started("s-1", {})  # the same session, resumed: it reports its whole cost again
    conv.apply_update({"sessionUpdate": "usage_update", "used": 6, "size": 10, "cost": usd(2.5)})
    assert spent == [usd(0.5)]
    conv.session_started("s-2", {})  # a new session: its costs count from nothing
    conv.apply_update({"sessionUpdate": "usage_update", "used": 1, "size": 10, "cost": usd(0.25)})
    assert spent == [usd(0.5), usd(0.25)]


def test_a_cost_that_is_not_one_is_unknown_and_spends_nothing() -> None:
    spent: list[dict] = []
    conv = Conversation("a", lambda event: None, spend=spent.append)
    too_much = {"amount": 1.7e308, "currency": "USD"}  # two of them would sum to infinity
    for cost in ({"amount": -1, "currency": "USD"}, {"amount": float("nan"), "currency": "USD"}, too_much, "free"):
        conv.apply_update({"sessionUpdate": "usage_update", "used": 1, "size": 2, "cost": cost})
        assert "cost" not in conv.usage
    assert spent == []


async def test_each_report_emits_what_it_spent_and_the_deck_sums_it(make_deck) -> None:
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    for agent, text in (("a", "spend 0.5"), ("a", "spend 0.25"), ("b", "usage")):
        deck.chat.send(agent, text)
        await rec.wait(lambda r, agent=agent: len([p for p in r.named("turn:changed", agent) if not p["busy"]])
                       >= (2 if text == "spend 0.25" else 1))  # fmt: skip
    spent = [p.get("spent") for p in rec.named("usage:changed", "a")]
    assert spent == [usd(0.5), usd(0.25)]
    # b: its usage_update, then its prompt response's 30 tokens
    assert [(p.get("spent"), p.get("tokens")) for p in rec.named("usage:changed", "b")] == [(None, None), (None, 30)]
    assert deck.conversation_of("b").usage == {"used": 1000, "size": 200000, "tokens": 30}
    found = await deck.call("DeckService.Usage", {"by": "day"})
    assert found["agents"]["a"]["spent"] == found["agents"]["a"]["today"] == {"USD": 0.75}
    assert found["agents"]["a"]["cost"] == usd(0.75) and found["agents"]["b"]["cost"] is None
    assert found["sinceStart"] == {"USD": 0.75} and found["notCounted"] == ["b"]  # tokens are no cost
    assert found["agents"]["b"]["tokens"] == {"conversation": 30, "sinceStart": 30, "today": 30}
    assert found["agents"]["a"]["tokens"] == {"conversation": 0, "sinceStart": 0, "today": 0}
    assert found["tokens"] == {"sinceStart": 30, "today": 30}
    today = date.today().isoformat()
    assert found["days"] == [{"day": today, "total": {"USD": 0.75}, "agents": {"a": {"USD": 0.75}}, "tokens": 30}]


def test_a_days_spending_outlives_a_restart_and_is_listed_per_day(run_deck, tmp_path) -> None:
    config = agent_block("a", "--sessions", str(tmp_path / "sessions.json"))
    first = run_deck(config)
    first.call("ChatService.Send", {"agent": "a", "text": "spend 1"})
    first.event("turn:changed", agent="a", busy=False, timeout=20)
    first.call("ChatService.Send", {"agent": "a", "text": "spend 1"})
    first.call("ChatService.Send", {"agent": "a", "text": "usage"})  # 30 tokens
    first.wait_line(lambda e: e.get("event") == "turn:changed" and not e["busy"], count=3, timeout=20)
    assert first.call("DeckService.Usage")["sinceStart"] == {"USD": 2.0}
    first.close_stdin()
    assert first.wait(20) == 0

    again = run_deck(config)
    at_start = again.call("DeckService.Usage")
    assert at_start["sinceStart"] == {} and at_start["today"] == {"USD": 2.0}  # from the history
    assert at_start["agents"]["a"]["cost"] == usd(2.0)  # the conversation's, restored with it
    assert at_start["agents"]["a"]["tokens"] == {"conversation": 30, "sinceStart": 0, "today": 30}
    again.call("ChatService.Send", {"agent": "a", "text": "spend 0.5"})  # the agent's own count began again
    again.event("usage:changed", agent="a", timeout=20)
    found = again.call("DeckService.Usage", {"by": "day"})
    assert found["sinceStart"] == {"USD": 0.5} and found["today"] == {"USD": 2.5}
    assert found["days"] == [{"day": date.today().isoformat(), "total": {"USD": 2.5}, "agents": {"a": {"USD": 2.5}}, "tokens": 30}]


async def test_usage_by_anything_else_is_refused_with_the_choices(make_deck) -> None:
    deck, _rec = make_deck(agent_block("a"))
    with pytest.raises(ServiceError, match="unknown grouping 'week': use agent or day"):
        await deck.call("DeckService.Usage", {"by": "week"})
