"""deck's exceptions, exit codes and JSON-RPC error codes.

    DeckError                 base of every error deck raises on purpose
    ├── UsageError            the user's mistake (bad flag, bad config): one line a problem, exit 2
    ├── UnknownMethod         a service method that does not exist
    ├── ServiceError          a service call refused (unknown agent, empty text, limit reached)
    │   ├── UnknownAgent      an agent name the config does not have: names it, lists the agents
    │   ├── PromptRefused     a message deck refuses to send (a plugin's deck_before_prompt: a budget)
    │   ├── InvalidParams     a service call whose parameters are missing or of the wrong type
    │   └── StartFailed       a `deck_before_start` hook: the agent cannot start as configured
    └── AcpError              an agent answered a request with a JSON-RPC error
        │                     (`.auth_required`: ACP's -32000 "Authentication required"),
        └── ConnectionClosed  or can no longer answer at all (it exited, stdin closed)

Every one carries `.code`, the JSON-RPC error code it travels as (on ACP, to a jsonl client).
Agent failures become states and events; they are raised only to the caller
that asked for the failed thing.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum
from typing import Any

# -- JSON-RPC 2.0 error codes, and those ACP adds --------------------------------------------

PARSE_ERROR = -32700  # not JSON
INVALID_REQUEST = -32600  # JSON, but not a request
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_ERROR = -32000  # left to implementations: a refused service call
AUTH_REQUIRED = -32000  # ACP's "Authentication required" (on session/new, session/prompt, …)
RESOURCE_NOT_FOUND = -32002  # ACP's "resource not found" (fs/*, an unknown session)
REQUEST_CANCELLED = -32800  # ACP's answer to a request the other side cancelled


class ExitCode(IntEnum):
    """Documented exit codes of the `deck` command."""

    OK = 0
    ERROR = 1  # deck itself failed (an agent error in `deck send`)
    USAGE = 2  # bad command line or config, an agent the config does not have
    MAX_TOKENS = 3  # `deck send`: the stop reasons other than end_turn
    MAX_TURN_REQUESTS = 4
    REFUSAL = 5  # the agent refused (stop reason `refusal`), or deck refused to send the prompt
    CANCELLED = 6
    INTERRUPTED = 130  # SIGINT; other signals exit 128 + signal number


class DeckError(Exception):
    """Base of deck's own errors."""

    code: int = INTERNAL_ERROR


class UsageError(DeckError):
    """A mistake of the user's, exit code 2: the message, and the problems that make it, each one line.

    The problems stay separate (`invalid config` and `PATH:LINE:COL: MESSAGE` for each) so the
    command line prints one line a problem without taking the message apart again."""

    code = INVALID_PARAMS

    def __init__(self, message: str, problems: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)

    def lines(self) -> list[str]:
        """`message: problem` for each problem, else the message alone."""
        message = str(self)
        return [f"{message}: {problem}" for problem in self.problems] or [message]


class ServiceError(DeckError):
    """A service refused a call; the message goes back to the caller as is."""

    code = SERVER_ERROR

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.data = data


class UnknownAgent(ServiceError):
    """An agent name the config does not have. Every command and service that takes an agent name
    says it in these words, `unknown agent 'NAME' (agents: a, b)`; a command exits with
    `ExitCode.USAGE`. `data` holds the name and the agents, `{agent, agents}`."""

    def __init__(self, name: str, agents: Iterable[str]) -> None:
        known = list(agents)
        message = f"unknown agent {name!r} (agents: {', '.join(known) or 'none'})"
        super().__init__(message, {"agent": name, "agents": known})


class PromptRefused(ServiceError):
    """A message deck refuses to send to an agent: a plugin's `deck_before_prompt` said no (a budget
    reached). Not the sender's mistake: `deck send` exits `ExitCode.REFUSAL`. On the wire, its
    `data` says so, `{"refused": true}` (with what the plugin's own data held, if it was an object)."""

    def __init__(self, message: str, data: Any = None) -> None:
        marked = {**data, "refused": True} if isinstance(data, dict) else {"refused": True}
        if data is not None and not isinstance(data, dict):
            marked["data"] = data
        super().__init__(message, marked)


def refused_prompt(error: ServiceError) -> bool:
    """Whether `error` (raised here, or come back over the wire) is a `PromptRefused`."""
    return isinstance(error, PromptRefused) or (isinstance(error.data, dict) and error.data.get("refused") is True)


class UnknownMethod(DeckError):
    """A service method that does not exist (JSON-RPC -32601)."""

    code = METHOD_NOT_FOUND


class InvalidParams(ServiceError):
    """Missing or ill-typed service parameters (JSON-RPC -32602)."""

    code = INVALID_PARAMS


class StartFailed(ServiceError):
    """Raised by a `deck_before_start` hook: the agent cannot start as it is configured (its
    worktree cannot be made). Unlike a plain ServiceError, which only refuses this one start, the
    agent goes to its error state with the message, where every frontend shows it."""


class AcpError(DeckError):
    """A JSON-RPC error answered by an agent."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data

    @property
    def auth_required(self) -> bool:
        """The agent wants the client to authenticate first.

        JSON-RPC leaves -32000 to implementations, so the message must say so too."""
        return self.code == AUTH_REQUIRED and "auth" in str(self.args[0]).lower()

    def __str__(self) -> str:
        # Agents often put the real reason in `data` (claude-agent-acp: {"details": …}).
        data = self.data
        detail = data.get("details") or data.get("message") if isinstance(data, dict) else data
        if isinstance(detail, str) and detail.strip() and detail.strip() != self.args[0]:
            return f"{self.args[0]} ({self.code}): {detail.strip()[:300]}"
        return f"{self.args[0]} ({self.code})"


class ConnectionClosed(AcpError):
    """The agent's connection closed before it answered."""

    def __init__(self, message: str = "the agent's connection is closed") -> None:
        super().__init__(INTERNAL_ERROR, message)
