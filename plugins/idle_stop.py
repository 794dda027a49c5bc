"""idle_stop: stop agents left idle, make room for a start, refuse one when every agent is busy.

- A `ready` agent unused for `limits.stopIdleAgentsAfter` is stopped (checked every
  CHECK_INTERVAL seconds; `deck.clock` is the clock, injectable in tests).
- When an agent must start and `limits.maxRunningAgents` agents run, the least
  recently used `ready` agent is stopped first; when none is ready, the start is
  refused: "too many agents running: N agent(s) busy (a, b), the limit is N".

Both keys are this plugin's, added to the config's `[limits]` table (`IdleStopLimits`,
contributed as the section "limits"): with the plugin disabled, they mean nothing.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from deck import Duration, hookimpl
from deck.errors import ServiceError
from deck.states import AgentState
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from deck import Agent, Deck

CHECK_INTERVAL = 30.0


class IdleStopLimits(BaseModel):
    """idle_stop's keys in the `[limits]` table."""

    # As deck's own tables: typed values (strict), the documented spelling only, unknown keys warned about.
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    max_running_agents: int = Field(4, alias="maxRunningAgents", ge=1, description="Agents running at once.")
    stop_idle_agents_after: Duration = Field(
        600.0, alias="stopIdleAgentsAfter", description='Stop a ready agent unused this long ("10m"; 0 = never).'
    )


def limits(deck: Deck) -> IdleStopLimits:
    """The limits of the config in force (the defaults when the config has none)."""
    found = deck.config_service.section("limits")
    return found if isinstance(found, IdleStopLimits) else IdleStopLimits.model_validate({})


def stop_idle(deck: Deck) -> list[str]:
    """Stop every ready agent idle for longer than the limit; return their names."""
    limit = limits(deck).stop_idle_agents_after
    if limit <= 0:
        return []
    idle = [a for a in deck.agents.values() if _idle(deck, a, limit)]
    for agent in idle:
        deck.spawn(_stop_if_idle(deck, agent, limit), f"idle stop {agent.name}")
    return [a.name for a in idle]


def _idle(deck: Deck, agent: Agent, limit: float) -> bool:
    return agent.state is AgentState.READY and deck.clock() - agent.last_used >= limit


async def _stop_if_idle(deck: Deck, agent: Agent, limit: float) -> None:
    # Checked again when the task runs: a message sent meanwhile made the agent busy.
    if _idle(deck, agent, limit):
        agent.log(f"deck: stopping, unused for {limit:g}s")
        await agent.stop()


async def _check_forever(deck: Deck) -> None:
    while True:
        await asyncio.sleep(CHECK_INTERVAL)  # read each time: tests shorten it
        stop_idle(deck)


@hookimpl
def deck_config_sections() -> dict[str, Any]:
    return {"limits": IdleStopLimits}


@hookimpl
def deck_startup(deck: Deck) -> None:
    deck.spawn(_check_forever(deck), "idle_stop")


@hookimpl
def deck_before_start(deck: Deck, agent: Agent) -> Any:
    limit = limits(deck).max_running_agents
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
