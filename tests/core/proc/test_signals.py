"""However deck ends — SIGTERM, SIGINT, SIGHUP, a frontend that raises — no agent process outlives it."""

from __future__ import annotations

import os
import signal
import time

import pytest
from deck.frontend import Frontend

from tests.conftest import agent_block, descendants_of_self
from tests.deck_process import alive, run_deck, wait_dead  # noqa: F401  (run_deck: fixture)


def _start_all(deck, names: list[str]) -> list[int]:
    """Start the agents through the bridge; return the pids of everything under deck."""
    for name in names:
        assert deck.call("AgentService.Start", {"name": name})["state"] == "ready"
    return deck.descendants()


def _kill(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_stops_every_agent_and_descendant(run_deck, tmp_path, sig):
    pidfile = tmp_path / "grandchild.pid"
    deck = run_deck(agent_block("busy") + agent_block("idle") + agent_block("parent", "--grandchild", str(pidfile)))
    pids = _start_all(deck, ["busy", "idle", "parent"])
    grandchild = int(pidfile.read_text())
    try:
        assert os.getsid(grandchild) == grandchild  # setsid: it left the agent's group and session
        deck.call("ChatService.Send", {"agent": "busy", "text": "slow"})
        deck.event("message:delta", agent="busy")  # mid-turn
        assert len(set(pids) | {grandchild}) == 4 and all(alive(pid) for pid in [*pids, grandchild])
        deck.signal(sig)
        assert deck.wait(20) == 128 + sig
        assert wait_dead([*pids, grandchild]) == []
        assert b"Traceback" not in deck.stderr
    finally:
        _kill([*pids, grandchild])


@pytest.mark.timeout(60)
def test_a_signal_ends_an_agent_that_ignores_sigterm_and_eof(run_deck, tmp_path):
    """At the real timings: stdin closed, 5 s, SIGTERM ignored, 3 s, SIGKILL."""
    pidfile = tmp_path / "grandchild.pid"
    deck = run_deck(
        agent_block("stubborn", "--ignore-sigterm", "--ignore-eof", "--grandchild", str(pidfile)) + agent_block("plain")
    )
    pids = _start_all(deck, ["stubborn", "plain"])
    grandchild = int(pidfile.read_text())
    try:
        started = time.monotonic()
        deck.signal(signal.SIGTERM)
        time.sleep(1)
        deck.signal(signal.SIGINT)  # an impatient second signal must not cut the cleanup short
        assert deck.wait(20) == 128 + signal.SIGTERM
        elapsed = time.monotonic() - started
        assert 7.5 <= elapsed < 14, elapsed  # escalated, not killed at once, not hung
        assert wait_dead([*pids, grandchild]) == []
        assert deck.states("stubborn")[-1] == "stopped" and deck.states("plain")[-1] == "stopped"
        assert b"Traceback" not in deck.stderr
    finally:
        _kill([*pids, grandchild])


# -- a frontend that raises, in-process -----------------------------------------------------

class RaisingFrontend(Frontend):
    """Starts every agent, one of them mid-turn, then fails."""

    name = "raising"

    async def run(self) -> int:
        for info in await self.client.call("AgentService.List"):
            await self.client.call("AgentService.Start", {"name": info["name"]})
        await self.client.call("ChatService.Send", {"agent": "busy", "text": "slow"})
        await self.options["recorder"].wait_event("message:delta", agent="busy")
        # Not zombies: this process is a subreaper, what other decks left when they died comes back to it.
        self.options["pids"].extend(p.pid for p in descendants_of_self())
        raise RuntimeError("frontend bug")


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_an_exception_in_a_frontend_still_stops_every_agent(make_deck, tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    deck, rec = make_deck(
        agent_block("busy")
        + agent_block("stubborn", "--ignore-sigterm", "--ignore-eof")
        + agent_block("parent", "--grandchild", str(pidfile), "--ignore-eof")
    )
    pids: list[int] = []
    try:
        with pytest.raises(RuntimeError, match="frontend bug"):
            await deck.run(RaisingFrontend, recorder=rec, pids=pids)
        pids.append(int(pidfile.read_text()))
        assert len(set(pids)) == 4
        assert wait_dead(pids) == []
        assert [a.state.value for a in deck.agents.values()] == ["stopped", "stopped", "stopped"]
    finally:
        _kill(pids)
