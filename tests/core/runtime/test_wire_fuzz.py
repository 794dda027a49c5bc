"""The wire fuzzed end to end: a real agent (tests/agents/fuzz_agent.py) answers prompts with random and
mutated ACP messages — every session/update kind, requests, answers, batches, broken lines, terminal
control sequences — while random JSON-RPC and junk lines arrive on the jsonl bridge's stdin, on line
mode's stdin and on the web server's `/ws`. Whatever comes, deck stays up, answers every request once,
still hears the agent afterwards, and nothing raw reaches a frontend's terminal.

Seeds are fixed, so a failure is the same on every run; DECK_FUZZ_SEED=N runs another one."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import agent_table
from tests.deck_process import alive, run_deck  # noqa: F401  (run_deck: fixture)
from tests.frontends.test_line import line_deck  # noqa: F401  (fixture)
from tests.web_server import WebServe, WebSocketClient

pytestmark = [pytest.mark.timeout(120)]

FUZZ_AGENT = Path(__file__).parents[2] / "agents" / "fuzz_agent.py"
SEEDS = [int(os.environ["DECK_FUZZ_SEED"])] if os.environ.get("DECK_FUZZ_SEED") else [1, 2, 3]
#: The services a client may call with anything: all but those that end the deck or change the
#: config file by design (they are tested for junk on their own).
METHODS = [
    "AgentService.Authenticate", "AgentService.DeleteSession", "AgentService.List", "AgentService.Logs",
    "AgentService.Restart", "AgentService.Start", "AgentService.Stop", "ChatService.AgentSessions",
    "ChatService.AnswerPermission", "ChatService.AnswerQuestion", "ChatService.Cancel", "ChatService.Conversation",
    "ChatService.EditQueued", "ChatService.History", "ChatService.NewConversation", "ChatService.OpenConversation",
    "ChatService.Pending", "ChatService.Queue", "ChatService.Search", "ChatService.Send", "ChatService.SetConfigOption",
    "ChatService.SetMode", "ChatService.Unqueue", "ConfigService.Content", "ConfigService.Current",
    "ConfigService.Recent", "ConfigService.Schema", "ConfigService.Validate", "DeckService.Clients",
    "DeckService.Inbox", "DeckService.Snapshot", "DeckService.Usage", "WorktreeService.Diff", "WorktreeService.List",
    "NoSuch.Method", "", "rpc.discover",
]  # fmt: skip
#: What may never reach a terminal from an agent: OSC (clipboard, title), clear screen, reset, C1 CSI,
#: BEL, backspace, a right-to-left override.
RAW = ["\x1b]", "\x1b[2J", "\x1bc", "\x9b", "\x07", "\x08", "\u202e"]


#: What a log says when deck's own code, not the agent's input, failed.
FAILED = ("Traceback", "error while handling", "listener failed", "Exception in callback", "plugin ")


def failures() -> list[str]:
    """The lines of deck's log (this test's own) that say deck's code failed on what it got."""
    log = Path(os.environ["XDG_STATE_HOME"]) / "deck" / "deck.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [line[:300] for line in lines if any(word in line for word in FAILED)]


def fuzz_table() -> str:
    return '[notify]\nbell = false\n' + agent_table("fz", [sys.executable, str(FUZZ_AGENT)])


def junk(r: random.Random, depth: int = 0) -> Any:
    pick = r.randrange(9 if depth < 3 else 6)
    if pick == 0:
        return None
    if pick == 1:
        return r.choice([True, 0, -1, 2**64, 1.5, 1e308])
    if pick == 2:
        return r.choice(["", "fz", "nobody", "perm-1", "\x1b[2J", "x" * 10_000, "../../etc", "\ud800"])
    if pick == 3:
        return r.choice(["fz", "hello", "yes", "allow_once"])
    if pick == 4:
        return [junk(r, depth + 1) for _ in range(r.randrange(3))]
    if pick == 5:
        return "fz"
    return {r.choice(["agent", "text", "id", "optionId", "name", "values", "sessionId", "query"]): junk(r, depth + 1)
            for _ in range(r.randrange(4))}  # fmt: skip


def random_lines(r: random.Random, first_id: int, count: int) -> tuple[list[str], list[int]]:
    """`count` lines for a JSON-RPC server: requests of any method with any params, notifications,
    batches and junk; and the ids of the requests among them, which must each get one answer."""
    lines, ids = [], []
    for i in range(count):
        pick = r.random()
        request: dict[str, Any] = {"jsonrpc": "2.0", "method": r.choice(METHODS)}
        if r.random() < 0.8:
            request["params"] = junk(r)
        if pick < 0.7:
            ids.append(first_id + i)
            lines.append(json.dumps({**request, "id": first_id + i}))
        elif pick < 0.8:
            lines.append(json.dumps(request))  # a notification: no answer
        else:
            lines.append(r.choice(["{", "not json", "[]", "null", "[1, 2]", '{"jsonrpc": "2.0", "id": {}}', "\x1b[2J", "9" * 5000]))
    return lines, ids


