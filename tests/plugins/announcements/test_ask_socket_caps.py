"""What deck's ask socket and its asks may take, whatever an agent sends: connections, line sizes,
bytes held, asks in progress. The hostile client is a real agent (tests/agents/socket_agent.py) that
reads the socket from its session/new and connects from its own process."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import psutil
import pytest
from deck.plugins import announcements, announcements_mcp
from deck.plugins.announcements import asks, bridge

from tests.conftest import AGENTS, agent_block, agent_table
from tests.deck_process import DeckProcess, run_deck  # noqa: F401 - a fixture
from tests.plugins.announcements.test_announcements import server_entry
from tests.turns import ask

pytestmark = pytest.mark.timeout(120)

SOCKET_AGENT = AGENTS / "socket_agent.py"
MIB = 1024 * 1024
LIMITS = "[limits]\nmaxRunningAgents = 8\n"
#: Asks that stay until their connection closes: no turn of the requester's is their origin.
SLOW_ASK = {"method": "ask_agent", "params": {"agent": "b", "question": "slow"}, "origin": "held"}


def socket_agent(name: str) -> str:
    return agent_table(name, [sys.executable, str(SOCKET_AGENT)])


async def step(deck: Any, rec: Any, agent: str, **spec: Any) -> list[dict[str, Any]]:
    """One prompt to a socket agent: what each connection it used got."""
    reply = await ask(deck, rec, json.dumps(spec), agent)
    return json.loads(reply.text)  # type: ignore[no-any-return]


def errors(report: list[dict[str, Any]]) -> list[str]:
    return [r["reply"]["error"] for r in report if r["reply"] and "error" in r["reply"]]


def active_asks(rec: Any) -> list[dict[str, Any]]:
    changes = rec.named("ask:changed")
    ended = {c["ticketId"] for c in changes if not c["active"]}
    return [c for c in changes if c["active"] and c["ticketId"] not in ended]


@pytest.mark.anyio
async def test_connections_past_the_cap_get_an_error_line_and_others_are_not_starved(make_deck):
    deck, rec = make_deck(socket_agent("a") + socket_agent("c"))
    report = await step(deck, rec, "a", open=bridge.MAX_CONNECTIONS + 1, wait=1)
    refused = [r for r in report if r["reply"]]
    assert len(refused) == 1 and refused[0]["closed"]
    assert refused[0]["reply"]["error"].startswith("too many connections: a has 8 open to deck's ask socket")
    assert sum(not r["closed"] for r in report) == 8
    assert any("ask socket: a connection refused: too many connections" in line for line in deck.agent("a").logs)
    listed = await step(deck, rec, "c", open=1, request={"method": "list_agents"}, wait=1)  # another agent's own room
    assert [a["name"] for a in listed[0]["reply"]["result"]] == ["a", "c"]
    closed = await step(deck, rec, "a", close=True)
    assert [r["reply"] for r in closed] == [{"error": "not a JSON request"}] * 8
    again = await step(deck, rec, "a", open=1, request={"method": "list_agents"}, wait=1)
    assert "result" in again[0]["reply"]


@pytest.mark.anyio
async def test_a_line_past_the_limit_is_refused_and_bytes_held_across_connections_are_bounded(make_deck):
    deck, rec = make_deck(socket_agent("a"))
    long = await step(deck, rec, "a", open=1, junk=bridge.MAX_LINE + 1, wait=1)
    assert long[0]["closed"] and errors(long) == ["a request is 1 MiB at most: this one is longer"]
    # Each line fits, all of them do not: past MAX_BUFFERED the connection that brings more is closed.
    size = 900 * 1024
    report = await step(deck, rec, "a", open=6, junk=size, wait=2, timeout=10)
    refused = errors(report)
    assert len(refused) >= 6 - bridge.MAX_BUFFERED // size
    assert all(e.startswith("a has ") and "4 MiB at most may be: this one is closed" in e for e in refused), refused
    pool = announcements.of(deck).bridge._pools["a"]
    assert pool.buffered <= bridge.MAX_BUFFERED
    assert any("ask socket: a request refused" in line for line in deck.agent("a").logs)


@pytest.mark.anyio
async def test_asks_in_progress_are_capped_per_requester_and_per_target(make_deck):
    config = LIMITS + socket_agent("a") + socket_agent("c") + socket_agent("d") + agent_block("b")
    deck, rec = make_deck(config)
    first = await step(deck, rec, "a", open=asks.MAX_ASKS_FROM + 1, request=SLOW_ASK, wait=1)
    assert errors(first) == ["too many asks: a has 4 in progress, the most one agent may have; ask again once one has ended"]
    await rec.wait(lambda r: len(active_asks(r)) == 4)
    await step(deck, rec, "c", open=4, request=SLOW_ASK)
    await rec.wait(lambda r: len(active_asks(r)) == asks.MAX_ASKS_TO == 8)
    busy = await step(deck, rec, "d", open=1, request=SLOW_ASK, wait=1)
    assert errors(busy) == ["b is busy: it is answering 8 asks, the most it takes at once; ask again later"]
    assert any("ask_agent b refused: too many asks" in line for line in deck.agent("a").logs)
    assert any("ask_agent b refused: b is busy" in line for line in deck.agent("d").logs)
    await step(deck, rec, "a", close=True)
    await step(deck, rec, "c", close=True)
    await rec.wait(lambda r: not active_asks(r) and r.states("b")[-1:] == ["ready"])
    answered = await step(deck, rec, "d", open=1, request={**SLOW_ASK, "params": {"agent": "b", "question": "multi 1"}},
                          wait=1)  # fmt: skip
    assert answered[0]["reply"] == {"result": "The answer is 42."}


@pytest.mark.anyio
async def test_a_question_goes_compact_and_one_too_long_never_leaves_the_mcp_server(make_deck, tmp_path):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    env = {e["name"]: e["value"] for e in server_entry(deck, "a")["env"]}
    question = "é" * 300_000  # 600 kB as UTF-8, 1.8 MB as \u escapes: over the socket's line
    answer = await asyncio.to_thread(announcements_mcp.request, "ask_agent", {"agent": "b", "question": question}, env)
    assert answer == {"result": f"You said: {question}"}
    gone = {**env, bridge.ENV_SOCKET: str(tmp_path / "none.sock")}  # it is never reached
    too_long = await asyncio.to_thread(announcements_mcp.request, "ask_agent", {"agent": "b", "question": "x" * MIB}, gone)
    assert too_long["error"].startswith("too long: deck takes requests of 1 MiB at most")


# -- a real deck process ----------------------------------------------------------------------------


def prompt(deck: DeckProcess, **spec: Any) -> list[dict[str, Any]]:
    turns = len(deck.events("turn:changed", agent="a", busy=False))
    deck.call("ChatService.Send", {"agent": "a", "text": json.dumps(spec)})
    deck.wait_line(lambda x: x.get("event") == "turn:changed" and x.get("agent") == "a" and not x["busy"],
                   timeout=60, count=turns + 1)  # fmt: skip
    texts = [d["text"] for d in deck.events("message:delta", agent="a") if d["kind"] == "text"]
    return json.loads(texts[-1])  # type: ignore[no-any-return]


def high_water(pid: int) -> int:
    """The most resident memory the process has had, in bytes (Linux), else what it has now."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return psutil.Process(pid).memory_info().rss  # type: ignore[no-any-return]


