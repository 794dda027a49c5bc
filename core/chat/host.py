"""What the chat layer needs from the deck that runs it: the one way up from it.

`deck.runtime.deck.Deck` is the host of the conversations, turns, pending requests and session
settings; they never reach past these members (as `deck.agent.host` is the agents' way up).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from deck.agent.agent import Agent
    from deck.chat.conversation import Conversation
    from deck.config.models import DeckConfig
    from deck.events import Event
    from deck.proc.tasks import TaskGroup


class ChatHost(Protocol):
    """The deck, as its conversations use it."""

    config: DeckConfig
    tasks: TaskGroup

    def agent(self, name: str) -> Agent:
        """The agent named `name`; ServiceError naming the agents when there is none."""
        ...

    def emit(self, event: Event) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, *, log_errors: bool = True) -> asyncio.Task[Any]: ...

    def conversation_of(self, agent: str) -> Conversation: ...

    def before_prompt(self, agent: Agent, text: str) -> None:
        """The plugins' say on a message about to go to `agent`: ServiceError (PromptRefused) refuses it."""
        ...
