"""Agent states, the transition table, and the one function that changes state."""

from __future__ import annotations

from enum import Enum
from typing import Protocol


class AgentState(str, Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    BUSY = "busy"
    ERROR = "error"


S = AgentState

#: The allowed changes of state (docs/architecture.md, "Agent states"). Any other is a bug and raises.
TRANSITIONS: frozenset[tuple[AgentState, AgentState]] = frozenset(
    {
        (S.STOPPED, S.STARTING),  # start requested
        (S.ERROR, S.STARTING),
        (S.STARTING, S.READY),  # handshake succeeded
        (S.STARTING, S.ERROR),  # handshake failed, wrong protocol, timeout
        (S.STARTING, S.STOPPED),  # stop requested while starting, once the start finished
        (S.READY, S.BUSY),  # used
        (S.BUSY, S.READY),  # the last user is done
        (S.READY, S.STOPPED),  # stop, app closing, removed, idle, least recently used
        (S.BUSY, S.STOPPED),
        (S.READY, S.ERROR),  # the process exited on its own
        (S.BUSY, S.ERROR),
    }
)

class InvalidTransition(RuntimeError):
    """A change of state the transition table does not allow."""


class Stateful(Protocol):
    """What `transition` changes: an agent (deck.agent.Agent), as this layer below it sees it."""

    name: str
    state: AgentState
    error: str | None

    def emit_state(self) -> None: ...


def transition(agent: Stateful, to: AgentState, error: str | None = None) -> None:
    """Move `agent` to state `to` and emit `agent:state`; the only writer of `agent.state`."""
    if (agent.state, to) not in TRANSITIONS:
        raise InvalidTransition(f"{agent.name}: {agent.state.value} → {to.value} is not allowed")
    agent.state = to
    agent.error = error if to is S.ERROR else None
    agent.emit_state()