def test_long_lines_on_many_connections_cost_deck_little_memory(run_deck):
    """20 connections, then 6 MiB with no newline on each still open: deck holds a few MiB, not 120."""
    deck = run_deck(socket_agent("a"), "--stay")
    warm = prompt(deck, open=1, request={"method": "list_agents"}, wait=1)
    assert "result" in warm[0]["reply"]
    process = psutil.Process(deck.pid)
    rss, peak = process.memory_info().rss, high_water(deck.pid)
    opened = prompt(deck, open=20, wait=20 - bridge.MAX_CONNECTIONS)
    flooded = prompt(deck, send=6 * MIB, wait=bridge.MAX_CONNECTIONS)
    grown, peaked = process.memory_info().rss - rss, high_water(deck.pid) - peak
    assert grown < 32 * MIB and peaked < 32 * MIB, (grown, peaked)  # 6 or 7 MiB at its peak; 120 unbounded
    assert len(errors(opened)) == 12 and all(e.startswith("too many connections") for e in errors(opened))
    assert len(flooded) == 8 and len(errors(flooded)) == 8 and all(r["closed"] for r in flooded)
    assert all(r["sent"] < 2 * MIB for r in flooded)  # closed at the first MiB, not read to the end
    logs = deck.call("AgentService.Logs", {"name": "a"})
    assert any("ask socket: a connection refused" in line for line in logs), logs


def test_a_targets_answer_is_cut_past_its_cap_with_a_note() -> None:
    from deck.plugins.announcements.asks import ANSWER_MAX, Messages

    said: list[str] = []
    messages = Messages(said.append)
    for _ in range(3 * ANSWER_MAX // 65536):
        messages.text("y" * 65536)
    messages.boundary()
    messages.text("second")
    messages.boundary()
    first = said[0]
    assert len(first) < ANSWER_MAX + 200 and first.endswith(f"an answer keeps {ANSWER_MAX:,} characters]")
    assert messages._last == "second"  # the next message is whole again
