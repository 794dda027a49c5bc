"""What an agent needs from the deck that runs it: the one way up from the agent layer.

`deck.runtime.deck.Deck` is the host of every agent; an agent never reaches past these members.
The chat layer above, its conversations and pending requests, is reached straight through
`conversations` and `asks`, typed here by what the agents use of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from deck.agent.agent import Agent
    from deck.agent.session import Session
    from deck.config.models import DeckConfig
    from deck.events import Event
    from deck.proc.supervisor import StopTimings
    from deck.proc.tasks import TaskGroup


class AgentHooks(Protocol):
    """The plugin hooks an agent calls."""

    async def before_start(self, agent: Agent) -> dict[str, str]: ...

    def acp_message(self, agent: Agent, direction: str, message: dict[str, Any]) -> None: ...

    def session_mcp_servers(self, agent: Agent, session: Session) -> list[dict[str, Any]]: ...


class Replay(Protocol):
    """Where a `session/load`'s replayed updates go (the chat layer's resume policy)."""

    def on_update(self, update: dict[str, Any]) -> None: ...

    def finish(self) -> Any:
        """The replay is over: what it added to the conversation (a list), or None."""
        ...


class ConversationLink(Protocol):
    """The agent's conversation as the agent sees it: its session and its commands' output."""

    session_id: str | None
    messages: Any

    def terminal_started(self, terminal_id: str) -> None: ...

    def terminal_output(self, terminal_id: str, text: str) -> None: ...

    def terminal_exited(self, terminal_id: str, status: dict[str, Any]) -> None: ...


class Conversations(Protocol):
    """The chat layer's conversations, as the agents use them (deck.chat.book.Conversations)."""

    def of(self, agent: str) -> ConversationLink:
        """The conversation of the agent named `agent`."""
        ...

    def session_opened(self, agent: Agent) -> None:
        """The agent's new conversation session now serves its conversation."""
        ...

    def replay_into(self, agent: str, *, matched: bool) -> Replay:
        """The sink of a `session/load` of the agent's conversation: the replay forms an empty
        conversation, or (`matched`) only adds what the conversation does not hold; its
        `finish()` ends it (and says, for `matched`, what was added)."""
        ...

    def session_cost(self, session: Session, update: dict[str, Any]) -> None:
        """A `usage_update` of a session other than the conversation's: what its cost adds is the
        agent's spending too (budgets and the history count it)."""
        ...


class Asks(Protocol):
    """The chat layer's pending requests, as the agents use them (deck.chat.pending.PendingRequests)."""

    async def ask_permission(self, asker: Session, params: dict[str, Any]) -> dict[str, Any]: ...

    async def ask_question(self, asker: Session, params: dict[str, Any]) -> dict[str, Any]: ...

    def cancel_from(self, asker: Session) -> None:
        """Cancel the permission requests and questions `asker` still waits on."""
        ...


class Host(Protocol):
    """The deck, as its agents use it."""

    config: DeckConfig
    config_path: Path | None
    private_folders: list[Path]
    reachable_folders: list[Path]
    trace_acp: bool
    timings: StopTimings
    tasks: TaskGroup
    clock: Callable[[], float]

    @property
    def hooks(self) -> AgentHooks: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, *, log_errors: bool = True) -> asyncio.Task[Any]: ...

    def emit(self, event: Event) -> None: ...

    @property
    def conversations(self) -> Conversations:
        """The agents' conversations (the chat layer's)."""
        ...

    @property
    def asks(self) -> Asks:
        """What the agents ask the user (the chat layer's pending requests)."""
        ...

    def plugin_off(self, plugin: str) -> str | None:
        """How `plugin` was switched off ("[plugins] disabled", "-p no:NAME"), None when it was not."""
        ...

    def relied_on(self, agent: str) -> dict[str, str]:
        """The plugins agent `agent` relies on (it sets keys of theirs): plugin → one such key."""
        ...

    def sandbox_hidden(self) -> list[Path]:
        """deck's own files and folders that a sandboxed agent must not see."""
        ...

    def before_session_prompt(self, session: Session, text: str) -> None:
        """A prompt in a session other than the conversation's (a plugin's): refused (ServiceError)
        as a message to the agent would be, by a budget reached say."""
        ...

