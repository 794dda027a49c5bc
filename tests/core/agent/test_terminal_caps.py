"""What one agent's terminals may take: MAX_TERMINALS of them however fast it asks, MAX_TOTAL_OUTPUT of
output kept in all, and file descriptors enough left for other agents. A real agent
(tests/agents/terminal_burst_agent.py) writes its terminal/create requests in one burst."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import signal
import sys
import threading
import time
from typing import Any

import psutil
import pytest
from deck import AcpError
from deck.agent import terminals

from tests import deck_process
from tests.conftest import AGENTS, FAKE_AGENT, agent_table, descendants_of_self
from tests.deck_process import run_deck  # noqa: F401 - a fixture
from tests.turns import ask

pytestmark = pytest.mark.timeout(120)

BURST = AGENTS / "terminal_burst_agent.py"
PY = sys.executable
MIB = 1024 * 1024
SLEEP = shutil.which("sleep") or "sleep"


def burst_agent(name: str = "a", **keys: Any) -> str:
    return agent_table(name, [PY, str(BURST)], **keys)


def prompt(count: int, command: list[str], **extra: Any) -> str:
    return json.dumps({"count": count, "command": command[0], "args": command[1:], **extra})


def printer(size: int) -> list[str]:
    """A command that prints `size` bytes and exits."""
    return [PY, "-c", f"import sys; w = sys.stdout.buffer.write\nfor _ in range({size // 65536}): w(b'x' * 65536)"]


async def burst(deck: Any, rec: Any, count: int, command: list[str], **extra: Any) -> dict[str, Any]:
    reply = await ask(deck, rec, prompt(count, command, **extra))
    return json.loads(reply.text)  # type: ignore[no-any-return]


@pytest.mark.anyio
async def test_a_burst_of_creates_gets_exactly_the_cap_and_errors_for_the_rest(make_deck, tmp_path):
    deck, rec = make_deck(burst_agent(cwd=str(tmp_path)))
    report = await burst(deck, rec, 100, [SLEEP, "60"])
    assert len(report["created"]) == terminals.MAX_TERMINALS == 16
    assert len(report["errors"]) == 100 - 16
    for error in report["errors"]:
        assert error["code"] == -32602 and error["message"].startswith("too many terminals: 16 are open"), error
    held = deck.agent("a").terminals
    assert sorted(held.terminals) == sorted(report["created"]) and held.starting == 0
    assert any("terminal/create refused: too many terminals" in line for line in deck.agent("a").logs)
    pids = [t.process.pid for t in held.terminals.values()]
    await deck.agent("a").stop()
    assert deck_process.wait_dead(pids) == []


@pytest.mark.anyio
async def test_the_output_all_terminals_of_an_agent_keep_is_bounded(make_deck, tmp_path):
    """16 commands printing 12 MiB each, each asking to keep it all: 32 MiB are kept in all (12, 12,
    and the 8 left), the other creates are refused; a release gives its share back."""
    deck, rec = make_deck(burst_agent(cwd=str(tmp_path)))
    await deck.agent("a").start()
    before = psutil.Process().memory_info().rss
    report = await burst(deck, rec, 16, printer(12 * MIB), outputByteLimit=12 * MIB, wait=True)
    assert len(report["created"]) == 3 and report["exits"] == [{"exitCode": 0, "signal": None}] * 3
    assert len(report["errors"]) == 13
    for error in report["errors"]:
        assert error["code"] == -32602 and "too much terminal output kept" in error["message"], error
    held = deck.agent("a").terminals
    kept = [len(held.terminals[t].output) for t in report["created"]]
    assert kept == [12 * MIB, 12 * MIB, 8 * MIB] and sum(kept) == terminals.MAX_TOTAL_OUTPUT
    assert any(f"outputByteLimit {12 * MIB} cut to {8 * MIB}" in line for line in deck.agent("a").logs)
    grown = psutil.Process().memory_info().rss - before
    assert grown < 100 * MIB, grown  # 16 × 12 MiB would be 192 MiB
    first = report["created"][0]
    again = await burst(deck, rec, 2, printer(64 * 1024), outputByteLimit=12 * MIB, release=[first])
    assert len(again["created"]) == 1 and len(again["errors"]) == 1  # the 12 MiB released, taken again
    assert held.kept == terminals.MAX_TOTAL_OUTPUT and first not in held.terminals
    nothing = await burst(deck, rec, 1, [SLEEP, "60"], outputByteLimit=0)  # keeps nothing: fits however full
    assert len(nothing["created"]) == 1


@pytest.mark.anyio
async def test_a_create_that_ends_after_its_agent_stopped_leaves_no_command(tmp_path):
    """The agent stops while a create waits for its directory: the command it then starts is killed,
    not kept by terminals nobody will close."""
    gate = threading.Event()

    def cwd(path: str | None) -> tuple[int, str]:
        gate.wait(10)
        return os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY), str(tmp_path)

    spawn = lambda coro, name: asyncio.ensure_future(coro)  # noqa: E731
    held = terminals.Terminals(spawn, lambda *_: None, lambda *_: None, lambda _: None, grace=0.3)
    creating = asyncio.ensure_future(held.create({"command": SLEEP, "args": ["60"]}, cwd, dict(os.environ)))
    await asyncio.sleep(0)
    assert held.starting == 1
    await held.close()
    gate.set()
    with pytest.raises(AcpError, match="the agent is stopping"):
        await creating
    assert held.terminals == {} and held.starting == 0
    await asyncio.gather(*terminals._killing)
    assert [p for p in descendants_of_self() if p.name() == "sleep"] == []


# -- a real deck process with few file descriptors -------------------------------------------------------

#: deck with two agents holds about 30 descriptors, 16 terminals about 32 more.
FD_LIMIT = 128
LIMITED = (
    "import os, resource, sys\n"
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({FD_LIMIT}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
    "os.execv(sys.executable, [sys.executable, '-P', '-m', 'deck', *sys.argv[1:]])\n"
)


def text_of(deck: deck_process.DeckProcess, agent: str) -> str:
    return "".join(d["text"] for d in deck.events("message:delta", agent=agent) if d["kind"] == "text")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_a_burst_of_creates_leaves_descriptors_for_another_agent(run_deck, tmp_path, monkeypatch):
    monkeypatch.setattr(deck_process, "DECK", [PY, "-c", LIMITED])
    config = burst_agent(cwd=str(tmp_path)) + agent_table("b", [PY, str(FAKE_AGENT)], cwd=str(tmp_path))
    deck = run_deck(config, "--stay")
    deck.call("ChatService.Send", {"agent": "a", "text": prompt(300, [SLEEP, "60"])})
    deck.event("turn:changed", agent="a", busy=False, timeout=60)
    assert int(psutil.Process(deck.pid).rlimit(psutil.RLIMIT_NOFILE)[0]) == FD_LIMIT
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > FD_LIMIT  # the test's own limit is untouched
    started = deck.response(deck.request("AgentService.Start", {"name": "b"}))
    assert started.get("result", {}).get("state") == "ready", started
    deck.call("ChatService.Send", {"agent": "b", "text": "still here"})
    deck.event("message:delta", agent="b", text="You said: still here")
    report = json.loads(text_of(deck, "a"))
    assert len(report["created"]) == 16 and len(report["errors"]) == 300 - 16
    assert {e["message"][:18] for e in report["errors"]} == {"too many terminals"}
    assert len(os.listdir(f"/proc/{deck.pid}/fd")) < FD_LIMIT - 32
    started = time.monotonic()
    deck.signal(signal.SIGTERM)
    assert deck.wait(30) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 15  # 16 commands to kill, in parallel
