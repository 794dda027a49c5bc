"""DeckService: the deck as a whole, for a client that (re)joins it: one consistent snapshot.

A client subscribes first, then asks for `DeckService.Snapshot()`, then applies only the
events whose `seq` is greater than the snapshot's: it ends up exactly where the deck is,
whatever happened in between, in this process or at the other end of a socket.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ServiceError
from .rpc import rpc

if TYPE_CHECKING:
    from .app import Deck

#: How many times a snapshot is taken again when the deck changed while it was being read.
SNAPSHOT_TRIES = 8


class DeckService:
    """The deck as one thing: its snapshot (a server adds the clients attached to it)."""

    def __init__(self, deck: Deck) -> None:
        self.deck = deck

    @rpc("DeckService.Snapshot")
    async def snapshot(self) -> dict[str, Any]:
        """`{seq, agents, conversations: {agent: Conversation}, pending, config}`, consistent at `seq`.

        Read with the services' own methods, so each piece is exactly what a call of it returns:
        `agents` is `AgentService.List()`, `conversations` holds `ChatService.Conversation(agent)`
        of each agent that has a conversation (one left out has none yet: it is empty), `pending` is
        `ChatService.Pending()`, `config` is `ConfigService.Current()`. Should one of them wait
        while events go out, the snapshot is read again, so it never mixes two moments.
        """
        deck = self.deck
        for _ in range(SNAPSHOT_TRIES):
            seq = deck.seq
            agents = await deck.call("AgentService.List", None)
            names = [name for name in deck.chat.conversations if name in deck.agents]
            conversations = {name: await deck.call("ChatService.Conversation", {"agent": name}) for name in names}
            pending = await deck.call("ChatService.Pending", None)
            config = await deck.call("ConfigService.Current", None)
            if deck.seq == seq:
                return {
                    "seq": seq, "agents": agents, "conversations": conversations, "pending": pending, "config": config
                }
        raise ServiceError(f"the deck kept changing while its snapshot was read ({SNAPSHOT_TRIES} tries)")
