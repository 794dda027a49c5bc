"""The history as the core's `HistoryProvider` (`deck_history_provider`): what `ChatService.History`,
`Search` and `OpenConversation` read, and the recorder following `ChatService.NewConversation`.

Reads run in a worker thread, after what the recorder has handed to its writer is written, so
that a conversation just spoken in is listed and found at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from deck.errors import ServiceError
from deck.events import ConversationReset

if TYPE_CHECKING:
    from .recorder import HistoryRecorder

T = TypeVar("T")

#: What `ChatService.History` gives of each conversation.
LISTED = ("id", "agent", "title", "createdAt", "updatedAt", "messages")


class StoredConversations:
    """One running deck's history, through its recorder (the config in use is the recorder's)."""

    def __init__(self, recorder: HistoryRecorder) -> None:
        self.recorder = recorder

    async def conversations(self, agent: str | None, limit: int) -> list[dict[str, Any]]:
        recorder = self.recorder
        rows = await self._read(lambda: recorder.store.list(recorder.config, agent, limit))
        return [{key: row[key] for key in LISTED} for row in rows]

    async def search(self, query: str, agent: str | None, limit: int) -> list[dict[str, Any]]:
        recorder = self.recorder
        return await self._read(lambda: recorder.store.search(query, agent, recorder.config, limit))

    async def get(self, conversation_id: str, tail: int | None = None) -> dict[str, Any]:
        recorder = self.recorder
        stored = await self._read(lambda: recorder.store.get(conversation_id, tail))
        if stored is None or stored["configPath"] != recorder.config:
            raise ServiceError(f"no conversation {conversation_id!r} in the history of this config")
        return stored

    def continue_conversation(self, agent: str, stored: dict[str, Any]) -> None:
        """`ChatService.OpenConversation`: `stored` is the agent's current conversation, and its
        latest too, so that the next start brings it back even if nothing is said in it first."""
        self.recorder.continue_conversation(agent, stored)
        self.recorder.writer.touch(stored["id"])

    def start_conversation(self, agent: str, session_id: str | None) -> str:
        return self.recorder.start_conversation(agent, session_id)

    async def spending(self) -> list[dict[str, Any]]:
        recorder = self.recorder
        return await self._read(lambda: recorder.store.spending(recorder.config))

    async def _read(self, read: Callable[[], T]) -> T:
        from .store import HistoryUnavailable

        writer = self.recorder.writer

        def flushed_then_read() -> T:
            if not self.recorder.closed:
                writer.flush()
            return read()

        try:
            return await asyncio.to_thread(flushed_then_read)
        except HistoryUnavailable as e:
            raise ServiceError(f"history is off: {e.reason}") from e


def follow(recorder: HistoryRecorder, event: ConversationReset) -> None:
    """A conversation emptied for a new one: the agent's next message starts a new stored conversation
    (one made current from the history, with its `conversationId`, was handed to the recorder already);
    either is the one a later start comes back to, unless it is kept apart."""
    recorder.made_current(event.agent, event.conversation_id, bool(event.apart))
