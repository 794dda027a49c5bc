"""Budgets: an agent (or all of them) that reaches what it may spend has its turn cancelled with a
note, `budget:reached` goes out, and its next prompt is refused naming the budget — until the
config raises it or the period turns. An agent that reports no cost is never stopped."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import agent_block
from tests.deck_process import DECK, run_deck  # noqa: F401  (run_deck: fixture)
from tests.frontends.test_line import line_deck  # noqa: F401  (fixture)

pytestmark = [pytest.mark.timeout(90)]


def ended(deck, agent: str, count: int = 1) -> None:
    deck.wait_line(lambda e: e.get("event") == "turn:changed" and e["agent"] == agent and not e["busy"],
                   count=count, timeout=20)  # fmt: skip


def refused(deck, agent: str, text: str = "hello") -> str:
    reply = deck.response(deck.request("ChatService.Send", {"agent": agent, "text": text}))
    assert "error" in reply, reply
    return reply["error"]["message"]


def test_an_agent_at_its_budget_is_cancelled_with_a_note_and_refused_while_the_other_goes_on(run_deck) -> None:
    deck = run_deck('[budget]\nperiod = "server"\n' + agent_block("a", budget="1 USD") + agent_block("b"))
    deck.call("ChatService.Send", {"agent": "a", "text": "spend-slowly 0.3"})  # 0.3, 0.6, 0.9, 1.2…
    reached = deck.event("budget:reached", timeout=20)
    assert reached["agent"] == "a" and reached["budget"] == "1 USD" and reached["period"] == "server"
    assert reached["period"] == "server" and reached["spent"]["currency"] == "USD" and reached["spent"]["amount"] >= 1
    ended(deck, "a")
    conversation = deck.call("ChatService.Conversation", {"agent": "a"})
    notes = [m for m in conversation["messages"] if m["role"] == "system" and m.get("code") == "budget-reached"]
    assert len(notes) == 1  # however many reports came before the cancel took
    assert notes[0]["parts"][0]["text"].startswith("Budget reached: the budget of a (1 USD since the server started) is reached")
    assert notes[0]["parts"][0]["text"].endswith("The turn is stopped, and new messages are refused.")
    answer = [m for m in conversation["messages"] if m["role"] == "agent"][-1]
    assert answer["stopReason"] == "cancelled"
    before = len(deck.call("ChatService.Conversation", {"agent": "a"})["messages"])
    message = refused(deck, "a")
    assert re.search(r"the budget of a \(1 USD since the server started\) is reached: 1\.[2-9]0 USD spent", message)
    assert "raise it in the config" in message
    assert len(deck.call("ChatService.Conversation", {"agent": "a"})["messages"]) == before  # the refused one not added
    deck.call("ChatService.Send", {"agent": "b", "text": "spend 5"})  # b has no budget of its own, and no total
    ended(deck, "b")
    assert len(deck.events("budget:reached")) == 1  # told once


def test_the_total_stops_every_agent_that_reports_a_cost_but_not_one_whose_cost_is_unknown(run_deck) -> None:
    deck = run_deck('[budget]\ntotal = "1 USD"\n' + agent_block("a") + agent_block("b") + agent_block("c"))
    deck.call("ChatService.Send", {"agent": "a", "text": "spend 0.5"})
    ended(deck, "a")
    deck.call("ChatService.Send", {"agent": "b", "text": "spend 0.6"})
    reached = deck.event("budget:reached", timeout=20)
    assert "agent" not in reached and reached["budget"] == "1 USD" and reached["period"] == "day" and reached["spent"] == {"amount": 1.1, "currency": "USD"}
    ended(deck, "b")
    for agent in ("a", "b"):
        assert "the total budget (1 USD per day) is reached: 1.10 USD spent" in refused(deck, agent)
        assert "wait for the day to turn" in refused(deck, agent)
    deck.call("ChatService.Send", {"agent": "c", "text": "usage"})  # no cost reported: not counted, not stopped
    ended(deck, "c")
    usage = deck.call("DeckService.Usage")
    assert usage["notCounted"] == ["c"] and usage["today"] == {"USD": 1.1}


def test_a_budget_raised_in_the_config_applies_at_once(run_deck, tmp_path: Path) -> None:
    deck = run_deck(agent_block("a", budget="1 USD"))
    deck.call("ChatService.Send", {"agent": "a", "text": "spend 1"})
    deck.event("budget:reached", agent="a", timeout=20)
    ended(deck, "a")
    assert "1 USD per day" in refused(deck, "a")
    config = tmp_path / "deck.toml"
    config.write_text(config.read_text().replace('budget = "1 USD"', 'budget = "3 USD"'))
    deck.wait_line(lambda e: e.get("event") == "config:changed" and e["valid"], timeout=20)
    deck.call("ChatService.Send", {"agent": "a", "text": "spend 1"})  # 2 of 3: on it goes
    ended(deck, "a", 2)
    assert len(deck.events("budget:reached")) == 1


def test_a_budget_lowered_under_what_was_spent_stops_the_running_turn_at_once(run_deck, tmp_path: Path) -> None:
    deck = run_deck(agent_block("a", budget="5 USD") + agent_block("b", budget="5 USD"))
    for agent in ("a", "b"):
        deck.call("ChatService.Send", {"agent": agent, "text": "spend 0.6"})
        ended(deck, agent)
    deck.call("ChatService.Send", {"agent": "a", "text": "slow"})
    deck.wait_line(lambda e: e.get("event") == "message:delta" and e["agent"] == "a" and "tick" in json.dumps(e), timeout=20)
    config = tmp_path / "deck.toml"
    config.write_text(config.read_text().replace('budget = "5 USD"', 'budget = "0.5 USD"'))
    reached = [deck.event("budget:reached", agent=agent, timeout=20) for agent in ("a", "b")]  # b idle: told all the same
    assert [r["budget"] for r in reached] == ["0.5 USD", "0.5 USD"] and reached[0]["spent"] == {"amount": 0.6, "currency": "USD"}
    ended(deck, "a", 2)
    messages = deck.call("ChatService.Conversation", {"agent": "a"})["messages"]
    assert [m.get("code") for m in messages if m["role"] == "system"] == ["budget-reached"]
    assert [m for m in messages if m["role"] == "agent"][-1]["stopReason"] == "cancelled"
    assert "the budget of b (0.5 USD per day) is reached" in refused(deck, "b")


def test_a_days_budget_holds_across_a_restart(run_deck) -> None:
    config = agent_block("a", budget="1 USD")
    first = run_deck(config)
    first.call("ChatService.Send", {"agent": "a", "text": "spend 1.5"})
    first.event("budget:reached", agent="a", timeout=20)
    first.close_stdin()
    assert first.wait(20) == 0
    again = run_deck(config)  # the history says what today cost
    assert "1.50 USD spent" in refused(again, "a")


def test_budget_reached_is_a_notification(run_deck, tmp_path: Path) -> None:
    out = tmp_path / "told.txt"
    command = ["sh", "-c", f'echo "$DECK_WHAT $DECK_TITLE" >> {out}']
    deck = run_deck(f"[notify]\ncommand = {json.dumps(command)}\n" + agent_block("a", budget="0.5 USD"))
    deck.call("ChatService.Send", {"agent": "a", "text": "spend 1"})
    sent = deck.event("notify:sent", what="budget", timeout=20)
    assert sent["agent"] == "a" and sent["title"] == "budget reached: 0.5 USD per day"
    deck.wait_for(lambda _: out.exists() and "budget budget reached: 0.5 USD per day" in out.read_text())


@pytest.mark.parametrize("value, said", [
    ('"lots"', 'a budget is an amount and a currency, like "20 USD"'),
    ('"5"', 'did you mean "5 USD"?'), ("5", 'did you mean "5 USD"?'),
    ('"-1 USD"', "a budget is more than 0"), ('"0 USD"', "more than 0 and at most 1e+12"),
    ('"1' + "0" * 400 + ' USD"', "more than 0 and at most 1e+12"),
])  # fmt: skip
def test_a_budget_that_is_not_an_amount_and_a_currency_is_a_config_error(tmp_path: Path, value: str, said: str) -> None:
    config = tmp_path / "deck.toml"
    config.write_text(agent_block("a").replace("[agents.a]\n", f"[agents.a]\nbudget = {value}\n"))
    checked = subprocess.run([*DECK, "config", "validate", str(config)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 1, checked.stdout
    assert said in checked.stdout and "agents.a.budget" in checked.stdout
    assert ":2:" in checked.stdout  # the line of the key
    total = tmp_path / "total.toml"
    total.write_text(f"[budget]\ntotal = {value}\n" + agent_block("a"))
    checked = subprocess.run([*DECK, "config", "validate", str(total)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 1 and "budget.total" in checked.stdout and said in checked.stdout


def test_an_agent_that_never_reports_a_cost_is_never_stopped(run_deck) -> None:
    deck = run_deck('[budget]\ntotal = "0.01 USD"\n' + agent_block("a", budget="0.01 USD") + agent_block("b"))
    deck.call("ChatService.Send", {"agent": "b", "text": "spend 1"})  # the total is spent
    deck.event("budget:reached", timeout=20)
    for _ in range(2):
        deck.call("ChatService.Send", {"agent": "a", "text": "usage"})  # reports tokens, never a cost
        ended(deck, "a")
    assert deck.call("DeckService.Usage")["notCounted"] == ["a"]


def test_a_report_without_a_cost_keeps_the_sessions_cost(run_deck) -> None:
    deck = run_deck(agent_block("a"))
    deck.call("ChatService.Send", {"agent": "a", "text": "cost 0.25"})
    ended(deck, "a")
    deck.call("ChatService.Send", {"agent": "a", "text": "usage"})
    ended(deck, "a", 2)
    found = deck.call("DeckService.Usage")
    assert found["agents"]["a"]["cost"] == {"amount": 0.25, "currency": "USD"} and found["notCounted"] == []
    assert found["sinceStart"] == {"USD": 0.25}


def test_the_keys_are_known_to_the_schema_and_the_effective_config(tmp_path: Path) -> None:
    config = tmp_path / "deck.toml"
    config.write_text('[budget]\ntotal = "20 usd"\n' + agent_block("a", budget="5 USD"))
    checked = subprocess.run([*DECK, "config", "validate", str(config)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0 and "warning" not in checked.stdout, checked.stdout
    shown = subprocess.run([*DECK, "config", "show", "--json", "--config", str(config)], capture_output=True,
                           text=True, timeout=30)  # fmt: skip
    data = json.loads(shown.stdout)
    assert data["budget"] == {"total": "20 USD", "period": "day"} and data["agents"]["a"]["budget"] == "5 USD"
    schema = json.loads(subprocess.run([*DECK, "config", "schema"], capture_output=True, text=True, timeout=30).stdout)
    assert "budget" in schema["$defs"]["AgentConfig"]["properties"] and "budget" in schema["properties"]


def test_line_mode_says_the_budget_is_reached_and_why_a_message_is_refused(line_deck) -> None:
    deck = line_deck(agent_block("a", budget="1 USD"))
    deck.send("@a spend 1")
    deck.expect(r"\[a\] budget reached: 1 USD per day, 1\.00 USD spent; messages are refused")
    deck.expect(r"\[a\] ready")
    deck.send("hello")
    deck.expect(r"\[a\] the budget of a \(1 USD per day\) is reached: 1\.00 USD spent: raise it in the config.*")
    deck.send("/agents")
    deck.expect(r"\[a\] a · ready · budget reached: 1 USD per day, 1\.00 USD spent; messages are refused  \(current\)")
    assert deck.close() == 0


def test_what_an_agent_spends_answering_an_ask_counts_and_at_its_budget_it_answers_no_more_asks(run_deck) -> None:
    deck = run_deck('[budget]\nperiod = "server"\n' + agent_block("a") + agent_block("b", budget="0.5 USD"))
    deck.call("ChatService.Send", {"agent": "a", "text": "ask b spend 0.7"})  # b answers in an ask session of its own
    reached = deck.event("budget:reached", timeout=30)
    assert reached["agent"] == "b" and reached["spent"] == {"amount": 0.7, "currency": "USD"}
    ended(deck, "a")
    usage = deck.call("DeckService.Usage", {})
    assert usage["agents"]["b"]["spent"] == {"USD": 0.7} and usage["sinceStart"] == {"USD": 0.7}
    deck.call("ChatService.Send", {"agent": "a", "text": "ask b spend 0.7"})
    ended(deck, "a", count=2)
    answers = [m for m in deck.call("ChatService.Conversation", {"agent": "a"})["messages"] if m["role"] == "agent"]
    text = answers[-1]["parts"][-1]["text"]
    assert text.startswith("tool error: b may not answer: the budget of b (0.5 USD since the server started) is reached")
    assert deck.call("DeckService.Usage", {})["agents"]["b"]["spent"] == {"USD": 0.7}  # the refused ask ran nothing


def test_a_conversations_cost_is_its_sessions_costs_together_across_restarts(run_deck, tmp_path: Path) -> None:
    config = agent_block("a", budget="10 USD")  # sessions s1, s2… in each process: a new one may reuse an id

    def cost_after(deck, text: str, turns: int) -> dict:
        deck.call("ChatService.Send", {"agent": "a", "text": text})
        ended(deck, "a", count=turns)
        return deck.call("ChatService.Conversation", {"agent": "a"})["usage"]

    deck = run_deck(config)
    assert cost_after(deck, "cost 0.02", 1)["cost"] == {"amount": 0.02, "currency": "USD"}
    deck.call("AgentService.Restart", {"name": "a"})  # it cannot resume: a new session, its cost from 0
    usage = cost_after(deck, "cost 0.2", 2)
    assert usage["cost"] == {"amount": 0.22, "currency": "USD"} and usage["sessionCost"] == {"amount": 0.2, "currency": "USD"}
    assert deck.call("DeckService.Usage", {})["agents"]["a"]["spent"] == {"USD": 0.22}
    deck.close_stdin()
    assert deck.wait(30) == 0
    again = run_deck(None, "--config", str(tmp_path / "deck.toml"))  # the conversation comes back from the history
    assert again.call("ChatService.Conversation", {"agent": "a"})["usage"]["cost"] == {"amount": 0.22, "currency": "USD"}
    assert cost_after(again, "cost 0.1", 1)["cost"] == {"amount": 0.32, "currency": "USD"}
    assert again.call("DeckService.Usage", {})["agents"]["a"]["today"] == {"USD": 0.32}


def test_a_reached_budget_is_shown_on_the_agent_until_it_is_raised(run_deck, tmp_path: Path) -> None:
    deck = run_deck('[budget]\nperiod = "server"\n' + agent_block("a", budget="1 USD") + agent_block("b"))
    listed = {a["name"]: a["notices"] for a in deck.call("AgentService.List")}
    assert listed == {"a": [], "b": []}
    deck.call("ChatService.Send", {"agent": "a", "text": "spend 1.5"})
    notice = deck.event("deck:notice", agent="a", timeout=20)
    assert notice["source"] == "budget" and notice["level"] == "warning" and notice["sticky"] is True
    assert notice["text"] == "budget reached: 1 USD since the server started, 1.50 USD spent; messages are refused"
    listed = {a["name"]: a["notices"] for a in deck.call("AgentService.List")}
    assert listed == {"a": [{"source": "budget", "level": "warning", "text": notice["text"]}], "b": []}
    assert deck.call("DeckService.Snapshot")["agents"][0]["notices"] == listed["a"]
    (tmp_path / "deck.toml").write_text('[budget]\nperiod = "server"\n' + agent_block("a", budget="5 USD") + agent_block("b"))
    cleared = deck.wait_line(lambda e: e.get("event") == "deck:notice" and e.get("agent") == "a" and e["text"] == "", timeout=20)
    assert cleared["sticky"] is True
    assert [a["notices"] for a in deck.call("AgentService.List")] == [[], []]


@pytest.mark.anyio
async def test_a_sticky_notice_said_again_unchanged_is_told_once(make_deck) -> None:
    deck, rec = make_deck(agent_block("a"))
    for _ in range(3):  # as a budget says it at each cost report past it
        deck.notice("budget", "budget reached", agent="a", level="warning", sticky=True)
    deck.notice("budget", "budget reached, more spent", agent="a", level="warning", sticky=True)
    assert [n["text"] for n in rec.named("deck:notice", "a")] == ["budget reached", "budget reached, more spent"]
    deck.notice("budget", "", agent="a", sticky=True)
    deck.notice("budget", "", agent="a", sticky=True)  # nothing left to take back: nothing said
    assert [n["text"] for n in rec.named("deck:notice", "a")][2:] == [""]