@pytest.mark.parametrize("seed", SEEDS)
def test_the_jsonl_bridge_survives_a_fuzzed_agent_and_fuzzed_requests(run_deck, seed) -> None:
    r = random.Random(seed)
    deck = run_deck(fuzz_table())
    asked: list[int] = []
    for round_ in range(4):
        asked.append(deck.request("ChatService.Send", {"agent": "fz", "text": f"fuzz {seed * 10 + round_} 250"}))
        lines, ids = random_lines(r, 100_000 * (round_ + 1), 60)
        for line in lines:
            deck.send_raw(line)
        asked += ids
    # Still hearing the agent, and answering: the last turn is the agent's own words.
    deck.call("ChatService.Send", {"agent": "fz", "text": "still there"}, timeout=60)
    deck.wait_line(lambda e: e.get("event") == "message:delta" and "pong: still there" in (e.get("text") or ""), timeout=60)
    assert alive(deck.pid)
    for request_id in asked:
        answers = deck.wait_line(lambda e, i=request_id: "id" in e and e["id"] == i and "method" not in e, timeout=30)
        assert "result" in answers or isinstance(answers.get("error", {}).get("message"), str), answers
    with deck._changed:
        replies = [e["id"] for e in deck.lines if "method" not in e and "event" not in e and isinstance(e.get("id"), int) and e["id"] in set(asked)]
        errors = [e for e in deck.lines if e.get("event") == "plugin:error"]
    assert sorted(replies) == sorted(asked)  # each exactly once
    assert errors == []
    deck.close_stdin()
    assert deck.wait(60) == 0
    assert failures() == [] and b"Traceback" not in deck.stderr


@pytest.mark.parametrize("seed", SEEDS[:1])
def test_line_mode_survives_a_fuzzed_agent_and_shows_nothing_raw(line_deck, seed) -> None:
    deck = line_deck(fuzz_table())
    for round_ in range(3):
        deck.send(f"@fz fuzz {seed * 10 + round_} 250")
        deck.send(random.Random(seed + round_).choice(["/nosuch", "@nobody hi", "/agents", "\x1b[2J", "/inbox"]))
    deck.send("@fz still there")
    deck.expect(r".*pong: @?f?z? ?still there.*", timeout=60)
    assert deck.close(30) == 0
    output = deck.output.decode(errors="replace")
    assert [raw for raw in RAW if raw in output] == []
    assert "\x1b" not in output  # not a terminal: deck writes no escape of its own either
    assert failures() == []


@pytest.mark.parametrize("seed", SEEDS[:1])
def test_the_web_socket_survives_fuzzed_requests_and_a_fuzzed_agent(tmp_path, seed) -> None:
    config = tmp_path / "deck.toml"
    config.write_text(fuzz_table())
    server = WebServe(config, f"fz{seed}")
    try:
        asyncio.run(_fuzz_ws(server, seed))
        assert server.popen.poll() is None
    finally:
        server.stop()
    assert failures() == [] and b"Traceback" not in server.stderr


async def _fuzz_ws(server: WebServe, seed: int) -> None:
    r = random.Random(seed)
    headers = {"Origin": server.base.rstrip("/")}
    async with aiohttp.ClientSession() as session:
        ws = await session.ws_connect(server.ws_url, protocols=["deck.v1", f"deck.token.{server.token}"], headers=headers)
        client = WebSocketClient(ws)
        await client.call("ChatService.Send", {"agent": "fz", "text": f"fuzz {seed} 250"})
        lines, ids = random_lines(r, 500_000, 120)
        while lines:  # some messages of one line, some of several
            size = r.randrange(1, 8)
            await ws.send_str("\n".join(lines[:size]))
            lines = lines[size:]
        await client.call("ChatService.Send", {"agent": "fz", "text": "still there"}, timeout=60)
        await client.wait(lambda got: any(e.get("event") == "message:delta" and "pong: still there" in (e.get("text") or "")
                                          for e in got), timeout=60)  # fmt: skip
        answered = await client.wait(lambda got: (found := {e["id"] for e in got if isinstance(e.get("id"), int) and e["id"] in set(ids)}) == set(ids) and found)
        assert answered == set(ids)
        await client.close()
