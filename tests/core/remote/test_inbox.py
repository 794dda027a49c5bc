"""The needs-you inbox: `DeckService.Inbox()` lists what waits in every agent, oldest first, and
`deck inbox` / `deck answer` read and answer it from a shell, through a running `deck serve`."""

from __future__ import annotations

import json
from datetime import date

import pytest

from tests.conftest import agent_block
from tests.core.remote.test_server import cli, clients, runtime, serve  # noqa: F401  (fixtures: a server folder of its own, a server, clients)

pytestmark = [pytest.mark.timeout(90)]


def test_the_inbox_lists_every_agents_requests_oldest_first_and_deck_answer_resolves_them(serve, clients) -> None:
    server = serve(agent_block("a") + agent_block("b"))
    watcher = clients(server.path)
    watcher.request("ChatService.Send", {"agent": "a", "text": "perm"})
    asked = watcher.event("permission:requested", agent="a", timeout=20)
    watcher.request("ChatService.Send", {"agent": "b", "text": "question"})
    question = watcher.event("question:requested", agent="b", timeout=20)

    shown = cli("inbox", "--attach", server.name, "--json")
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    assert [(r["id"], r["agent"], r["kind"]) for r in rows] == [
        (asked["id"], "a", "permission"), (question["id"], "b", "question")]  # fmt: skip
    assert rows[0]["title"].startswith("permission: ") and rows[0]["since"] <= rows[1]["since"]
    assert rows[1]["title"] and rows[0]["since"].endswith("Z")
    plain = cli("inbox", "--attach", server.name)
    assert asked["id"] in plain.stdout and question["id"] in plain.stdout
    assert "options: yes (Allow), no (Reject)" in plain.stdout  # what `deck answer` takes, at a glance
    assert "answer with --json VALUES, or --decline" in plain.stdout

    wrong = cli("answer", asked["id"], "--attach", server.name, "--json", "{}")
    assert wrong.returncode == 2 and "is a permission request: answer it with one of its options (yes" in wrong.stderr
    bad = cli("answer", question["id"], "--attach", server.name, "--json", "[1]")
    assert bad.returncode == 2 and "a JSON object" in bad.stderr
    unknown = cli("answer", "perm-999", "yes", "--attach", server.name)
    assert unknown.returncode == 1 and "nothing waits as 'perm-999'" in unknown.stderr

    done = cli("answer", asked["id"], "yes", "--attach", server.name)
    assert done.returncode == 0 and f"answered {asked['id']} (a)" in done.stdout, done.stderr
    watcher.event("permission:resolved", id=asked["id"])  # every client sees it resolved
    done = cli("answer", question["id"], "--attach", server.name, "--json", '{"name": "Ada"}')
    assert done.returncode == 0, done.stderr
    watcher.event("question:resolved", id=question["id"])
    assert json.loads(cli("inbox", "--attach", server.name, "--json").stdout) == []
    assert cli("inbox", "--attach", server.name).stdout.strip() == "nothing waits for you"
    watcher.request("ChatService.Send", {"agent": "b", "text": "question"})
    second = watcher.wait_line(lambda e: e.get("event") == "question:requested" and e["id"] != question["id"], timeout=20)
    both = cli("answer", second["id"], "--attach", server.name, "--decline", "--json", "{}")
    assert both.returncode == 2 and "--decline answers" in both.stderr
    declined = cli("answer", second["id"], "--attach", server.name, "--decline")
    assert declined.returncode == 0, declined.stderr
    watcher.event("question:resolved", id=second["id"])
    watcher.wait_line(lambda e: e.get("event") == "message:delta" and e.get("agent") == "b"
                      and '"decline"' in (e.get("text") or ""), timeout=20)  # the agent got ACP's decline  # fmt: skip


