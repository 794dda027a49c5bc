"""idle_stop: stop agents left idle, make room for a start, refuse one when every agent is busy.

- A `ready` agent unused for `limits.stopIdleAgentsAfter` is stopped (checked every
  CHECK_INTERVAL seconds; `deck.clock` is the clock, injectable in tests).
- When an agent must start and `limits.maxRunningAgents` agents run, the least
  recently used `ready` agent is stopped first; when none is ready, the start is
  refused: "too many agents running: N agent(s) busy (a, b), the limit is N".
"""

from __future__ import annotations

import asyncio
from typing import Any

from deck import hookimpl
from deck.errors import ServiceError
from deck.states import AgentState

CHECK_INTERVAL = 30.0


def stop_idle(deck: Any) -> list[str]:
    """Stop every ready agent idle for longer than the limit; return their names."""
    limit = deck.config.limits.stop_idle_agents_after
    if limit <= 0:
        return []
    idle = [a for a in deck.agents.values() if _idle(deck, a, limit)]
    for agent in idle:
        deck.spawn(_stop_if_idle(deck, agent, limit), f"idle stop {agent.name}")
    return [a.name for a in idle]


def _idle(deck: Any, agent: Any, limit: float) -> bool:
    return agent.state is AgentState.READY and deck.clock() - agent.last_used >= limit


async def _stop_if_idle(deck: Any, agent: Any, limit: float) -> None:
    # Checked again when the task runs: a message sent meanwhile made the agent busy.
    if _idle(deck, agent, limit):
        agent.log(f"deck: stopping, unused for {limit:g}s")
        await agent.stop()


async def _check_forever(deck: Any) -> None:
    while True:
        await asyncio.sleep(CHECK_INTERVAL)  # read each time: tests shorten it
        stop_idle(deck)


@hookimpl
def deck_startup(deck: Any) -> None:
    deck.spawn(_check_forever(deck), "idle_stop")


@hookimpl
def deck_before_start(deck: Any, agent: Any) -> Any:
    limit = deck.config.limits.max_running_agents
    running = [a for a in deck.agents.values() if a is not agent and a.state in _RUNNING]
    if len(running) < limit:
        return None
    ready = sorted((a for a in running if a.state is AgentState.READY), key=lambda a: a.last_used)
    if not ready:
        names = ", ".join(a.name for a in running)
        raise ServiceError(f"too many agents running: {len(running)} agent(s) busy ({names}), the limit is {limit}")
    victim = ready[0]
    victim.log(f"deck: stopping, least recently used, to make room for {agent.name}")
    return victim.stop()


_RUNNING = frozenset({AgentState.STARTING, AgentState.READY, AgentState.BUSY})
