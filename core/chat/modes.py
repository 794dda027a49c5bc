"""Session settings: an agent's modes and config options (ACP `session/set_mode`, `session/set_config_option`).

The agent starts if it must; its answer is folded into the conversation as the matching
`session/update` would be, so every frontend sees the change as a `conversation:changed`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deck.errors import ServiceError

if TYPE_CHECKING:
    from deck.agent.session import Session
    from deck.chat.book import Conversations
    from deck.runtime.deck import Deck


class SessionSettings:
    """Change the modes and config options of each agent's conversation session."""

    def __init__(self, deck: Deck, conversations: Conversations) -> None:
        self._deck = deck
        self._conversations = conversations

    async def set_mode(self, agent: str, mode_id: str) -> dict[str, Any]:
        session = await self._session(agent)
        conv = self._conversations.of(agent)
        await session.request("session/set_mode", {"modeId": mode_id})
        conv.apply_update({"sessionUpdate": "current_mode_update", "currentModeId": mode_id})
        return {"modes": conv.modes}

    async def set_config_option(self, agent: str, config_id: str, value: str | bool) -> dict[str, Any]:
        session = await self._session(agent)
        conv = self._conversations.of(agent)
        params: dict[str, Any] = {"configId": config_id, "value": value}
        if isinstance(value, bool):
            params["type"] = "boolean"
        result = await session.request("session/set_config_option", params)
        if isinstance(result, dict) and isinstance(result.get("configOptions"), list):
            conv.apply_update({"sessionUpdate": "config_option_update", "configOptions": result["configOptions"]})
        return {"configOptions": conv.config_options}

    async def _session(self, name: str) -> Session:
        agent = self._deck.agent(name)
        await agent.start()
        if agent.conn is None or agent.session is None or agent.session.id is None:
            raise ServiceError(f"{name} has no session")
        return agent.session