def test_the_inbox_with_no_server_is_a_clear_error(tmp_path, runtime, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deck.toml").write_text(agent_block("a"))
    out = cli("inbox", "--config", str(tmp_path / "deck.toml"))
    assert out.returncode == 1 and "no deck server runs" in out.stderr and "deck serve" in out.stderr
    gone = cli("inbox", "--attach", "nobody")
    assert gone.returncode == 1 and "nobody" in gone.stderr


def test_usage_sums_the_known_costs_and_says_which_are_unknown(serve, clients) -> None:
    server = serve(agent_block("a") + agent_block("b") + agent_block("c"))
    watcher = clients(server.path)
    for agent, text in (("a", "cost 0.25 USD"), ("b", "usage"), ("c", "cost 1.5 usd")):
        watcher.request("ChatService.Send", {"agent": agent, "text": text})
        watcher.event("usage:changed", agent=agent, timeout=20)
    watcher.event("usage:changed", agent="b", tokens=30, timeout=20)  # its prompt response's tokens
    watcher.request("ChatService.Send", {"agent": "a", "text": "cost 0.75 USD"})  # the session's cost so far
    watcher.event("usage:changed", agent="a", usage={"used": 500, "size": 100000, "cost": {"amount": 0.75, "currency": "USD"}})

    found = json.loads(cli("usage", "--attach", server.name, "--json").stdout)
    usd = {"amount": 0.75, "currency": "USD"}
    none, thirty = {"conversation": 0, "sinceStart": 0, "today": 0}, {"conversation": 30, "sinceStart": 30, "today": 30}
    assert found["agents"]["a"] == {"used": 500, "size": 100000, "cost": usd, "spent": {"USD": 0.75}, "today": {"USD": 0.75},
                                    "tokens": none}  # fmt: skip
    assert found["agents"]["b"] == {"used": 1000, "size": 200000, "cost": None, "spent": {}, "today": {}, "tokens": thirty}  # never 0
    assert found["total"] == found["sinceStart"] == found["today"] == {"USD": 2.25} and found["notCounted"] == ["b"]
    shown = cli("usage", "--attach", server.name).stdout.splitlines()
    assert shown[1].split() == ["a", "500/100,000", "tokens", "—", "0.75", "USD", "0.75", "USD", "0.75", "USD"]
    assert shown[2].split() == ["b", "1,000/200,000", "tokens", "30", "cost", "unknown", "(not", "counted)", "—", "—"]
    assert shown[-1] == ("total: 2.25 USD since the server started, 2.25 USD today; 30 tokens reported since the server "
                         "started, 30 today (not counted, cost unknown: b)")  # fmt: skip
    by_day = json.loads(cli("usage", "--attach", server.name, "--by", "day", "--json").stdout)["days"]
    assert by_day == [{"day": date.today().isoformat(), "total": {"USD": 2.25}, "agents": {"a": {"USD": 0.75}, "c": {"USD": 1.5}}, "tokens": 30}]
    assert cli("usage", "--attach", server.name, "--by", "day").stdout.split() == [
        date.today().isoformat(), "2.25", "USD", "(a", "0.75", "USD,", "c", "1.50", "USD)", "30", "tokens", "reported", "not",
        "counted,", "cost", "unknown:", "b"]  # fmt: skip
    wrong = cli("usage", "--attach", server.name, "--by", "week")
    assert wrong.returncode == 2 and "'week' is not one of 'agent', 'day'" in wrong.stderr


@pytest.mark.parametrize("cost", [{"amount": -1, "currency": "USD"}, {"amount": "1", "currency": "USD"},
                                  {"amount": True, "currency": "USD"}, {"amount": 1, "currency": "$$$"},
                                  {"amount": float("inf"), "currency": "USD"}, "free"])  # fmt: skip
def test_a_cost_that_is_not_one_is_unknown(cost) -> None:
    from deck.chat.spending import money as _cost

    assert _cost(cost) is None
    assert _cost({"amount": 2, "currency": "eur"}) == {"amount": 2.0, "currency": "EUR"}
